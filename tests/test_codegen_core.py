"""The codegen core: each schedule primitive's lowered loops and results, illegal schedules,
the simplifier, the printer and the C backend (compiler errors, kernel cache, vector code)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from taso_py.codegen import te
from taso_py.codegen.backends.c import build
from taso_py.codegen.backends.c.emit import register_lanes
from taso_py.codegen.errors import CodegenError, ScheduleError
from taso_py.codegen.lower import Allocate, For, GemmIntrin, IfThenElse, Intrinsic, lower, simplify, walk_stmts
from taso_py.codegen.lower.ir import PrimFunc
from taso_py.codegen.schedule import LoopKind, create_schedule

RNG = np.random.default_rng(0)


# ---- helpers ------------------------------------------------------------------------------

def loops(f: PrimFunc) -> list[tuple[str, int, LoopKind]]:
    """(name, extent, kind) of every loop, outermost first (pre-order)."""
    return [(s.var.name, s.extent, s.kind) for s in walk_stmts(f.body) if isinstance(s, For)]


def allocs(f: PrimFunc) -> dict[str, tuple[int, ...]]:
    return {s.buffer.name: s.buffer.shape for s in walk_stmts(f.body) if isinstance(s, Allocate)}


def run(f: PrimFunc, *inputs: np.ndarray, out_shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    outs = [np.full(sh, np.nan, np.float32) for sh in out_shapes]
    build(f)[f.name](*[np.ascontiguousarray(x) for x in inputs], *outs)
    return outs


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def matmul(n: int = 16, m: int = 16, k: int = 16) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis(k, "k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return a, b, c


def check_matmul(s, a, b, c, name: str = "mm") -> PrimFunc:  # type: ignore[no-untyped-def]
    f = lower(s, [a, b, c], name)
    x, y = rand(*a.shape), rand(*b.shape)
    (got,) = run(f, x, y, out_shapes=[c.shape])
    np.testing.assert_allclose(got, x @ y, rtol=1e-4, atol=1e-4)
    return f


def elementwise(shape: tuple[int, ...] = (10, 12)) -> tuple[te.Tensor, te.Tensor]:
    a = te.placeholder(shape, name="A")
    return a, te.compute(shape, lambda *i: a[i] * 2.0 + 1.0, name="B")


# ---- split, fuse, reorder, tile ---------------------------------------------------------------

def test_split_dividing_factor_gives_two_loops_without_guard() -> None:
    a, b = elementwise((12, 8))
    s = create_schedule(b)
    io, ii = s[b].split(s[b].axes[0], factor=4)
    assert (io.extent, ii.extent) == (3, 4)
    f = lower(s, [a, b], "split4")
    assert [(n, e) for n, e, _ in loops(f)] == [("i.o", 3), ("i.i", 4), ("j", 8)]
    assert not any(isinstance(x, IfThenElse) for x in walk_stmts(f.body))
    x = rand(12, 8)
    np.testing.assert_allclose(run(f, x, out_shapes=[(12, 8)])[0], x * 2 + 1, rtol=1e-6)


def test_split_non_dividing_factor_guards_the_tail() -> None:
    a, b = elementwise((10, 7))
    s = create_schedule(b)
    s[b].split(s[b].axes[0], factor=4)
    s[b].split(s[b].axes[1], factor=3)
    f = lower(s, [a, b], "split_tail")
    assert [(n, e) for n, e, _ in loops(f)] == [("i.o", 3), ("i.i", 4), ("j.o", 3), ("j.i", 3)]
    assert sum(isinstance(x, IfThenElse) for x in walk_stmts(f.body)) == 1
    x = rand(10, 7)
    np.testing.assert_allclose(run(f, x, out_shapes=[(10, 7)])[0], x * 2 + 1, rtol=1e-6)


def test_split_nparts_and_factor_larger_than_extent() -> None:
    a, b = elementwise((10, 6))
    s = create_schedule(b)
    io, ii = s[b].split(s[b].axes[0], nparts=3)
    assert (io.extent, ii.extent) == (3, 4)
    jo, ji = s[b].split(s[b].axes[1], factor=100)
    assert (jo.extent, ji.extent) == (1, 6)
    f = lower(s, [a, b], "nparts")
    assert [(n, e) for n, e, _ in loops(f)] == [("i.o", 3), ("i.i", 4), ("j.i", 6)]  # the 1-trip loop is gone
    x = rand(10, 6)
    np.testing.assert_allclose(run(f, x, out_shapes=[(10, 6)])[0], x * 2 + 1, rtol=1e-6)


def test_split_of_reduce_axis_and_reduction_result() -> None:
    a, b, c = matmul(8, 8, 20)
    s = create_schedule(c)
    ko, ki = s[c].split(s[c].reduce_axes[0], factor=6)
    assert ko.reduce and ki.reduce
    f = check_matmul(s, a, b, c)
    assert [(n, e) for n, e, _ in loops(f)][-2:] == [("k.o", 4), ("k.i", 6)]


def test_reduction_over_one_element_still_initializes() -> None:
    a = te.placeholder((4, 1), name="A")
    r = te.reduce_axis(1, "r")
    c = te.compute((4,), lambda i: te.sum(a[i, r], axis=r), name="C")
    f = lower(create_schedule(c), [a, c], "sum1")
    x = rand(4, 1)
    np.testing.assert_allclose(run(f, x, out_shapes=[(4,)])[0], x[:, 0], rtol=1e-6)  # outputs start as NaN


def test_fuse_adjacent_axes() -> None:
    a, b = elementwise((5, 6, 7))
    s = create_schedule(b)
    i, j, k = s[b].axes
    ij = s[b].fuse(i, j)
    assert ij.extent == 30 and s[b].leaf == [ij, k]
    f = lower(s, [a, b], "fuse")
    assert [(n, e) for n, e, _ in loops(f)] == [("i.j.f", 30), ("l", 7)] or \
        [e for _, e, _ in loops(f)] == [30, 7]
    x = rand(5, 6, 7)
    np.testing.assert_allclose(run(f, x, out_shapes=[(5, 6, 7)])[0], x * 2 + 1, rtol=1e-6)


def test_fuse_of_two_split_halves_restores_the_axis() -> None:
    a, b = elementwise((9, 4))
    s = create_schedule(b)
    io, ii = s[b].split(s[b].axes[0], factor=3)
    s[b].fuse(io, ii)
    f = lower(s, [a, b], "refuse")
    assert [e for _, e, _ in loops(f)] == [9, 4]
    x = rand(9, 4)
    np.testing.assert_allclose(run(f, x, out_shapes=[(9, 4)])[0], x * 2 + 1, rtol=1e-6)


def test_reorder_swaps_loops_and_moves_the_reduction_out() -> None:
    a, b, c = matmul(6, 10, 8)
    s = create_schedule(c)
    i, j = s[c].axes
    (k,) = s[c].reduce_axes
    s[c].reorder(k, j, i)
    # k is the first reduce loop: C's init nest runs before it, over the data loops inside it
    f = check_matmul(s, a, b, c)
    names = [n for n, _, _ in loops(f)]
    assert names == ["j", "i", "k", "j", "i"]  # init (j, i), then k, j, i


def test_tile_is_split_split_reorder() -> None:
    a, b, c = matmul(16, 24, 8)
    s = create_schedule(c)
    i, j = s[c].axes
    io, jo, ii, ji = s[c].tile(i, j, 4, 8)
    assert s[c].leaf[:4] == [io, jo, ii, ji]
    f = check_matmul(s, a, b, c)
    assert [(n, e) for n, e, _ in loops(f)][:2] == [("i.o", 4), ("j.o", 3)]


# ---- loop kinds ---------------------------------------------------------------------------------

def test_parallel_vectorize_unroll_kinds_in_ir_and_c() -> None:
    a, b = elementwise((8, 32))
    s = create_schedule(b)
    i, j = s[b].axes
    jo, ji = s[b].split(j, factor=16)
    io, ii = s[b].split(i, factor=2)
    s[b].reorder(io, jo, ii, ji)
    s[b].parallel(io)
    s[b].unroll(ii)
    s[b].vectorize(ji)
    f = lower(s, [a, b], "kinds")
    assert [(e, k) for _, e, k in loops(f)] == [(4, LoopKind.PARALLEL), (2, LoopKind.SERIAL),
                                                (2, LoopKind.UNROLLED), (16, LoopKind.VECTORIZED)]
    m = build(f)
    assert "taso_parallel_for(4, kinds_par0" in m.source and "#pragma GCC unroll 2" in m.source
    # a contiguous vectorized loop is vector-extension code, in registers of the host's width
    assert f"v{register_lanes(16)}_float32" in m.source
    x = rand(8, 32)
    out = np.zeros((8, 32), np.float32)
    m["kinds"](x, out)
    np.testing.assert_allclose(out, x * 2 + 1, rtol=1e-6)


def test_vectorize_of_strided_access_falls_back_to_omp_simd() -> None:
    a = te.placeholder((16, 8), name="A")
    b = te.compute((8, 16), lambda i, j: a[j, i] + 1.0, name="T")
    s = create_schedule(b)
    s[b].vectorize(s[b].axes[1])
    f = lower(s, [a, b], "transpose")
    src = build(f).source
    assert "#pragma omp simd" in src
    x = rand(16, 8)
    np.testing.assert_allclose(run(f, x, out_shapes=[(8, 16)])[0], x.T + 1, rtol=1e-6)


def test_bind_shows_the_thread_tag_and_the_c_backend_refuses_it() -> None:
    a, b = elementwise((64, 4))
    s = create_schedule(b)
    bx, tx = s[b].split(s[b].axes[0], factor=32)
    s[b].bind(bx, "blockIdx.x")
    s[b].bind(tx, "threadIdx.x")
    f = lower(s, [a, b], "bound")
    fors = [x for x in walk_stmts(f.body) if isinstance(x, For)]
    assert [(x.kind, x.thread_tag) for x in fors[:2]] == [(LoopKind.THREAD, "blockIdx.x"),
                                                           (LoopKind.THREAD, "threadIdx.x")]
    assert "(blockIdx.x)" in str(f) and "(threadIdx.x)" in str(f)
    with pytest.raises(CodegenError, match=r"blockIdx\.x"):
        build(f)
    with pytest.raises(ScheduleError, match="thread tag"):
        s[b].bind(s[b].axes[1], "warpIdx.x")


# ---- compute_at, compute_inline -------------------------------------------------------------

def test_compute_inline_removes_the_stage() -> None:
    a = te.placeholder((6, 5), name="A")
    t = te.compute((6, 5), lambda i, j: a[i, j] * 3.0, name="T")
    u = te.compute((6, 5), lambda i, j: t[i, j] + 1.0, name="U")
    s = create_schedule(u)
    s[t].compute_inline()
    f = lower(s, [a, u], "inl")
    assert allocs(f) == {} and len(loops(f)) == 2
    x = rand(6, 5)
    np.testing.assert_allclose(run(f, x, out_shapes=[(6, 5)])[0], x * 3 + 1, rtol=1e-6)


def test_without_inline_an_intermediate_gets_a_full_buffer() -> None:
    a = te.placeholder((6, 5), name="A")
    t = te.compute((6, 5), lambda i, j: a[i, j] * 3.0, name="T")
    u = te.compute((6, 5), lambda i, j: t[i, j] + 1.0, name="U")
    f = lower(create_schedule(u), [a, u], "noinl")
    assert allocs(f) == {"T": (6, 5)}
    x = rand(6, 5)
    np.testing.assert_allclose(run(f, x, out_shapes=[(6, 5)])[0], x * 3 + 1, rtol=1e-6)


def padded_conv1d(n: int = 7, w: int = 10, kw: int = 3) -> tuple[te.Tensor, te.Tensor, te.Tensor, te.Tensor]:
    """rows of a 1-D convolution over zero-padded input: out[r, x] = sum_q pad[r, x + q] * k[q]."""
    a = te.placeholder((n, w), name="A")
    k = te.placeholder((kw,), name="K")
    p = kw // 2
    pad = te.compute((n, w + 2 * p), lambda r, x: te.if_then_else(  # both branches run: clamp the index
        te.all_of(x >= p, x < w + p), a[r, te.min_(te.max_(x - p, 0), w - 1)], 0.0), name="Pad")
    q = te.reduce_axis(kw, "q")
    out = te.compute((n, w), lambda r, x: te.sum(pad[r, x + q] * k[q], axis=q), name="Out")
    return a, k, pad, out


def conv1d_ref(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    p = len(k) // 2
    xp = np.pad(x, ((0, 0), (p, p)))
    return np.stack([sum(xp[r, q:q + x.shape[1]] * k[q] for q in range(len(k))) for r in range(x.shape[0])])


def test_compute_at_padding_stage_at_a_row_loop() -> None:
    a, k, pad, out = padded_conv1d()
    s = create_schedule(out)
    r = s[out].axes[0]
    s[pad].compute_at(s[out], r)
    f = lower(s, [a, k, out], "padrow")
    assert allocs(f) == {"Pad": (1, 12)}  # one padded row, not the whole padded tensor
    fors = loops(f)
    assert fors[0][:2] == ("r", 7) and ("x", 12, LoopKind.SERIAL) in fors
    x, kk = rand(7, 10), rand(3)
    np.testing.assert_allclose(run(f, x, kk, out_shapes=[(7, 10)])[0], conv1d_ref(x, kk), rtol=1e-5, atol=1e-5)


def test_compute_at_a_tile_infers_an_overlapping_window() -> None:
    a, k, pad, out = padded_conv1d(4, 16, 3)
    s = create_schedule(out)
    _r, xx = s[out].axes
    xo, _xi = s[out].split(xx, factor=4)
    s[pad].compute_at(s[out], xo)
    f = lower(s, [a, k, out], "padtile")
    assert allocs(f) == {"Pad": (1, 6)}  # 4 outputs read a window of 4 + 3 - 1
    x, kk = rand(4, 16), rand(3)
    np.testing.assert_allclose(run(f, x, kk, out_shapes=[(4, 16)])[0], conv1d_ref(x, kk), rtol=1e-5, atol=1e-5)


def test_compute_at_of_a_fused_producer_uses_the_region_extents() -> None:
    a, k, pad, out = padded_conv1d(5, 8, 3)
    s = create_schedule(out)
    r, xx = s[out].axes
    s[out].reorder(xx, r)
    s[pad].fuse(*s[pad].axes)
    s[pad].compute_at(s[out], xx)  # all rows, a 3-column window: the fused loop spans 5 x 3
    f = lower(s, [a, k, out], "fusedat")
    assert allocs(f) == {"Pad": (5, 3)} and ("r.x.f", 15, LoopKind.SERIAL) in loops(f)
    x, kk = rand(5, 8), rand(3)
    np.testing.assert_allclose(run(f, x, kk, out_shapes=[(5, 8)])[0], conv1d_ref(x, kk), rtol=1e-5, atol=1e-5)


def test_compute_at_under_an_upsampling_read_infers_one_row() -> None:
    a = te.placeholder((5, 6), name="A")
    t = te.compute((5, 6), lambda i, j: a[i, j] * 2.0, name="T")
    up = te.compute((10, 12), lambda i, j: t[i // 2, j // 2] + 1.0, name="Up")
    s = create_schedule(up)
    jo, _ = s[up].split(s[up].axes[1], factor=5)
    s[t].compute_at(s[up], jo)
    f = lower(s, [a, up], "upsample")
    assert allocs(f) == {"T": (1, 6)}  # row i // 2; the columns j // 2 of a tile are not linear: all of them
    x = rand(5, 6)
    np.testing.assert_allclose(run(f, x, out_shapes=[(10, 12)])[0], np.repeat(np.repeat(x * 2, 2, 0), 2, 1) + 1,
                               rtol=1e-6)


def test_compute_at_chain_of_two_stages() -> None:
    a = te.placeholder((8, 12), name="A")
    t1 = te.compute((8, 12), lambda i, j: a[i, j] + 1.0, name="T1")
    t2 = te.compute((8, 12), lambda i, j: t1[i, j] * 2.0, name="T2")
    out = te.compute((8, 12), lambda i, j: t2[i, j] - 3.0, name="Out")
    s = create_schedule(out)
    i, _j = s[out].axes
    io, _ii = s[out].split(i, factor=2)
    s[t2].compute_at(s[out], io)
    s[t1].compute_at(s[t2], s[t2].axes[0])
    f = lower(s, [a, out], "chain")
    assert allocs(f) == {"T2": (2, 12), "T1": (1, 12)}
    body = str(f)
    assert body.index("allocate T2") < body.index("allocate T1")  # T1 lives inside T2's row loop
    x = rand(8, 12)
    np.testing.assert_allclose(run(f, x, out_shapes=[(8, 12)])[0], (x + 1) * 2 - 3, rtol=1e-6)


# ---- cache_read, cache_write ----------------------------------------------------------------

def test_cache_write_local_accumulator() -> None:
    a, b, c = matmul(16, 32, 12)
    s = create_schedule(c)
    cl = s.cache_write(c, "local")
    i, j = s[c].axes
    _io, jo, _ii, _ji = s[c].tile(i, j, 4, 8)
    s[cl].compute_at(s[c], jo)
    f = check_matmul(s, a, b, c)
    assert allocs(f) == {"C_local": (4, 8)}
    assert [b.scope for b in (x.buffer for x in walk_stmts(f.body) if isinstance(x, Allocate))] == ["local"]


def test_cache_read_packs_a_tile() -> None:
    a, b, c = matmul(8, 16, 12)
    s = create_schedule(c)
    bl = s.cache_read(b, "local", [c])
    i, j = s[c].axes
    jo, ji = s[c].split(j, factor=4)
    s[c].reorder(jo, i, ji)
    s[bl].compute_at(s[c], jo)
    f = check_matmul(s, a, b, c)
    assert allocs(f) == {"B_local": (12, 4)}  # the B columns one jo step reads, over all k
    assert s[c].body is not c.op.body  # the tensor expression itself is untouched


def test_cache_write_after_scheduling_is_rejected() -> None:
    _a, _b, c = matmul()
    s = create_schedule(c)
    s[c].split(s[c].axes[0], factor=4)
    with pytest.raises(ScheduleError, match="before scheduling"):
        s.cache_write(c, "local")


# ---- tensorize ------------------------------------------------------------------------------

def tensorized_matmul(tm: int, tn: int, tk: int, n: int = 16, m: int = 32, k: int = 24,
                      intrin: GemmIntrin | None = None):  # type: ignore[no-untyped-def]
    a, b, c = matmul(n, m, k)
    s = create_schedule(c)
    i, j = s[c].axes
    (kk,) = s[c].reduce_axes
    io, ii = s[c].split(i, factor=tm)
    jo, ji = s[c].split(j, factor=tn)
    ko, ki = s[c].split(kk, factor=tk)
    s[c].reorder(io, jo, ko, ii, ji, ki)
    s[c].tensorize(ii, intrin or GemmIntrin("gemm", tm, tn, tk))
    return s, a, b, c


def test_tensorize_gemm_matches_numpy() -> None:
    s, a, b, c = tensorized_matmul(4, 16, 8)
    f = check_matmul(s, a, b, c, "mm_tz")
    calls = [x for x in walk_stmts(f.body) if isinstance(x, Intrinsic)]
    assert len(calls) == 1 and calls[0].params["m"] == 4 and calls[0].params["k"] == 8
    assert [r.buffer.name for r in calls[0].regions] == ["C", "A", "B"]
    # io, jo, C's init nest (the k loop is outside the tile, so the call accumulates), ko
    assert [e for _, e, _ in loops(f)] == [4, 2, 4, 16, 3] and calls[0].params["reset"] is False


def test_tensorize_with_the_whole_reduction_inside_resets_the_tile() -> None:
    s, a, b, c = tensorized_matmul(4, 8, 24)
    f = check_matmul(s, a, b, c, "mm_tz_reset")
    calls = [x for x in walk_stmts(f.body) if isinstance(x, Intrinsic)]
    assert [e for _, e, _ in loops(f)] == [4, 4] and calls[0].params["reset"] is True


def test_tensorize_takes_the_factors_in_either_order_and_of_one_tensor() -> None:
    a = te.placeholder((16, 16), name="A")
    b = te.placeholder((16, 16), name="B")
    r, r2 = te.reduce_axis(16, "k"), te.reduce_axis(16, "k2")
    swapped = te.compute((16, 16), lambda i, j: te.sum(b[r, j] * a[i, r], axis=r), name="S")
    square = te.compute((16, 16), lambda i, j: te.sum(a[i, r2] * a[r2, j], axis=r2), name="Q")
    for out, args, name in ((swapped, [a, b, swapped], "tz_swapped"), (square, [a, square], "tz_square")):
        s = create_schedule(out)
        i, j = s[out].axes
        io, ii = s[out].split(i, factor=4)
        s[out].reorder(io, ii, j, *s[out].reduce_axes)
        s[out].tensorize(ii, GemmIntrin("gemm", 4, 16, 16))
        f = lower(s, args, name)
        (call,) = [x for x in walk_stmts(f.body) if isinstance(x, Intrinsic)]
        assert [r.loop_strides for r in call.regions] == [(16, 1, 0), (16, 0, 1), (0, 1, 16)]
        x, y = rand(16, 16), rand(16, 16)
        got = run(f, x, y, out_shapes=[(16, 16)]) if out is swapped else run(f, x, out_shapes=[(16, 16)])
        np.testing.assert_allclose(got[0], x @ y if out is swapped else x @ x, rtol=1e-4, atol=1e-4)


def test_tensorize_wrong_tile_shape_is_rejected() -> None:
    s, a, b, c = tensorized_matmul(4, 16, 8, intrin=GemmIntrin("gemm", 4, 8, 8))
    with pytest.raises(ScheduleError, match="extents"):
        lower(s, [a, b, c], "bad")


def test_tensorize_of_a_tile_with_a_tail_is_rejected() -> None:
    s, a, b, c = tensorized_matmul(4, 16, 8, n=18)  # the last row tile would write rows 18, 19
    with pytest.raises(ScheduleError, match="tiles that divide"):
        lower(s, [a, b, c], "tail")


def test_tensorize_under_a_guarded_outer_split_guards_the_call() -> None:
    s, a, b, c = tensorized_matmul(4, 16, 8)
    io = s[c].leaf[0]
    s[c].split(io, factor=3)  # 4 row tiles in 2 x 3 steps: the sixth is past the end
    f = check_matmul(s, a, b, c, "mm_tz_guard")
    guarded = [x.then for x in walk_stmts(f.body) if isinstance(x, IfThenElse)]
    assert sum(isinstance(x, Intrinsic) for x in guarded) == 1  # (the other guard is the init nest's)


def test_tensorize_of_a_non_product_is_rejected() -> None:
    a = te.placeholder((8, 8), name="A")
    r = te.reduce_axis(8, "k")
    c = te.compute((8, 8), lambda i, j: te.sum(a[i, r] + a[r, j], axis=r), name="C")
    s = create_schedule(c)
    s[c].tensorize(s[c].axes[0], GemmIntrin("gemm", 8, 8, 8))
    with pytest.raises(ScheduleError, match="product"):
        lower(s, [a, c], "bad")


# ---- illegal schedules ----------------------------------------------------------------------

def test_illegal_schedules_are_rejected() -> None:
    _a, _b, c = matmul()
    s = create_schedule(c)
    i, j = s[c].axes
    (k,) = s[c].reduce_axes
    io, ii = s[c].split(i, factor=4)
    with pytest.raises(ScheduleError, match="not a current loop axis"):
        s[c].split(i, factor=2)  # i was split: no longer a leaf
    with pytest.raises(ScheduleError, match="directly outside"):
        s[c].fuse(io, j)  # ii is between them
    with pytest.raises(ScheduleError, match="reduce axis with a data axis"):
        s[c].fuse(j, k)
    with pytest.raises(ScheduleError, match="reduce axis"):
        s[c].parallel(k)
    with pytest.raises(ScheduleError, match="innermost"):
        s[c].vectorize(ii)
    with pytest.raises(ScheduleError, match="cannot vectorize reduce axis"):
        s[c].vectorize(k)
    with pytest.raises(ScheduleError, match="exactly one of"):
        s[c].split(j, factor=2, nparts=2)
    with pytest.raises(ScheduleError, match="factor must be"):
        s[c].split(j, factor=0)


def test_vectorized_loop_moved_out_by_reorder_is_rejected_when_lowered() -> None:
    a, b = elementwise((4, 8))
    s = create_schedule(b)
    i, j = s[b].axes
    s[b].vectorize(j)
    s[b].reorder(j, i)
    with pytest.raises(ScheduleError, match="no longer the innermost"):
        lower(s, [a, b], "moved")


def test_vectorize_of_odd_width_falls_back_to_omp_simd() -> None:
    a, b = elementwise((4, 7))
    s = create_schedule(b)
    s[b].vectorize(s[b].axes[1])
    f = lower(s, [a, b], "odd")
    assert "#pragma omp simd" in build(f).source  # GCC vector types need power-of-two lanes
    x = rand(4, 7)
    np.testing.assert_allclose(run(f, x, out_shapes=[(4, 7)])[0], x * 2 + 1, rtol=1e-6)


def test_vectorize_over_64_lanes_is_rejected_when_lowered() -> None:
    a, b = elementwise((2, 128))
    s = create_schedule(b)
    s[b].vectorize(s[b].axes[1])
    with pytest.raises(ScheduleError, match="at most 64"):
        lower(s, [a, b], "wide")


def test_compute_inline_of_reduction_or_output_is_rejected() -> None:
    _a, _b, c = matmul()
    d = te.compute(c.shape, lambda i, j: c[i, j] + 1.0, name="D")
    s = create_schedule(d)
    with pytest.raises(ScheduleError, match="reduction"):
        s[c].compute_inline()
    with pytest.raises(ScheduleError, match="output"):
        s[d].compute_inline()
    with pytest.raises(ScheduleError, match="output"):
        s[d].compute_at(s[c], s[c].axes[0])


def test_compute_at_with_a_second_reader_is_rejected() -> None:
    a = te.placeholder((4, 4), name="A")
    t = te.compute((4, 4), lambda i, j: a[i, j] + 1.0, name="T")
    u = te.compute((4, 4), lambda i, j: t[i, j] * 2.0, name="U")
    v = te.compute((4, 4), lambda i, j: t[i, j] + u[i, j], name="V")
    s = create_schedule(v)
    s[t].compute_at(s[u], s[u].axes[0])
    with pytest.raises(ScheduleError, match="read by"):
        lower(s, [a, v], "two_readers")


def test_compute_at_cycle_is_rejected() -> None:
    a = te.placeholder((4, 4), name="A")
    t = te.compute((4, 4), lambda i, j: a[i, j] + 1.0, name="T")
    u = te.compute((4, 4), lambda i, j: t[i, j] * 2.0, name="U")
    v = te.compute((4, 4), lambda i, j: u[i, j] - 1.0, name="V")
    s = create_schedule(v)
    s[t].compute_at(s[u], s[u].axes[0])
    with pytest.raises(ScheduleError, match="forms a cycle"):
        s[u].compute_at(s[t], s[t].axes[0])
    with pytest.raises(ScheduleError, match="forms a cycle"):
        s[t].compute_at(s[t], s[t].axes[0])


def test_nested_parallel_is_rejected() -> None:
    a, b = elementwise((4, 4))
    s = create_schedule(b)
    i, j = s[b].axes
    s[b].parallel(i)
    s[b].parallel(j)
    with pytest.raises(ScheduleError, match="nested parallel"):
        lower(s, [a, b], "nested")


def test_conflicting_loop_kinds_are_rejected() -> None:
    _a, b = elementwise((4, 8))
    s = create_schedule(b)
    j = s[b].axes[1]
    s[b].vectorize(j)
    with pytest.raises(ScheduleError, match="already vectorized"):
        s[b].unroll(j)


def test_missing_argument_is_rejected() -> None:
    _a, b = elementwise()
    with pytest.raises(ScheduleError, match="not among the kernel's arguments"):
        lower(create_schedule(b), [b], "noarg")


# ---- expressions and dtypes through the C backend ----------------------------------------------

def test_reductions_intrinsics_and_integer_arithmetic_match_numpy() -> None:
    a = te.placeholder((6, 10), name="A")
    r, r2 = te.reduce_axis(10, "r"), te.reduce_axis(10, "r2")
    mx = te.compute((6,), lambda i: te.max_reduce(a[i, r], axis=r), name="mx")
    mn = te.compute((6,), lambda i: te.min_reduce(a[i, r2], axis=r2), name="mn")
    fx = te.compute((6, 10), lambda i, j: te.exp(a[i, j]) + te.tanh(a[i, j]) + te.erf(a[i, j])
                    + te.sigmoid(a[i, j]) + te.sqrt(te.max_(a[i, j], 0.0)), name="fx")
    n = te.placeholder((12,), dtype="int32", name="N")
    g = te.compute((12,), lambda i: n[i] // 3 + n[i] % 3 * 100
                   + te.cast("int32", te.if_then_else(n[i] < 0, 1, 2)) * 1000, name="g")
    h = te.compute((12,), lambda i: te.cast("float32", n[i]) / 4.0, name="h")
    f = lower(create_schedule([mx, mn, fx, g, h]), [a, n, mx, mn, fx, g, h], "exprs")
    x, iv = rand(6, 10), np.arange(-6, 6, dtype=np.int32)
    outs = [np.zeros(6, np.float32), np.zeros(6, np.float32), np.zeros((6, 10), np.float32),
            np.zeros(12, np.int32), np.zeros(12, np.float32)]
    build(f)["exprs"](x, iv, *outs)
    np.testing.assert_array_equal(outs[0], x.max(axis=1))
    np.testing.assert_array_equal(outs[1], x.min(axis=1))
    erf = np.vectorize(math.erf)(x.astype(np.float64))
    ref = np.exp(x) + np.tanh(x) + erf + 1 / (1 + np.exp(-x)) + np.sqrt(np.maximum(x, 0))
    np.testing.assert_allclose(outs[2], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(outs[3], iv // 3 + iv % 3 * 100 + np.where(iv < 0, 1, 2) * 1000)  # floor division
    np.testing.assert_array_equal(outs[4], iv / 4)


# ---- simplifier and printer ------------------------------------------------------------------

def test_simplify_floordiv_floormod_with_ranges() -> None:
    i, j = te.Var("i"), te.Var("j")
    ranges = {i: (0, 7), j: (0, 3)}
    assert str(simplify((i * 4 + j) // 4, ranges)) == "i"
    assert str(simplify((i * 4 + j) % 4, ranges)) == "j"
    assert str(simplify((i * 8 + j + 4) // 4, ranges)) == "i * 2 + 1"
    assert str(simplify(j // 4, ranges)) == "0"
    assert str(simplify((i + j) // 4, ranges)) == "(i + j) // 4"  # i + j spans several quotients
    assert str(simplify(i * 2 + 3 - i - 3 + i, {})) == "i * 2"


def test_simplify_cancels_equal_non_linear_terms() -> None:
    i, j = te.Var("i"), te.Var("j")
    e = (i // 2) * 3 + j % 4 - (j % 4) - (i // 2) * 2  # four separately built terms
    assert str(simplify(e, {i: (0, 9), j: (0, 9)})) == "i // 2"


def test_simplify_decides_comparisons_by_bounds() -> None:
    i, j = te.Var("i"), te.Var("j")
    ranges = {i: (0, 7), j: (0, 3)}
    assert str(simplify(i * 4 + j < 32, ranges)) == "true"
    assert str(simplify(i * 4 + j < 31, ranges)) == "i * 4 + j < 31"
    assert str(simplify(i + 8 <= 7, ranges)) == "false"
    assert str(simplify(te.all_of(i < 8, j < 2), ranges)) == "j < 2"
    assert str(simplify(te.min_(j, 10), ranges)) == "j"


def evaluate(e: te.Expr, env: dict[te.Var, int]) -> int | bool:
    if isinstance(e, te.Const):
        return e.value  # type: ignore[return-value]
    if isinstance(e, te.Var):
        return env[e]
    assert isinstance(e, te.Binary), e
    x, y = evaluate(e.a, env), evaluate(e.b, env)
    return {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "//": lambda: x // y,
            "%": lambda: x % y, "min": lambda: min(x, y), "max": lambda: max(x, y), "<": lambda: x < y,
            "<=": lambda: x <= y, "==": lambda: x == y, "!=": lambda: x != y,
            "&&": lambda: bool(x) and bool(y), "||": lambda: bool(x) or bool(y)}[e.op]()


@st.composite
def index_exprs(draw: st.DrawFn, depth: int = 3) -> te.Expr:
    i, j = INDEX_VARS
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from([i, j, te.const(draw(st.integers(-9, 9)))]))
    a, b = draw(index_exprs(depth - 1)), draw(index_exprs(depth - 1))
    op = draw(st.sampled_from(["+", "-", "*k", "//", "%", "min", "max", "<", "=="]))
    k = draw(st.integers(1, 8))
    if op == "*k":
        return a * k
    if op in ("//", "%"):
        return a // k if op == "//" else a % k
    if op in ("min", "max"):
        return te.min_(a, b) if op == "min" else te.max_(a, b)
    return a < b if op == "<" else te.equal(a, b)


INDEX_VARS = (te.Var("i"), te.Var("j"))


@settings(max_examples=300, deadline=None)
@given(e=index_exprs(), hi=st.tuples(st.integers(0, 9), st.integers(0, 9)))
def test_simplify_keeps_the_value_on_every_point_of_the_ranges(e: te.Expr, hi: tuple[int, int]) -> None:
    i, j = INDEX_VARS
    ranges = {i: (0, hi[0]), j: (0, hi[1])}
    simple = simplify(e, ranges)
    for vi in range(hi[0] + 1):
        for vj in range(hi[1] + 1):
            env = {i: vi, j: vj}
            assert evaluate(simple, env) == evaluate(e, env), (str(e), str(simple), env)


def test_printer_is_readable() -> None:
    a, b, c = matmul(8, 8, 4)
    s = create_schedule(c)
    s[c].parallel(s[c].axes[0])
    text = str(lower(s, [a, b, c], "mm_print"))
    assert text.splitlines()[0] == "def mm_print(A: float32[8, 4], B: float32[4, 8], C: float32[8, 8]):"
    assert "  for parallel i in 0..8:" in text
    assert "C[i * 8 + j] = C[i * 8 + j] + A[i * 4 + k] * B[j + k * 8]" in text


# ---- C backend --------------------------------------------------------------------------------

def test_missing_compiler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CC", "no-such-cc-xyz")
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    a, b = elementwise()
    with pytest.raises(CodegenError, match="no C compiler: 'no-such-cc-xyz'"):
        build(lower(create_schedule(b), [a, b], "nocc"))


def test_kernel_cache_reuses_the_shared_library(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    a, b = elementwise()
    f = lower(create_schedule(b), [a, b], "cached")
    m1 = build(f)
    mtime = m1.path.stat().st_mtime_ns
    m2 = build(lower(create_schedule(b), [a, b], "cached"))
    assert m2.path == m1.path and m2.path.stat().st_mtime_ns == mtime
    assert m1.path.parent == tmp_path / "kernels" and len(list(m1.path.parent.glob("*.so"))) == 1
    a2, b2 = elementwise((10, 13))  # another kernel: another content hash
    assert build(lower(create_schedule(b2), [a2, b2], "cached")).path != m1.path


def test_register_blocked_matmul_uses_vector_accumulators() -> None:
    a, b, c = matmul(32, 64, 32)
    s = create_schedule(c)
    cl = s.cache_write(c, "local")
    i, j = s[c].axes
    io, jo, _ii, ji = s[c].tile(i, j, 4, 32)
    s[c].vectorize(ji)
    s[c].parallel(io)
    s[cl].compute_at(s[c], jo)
    x, y = s[cl].axes
    (kk,) = s[cl].reduce_axes
    s[cl].reorder(kk, x, y)
    s[cl].unroll(x)
    s[cl].vectorize(y)
    f = check_matmul(s, a, b, c, "mm_reg")
    src = build(f).source
    lanes = register_lanes(32)  # a row of 32 floats is one vector, or several of the host's register width
    assert f"typedef float v{lanes}_float32 __attribute__((vector_size({lanes * 4})))" in src
    assert f"v{lanes}_float32 C_local[{4 * 32 // lanes}];" in src  # the 4x32 accumulator, kept in registers
    assert "#pragma omp simd" not in src


def test_kernel_rejects_wrong_arrays() -> None:
    a, b = elementwise((3, 4))
    m = build(lower(create_schedule(b), [a, b], "shapes"))
    with pytest.raises(CodegenError, match="shape"):
        m["shapes"](np.zeros((4, 3), np.float32), np.zeros((3, 4), np.float32))


# ---- property: random loop transformations keep the result ------------------------------------

PRIMITIVES = ["split", "split", "fuse", "reorder", "parallel", "vectorize", "unroll"]


@st.composite
def transformations(draw: st.DrawFn) -> list[tuple]:
    return draw(st.lists(st.tuples(st.sampled_from(PRIMITIVES), st.integers(0, 5), st.integers(1, 7)), max_size=6))


def apply(stage, steps: list[tuple]) -> None:  # type: ignore[no-untyped-def]
    """Apply each step to the stage's current leaf loops, skipping the ones that are illegal."""
    for kind, pick, factor in steps:
        leaf = stage.leaf
        ax = leaf[pick % len(leaf)]
        try:
            if kind == "split":
                stage.split(ax, factor=factor)
            elif kind == "fuse" and pick % len(leaf) + 1 < len(leaf):
                stage.fuse(ax, leaf[pick % len(leaf) + 1])
            elif kind == "reorder" and len(leaf) > 1:
                stage.reorder(*leaf[factor % len(leaf):], *leaf[:factor % len(leaf)])
            elif kind == "parallel":
                stage.parallel(ax)
            elif kind == "vectorize":
                stage.vectorize(leaf[-1])
            elif kind == "unroll":
                stage.unroll(ax)
        except ScheduleError:
            pass


