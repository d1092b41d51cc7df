"""The operator library (all but matmul and conv2d): each operator's compute and default
schedule, compiled by the C backend, against the op table's numpy reference and, for a
few, ONNX Runtime; fusion of an injective chain into one vectorized parallel kernel.

All cases are lowered into one module, so gcc runs once (and not at all when the
content-hash cache has it).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from taso_py import ops
from taso_py.codegen import te
from taso_py.codegen.backends.c import Module, build
from taso_py.codegen.backends.c.emit import register_lanes
from taso_py.codegen.lower import Allocate, For, PrimFunc, Store, lower, walk_stmts
from taso_py.codegen.schedule.schedule import LoopKind
from taso_py.codegen.topi import compute, schedule_group
from taso_py.codegen.tune.space import Config
from taso_py.graph import Graph
from taso_py.onnx_io import OnnxModel, OnnxOrigin, to_onnx
from taso_py.runtime import run
from taso_py.types import DType, TensorType

# every parallel-loop decision taken, so small cases exercise the parallel code too
SMALL_PARALLEL = {"parallel_min_elements": 0}


@dataclass
class Case:
    op: str
    shapes: list[tuple[int, ...]]
    attrs: dict[str, Any]
    dtype: str = "float32"
    onnx: bool = False  # also compare with ONNX Runtime
    label: str = field(init=False)

    def __post_init__(self) -> None:
        dt = "" if self.dtype == "float32" else self.dtype
        self.label = f"{self.op}{self.shapes}{self.attrs or ''}{dt}".replace(" ", "")

    @property
    def opdef(self) -> Any:
        return ops.get(self.op)

    def typed(self) -> tuple[Any, Any, list[TensorType], tuple[TensorType, ...]]:
        """(attributes as given, canonical attributes, input types, output types)."""
        values = dict(self.attrs) if self.opdef.inputs else {**self.attrs, "dtype": self.dtype}
        raw = self.opdef.make_attrs(**values)
        in_types = [TensorType(s, DType(self.dtype)) for s in self.shapes]
        return raw, self.opdef.canonical(raw, in_types), in_types, self.opdef.infer(in_types, raw)

    def inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Normal floats (positive for batch norm's variance), non-zero small ints (safe divisors)."""
        rng = np.random.default_rng(seed)
        out = []
        for name, shape in zip(self.opdef.inputs * 8, self.shapes):
            if np.dtype(self.dtype).kind == "f":
                v = rng.standard_normal(shape)
                v = np.abs(v) + 0.5 if name == "var" else v
            else:
                v = rng.integers(1, 6, shape) * rng.choice((-1, 1), shape)
            out.append(np.asarray(v, self.dtype))
        return out


def c(op: str, *shapes: tuple[int, ...], dtype: str = "float32", onnx: bool = False, **attrs: Any) -> Any:
    case = Case(op, list(shapes), attrs, dtype, onnx)
    return pytest.param(case, id=case.label)


X4 = (2, 3, 7, 6)
POOL_WINDOWS = ((3, 1, 1, False), ((3, 2), (2, 1), (1, 0, 2, 1), False), (3, 2, 0, True), (2, 2, 1, True),
                ((3, 2), (2, 3), (1, 1, 0, 0), True), (3, 3, (2, 1), True))
