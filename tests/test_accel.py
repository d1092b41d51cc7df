"""The simulated accelerator: bit-exact layers, tensorize, buffer limits, the token protocol."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from taso_py.codegen import te
from taso_py.codegen.backends.accel import (
    AccelConfig,
    AccelGemmIntrin,
    BufferOverflowError,
    ConvShape,
    DeadlockError,
    Epilogue,
    LayerAttrs,
    ProtocolError,
    Simulator,
    conv2d_program,
    reference,
    run_layer,
)
from taso_py.codegen.backends.accel.codegen import Tiling, simulate_timing
from taso_py.codegen.backends.accel.intrin import ConvBlock, conv_kernel
from taso_py.codegen.backends.accel.isa import Alu, Finish, Gemm, Load, Store
from taso_py.codegen.backends.accel.quant import (
    activation_scale,
    dequantize,
    error_bound,
    quantize,
    quantize_bias,
    quantize_weights,
    requant_params,
)
from taso_py.codegen.errors import CodegenError, ScheduleError
from taso_py.codegen.lower import lower
from taso_py.codegen.schedule import create_schedule

CFG = AccelConfig()


def layer(kind: str, xs: tuple[int, ...], ws: tuple[int, ...], *, stride: int = 1, pad: int = 0, relu: bool = False,
          requant: bool = True, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, LayerAttrs]:
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, xs, dtype=np.int8)
    w = rng.integers(-128, 128, ws, dtype=np.int8)
    oc = ws[0] if kind == "conv2d" else ws[1]
    bias = rng.integers(-5000, 5000, oc).astype(np.int32)
    mult = tuple(int(m) for m in rng.integers(1, 4000, oc)) if requant else None
    return x, w, bias, LayerAttrs(stride, pad, relu, 20 if requant else None, mult)


def check(kind: str, xs: tuple[int, ...], ws: tuple[int, ...], **kw: object) -> None:
    x, w, bias, attrs = layer(kind, xs, ws, **kw)  # type: ignore[arg-type]
    out, stats = run_layer(kind, x, w, bias, attrs, CFG)
    ref = reference(kind, x, w, bias, attrs)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    np.testing.assert_array_equal(out, ref)
    useful = ref.size * (x.shape[1] if kind == "matmul" else w.size // w.shape[0])
    assert useful <= stats.macs < 6 * useful  # executed MACs include channel padding only


# ---- bit-exact against numpy ------------------------------------------------------------------

@pytest.mark.parametrize("m,k,n,requant", [(1, 16, 16, False), (5, 20, 33, False), (7, 40, 24, True),
                                           (64, 96, 80, True)])
def test_matmul_matches_numpy(m: int, k: int, n: int, requant: bool) -> None:
    check("matmul", (m, k), (k, n), requant=requant)


@pytest.mark.parametrize("c,h,w,oc,kh,stride,pad,relu", [
    (20, 9, 7, 18, 3, 1, 1, False),  # ragged channel tiles
    (32, 9, 9, 40, 3, 2, 1, True),  # strided 3x3
    (3, 15, 15, 18, 7, 2, 3, True),  # a first layer: im2col on the host
    (32, 10, 10, 40, 1, 2, 0, False),  # strided 1x1: subsampled on the host
    (16, 6, 5, 16, 1, 1, 0, True),
])
def test_conv2d_matches_numpy(c: int, h: int, w: int, oc: int, kh: int, stride: int, pad: int, relu: bool) -> None:
    check("conv2d", (1, c, h, w), (oc, c, kh, kh), stride=stride, pad=pad, relu=relu)


def test_run_layer_rejects_what_it_cannot_run() -> None:
    x, w, bias, attrs = layer("conv2d", (2, 16, 4, 4), (16, 16, 1, 1))
    with pytest.raises(CodegenError, match="batch-1"):
        run_layer("conv2d", x, w, bias, attrs, CFG)
    with pytest.raises(CodegenError, match="expected matmul"):
        run_layer("matmul", x[0, 0], w[:, :, 0, 0][:8], None, LayerAttrs(), CFG)
    with pytest.raises(CodegenError, match="int8"):
        run_layer("conv2d", x[:1].astype(np.int32), w, bias, attrs, CFG)


def test_int32_output_keeps_the_accumulators() -> None:
    check("conv2d", (1, 32, 8, 8), (32, 32, 3, 3), pad=1, relu=True, requant=False)


@pytest.mark.parametrize("c,h,oc,k,stride,pad", [
    (64, 56, 64, 3, 1, 1),  # ResNet-50 stage 1 3x3
    (512, 28, 1024, 1, 2, 0),  # stage 4 projection shortcut (strided 1x1)
    (512, 7, 512, 3, 1, 1),  # stage 4 3x3
    (3, 224, 64, 7, 2, 3),  # the stem
])
def test_resnet50_layers_match_numpy(c: int, h: int, oc: int, k: int, stride: int, pad: int) -> None:
    check("conv2d", (1, c, h, h), (oc, c, k, k), stride=stride, pad=pad, relu=True)


@pytest.mark.parametrize("seq,k,n", [(128, 768, 768), (32, 768, 3072)])
def test_bert_base_projections_match_numpy(seq: int, k: int, n: int) -> None:
    check("matmul", (seq, k), (k, n))


# ---- tensorize --------------------------------------------------------------------------------

def packed_block(bo: int, dtype: str = "int8"):  # type: ignore[no-untyped-def]
    inp = te.placeholder((4, 1, 16), dtype, "inp")
    wgt = te.placeholder((2, 4, bo, 16), dtype, "wgt")
    ric, ri = te.reduce_axis(4, "ic"), te.reduce_axis(16, "ci")
    acc = te.compute((2, 1, bo), lambda o, b, j: te.sum(
        te.cast("int32", inp[ric, b, ri]) * te.cast("int32", wgt[o, ric, j, ri]), axis=[ric, ri]), name="acc")
    s = create_schedule(acc)
    o, b, j = s[acc].axes
    s[acc].reorder(o, ric, b, j, ri)
    s[acc].tensorize(b, AccelGemmIntrin.for_config(CFG))
    return s, [inp, wgt, acc]


def test_tensorize_builds_the_uop_kernel() -> None:
    k = conv_kernel(CFG, ConvBlock(toc=2, tic=1, th=2, ow=3, kh=1, kw=1, stride=2, iht=3, iwp=5))
    # output (oc, h, w) row-major; input pixel (2h, 2w) of a 3 x 5 window; weight tile per oc
    assert k.acc.tolist() == list(range(12))
    assert k.inp.tolist() == [0, 2, 4, 10, 12, 14] * 2
    assert k.wgt.tolist() == [0] * 6 + [1] * 6
    assert k.reset_tiles.tolist() == list(range(12))
    s, args = packed_block(16)
    lower(s, args, "ok")


def test_tensorize_with_wrong_shapes_is_rejected() -> None:
    s, args = packed_block(8)  # an 8-wide output tile on a 16-wide GEMM core
    with pytest.raises(ScheduleError, match="extents"):
        lower(s, args, "bad")
    s, args = packed_block(16, "float32")
    with pytest.raises(ScheduleError, match="int"):
        lower(s, args, "bad")


# ---- buffers ----------------------------------------------------------------------------------

def tiles(n: int, elems: int, dtype: type = np.int8) -> np.ndarray:
    return np.zeros((n, elems), dtype)


def test_buffer_overflow_is_rejected() -> None:
    sim = Simulator(CFG)
    cap = CFG.capacity("inp")
    dram = {"x": tiles(64, 16)}
    with pytest.raises(BufferOverflowError, match=f"inp buffer tiles .{cap - 8}, {cap + 8}. exceed its {cap}"):
        sim.run([Load(buffer="inp", dram="x", dram_offset=0, y_size=1, x_size=16, x_stride=16,
                      sram_offset=cap - 8), Finish()], dram)
    with pytest.raises(BufferOverflowError, match="DRAM tensor 'x'"):
        sim.run([Load(buffer="inp", dram="x", dram_offset=60, y_size=1, x_size=16, x_stride=16, sram_offset=0),
                 Finish()], dram)
    k = conv_kernel(CFG, ConvBlock(1, 1, 1, 4, 1, 1, 1, 1, 4))
    with pytest.raises(BufferOverflowError, match="wgt buffer tile"):
        sim.run([Gemm(kernel=k, acc_base=0, inp_base=0, wgt_base=CFG.capacity("wgt")), Finish()], {})
    with pytest.raises(CodegenError, match="half the buffer holds"):
        conv2d_program(ConvShape(64, 56, 56, 64, 3, 3, 1, 1), Epilogue(), CFG, tiling=Tiling(4, 4, 56))


# ---- the dependency-token protocol ------------------------------------------------------------

def load_gemm_store(**flags: dict[str, bool]) -> list:  # type: ignore[type-arg]
    k = conv_kernel(CFG, ConvBlock(1, 1, 1, 4, 1, 1, 1, 1, 4))
    return [Load(buffer="inp", dram="x", dram_offset=0, y_size=1, x_size=4, x_stride=4, sram_offset=0,
                 **flags.get("li", {})),
            Load(buffer="wgt", dram="w", dram_offset=0, y_size=1, x_size=1, x_stride=1, sram_offset=0,
                 **flags.get("lw", {})),
            Gemm(kernel=k, acc_base=0, inp_base=0, wgt_base=0, reset=True, **flags.get("g", {})),
            Store(dram="y", dram_offset=0, y_size=1, x_size=4, x_stride=4, sram_offset=0, dtype="int32",
                  **flags.get("s", {})),
            Finish()]


def tiny_dram() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"x": rng.integers(-128, 128, (4, 16), dtype=np.int8), "w": rng.integers(-128, 128, (1, 256), dtype=np.int8),
            "y": tiles(4, 16, np.int32)}


def test_a_hand_made_program_runs_and_matches() -> None:
    prog = load_gemm_store(lw={"push_next": True}, g={"pop_prev": True, "push_next": True}, s={"pop_prev": True})
    dram = tiny_dram()
    stats = Simulator(CFG).run(prog, dram)
    np.testing.assert_array_equal(dram["y"], dram["x"].astype(np.int32) @ dram["w"].reshape(16, 16).T.astype(np.int32))
    assert stats.start[2] >= stats.end[1] and stats.start[3] >= stats.end[2]  # the tokens ordered them
    assert stats.macs == 4 * 256


def test_deadlock_is_reported() -> None:
    # compute waits for data that no load announces
    prog = load_gemm_store(g={"pop_prev": True, "push_next": True}, s={"pop_prev": True})
    with pytest.raises(DeadlockError, match=r"compute at instruction #2 \(GEMM\) pops empty queue l2c"):
        Simulator(CFG).run(prog, tiny_dram())
    # load waits for a free buffer before it loads what compute waits for: a cycle
    prog = load_gemm_store(li={"pop_next": True}, lw={"push_next": True}, g={"pop_prev": True, "push_prev": True})
    with pytest.raises(DeadlockError, match="load at instruction #0"):
        Simulator(CFG).run(prog, tiny_dram())


def test_unbalanced_tokens_and_missing_neighbours_are_rejected() -> None:
    with pytest.raises(ProtocolError, match="tokens left"):
        Simulator(CFG).run(load_gemm_store(lw={"push_next": True}), tiny_dram())
    with pytest.raises(ProtocolError, match="no prev module"):
        Simulator(CFG).run(load_gemm_store(li={"pop_prev": True}), tiny_dram())


@pytest.mark.parametrize("latency_hiding", [True, False])
def test_randomized_module_timing_gives_identical_results(latency_hiding: bool) -> None:
    x, w, bias, attrs = layer("conv2d", (1, 48, 12, 12), (64, 48, 3, 3), pad=1, relu=True)
    ref = reference("conv2d", x, w, bias, attrs)
    cycles = set()
    for seed in range(5):
        out, stats = run_layer("conv2d", x, w, bias, attrs, CFG, latency_hiding, jitter=2.0, seed=seed)
        np.testing.assert_array_equal(out, ref)
        cycles.add(stats.cycles)
    assert len(cycles) > 1  # the timing did change


def test_a_missing_buffer_free_token_is_a_race() -> None:
    """Without compute->load tokens the loads overwrite buffers the GEMMs still read."""
    shape, epi = ConvShape(16, 24, 24, 64, 3, 3, 1, 1), Epilogue()  # loads much faster than the GEMMs
    prog = conv2d_program(shape, epi, CFG, tiling=Tiling(4, 1, 2))
    racy = [replace(i, pop_next=False) if i.module == "load" else
            replace(i, push_prev=False) if isinstance(i, Gemm) else i for i in prog.insns]
    rng = np.random.default_rng(0)
    dram = {n: rng.integers(-128, 128, (t, e)).astype(dt) for n, (t, e, dt) in prog.dram.items()}
    good = {n: a.copy() for n, a in dram.items()}
    Simulator(CFG).run(prog.insns, good)
    bad = {n: a.copy() for n, a in dram.items()}
    Simulator(CFG).run(racy, bad)
    assert not np.array_equal(good["out"], bad["out"])


def test_generated_programs_never_deadlock() -> None:
    for shape in (ConvShape(48, 12, 12, 64, 3, 3, 1, 1), ConvShape(64, 9, 9, 48, 1, 1), ConvShape.matmul(33, 64, 80)):
        for lh in (True, False):
            for t in (Tiling(1, 1, 1), Tiling(2, 2, 3, "oc"), Tiling(3, 1, 4, "sp")):
                stats = simulate_timing(conv2d_program(shape, Epilogue(bias=True, shift=8), CFG, latency_hiding=lh,
                                                       tiling=t), CFG)
                assert stats.cycles > 0


# ---- performance ------------------------------------------------------------------------------

def test_latency_hiding_reduces_cycles_on_a_load_heavy_layer() -> None:
    shape = ConvShape(512, 7, 7, 512, 3, 3, 1, 1)  # 2.4 MB of weights for 49 pixels
    epi = Epilogue(bias=True, shift=20, relu=True)
    with_lh = simulate_timing(conv2d_program(shape, epi, CFG, latency_hiding=True), CFG)
    without = simulate_timing(conv2d_program(shape, epi, CFG, latency_hiding=False, tiling=None), CFG)
    assert with_lh.cycles < 0.8 * without.cycles
    assert with_lh.busy["load"] > 0.5 * with_lh.cycles  # it is load-heavy
    assert with_lh.macs / (with_lh.cycles * CFG.peak_macs_per_cycle) >= 0.8


def test_alu_ops() -> None:
    acc = np.array([[5, -7, 100, -(1 << 31)] + [0] * 12, [3] * 16], np.int32)
    dram = {"a": np.vstack([acc, acc]).astype(np.int32), "y": tiles(2, 16, np.int32)}
    dst, src = np.array([0]), np.array([1])
    prog = [Load(buffer="acc", dram="a", dram_offset=0, y_size=1, x_size=2, x_stride=2, sram_offset=0),
            Alu(op="requant", dst=dst, src=src, imm=(1, -10, 120)),  # clip((x*3 + 1) >> 1, -10, 120)
            Alu(op="shr", dst=dst, imm=(-1,)),
            Alu(op="add", dst=dst, src=src, push_next=True),
            Store(dram="y", dram_offset=0, y_size=1, x_size=2, x_stride=2, sram_offset=0, dtype="int32", pop_prev=True),
            Finish()]
    Simulator(CFG).run(prog, dram)
    x = np.array([5, -7, 100, -(1 << 31)], np.int64)
    want = np.clip((x * 3 + 1) >> 1, -10, 120) * 2 + 3
    np.testing.assert_array_equal(dram["y"][0, :4], want)


def test_quantized_conv_tracks_the_float_conv() -> None:
    rng = np.random.default_rng(3)
    x, w, b = rng.standard_normal((1, 32, 8, 8)), rng.standard_normal((48, 32, 3, 3)) * 0.1, rng.standard_normal(48)
    s_x = activation_scale(x)
    wq, s_w = quantize_weights(w)
    xq = quantize(x, s_x)
    cols = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
    yf = np.zeros((48, 8, 8))
    for i in range(3):
        for j in range(3):
            yf += np.einsum("oc,chw->ohw", w[:, :, i, j], cols[:, i:i + 8, j:j + 8])
    yf = np.maximum(yf + b[:, None, None], 0)
    s_y = activation_scale(yf)
    shift, mult = requant_params(s_x, s_w, s_y)
    out, _ = run_layer("conv2d", xq, wq, quantize_bias(b, s_x, s_w), LayerAttrs(1, 1, True, shift, mult), CFG)
    attrs = LayerAttrs(1, 1, True, shift, mult)
    err = np.abs(dequantize(out, s_y) - yf[None])
    bound = error_bound("conv2d", x, w, b, attrs, s_x, s_w, s_y)
    assert np.all(err <= bound) and bound.max() < 0.2 * yf.max()  # the documented worst case holds
    assert err.max() > 0.2 * s_y  # (the comparison is not vacuous)


# ---- the instruction streams: virtual threads and DMA padding -----------------------------------

@pytest.mark.parametrize("m,k,n,ratio", [(12, 64, 64, 1.0), (128, 768, 768, 0.8)])
def test_matmul_runs_bit_exact_and_virtual_threads_hide_latency(m: int, k: int, n: int, ratio: float) -> None:
    x, w, _, attrs = layer("matmul", (m, k), (k, n), requant=False)
    ref = reference("matmul", x, w, None, attrs)
    cycles = {}
    for lh in (True, False):
        out, stats = run_layer("matmul", x, w, None, attrs, CFG, lh)
        np.testing.assert_array_equal(out, ref)
        cycles[lh] = stats.cycles
    assert cycles[True] <= ratio * cycles[False]
    if m == 128:  # int32 outputs (as the graph compiler stores them): 4 bytes an element to store
        assert m * k * n / (cycles[True] * CFG.peak_macs_per_cycle) > 0.85


@pytest.mark.parametrize("ic,h,oc,k,stride", [(32, 8, 32, 3, 1), (64, 14, 64, 3, 2), (32, 6, 48, 1, 1)])
def test_zero_padding_becomes_padded_dma_loads(ic: int, h: int, oc: int, k: int, stride: int) -> None:
    pad = k // 2
    prog = conv2d_program(ConvShape(ic, h, h, oc, k, k, stride, pad), Epilogue(), CFG)
    inp = [i for i in prog.insns if isinstance(i, Load) and i.buffer == "inp"]
    assert inp and all(i.y_size * i.x_size for i in inp)  # loads of whole rows of input tiles
    assert any(i.y_pad0 or i.x_pad0 for i in inp) == bool(pad)  # the padding is the DMA's, not in DRAM
    x, w, bias, attrs = layer("conv2d", (1, ic, h, h), (oc, ic, k, k), stride=stride, pad=pad, requant=False)
    ref = reference("conv2d", x, w, bias, attrs)
    cycles = []
    for lh in (True, False):
        out, stats = run_layer("conv2d", x, w, bias, attrs, CFG, lh)
        np.testing.assert_array_equal(out, ref)
        cycles.append(stats.cycles)
    assert cycles[0] < cycles[1]