def lower_or_reject(s, args, name: str) -> PrimFunc:  # type: ignore[no-untyped-def]
    """The kernel; schedules only lowering rejects (nested parallel, > 64 lanes, moved vector loop) are skipped."""
    try:
        return lower(s, args, name)
    except ScheduleError as e:
        assert any(w in str(e) for w in ("nested parallel", "at most 64", "no longer the innermost")), e
        assume(False)
        raise


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(steps=transformations(), three_d=st.booleans())
def test_random_schedules_keep_elementwise_results(steps: list[tuple], three_d: bool) -> None:
    shape = (3, 5, 4) if three_d else (6, 7)
    a, b = elementwise(shape)
    s = create_schedule(b)
    apply(s[b], steps)
    f = lower_or_reject(s, [a, b], "prop_ew")
    x = rand(*shape)
    np.testing.assert_allclose(run(f, x, out_shapes=[shape])[0], x * 2 + 1, rtol=1e-6)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(steps=transformations())
def test_random_schedules_keep_reduction_results(steps: list[tuple]) -> None:
    a = te.placeholder((5, 6, 7), name="A")
    r = te.reduce_axis(6, "r")
    c = te.compute((5, 7), lambda i, j: te.sum(a[i, r, j], axis=r), name="C")
    s = create_schedule(c)
    apply(s[c], steps)
    f = lower_or_reject(s, [a, c], "prop_red")
    x = rand(5, 6, 7)
    np.testing.assert_allclose(run(f, x, out_shapes=[(5, 7)])[0], x.sum(axis=1), rtol=1e-5, atol=1e-5)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(producer=transformations(), consumer=transformations(), at=st.integers(0, 7))