BN = ((3,),) * 4
CASES = [
    c("relu", (2, 3, 4)), c("relu", (1000,)), c("relu", (4, 3, 17)), c("relu", (5,), dtype="int32"),
    c("relu", (3, 33), dtype="float64"),
    c("sigmoid", (2, 3)), c("sigmoid", (3, 37), onnx=True), c("tanh", (2, 3)), c("tanh", (67,)),
    c("erf", (3, 4)), c("erf", (5, 19)),
    *(c("gelu", s, approximate=a, onnx=a == "tanh") for a in ("none", "tanh") for s in ((2, 5), (3, 33))),
    *(c(op, *s, onnx=op == "div") for op in ("add", "mul", "sub", "div")
      for s in (((2, 3), (2, 3)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((1, 3), (2, 1)),
                ((5, 33), (33,)), ((4, 32), (4, 1)), ((3, 7, 20), (7, 1)), ((2, 3, 5), ()))),
    c("div", (4, 5), (5,), dtype="int32"), c("sub", (2, 3), (3,), dtype="int64"),
    c("mul", (2, 3), (2, 1), dtype="int32"), c("add", (3, 40), (40,), dtype="int32"),
    c("scalar_mul", (2, 3), scale=2.5), c("scalar_mul", (100,), scale=-0.5),
    c("scalar_mul", (4,), scale=-3, dtype="int32"),
    *(c(pool, X4, kernel=2, stride=2, **extra) for pool, extra in
      (("maxpool2d", {}), ("avgpool2d", {}), ("avgpool2d", {"count_include_pad": True}))),
    *(c(pool, X4, kernel=k, stride=s, pad=p, ceil_mode=cm, onnx=pool == "avgpool2d" and cm, **extra)
      for pool, extra in (("maxpool2d", {}), ("avgpool2d", {"count_include_pad": False}),
                          ("avgpool2d", {"count_include_pad": True}))
      for k, s, p, cm in POOL_WINDOWS),
    c("maxpool2d", (1, 4, 20, 37), kernel=3, stride=1, pad=1), c("avgpool2d", (1, 2, 9, 33), kernel=3, stride=2),
    c("maxpool2d", X4, kernel=3, stride=2, pad=1, dtype="int8"), c("maxpool2d", X4, kernel=2, dtype="float64"),
    c("global_avgpool", X4, onnx=True), c("global_avgpool", (2, 3, 5)), c("global_avgpool", (1, 5, 2, 3, 4)),
    c("enlarge", (4, 3, 1, 1), kernel=3), c("enlarge", (2, 2, 3, 1), kernel=(5, 3)),
    c("enlarge", (2, 2, 3, 3), kernel=3),
    *(c("concat", (2, 3, 4), (2, 3, 4), (2, 3, 4), axis=a) for a in (0, 1, 2, -1, -3)),
    c("concat", (2, 1, 4), (2, 5, 4), axis=1, onnx=True), c("concat", (3,), (4,), axis=0), c("concat", (2, 3), axis=1),
    c("concat", (2, 17), (2, 40), axis=1),
    *(c("split", (4, 6, 5), axis=a, sizes=s) for a, s in ((0, (1, 3)), (1, (2, 2, 2)), (-1, (1, 4)), (-2, (6,)))),
    c("split", (3, 70), axis=1, sizes=(33, 37), onnx=True),
    *(c("transpose", s, perm=p) for s, p in (((3, 4), (1, 0)), ((2, 3, 4), (0, 2, 1)), ((2, 3, 4), (2, 0, 1)),
                                             ((2, 3, 4, 5), (3, 1, 2, 0)), ((2, 3), (0, 1)), ((5,), (0,)))),
    c("transpose", (4, 32, 3), perm=(0, 2, 1), onnx=True),
    c("reshape", (2, 3, 4), shape=(6, 4)), c("reshape", (2, 3, 4), shape=(24,)),
    c("reshape", (2, 3, 4), shape=(2, 1, 12, 1)), c("reshape", (6,), shape=(1, 2, 3)),
    c("reshape", (5, 7), shape=(7, 5)),
    *(c("flatten", (2, 3, 4), axis=a) for a in (0, 1, 2, 3, -1, -2)),
    c("pad", (2, 3, 4), pads=(0, 1, 2, 1, 0, 3), value=0.0), c("pad", (2, 3, 4), pads=(-1, 0, -1, 0, -1, -2)),
    c("pad", (2, 5, 4), pads=(1, -1, 0, 0, -2, 1), value=1.5, onnx=True),
    c("pad", (3, 4), pads=(1, 2, 0, 1), value=-2, dtype="int32"),
    c("batchnorm", X4, *BN, onnx=True), c("batchnorm", (4, 3), *BN, epsilon=1e-3), c("batchnorm", (2, 3, 5), *BN),
    c("batchnorm", (1, 3, 4, 40), *BN),
    *(c("softmax", (2, 3, 4), axis=a) for a in (0, 1, 2, -1, -2)),
    c("softmax", (5,), axis=0), c("softmax", (3, 4), axis=0, dtype="float64"),
    c("softmax", (6, 100), axis=-1, onnx=True),
    c("softmax", (2, 37, 3), axis=1),
    *(c("layernorm", *s, axis=a) for s, a in ((((2, 3, 4), (4,)), -1), (((2, 3, 4), (4,), (4,)), 2),
                                              (((2, 3, 4), (3, 4), (3, 4)), 1), (((2, 3, 4), (3, 4)), -2),
                                              (((2, 3, 4), (2, 3, 4), (1, 4)), 0))),
    c("layernorm", (2, 8), (8,), epsilon=1e-2), c("layernorm", (5, 96), (96,), (96,), onnx=True),
    c("const_iconv", channels=4, kernel=3), c("const_iconv", channels=6, kernel=(3, 5), groups=3),
    c("const_pool", channels=3, kernel=(2, 3)), c("const_imm", n=4), c("const_imm", n=3, dtype="float64"),
    c("const_one", shape=(2, 3)), c("const_one", shape=(), dtype="int64"), c("const_one", shape=(3, 50)),
]


def kernel_name(case: Case) -> str:
    """Stable across runs (str hash is not), so the compiled module comes from the cache."""
    return f"k_{hashlib.sha1(case.label.encode()).hexdigest()[:12]}"


def lower_case(case: Case, cfg: Config | None = None) -> PrimFunc:
    raw, _, in_types, out_types = case.typed()
    inputs = [te.placeholder(t.known_shape, case.dtype, name=f"x{k}") for k, t in enumerate(in_types)]
    outputs = compute(case.op, inputs, raw, out_types)
    return lower(schedule_group(outputs, cfg or Config(SMALL_PARALLEL)), [*inputs, *outputs], kernel_name(case))


@pytest.fixture(scope="module")
def module() -> Module:
    return build([lower_case(p.values[0]) for p in CASES])


def run_kernel(mod: Module, case: Case, xs: list[np.ndarray]) -> list[np.ndarray]:
    *_, out_types = case.typed()
    outs = [np.full(t.known_shape, 7, t.dtype.numpy) for t in out_types]  # not zeros: every element is written
    mod[kernel_name(case)](*xs, *outs)
    return outs


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if np.dtype(dtype).kind == "f":
        tol = 1e-5 if dtype == "float32" else 1e-10
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol / 10)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", CASES)
def test_op_matches_numpy_reference(module: Module, case: Case) -> None:
    xs = case.inputs()
    _, canonical, *_ = case.typed()
    want = case.opdef.ref(xs, canonical)
    got = run_kernel(module, case, xs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_close(g, w, case.dtype)


@pytest.mark.parametrize("case", [p for p in CASES if p.values[0].onnx])
def test_op_matches_onnxruntime(module: Module, case: Case) -> None:
    _, canonical, in_types, _ = case.typed()
    g = Graph(case.op)
    refs = [g.add_input(f"x{k}", t) for k, t in enumerate(in_types)]
    outs = g.add(case.op, refs, canonical)
    g.set_outputs(outs, [f"y{k}" for k in range(len(outs))])
    xs = case.inputs(seed=1)
    want = run(to_onnx(OnnxModel(g, OnnxOrigin(opsets={"": 17}))), {f"x{k}": x for k, x in enumerate(xs)})
    got = run_kernel(module, case, xs)
    for k, value in enumerate(got):
        np.testing.assert_allclose(value, want[f"y{k}"], rtol=1e-5, atol=1e-6)


KNOB_CASES = [p.values[0] for p in CASES if p.values[0].op in
              ("add", "maxpool2d", "avgpool2d", "softmax", "layernorm", "split", "transpose")][::3]


@pytest.mark.parametrize("values", [{"vector_width": 4, "pool_vector_width": 16},
                                    {"vector_width": 64, "pool_vector_width": 4, "parallel_min_elements": 0}])
def test_other_knob_values_compute_the_same(values: dict) -> None:
    """What the tuner may pick: other vector widths and parallel thresholds, same results."""
    mod = build([lower_case(case, Config(values)) for case in KNOB_CASES])
    for case in KNOB_CASES:
        xs = case.inputs()
        _, canonical, *_ = case.typed()
        for got, want in zip(run_kernel(mod, case, xs), case.opdef.ref(xs, canonical)):
            assert_close(got, want, case.dtype)


# ---- fusion and schedule structure ----------------------------------------------------------

def _chain(shape: tuple[int, ...], c_shape: tuple[int, ...]) -> tuple[list[te.Tensor], te.Tensor]:
    """relu(a * b + c), c broadcast, as the graph compiler hands it over: three operators."""
    a, b, c_ = te.placeholder(shape, name="a"), te.placeholder(shape, name="b"), te.placeholder(c_shape, name="c")
    t, t3 = TensorType(shape), TensorType(shape)
    (m,) = compute("mul", [a, b], None, [t])
    (s,) = compute("add", [m, c_], None, [t3])
    (r,) = compute("relu", [s], None, [t3])
    return [a, b, c_], r


def test_injective_chain_is_one_vectorized_parallel_kernel() -> None:
    inputs, out = _chain((64, 256), (256,))
    f = lower(schedule_group([out]), [*inputs, out], "chain")
    stmts = list(walk_stmts(f.body))
    assert isinstance(f.body, For) and f.body.kind is LoopKind.PARALLEL
    assert not any(isinstance(s, Allocate) for s in stmts)  # no intermediate buffer
    stores = [s for s in stmts if isinstance(s, Store)]
    assert len(stores) == 1 and stores[0].buffer.name == "relu"
    loops = [s for s in stmts if isinstance(s, For)]
    assert [lp.kind for lp in loops] == [LoopKind.PARALLEL, LoopKind.VECTORIZED] and loops[1].extent == 16
    mod = build(f)
    body = mod.source[mod.source.index("struct chain_par0_ctx"):]
    assert "taso_parallel_for(" in body and f"vmax_v{register_lanes(16)}_float32" in body and "omp simd" not in body
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 64, 256), dtype=np.float32)
    cv = rng.standard_normal(256, dtype=np.float32)
    out_arr = np.empty((64, 256), np.float32)
    mod["chain"](a, b, cv, out_arr)
    np.testing.assert_allclose(out_arr, np.maximum(a * b + cv, 0), rtol=1e-5, atol=1e-6)


