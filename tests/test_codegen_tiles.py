"""The register-tile micro-kernel (`TileIntrin`), the host ISA it is blocked for, and the tile shapes:
results against numpy on every ISA level this machine can run, and the blockings' register budget."""

from __future__ import annotations

import numpy as np
import pytest

from taso_py.codegen import isa, te
from taso_py.codegen.backends.c import build
from taso_py.codegen.backends.c.micro import intrinsic_source
from taso_py.codegen.errors import CodegenError, ScheduleError
from taso_py.codegen.lower import Intrinsic, lower, walk_stmts
from taso_py.codegen.lower.intrin import TileIntrin
from taso_py.codegen.schedule import create_schedule
from taso_py.codegen.topi import conv, registry, tiling
from taso_py.codegen.topi import linalg as _linalg  # noqa: F401  (registers matmul)
from taso_py.codegen.tune.space import Config
from taso_py.ops import OPS
from taso_py.ops.conv import Conv2dAttrs
from taso_py.types import TensorType

RNG = np.random.default_rng(1)
LEVELS = [lv for lv in isa.LEVELS if isa.LEVELS.index(lv) <= isa.LEVELS.index(isa._detected_level())]


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(params=LEVELS)
def level(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each ISA level this CPU runs: the kernels are built and run for it (TASO_ISA)."""
    monkeypatch.setenv("TASO_ISA", request.param)
    isa.host.cache_clear()
    yield request.param
    isa.host.cache_clear()


def tiles(f: object) -> list[Intrinsic]:
    return [s for s in walk_stmts(f.body) if isinstance(s, Intrinsic) and s.name == "tile"]  # type: ignore[attr-defined]


def test_isa_facts_follow_the_level(level: str) -> None:
    cpu = isa.host()
    assert cpu.level == level
    assert (cpu.lanes, cpu.registers) == {"avx512": (16, 32), "avx2": (8, 16), "sse": (4, 16)}[level]
    if level == "avx512":  # gcc's Intel tuning would otherwise keep 512-bit code at 256 bits
        assert "-mprefer-vector-width=512" in cpu.cflags
    assert level in cpu.key and cpu.model in cpu.key


def test_an_isa_the_cpu_lacks_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASO_ISA", "avx1024")
    isa.host.cache_clear()
    try:
        with pytest.raises(CodegenError, match="TASO_ISA"):
            isa.host()
    finally:
        isa.host.cache_clear()


@pytest.mark.parametrize("level_name", ["avx512", "avx2", "sse"])
def test_tile_shapes_fit_the_registers(level_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isa, "host", lambda: isa.Isa(level_name, "test cpu", 32 << 10, 1 << 20, 8 << 20))
    cpu = isa.host()
    for extent in (1, 7, 14, 56, 73, 128):
        for blocks in (1, 2, 4, 8, 32):
            rows, groups = tiling.tile_shape(extent, blocks, 16, lambda r, g: 64)
            vecs = groups * max(1, 16 // cpu.lanes)
            assert rows * vecs <= cpu.registers * 3 // 4 and blocks % groups == 0 and 1 <= rows <= extent
            assert rows == 1 or rows * vecs + vecs + 1 <= cpu.registers  # a row of B and a broadcast too


def test_an_avx2_tile_leaves_registers_for_its_row_of_b(monkeypatch: pytest.MonkeyPatch) -> None:
    """NASNet-A's 1x1 convolutions of 96 channels on 14 columns and 48 on 28: the 2 x 6-vector
    tile (12 accumulators, 6 B vectors) spilled in gcc's code and ran 25-35% slower on a Zen 1
    core than the 2 x 4 and 4 x 2 tiles its tuning found best."""
    monkeypatch.setattr(isa, "host", lambda: isa.Isa("avx2", "test cpu", 32 << 10, 512 << 10, 8 << 20))
    assert tiling.tile_shape(14, 6, 16, lambda r, g: 14 * 14 // r * 6 // g, steps=96) == (2, 2)
    assert tiling.tile_shape(28, 3, 16, lambda r, g: 28 * 28 // r * 3 // g, steps=48) == (4, 1)


def test_tile_shapes_hide_the_fma_latency() -> None:
    """Enough independent accumulators for two FMA units of latency 4 wherever the sizes allow."""
    rows, groups = tiling.tile_shape(56, 4, 16, lambda r, g: 56 * 4 // g)
    assert rows * groups * max(1, 16 // isa.host().lanes) >= isa.host().fma_units * tiling.FMA_LATENCY


def test_a_tile_whose_b_streams_from_l2_uses_each_b_vector_on_several_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """BERT's FC layer on an AVX2 core (64 rows, 3072 columns, 768 long): the B panel of any tile
    misses L1, so a 2-row tile reading 6 B vectors a step waits on L2 (it ran at 40% of the peak)."""
    monkeypatch.setattr(isa, "host", lambda: isa.Isa("avx2", "test cpu", 32 << 10, 512 << 10, 32 << 20))
    rows, groups = tiling.tile_shape(64, 192, 16, lambda r, g: 64 // r * 192 // g, steps=768)
    vecs = groups * 2
    assert rows >= 4 and vecs * 8 * 4 / tiling.L2_BYTES_PER_CYCLE <= rows * vecs / 2


def test_a_matrix_vector_tile_has_accumulators_enough_to_stream_b(monkeypatch: pytest.MonkeyPatch) -> None:
    """NasRNN's recurrent step (1 row, 4096 columns, 512 long) on an AVX2 core: B is read once
    whatever the tile, so a 1 x 16 tile (two accumulators, a 4-cycle FMA chain per step) only looked
    cheaper because its 32 KiB panel "fits L1"; with B known to stream, the tile hides the latency."""
    monkeypatch.setattr(isa, "host", lambda: isa.Isa("avx2", "test cpu", 32 << 10, 512 << 10, 32 << 20))
    assert tiling.tile_shape(1, 256, 16, lambda r, g: 256 // g, steps=512, pad=False) == (1, 1)
    rows, groups = tiling.tile_shape(1, 256, 16, lambda r, g: 256 // g, steps=512, pad=False, b_rows=1)
    assert rows == 1 and groups * 2 >= isa.host().fma_units * tiling.FMA_LATENCY


@pytest.mark.parametrize("lanes", [16, 32])
def test_vector_max_and_min_are_maxps_semantics_on_every_level(level: str, lanes: int) -> None:
    """max(a, b) is a > b ? a : b per lane, NaNs included, however wide the loop is against the
    registers (16 and 32 lanes: one, two or four registers of the level)."""
    a, b = te.placeholder((4, lanes), name="A"), te.placeholder((4, lanes), name="B")
    hi = te.compute((4, lanes), lambda i, j: te.max_(a[i, j], b[i, j]), name="Hi")
    lo = te.compute((4, lanes), lambda i, j: te.min_(a[i, j], b[i, j]) + hi[i, j] * 0.0, name="Lo")
    s = create_schedule(lo)
    s[hi].vectorize(s[hi].axes[1])
    s[lo].vectorize(s[lo].axes[1])
    f = lower(s, [a, b, lo], f"minmax{lanes}")
    m = build(f)
    assert f"vmax_v{min(lanes, isa.host().lanes)}_float32(" in m.source
    x, y = RNG.standard_normal((2, 4, lanes)).astype(np.float32)
    x[0, :3], y[1, :3] = np.nan, np.nan
    out = np.zeros((4, lanes), np.float32)
    m[f.name](x, y, out)
    with np.errstate(invalid="ignore"):
        want = np.where(x < y, x, y) + np.where(x > y, x, y) * 0.0
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(("a_shape", "b_shape", "knobs"), [
    ((8, 64), (64, 48), {}),
    ((24, 40), (40, 64), {"tile_m": 6, "tile_n": 32}),
    ((1, 300), (300, 32), {}),  # a row: the matrix-vector product of an FC layer
    ((3, 16, 20), (3, 20, 32), {}),  # batched
    ((12, 96), (96, 64), {"k_block": 64}),  # the reduction in two calls: the second accumulates
])
def test_matmul_register_tile_matches_numpy(level: str, a_shape: tuple, b_shape: tuple, knobs: dict) -> None:
    a, b = rand(*a_shape), rand(*b_shape)
    ta, tb = te.placeholder(a.shape, name="a"), te.placeholder(b.shape, name="b", constant=True)
    (y,) = registry.compute("matmul", [ta, tb], None, [TensorType(np.matmul(a, b).shape)])
    s = registry.schedule_group([y], Config(knobs))
    f = lower(s, [ta, tb, y], "mm")
    assert tiles(f), "the default matmul of whole column blocks uses the register tile"
    out = np.full(y.shape, np.nan, np.float32)
    build(f)["mm"](a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "knobs"), [
    ((1, 32, 14, 14), (32, 32, 3, 3), {"pad": (1, 1, 1, 1), "act": "relu"}, {}),
    ((1, 16, 9, 13), (48, 16, 1, 1), {}, {"tile_w": 13, "tile_ob": 3}),
    ((2, 32, 11, 11), (16, 32, 3, 3), {"stride": (2, 2), "pad": (1, 1, 1, 1)}, {}),  # 6 wide: padded to tiles
    ((1, 16, 10, 10), (32, 16, 3, 3), {"dilation": (2, 2), "pad": (2, 2, 2, 2)}, {"tile_w": 5}),
    ((1, 64, 8, 8), (64, 16, 3, 3), {"groups": 4, "pad": (1, 1, 1, 1)}, {}),  # whole-block groups
])
def test_blocked_convolution_register_tile_matches_the_reference(level: str, x_shape: tuple, w_shape: tuple,
                                                                 attrs: dict, knobs: dict) -> None:
    a = Conv2dAttrs(**attrs)
    x, w, bias = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    tx, tw = te.placeholder(x.shape, name="x"), te.placeholder(w.shape, name="w")
    xp, wp = conv.pack_data(tx, 16), conv.pack_weight(tw, 16, 16, a.groups)
    packed = []
    for t, src, v in ((xp, tx, x), (wp, tw, w)):
        f = lower(create_schedule([t]), [src, t], "pack")
        out = np.empty(t.shape, np.float32)
        build(f)["pack"](v, out)
        packed.append(out)
    txp, twp = te.placeholder(xp.shape, name="xp"), te.placeholder(wp.shape, name="wp")
    tb = te.placeholder(bias.shape, name="b")
    y = conv.conv2d_nchwc(txp, twp, tb, a, w_shape[0])
    f = lower(registry.schedule_group([y], Config(knobs)), [txp, twp, tb, y], "conv")
    assert tiles(f)
    out = np.full(y.shape, np.nan, np.float32)
    build(f)["conv"](*packed, bias, out)
    got = out.transpose(0, 1, 4, 2, 3).reshape(out.shape[0], -1, *out.shape[2:4])[:, :w_shape[0]]
    (want,) = OPS["conv2d"].ref([x, w, bias], a)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_micro_kernel_keeps_its_tile_in_named_vector_registers() -> None:
    a, b = te.placeholder((8, 32), name="a"), te.placeholder((32, 32), name="b")
    (y,) = registry.compute("matmul", [a, b], None, [TensorType((8, 32))])
    f = lower(registry.schedule_group([y], Config({"tile_m": 4, "tile_n": 32})), [a, b, y], "mm")
    src = build(f).source
    (call,) = [s for s in walk_stmts(f.body) if isinstance(s, Intrinsic)]
    name = next(line.split("(")[0].split()[-1] for line in src.splitlines()
                if line.startswith("static inline void tile_"))
    body = intrinsic_source(name)
    lanes = isa.host().lanes
    vectors_per_row = 32 // min(lanes, 16)
    assert body.count(" += v") == 4 * vectors_per_row  # one statement per accumulator, one per row x vector
    assert f"tvec{min(lanes, 16)}" in body and call.params["reduce"] == (32,)


def test_tile_intrinsic_checks_its_loops_and_operands() -> None:
    a, b = te.placeholder((8, 16), name="a"), te.placeholder((16, 16), name="b")
    k = te.reduce_axis(16, "k")
    y = te.compute((8, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="y")
    s = create_schedule([y])
    i, j, kk = s[y].leaf
    jo, ji = s[y].split(j, 16)
    s[y].reorder(i, jo, ji, kk)
    s[y].tensorize(i, TileIntrin("tile", 8, 1, 16, (16, 1)))  # claims two reduce loops: there is one
    with pytest.raises(ScheduleError, match="needs inner loops of extents"):
        lower(s, [a, b, y], "bad")
    bt = te.compute((16, 16), lambda kk2, j2: b[j2, kk2], name="bt")  # B's lanes strided: not a tile's
    y2 = te.compute((8, 16), lambda i, j: te.sum(a[i, k] * bt[k, j], axis=k), name="y2")
    s2 = create_schedule([y2])
    s2[bt].compute_inline()
    i, j, kk = s2[y2].leaf
    jo, ji = s2[y2].split(j, 16)
    s2[y2].reorder(i, jo, ji, kk)
    s2[y2].tensorize(i, TileIntrin("tile", 8, 1, 16, (16,)))
    with pytest.raises(ScheduleError, match="lanes must be contiguous"):
        lower(s2, [a, b, y2], "bad2")
