"""The cuda target: every operator of the library (the cases of test_codegen_ops, plus matmul,
conv2d and fused groups) scheduled for the GPU, lowered and compiled by nvcc in one call;
each kernel's source run against numpy on the CPU emulation of the CUDA runtime
(`codegen.backends.cuda.emulate`), and on a real GPU where one exists; the emitted text of a
tiled matmul; and the errors a user can meet (no nvcc, no GPU, bound loops on the C backend).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from test_codegen_ops import CASES, Case

from taso_py.codegen import te
from taso_py.codegen.backends.c import build as build_c
from taso_py.codegen.backends.cuda import CudaModule, build, device_count, nvcc, source
from taso_py.codegen.backends.cuda.build import NVCC_FLAGS
from taso_py.codegen.backends.cuda.emulate import build_emulated
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.lower import Allocate, PrimFunc, lower, walk_stmts
from taso_py.codegen.schedule import create_schedule
from taso_py.codegen.target import CPU, CUDA
from taso_py.codegen.topi import compute, schedule_group
from taso_py.codegen.topi import conv as conv_ops
from taso_py.codegen.topi.cuda import dense  # noqa: F401  (registers the cuda schedules)
from taso_py.codegen.topi.cuda.splitk import reduce_in_block
from taso_py.codegen.tune.space import Config
from taso_py.ops import OPS
from taso_py.ops.conv import Conv2dAttrs
from taso_py.types import TensorType

RNG = np.random.default_rng(0)
HAS_NVCC = bool(os.environ.get("NVCC")) or any(
    os.access(os.path.join(d, "nvcc"), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep))
needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc is not installed")
needs_gpu = pytest.mark.skipif(device_count() == 0, reason="no CUDA device on this machine")


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@dataclass
class Group:
    """A fused group to compile: te inputs and outputs, input arrays, expected outputs."""

    label: str
    ins: list[te.Tensor]
    outs: list[te.Tensor]
    arrays: list[np.ndarray]
    want: list[np.ndarray]
    exact: bool = False  # integer results: compared exactly

    def __post_init__(self) -> None:
        self.label = self.label.replace(" ", "")

    @property
    def name(self) -> str:
        return f"g_{hashlib.sha1(self.label.encode()).hexdigest()[:12]}"

    def lower(self, cfg: Config | None = None) -> PrimFunc:
        return lower(schedule_group(self.outs, cfg, target=CUDA), [*self.ins, *self.outs], self.name)

    def check(self, mod: CudaModule) -> None:
        outs = [np.full(t.shape, 7, t.dtype) for t in self.outs]  # not zeros: every element must be written
        mod[self.name](*self.arrays, *outs)
        for got, want in zip(outs, self.want):
            assert got.shape == want.shape and got.dtype == want.dtype
            if self.exact:
                np.testing.assert_array_equal(got, want)
            else:
                tol = 1e-10 if got.dtype == np.float64 else 1e-4
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def cuda_modules(funcs: list[PrimFunc]) -> list[CudaModule]:
    """The kernels under the CPU emulation, and built by nvcc for the GPU where one exists (the
    emulation cannot show races or a launch the device refuses)."""
    return [build_emulated(funcs)] + ([build(funcs)] if device_count() and HAS_NVCC else [])


def op_group(case: Case) -> Group:
    raw, canonical, in_types, out_types = case.typed()
    ins = [te.placeholder(t.known_shape, case.dtype, name=f"x{k}") for k, t in enumerate(in_types)]
    arrays = case.inputs()
    return Group(case.label, ins, list(compute(case.op, ins, raw, out_types)), arrays,
                 list(case.opdef.ref(arrays, canonical)), np.dtype(case.dtype).kind != "f")


def matmul_group(a_shape: tuple[int, ...], b_shape: tuple[int, ...], data: bool = True) -> Group:
    a, b = (rand(*a_shape), rand(*b_shape)) if data else (np.empty(0), np.empty(0))
    ta, tb = te.placeholder(a_shape, name="A"), te.placeholder(b_shape, name="B")
    (t,) = OPS["matmul"].shape([TensorType(a_shape), TensorType(b_shape)], None)
    (y,) = compute("matmul", [ta, tb], None, [t])
    return Group(f"matmul{a_shape}x{b_shape}", [ta, tb], [y], [a, b], [np.matmul(a, b)] if data else [])


def matmul_bias_relu(m: int, k: int, n: int, data: bool = True) -> Group:
    """relu(a @ b + bias): the matmul accumulates in registers inside the element-wise output."""
    shapes = ((m, k), (k, n), (n,))
    ta, tb, tbias = (te.placeholder(x, name=nm) for x, nm in zip(shapes, ("A", "B", "bias")))
    (y,) = compute("matmul", [ta, tb], None, [TensorType((m, n))])
    (added,) = compute("add", [y, tbias], None, [TensorType((m, n))])
    (out,) = compute("relu", [added], None, [TensorType((m, n))])
    a, b, bias = (rand(*x) for x in shapes) if data else (None, None, None)
    return Group(f"relu(matmul+bias){m, k, n}", [ta, tb, tbias], [out], [a, b, bias] if data else [],
                 [np.maximum(a @ b + bias, 0)] if data else [])


def transposed_matmul() -> Group:
    a, b = rand(24, 16), rand(24, 40)
    ta, tb = te.placeholder(a.shape, name="A"), te.placeholder(b.shape, name="B")
    at = te.compute((16, 24), lambda i, j: ta[j, i], name="transpose", tag="injective")
    (y,) = compute("matmul", [at, tb], None, [TensorType((16, 40))])
    return Group("matmul(transpose(a),b)", [ta, tb], [y], [a, b], [a.T @ b])


CONV_CASES = {
    "1x1": ((1, 16, 7, 9), (32, 16, 1, 1), {}, False),
    "3x3-pad": ((2, 8, 9, 11), (16, 8, 3, 3), {"pad": (1, 1, 1, 1)}, False),
    "stride2": ((1, 8, 13, 13), (16, 8, 3, 3), {"stride": (2, 2), "pad": (1, 1, 1, 1)}, False),
    "groups": ((1, 8, 10, 10), (8, 4, 3, 3), {"groups": 2, "pad": (1, 1, 1, 1)}, False),
    "depthwise": ((1, 8, 10, 10), (8, 1, 3, 3), {"groups": 8, "pad": (1, 1, 1, 1)}, True),
    "bias-relu": ((1, 16, 8, 8), (16, 16, 3, 3), {"pad": (1, 1, 1, 1), "act": "relu"}, True),
    "dilated-asym-pad": ((1, 4, 11, 10), (8, 4, 3, 3), {"pad": (2, 1, 0, 1), "dilation": (2, 2)}, True),
    "odd-sigmoid": ((1, 3, 7, 5), (5, 3, 2, 3), {"act": "sigmoid"}, True),
    # few outputs, a long reduction: split over the threads of a block (with groups too)
    "small-many-channels": ((1, 64, 3, 3), (40, 64, 3, 3), {"pad": (1, 1, 1, 1)}, True),
    "groups-split": ((1, 64, 4, 4), (32, 32, 3, 3), {"groups": 2, "pad": (1, 1, 1, 1), "act": "relu"}, False),
}


def conv_group(label: str, data: bool = True) -> Group:
    x_shape, w_shape, attrs, has_bias = CONV_CASES[label]
    a = Conv2dAttrs(**attrs)
    shapes = [x_shape, w_shape] + ([(w_shape[0],)] if has_bias else [])
    arrays = [rand(*x) for x in shapes] if data else []
    ins = [te.placeholder(x, name=f"in{k}") for k, x in enumerate(shapes)]
    types = list(OPS["conv2d"].shape([TensorType(x) for x in shapes], a))
    return Group(f"conv2d-{label}", ins, list(compute("conv2d", ins, a, types)), arrays,
                 list(OPS["conv2d"].ref(arrays, a)) if data else [])


def conv_nchwc() -> Group:
    """The blocked convolution on packed data (the packing itself is another group's job)."""
    x, w, bias = rand(1, 16, 6, 7), rand(16, 16, 3, 3), rand(16)
    a = Conv2dAttrs(pad=(1, 1, 1, 1), act="relu")
    xp = x.reshape(1, 2, 8, 6, 7).transpose(0, 1, 3, 4, 2).copy()
    wp = w.reshape(2, 8, 2, 8, 3, 3).transpose(0, 2, 4, 5, 3, 1).copy()
    txp, twp, tb = (te.placeholder(v.shape, name=n) for v, n in ((xp, "xp"), (wp, "wp"), (bias, "b")))
    y = conv_ops.conv2d_nchwc(txp, twp, tb, a, 16)
    (want,) = OPS["conv2d"].ref([x, w, bias], a)
    return Group("conv2d_nchwc", [txp, twp, tb], [y], [xp, wp, bias],
                 [want.reshape(1, 2, 8, 6, 7).transpose(0, 1, 3, 4, 2).copy()])


def pool_relu() -> Group:
    x = rand(2, 3, 9, 20)
    attrs = OPS["maxpool2d"].make_attrs(kernel=3, stride=1, pad=1)
    (t,) = OPS["maxpool2d"].infer([TensorType(x.shape)], attrs)
    tx = te.placeholder(x.shape, name="x")
    (p,) = compute("maxpool2d", [tx], attrs, [t])
    (r,) = compute("relu", [p], None, [t])
    return Group("relu(maxpool)", [tx], [r], [x], [np.maximum(OPS["maxpool2d"].ref([x], attrs)[0], 0)])


def conv_flatten() -> Group:
    """conv -> flatten fused: the consumer does not read the conv element by element."""
    x, w, bias = rand(1, 8, 6, 6), rand(16, 8, 3, 3), rand(16)
    a = Conv2dAttrs(pad=(1, 1, 1, 1), act="relu")
    ins = [te.placeholder(v.shape, name=f"in{k}") for k, v in enumerate((x, w, bias))]
    types = list(OPS["conv2d"].shape([TensorType.of(v) for v in (x, w, bias)], a))
    (y,) = compute("conv2d", ins, a, types)
    flat = te.compute((1, 16 * 36), lambda b, k: y[b, k // 36, k // 6 % 6, k % 6], name="flatten", tag="injective")
    return Group("flatten(conv2d)", ins, [flat], [x, w, bias], [OPS["conv2d"].ref([x, w, bias], a)[0].reshape(1, -1)])


def matmul_two_outputs() -> Group:
    """The matmul and relu of it, both outputs of the group."""
    a, b = rand(40, 24), rand(24, 36)
    ta, tb = te.placeholder(a.shape, name="A"), te.placeholder(b.shape, name="B")
    (y,) = compute("matmul", [ta, tb], None, [TensorType((40, 36))])
    (r,) = compute("relu", [y], None, [TensorType((40, 36))])
    return Group("matmul,relu(matmul)", [ta, tb], [y, r], [a, b], [a @ b, np.maximum(a @ b, 0)])


def dense_groups() -> list[Group]:
    shapes = [((64, 48), (48, 80)), ((128, 96), (96, 80)), ((3, 16, 24), (3, 24, 32)), ((2, 1, 12, 8), (3, 8, 32)),
              ((4, 16, 24), (24, 32)), ((1, 64), (64, 32)), ((24,), (3, 24, 16)), ((5, 24), (24,)), ((7, 5), (5, 3))]
    return [*(matmul_group(a, b) for a, b in shapes), matmul_bias_relu(32, 48, 64), matmul_bias_relu(70, 33, 50),
            matmul_bias_relu(1, 300, 130),
            transposed_matmul(), matmul_two_outputs(),
            conv_flatten(), *(conv_group(k) for k in sorted(CONV_CASES)), conv_nchwc(), pool_relu()]


GROUPS = [op_group(p.values[0]) for p in CASES] + dense_groups()
IDS = [g.label for g in GROUPS]


@pytest.fixture(scope="module")
def funcs() -> list[PrimFunc]:
    return [g.lower() for g in GROUPS]


@pytest.fixture(scope="module")
def emulated(funcs: list[PrimFunc]) -> CudaModule:
    return build_emulated(funcs)


# one group of each pattern and element type, compiled by nvcc in the default run (~5 s; all of them: ~30 s)
REPRESENTATIVE = ("matmul(128,96)x(96,80)", "relu(matmul+bias)(70,33,50)", "matmul(5,24)x(24,)", "conv2d-bias-relu",
                  "conv2d_nchwc", "relu(maxpool)", "softmax[(6,100)]{'axis':-1}", "layernorm[(5,96),(96,),(96,)]",
                  "global_avgpool[(2,3,7,6)]", "maxpool2d[(2,3,7,6)]{'kernel':3,'stride':2,'pad':1}int8",
                  "relu[(3,33)]float64", "split[(3,70)]{'axis':1,'sizes':(33,37)}", "const_one[]{'shape':()}int64")


@needs_nvcc
def test_representatives_compile_with_nvcc(funcs: list[PrimFunc]) -> None:
    chosen = [f for f, g in zip(funcs, GROUPS) if g.label in REPRESENTATIVE]
    assert len(chosen) == len(REPRESENTATIVE), sorted(set(REPRESENTATIVE) - {g.label for g in GROUPS})
    _compile(chosen)


@needs_nvcc
def test_every_kernel_compiles_with_nvcc(funcs: list[PrimFunc]) -> None:
    _compile(funcs)


def _compile(funcs: list[PrimFunc]) -> None:
    """One nvcc call (SASS for sm_90 and PTX for compute_80)."""
    mod = build(funcs)
    for f in funcs:
        assert callable(mod[f.name].fn)
    assert mod.source.count("__global__") >= len(funcs)


@pytest.mark.parametrize("group", GROUPS, ids=IDS)
def test_kernel_matches_numpy_in_the_cpu_emulation(emulated: CudaModule, group: Group) -> None:
    group.check(emulated)


@needs_gpu
@needs_nvcc
def test_every_kernel_matches_numpy_on_the_gpu(funcs: list[PrimFunc]) -> None:
    mod = build(funcs)
    for g in GROUPS:
        g.check(mod)


@pytest.mark.parametrize("knobs", [{"block_m": 32, "block_n": 16, "thread_m": 2, "thread_n": 1, "tile_k": 8},
                                   {"block_m": 16, "block_n": 128, "thread_m": 1, "thread_n": 8, "tile_k": 32,
                                    "threads": 64},
                                   {"threads": 1024, "tile_oc": 8}, {"threads": 64, "tile_oc": 2},
                                   {"kernel": "pixel", "tile_oc": 4},
                                   {"kernel": "splitk", "block_cols": 64, "split_k": 2}])
def test_other_knob_values_compute_the_same(knobs: dict) -> None:
    """What a tuner may pick: other tiles and block sizes, same results."""
    groups = [matmul_group((70, 40), (40, 90)), matmul_bias_relu(33, 20, 65), conv_group("3x3-pad"),
              conv_group("bias-relu"), op_group(Case("softmax", [(6, 100)], {"axis": -1}))]
    for mod in cuda_modules([g.lower(Config(knobs)) for g in groups]):
        for g in groups:
            g.check(mod)


def test_tiled_matmul_source() -> None:
    """Shared-memory tiles filled by all threads between barriers; a 4x4 register tile per thread."""
    g = matmul_group((256, 128), (128, 192))
    cfg = Config()
    text = source(g.lower(cfg))
    kernel = text[text.index("__global__"):text.index(f'extern "C" int {g.name}_launch')]
    assert {"block_m", "block_n", "thread_m", "thread_n", "tile_k"} <= set(cfg.space)
    assert kernel.count("__global__") == 1 and "__launch_bounds__(256)" in kernel
    assert "__shared__ float A_shared[1024];" in kernel and "__shared__ float B_shared[1024];" in kernel
    assert kernel.count("__syncthreads();") == 2
    assert "float matmul_local[16];" in kernel  # the block's 64x64 accumulator, privatized per thread
    for index in ("blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y"):
        assert index in kernel
    assert "TASO_LAUNCH(" + g.name + "_k0, dim3(3, 4, 1), dim3(16, 16, 1)" in text
    # the fill comes before the first barrier, the multiply-add between the barriers
    first, second = (i for i in range(len(kernel)) if kernel.startswith("__syncthreads", i))
    assert "A_shared[" in kernel[:first] and "= A[" in kernel[:first]
    assert "matmul_local[" in kernel[first:second] and "+ (A_shared[" in kernel[first:second]


def launches(text: str) -> dict[str, tuple[str, str]]:
    """Each kernel's (grid, block) dims, as the host wrapper launches it."""
    found = re.findall(r"TASO_LAUNCH\((\w+), dim3\(([^)]*)\), dim3\(([^)]*)\)", text)
    return {name: (grid, block) for name, grid, block in found}


def split_kernel(text: str) -> tuple[int, tuple[int, ...]]:
    """The blocks and block dims of the one kernel with a shared-memory reduction."""
    (name,) = re.findall(r"__global__ void __launch_bounds__\(\d+\) (\w+)\((?:(?!__global__).)*?__shared__", text, re.S)
    grid, block = launches(text)[name]
    return int(np.prod([int(d) for d in grid.split(", ")])), tuple(int(d) for d in block.split(", "))


def test_small_rows_matmul_splits_k_over_the_threads_of_a_block() -> None:
    """1 x 300 @ 300 x 130 (+bias, relu): a block per 8 columns, K over 4 threads each, partial sums
    in shared memory, combined and written out by the same kernel."""
    g = matmul_bias_relu(1, 300, 130, data=False)
    cfg = Config()
    text = source(g.lower(cfg))
    assert cfg.chosen() == {"kernel": "splitk", "block_cols": 8, "split_k": 4}
    assert text.count("__global__") == 1 and "__shared__ float matmul_rf[32];" in text
    assert split_kernel(text) == (17, (8, 4, 1))


@pytest.mark.parametrize(("group", "blocks"), [
    (lambda: conv_group("small-many-channels", data=False), 45),
    (lambda: matmul_bias_relu(1, 25088, 4096, data=False), 512),  # VGG-19's first FC layer
    (lambda: matmul_group((1, 2048), (2048, 1000), data=False), 125),  # ResNet-50's FC layer: 8 columns per block
])
def test_batch1_layers_are_split_over_blocks(monkeypatch: pytest.MonkeyPatch, group: object, blocks: int) -> None:
    """Blocks of the fewest columns that give 2 x 132 blocks (8 columns: a 32-byte sector of B per row)."""
    monkeypatch.delenv("TASO_CUDA_SMS", raising=False)
    assert split_kernel(source(group().lower()))[0] == blocks  # type: ignore[operator]


def test_resnet_last_stage_conv_fills_132_multiprocessors(monkeypatch: pytest.MonkeyPatch) -> None:
    """1x512x7x7, 3x3 over 512 channels: 25088 outputs, 100 threads per multiprocessor as one thread per
    output; split, 784 blocks of 32 channels x 8 slices of the reduction (at least two blocks per SM)."""
    monkeypatch.delenv("TASO_CUDA_SMS", raising=False)
    x, w = te.placeholder((1, 512, 7, 7), name="x"), te.placeholder((512, 512, 3, 3), name="w")
    a = Conv2dAttrs(pad=(1, 1, 1, 1), act="relu")
    (y,) = compute("conv2d", [x, w], a, list(OPS["conv2d"].shape([TensorType(x.shape), TensorType(w.shape)], a)))
    text = source(lower(schedule_group([y], Config(), target=CUDA), [x, w, y], "last"))
    blocks, dims = split_kernel(text)
    assert blocks >= 2 * 132 and dims == (32, 8, 1)
    monkeypatch.setenv("TASO_CUDA_SMS", "4")  # a small GPU: one output channel per thread suffices
    cfg = Config()
    schedule_group([y], cfg, target=CUDA)
    assert cfg.chosen()["kernel"] == "pixel"
    monkeypatch.setenv("TASO_CUDA_SMS", "many")
    with pytest.raises(CodegenError, match="TASO_CUDA_SMS must be a positive number"):
        schedule_group([y], Config(), target=CUDA)


def test_reduce_in_block_splits_any_reduction() -> None:
    """The primitive on its own: a max over 100 (not a multiple of the 8 slices), 2 rows per thread."""
    x = te.placeholder((2, 37, 100), name="x")
    k = te.reduce_axis(100, "k")
    y = te.compute((2, 37), lambda b, i: te.max_reduce(x[b, i, k.var], k), name="y")
    s = create_schedule(y)
    b, i = s[y].axes
    s[y].bind(reduce_in_block(s, s[y], i, 16, 8, rows=[b]), "blockIdx.x")
    f = lower(s, [x, y], "rowmax")
    assert split_kernel(source(f)) == (3, (16, 8, 1))
    data, out = rand(2, 37, 100), np.zeros((2, 37), np.float32)
    build_emulated(f)["rowmax"](data, out)
    np.testing.assert_array_equal(out, data.max(axis=2))


@needs_nvcc
def test_large_matmul_keeps_its_accumulators_in_registers(tmp_path: Path) -> None:
    """The 4096^3 default (128x128 tiles, 8x8 per thread): ptxas reports no spills and no stack."""
    text = source(matmul_group((4096, 4096), (4096, 4096), data=False).lower())
    cu = tmp_path / "mm.cu"
    cu.write_text(text)
    proc = subprocess.run([nvcc(), *NVCC_FLAGS, "-arch=sm_90", "-Xptxas", "-v", str(cu), "-o", str(tmp_path / "mm.so")],
                          capture_output=True, text=True, check=True)
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "16384 bytes smem" in proc.stderr  # two 128x16 float tiles


def test_per_thread_arrays_stay_small(funcs: list[PrimFunc]) -> None:
    """Accumulators are a thread's own tile (registers), never a block's or a tensor's."""
    text = source(funcs)
    local = re.findall(r"^ +(?:float|double|int\d+_t|bool) (\w+)\[(\d+)\];", text, re.M)
    assert local and max(int(n) for _, n in local) <= 64, sorted(local, key=lambda d: -int(d[1]))[:3]


def test_pool_is_computed_in_the_thread_of_its_relu() -> None:
    g = pool_relu()
    f = g.lower()
    (alloc,) = [s for s in walk_stmts(f.body) if isinstance(s, Allocate)]
    assert alloc.buffer.scope == "local" and alloc.buffer.size == 1
    assert source(f).count("__global__") == 1


def test_softmax_is_a_block_per_row_with_shared_partials() -> None:
    """Two kernels (max then exponentials; sum then output), each block a row: 16 threads
    reduce into shared memory, a barrier, each thread combines the partials in a register."""
    g = op_group(Case("softmax", [(6, 100)], {"axis": -1}))
    text = source(g.lower())
    launches = [ln for ln in text.splitlines() if ln.startswith("  TASO_LAUNCH(")]
    assert len(launches) == 2 and all("dim3(6, 1, 1), dim3(100, 1, 1)" in ln for ln in launches)
    assert text.count("__shared__ float softmax_max_part[16];") == 1 and text.count("__syncthreads();") == 4
    assert "float softmax_max[1];" in text and "float softmax_sum[1];" in text
    assert text.count("cudaMalloc") == 1 + 2  # the exponentials, then the host wrapper's input and output


def test_multi_stage_operator_is_several_launches_with_device_temporaries() -> None:
    """Layer norm: one kernel per statistic stage, in order, through device buffers."""
    g = op_group(Case("layernorm", [(5, 96), (96,), (96,)], {}))
    text = source(g.lower())
    host = text[text.index(f'extern "C" int {g.name}_launch('):]  # the launches, then the host wrapper
    launches = [ln for ln in host.splitlines() if "TASO_LAUNCH" in ln]
    assert [ln.split("(")[1].split(",")[0] for ln in launches] == [f"{g.name}_k{k}" for k in range(7)]
    assert host.count("cudaMalloc") == 6 + 4  # six statistic stages, then three inputs and the output
    assert host.count("cudaMemcpyHostToDevice") == 3 and host.count("cudaMemcpyDeviceToHost") == 1


def test_launch_entry_takes_device_pointers() -> None:
    """`name_launch`, for a runtime that keeps tensors on the GPU: no copies (in the emulation,
    device pointers are host pointers)."""
    g = op_group(Case("softmax", [(6, 100)], {"axis": -1}))
    kernel = build_emulated(g.lower())[g.name]
    out = np.zeros((6, 100), np.float32)
    kernel.launch(g.arrays[0].ctypes.data, out.ctypes.data)
    np.testing.assert_allclose(out, g.want[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(CodegenError, match="takes 2 buffers, got 1"):
        kernel.launch(out.ctypes.data)


@pytest.mark.skipif(device_count() > 0, reason="a CUDA device is present")
def test_benchmark_says_it_cannot_run_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.cuda_kernels import main
    assert main([]) == 0
    assert "cannot run here (no CUDA device on this machine); nothing measured" in capsys.readouterr().out


def test_suite_benchmark_checks_every_model_it_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a GPU it says so and times nothing; with one, a small model compiles, passes the check
    against ONNX Runtime and gets a row with both latencies."""
    import json

    from benchmarks.cuda_suite import main
    code = main(["--size", "small", "--models", "squeezenet", "--runs", "3", "--out", str(tmp_path)])
    if not device_count():
        assert code == 0 and "no CUDA device on this machine; nothing measured" in capsys.readouterr().out
        assert not (tmp_path / "cuda_suite.json").exists()
        return
    (row,) = json.loads((tmp_path / "cuda_suite.json").read_text())["rows"]
    assert code == 0 and row["ok"] and row["max_rel_error"] <= 1e-4 and row["gpu_ms"] > 0 and row["ort_cpu_ms"] > 0


# ---- errors -----------------------------------------------------------------------------------

def test_missing_nvcc_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.delenv("NVCC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))  # nothing cached: a compiler is needed
    with pytest.raises(CodegenError, match="no CUDA compiler: 'nvcc' is not on PATH"):
        build(matmul_group((8, 8), (8, 8)).lower())


def test_thread_bound_schedule_is_refused_by_the_c_backend() -> None:
    x = te.placeholder((1024,), name="x")
    y = te.compute((1024,), lambda i: x[i] * 2.0, name="y")
    s = create_schedule(y)
    bx, tx = s[y].split(s[y].axes[0], 256)
    s[y].bind(bx, "blockIdx.x")
    s[y].bind(tx, "threadIdx.x")
    with pytest.raises(CodegenError, match=r"bound to blockIdx\.x: use the cuda target"):
        build_c(lower(s, [x, y], "bound"))


@needs_nvcc
@pytest.mark.skipif(device_count() > 0, reason="a CUDA device is present")
def test_missing_gpu_at_run_time_is_a_clear_error() -> None:
    g = matmul_group((8, 8), (8, 8))
    mod = build(g.lower())
    with pytest.raises(CodegenError, match=r"cuda kernel 'g_[0-9a-f]+' failed: no CUDA device is available"):
        g.check(mod)


def test_too_many_threads_per_block_is_refused() -> None:
    x = te.placeholder((4096,), name="x")
    y = te.compute((4096,), lambda i: x[i] * 2.0, name="y")
    s = create_schedule(y)
    bx, tx = s[y].split(s[y].axes[0], 2048)
    s[y].bind(bx, "blockIdx.x")
    s[y].bind(tx, "threadIdx.x")
    with pytest.raises(CodegenError, match="binds 2048 threads per block"):
        source(lower(s, [x, y], "big"))


def test_cuda_schedules_exist_for_every_cpu_pattern() -> None:
    from taso_py.codegen.topi.registry import SCHEDULE
    cpu = {tag for key, tag in SCHEDULE if key == CPU.schedules}
    cuda = {tag for key, tag in SCHEDULE if key == CUDA.schedules}
    assert cpu <= cuda, cpu - cuda