def test_vector_width_is_a_knob() -> None:
    inputs, out = _chain((8, 64), (8, 1))
    cfg = Config({"vector_width": 8})
    f = lower(schedule_group([out], cfg), [*inputs, out], "chain8")
    assert {"vector_width", "parallel_min_elements"} <= set(cfg.space)
    vec = [s for s in walk_stmts(f.body) if isinstance(s, For) and s.kind is LoopKind.VECTORIZED]
    assert [v.extent for v in vec] == [8]
    assert not any(isinstance(s, For) and s.kind is LoopKind.PARALLEL for s in walk_stmts(f.body))  # 512 elements


def test_split_group_has_one_nest_per_output() -> None:
    case = Case("split", [(4, 70)], {"axis": 1, "sizes": (33, 37)})
    f = lower_case(case)
    roots = f.body.stmts  # type: ignore[attr-defined]
    assert len(roots) == 2 and all(isinstance(r, For) and r.kind is LoopKind.PARALLEL for r in roots)


def test_pool_then_relu_computes_the_pool_inside_the_relu_loop() -> None:
    """The relu is the group's output: the pool runs a chunk at a time in its parallel loop."""
    x = te.placeholder((2, 3, 9, 20), name="x")
    attrs = ops.get("maxpool2d").make_attrs(kernel=3, stride=1, pad=1)
    (pool_t,) = ops.get("maxpool2d").infer([TensorType((2, 3, 9, 20))], attrs)
    (p,) = compute("maxpool2d", [x], attrs, [pool_t])
    (r,) = compute("relu", [p], None, [pool_t])
    f = lower(schedule_group([r], Config(SMALL_PARALLEL)), [x, r], "pool_relu")
    (par,) = [s for s in walk_stmts(f.body) if isinstance(s, For) and s.kind is LoopKind.PARALLEL]
    (alloc,) = [s for s in walk_stmts(f.body) if isinstance(s, Allocate)]
    assert alloc in walk_stmts(par.body) and alloc.buffer.scope == "local" and alloc.buffer.shape == (1, 1, 1, 20)
    xs = np.random.default_rng(0).standard_normal((2, 3, 9, 20)).astype(np.float32)
    out = np.empty(pool_t.known_shape, np.float32)
    build(f)["pool_relu"](xs, out)
    (want,) = ops.get("maxpool2d").ref([xs], attrs)
    np.testing.assert_array_equal(out, np.maximum(want, 0))