def test_random_schedules_with_compute_at_keep_results(producer: list[tuple], consumer: list[tuple],
                                                       at: int) -> None:
    """A padded row sum (a stencil over a padding stage), the padding computed at a random consumer loop."""
    a = te.placeholder((6, 9), name="A")
    pad = te.compute((6, 11), lambda i, x: te.if_then_else(
        te.all_of(x >= 1, x < 10), a[i, te.min_(te.max_(x - 1, 0), 8)], 0.0), name="Pad")
    q = te.reduce_axis(3, "q")
    out = te.compute((6, 9), lambda i, x: te.sum(pad[i, x + q], axis=q), name="Out")
    s = create_schedule(out)
    apply(s[out], consumer)
    apply(s[pad], producer)
    s[pad].compute_at(s[out], s[out].leaf[at % len(s[out].leaf)])
    f = lower_or_reject(s, [a, out], "prop_at")
    x = rand(6, 9)
    xp = np.pad(x, ((0, 0), (1, 1)))
    np.testing.assert_allclose(run(f, x, out_shapes=[(6, 9)])[0], xp[:, :-2] + xp[:, 1:-1] + xp[:, 2:],
                               rtol=1e-5, atol=1e-5)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(outer=transformations(), inner=transformations(), at=st.integers(0, 7), packed=st.booleans())