def test_relu_fuses_into_global_average() -> None:
    x = te.placeholder((2, 8, 5, 5), name="x")
    t = TensorType((2, 8, 5, 5))
    (r,) = compute("relu", [x], None, [t])
    (g,) = compute("global_avgpool", [r], None, [TensorType((2, 8, 1, 1))])
    f = lower(schedule_group([g]), [x, g], "relu_gap")
    assert not any(isinstance(s, Allocate) for s in walk_stmts(f.body))
    xs = np.random.default_rng(0).standard_normal((2, 8, 5, 5)).astype(np.float32)
    out = np.empty((2, 8, 1, 1), np.float32)
    build(f)["relu_gap"](xs, out)
    np.testing.assert_allclose(out, np.maximum(xs, 0).mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


def test_layernorm_of_equal_values_is_its_bias() -> None:
    """A row of equal values has x - mean = 0 exactly when the mean is summed in float64; in
    float32, (v + v + v) / 3 misses v for one value in seven, and 1 / sqrt(0 + eps) amplified that
    ulp to errors of 1e-4 to 5e-4 on layer norms of constant rows (fuzz seeds 54016 and 74824)."""
    v = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    v = v[((v + v) + v) / np.float32(3) != v][:8]
    assert len(v) == 8
    x, scale, bias = te.placeholder((8, 3), name="x"), te.placeholder((3,), name="s"), te.placeholder((3,), name="b")
    (y,) = compute("layernorm", [x, scale, bias], ops.get("layernorm").make_attrs(axis=-1), [TensorType((8, 3))])
    f = lower(schedule_group([y]), [x, scale, bias, y], "ln_equal")
    out, b = np.empty((8, 3), np.float32), np.array([0.5, -1.0, 2.0], np.float32)
    build(f)["ln_equal"](np.repeat(v[:, None], 3, axis=1), np.ones(3, np.float32), b, out)
    np.testing.assert_array_equal(out, np.broadcast_to(b, (8, 3)))


@pytest.mark.parametrize(("op", "attrs", "shapes", "temporaries"), [
    ("softmax", {"axis": -1}, [(1, 6, 100)], ["softmax_exp"]),
    ("softmax", {"axis": 1}, [(2, 5, 7)], ["softmax_exp"]),
    ("layernorm", {"axis": -1}, [(1, 6, 100), (100,)], []),
    ("layernorm", {"axis": 2}, [(2, 6, 4, 5), (5,)], []),
])
def test_row_statistics_are_computed_inside_the_parallel_row_loops(op: str, attrs: dict, shapes: list,
                                                                   temporaries: list) -> None:
    """Per row, the statistics are small local buffers inside the parallel loop over all rows;
    only softmax's exponentials are a whole temporary."""
    f = lower_case(Case(op, shapes, attrs))
    x, axis = shapes[0], attrs["axis"] % len(shapes[0])
    rows = x[:axis] + x[axis + 1:] if op == "softmax" else x[:axis]
    par = [s for s in walk_stmts(f.body) if isinstance(s, For) and s.kind is LoopKind.PARALLEL]
    assert len(par) == (2 if op == "softmax" else 1) and all(p.extent == math.prod(rows) for p in par)
    inner = [s for p in par for s in walk_stmts(p.body) if isinstance(s, Allocate)]
    assert inner and all(a.buffer.scope == "local" and a.buffer.size <= 16 for a in inner)
    outer = [s.buffer for s in walk_stmts(f.body) if isinstance(s, Allocate) and s not in inner]
    assert [b.name for b in outer] == temporaries and all(b.shape == x for b in outer)