def test_random_schedules_of_a_cached_matmul_keep_results(outer: list[tuple], inner: list[tuple], at: int,
                                                          packed: bool) -> None:
    """A local accumulator (cache_write) computed at a random loop of the output, optionally B packed
    (cache_read) at the same loop, each stage transformed at random."""
    a, b, c = matmul(6, 10, 7)
    s = create_schedule(c)
    cl = s.cache_write(c, "local")
    bl = s.cache_read(b, "local", [cl]) if packed else None
    apply(s[c], outer)
    apply(s[cl], inner)
    axis = s[c].leaf[at % len(s[c].leaf)]
    s[cl].compute_at(s[c], axis)
    if bl is not None:
        s[bl].compute_at(s[cl], s[cl].leaf[0])
    f = lower_or_reject(s, [a, b, c], "prop_mm")
    x, y = rand(6, 7), rand(7, 10)
    np.testing.assert_allclose(run(f, x, y, out_shapes=[(6, 10)])[0], x @ y, rtol=1e-4, atol=1e-4)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(out_steps=transformations(), sum_steps=transformations(), max_steps=transformations(), at=st.integers(0, 7))
def test_random_schedules_of_a_softmax_keep_results(out_steps: list[tuple], sum_steps: list[tuple],
                                                    max_steps: list[tuple], at: int) -> None:
    """Rows of a softmax: a max and a sum reduction, the exponential inlined into both readers,
    the sum computed at a random loop of the output."""
    x = te.placeholder((4, 12), name="X")
    r1, r2 = te.reduce_axis(12, "r1"), te.reduce_axis(12, "r2")
    m = te.compute((4,), lambda i: te.max_reduce(x[i, r1], axis=r1), name="M")
    e = te.compute((4, 12), lambda i, j: te.exp(x[i, j] - m[i]), name="E")
    total = te.compute((4,), lambda i: te.sum(e[i, r2], axis=r2), name="S")
    y = te.compute((4, 12), lambda i, j: e[i, j] / total[i], name="Y")
    s = create_schedule(y)
    s[e].compute_inline()
    apply(s[y], out_steps)
    apply(s[total], sum_steps)
    apply(s[m], max_steps)
    s[total].compute_at(s[y], s[y].leaf[at % len(s[y].leaf)])
    f = lower_or_reject(s, [x, y], "prop_softmax")
    v = rand(4, 12)
    ref = np.exp(v - v.max(axis=1, keepdims=True))
    np.testing.assert_allclose(run(f, v, out_shapes=[(4, 12)])[0], ref / ref.sum(axis=1, keepdims=True),
                               rtol=1e-5, atol=1e-6)
