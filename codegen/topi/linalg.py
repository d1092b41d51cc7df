"""Matrix multiplication: its compute (NumPy's `matmul`) and a register-blocked CPU template.

The template is the classic BLAS scheme written as a schedule. The output is tiled into
`tile_m x tile_n` blocks, and each block is computed by one of three kernels (knob `kernel`):

- "tile" (default where the columns are whole groups of 16): the register tile (`TileIntrin`)
  of `tile_m` rows x `tile_n` columns over the reduction (one call, or `k_block` at a time),
  sized by `topi.tiling.tile_shape` from the host's ISA.
- "gemm": the inner (rows, columns, k) loops tensorized into `GemmIntrin` (the tile in a
  local array between calls); the default where the columns are not whole groups of 16.
- "vector": the same register blocking as plain loops: a local accumulator (`cache_write`, or
  the anchor itself computed at the consumer's tile), rows unrolled, columns vectorized.
  Tails (sizes the tiles do not divide) use it, guarded.

An element-wise consumer that is the group's output, such as `relu(matmul + bias)`, takes
each tile straight from the accumulator, so no full-size intermediate exists. B is repacked
into column panels `[N/tile_n][K][tile_n]` (`pack_b`; a stage added to the schedule, see
`pack_panels`) by default when it is a weight (packed once, at compile time) or when A has
rows enough to reuse each panel, so the kernel reads B contiguously. Other knobs: `k_block`,
`order` (which tile loop is outer), `k_unroll` (vector kernel).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from taso_py.codegen import te
from taso_py.codegen.lower.intrin import GemmIntrin, TileIntrin
from taso_py.codegen.schedule.schedule import Schedule, Stage
from taso_py.codegen.te.expr import Expr, rebuild
from taso_py.codegen.te.tensor import PlaceholderOp, Tensor, TensorRead
from taso_py.codegen.topi.injective import expanded_body
from taso_py.codegen.topi.registry import register_compute, register_schedule
from taso_py.codegen.topi.tiling import tile_shape
from taso_py.codegen.tune.space import Config
from taso_py.ops import linalg as linalg_ops
from taso_py.types import TensorType

PACK_TAG = "matmul_pack"
LANES = 16  # columns per group of the register tile (one AVX-512 vector; two AVX2 ones)


@register_compute(linalg_ops.matmul)
def matmul(inputs: Sequence[Tensor], _attrs: object, out_types: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """a @ b with NumPy semantics: 1-D operands are a row / a column, batch dims broadcast."""
    a, b = inputs
    out_shape = tuple(out_types[0].known_shape)
    has_m, has_n = a.ndim > 1, b.ndim > 1
    k_ext = a.shape[-1]
    k = te.reduce_axis(k_ext, "k")
    n_batch = len(out_shape) - has_m - has_n

    def batch_index(t: Tensor, batch: Sequence[Expr]) -> list[Expr]:
        dims = t.shape[:-2]
        own = batch[len(batch) - len(dims):] if dims else []
        return [te.const(0) if d == 1 and out_shape[len(batch) - len(dims) + q] != 1 else v
                for q, (d, v) in enumerate(zip(dims, own))]

    def body(*idx: Expr) -> Expr:
        batch = list(idx[:n_batch])
        i = idx[n_batch] if has_m else None
        j = idx[-1] if has_n else None
        a_idx = [*batch_index(a, batch), i, k] if has_m else [k]
        b_idx = [*batch_index(b, batch), k, j] if has_n else [k]
        return te.sum(a[tuple(a_idx)] * b[tuple(b_idx)], axis=k)

    out = te.compute(out_shape, body, name="matmul", tag="matmul",
                     attrs={"has_m": has_m, "has_n": has_n, "n_batch": n_batch})
    return (out,)


# ---- schedule ---------------------------------------------------------------------------------

def divisor(extent: int, most: int) -> int:
    """The largest divisor of `extent` up to `most`: a tile with no tail to guard."""
    return max(d for d in range(1, min(extent, most) + 1) if extent % d == 0)


def _divisor_default(extent: int, choices: Sequence[int], prefer: Sequence[int]) -> int:
    """The first of `prefer` that divides `extent` (no tail to guard), else the first that fits."""
    for c in prefer:
        if c in choices and extent % c == 0:
            return c
    fits = [c for c in prefer if c in choices and c <= extent]
    return fits[0] if fits else choices[0]


def reads_identity(s: Schedule, st: Stage, t: Tensor) -> bool:
    """Whether `st` reads `t` (through inlined stages) only at its own loop indices: an
    element-wise consumer of the same shape (or of a leading part of it: `t` padded to whole
    tiles), which can take `t` tile by tile."""
    if len(st.tensor.shape) != len(t.shape) or any(a > b for a, b in zip(st.tensor.shape, t.shape)):
        return False
    reads = [e for e in te.walk(expanded_body(s, st)) if isinstance(e, TensorRead) and e.tensor.op is t.op]
    return bool(reads) and all(len(r.indices) == len(st.axes) and all(i is a.var for i, a in zip(r.indices, st.axes))
                               for r in reads)


def live_readers(s: Schedule, t: Tensor) -> list[Stage]:
    """The stages that read `t` once inlined stages are substituted."""
    return [st for st in s.stages if st.attach != "inline" and st.op is not t.op
            and any(isinstance(e, TensorRead) and e.tensor.op is t.op for e in te.walk(expanded_body(s, st)))]


def materialize_inputs(s: Schedule, st: Stage) -> None:
    """Compute at the kernel's root the inlined stages `st` reads (an injective producer fused into
    the group, e.g. a transpose): the micro-kernel needs its operands as buffers with strides."""
    for e in te.walk(st.body):
        if isinstance(e, TensorRead) and e.tensor.op in s.stage_map and s[e.tensor].attach == "inline":
            src = s[e.tensor]
            src.attach = "root"
            schedule_flat(s, src)


def _rhs_tensor(st: Stage) -> Tensor | None:
    """B of `sum(A[..] * B[..])` when it is read directly (not an inlined expression) and is a matrix."""
    src = st.body.source if isinstance(st.body, te.Reduce) else None
    if isinstance(src, te.Binary) and src.op == "*" and isinstance(src.b, TensorRead) and src.b.tensor.ndim >= 2:
        return src.b.tensor
    return None


def pack_panels(s: Schedule, b: Tensor, reader: Stage, bn: int) -> Tensor:
    """Have `reader` read B[..., k, j] from a new stage P[..., j // bn, k, j % bn] (zero-padded N).

    A layout-changing `cache_read`: the panel of `bn` columns a tile needs becomes one
    contiguous block. P is computed at the root of the kernel, before the reader.
    """
    *batch, k_ext, n_ext = b.shape
    n_pan = -(-n_ext // bn)

    def body(*idx: Expr) -> Expr:
        *bi, jo, kk, ji = idx
        j = jo * bn + ji
        if n_ext % bn == 0:
            return b[(*bi, kk, j)]
        return te.if_then_else(j < n_ext, b[(*bi, kk, te.min_(j, n_ext - 1))], te.const(0, b.dtype))

    packed = te.compute((*batch, n_pan, k_ext, bn), body, name=f"{b.name}.packed", tag=PACK_TAG)

    def swap(e: Expr) -> Expr:
        if isinstance(e, TensorRead) and e.tensor.op is b.op:
            *bi, kk, j = (swap(i) for i in e.indices)
            return TensorRead(packed, (*bi, j // bn, kk, j % bn))
        return rebuild(e, swap)

    reader.body = swap(reader.body)
    stage = Stage(packed.op, packed.op.body)
    s.stages.insert(0, stage)
    s.stage_map[packed.op] = stage
    return packed


def vectorize(st: Stage, axis: object, extent: int | None = None) -> None:
    """Vectorize the innermost loop when its extent makes a vector type (a power of two up to 64).

    `extent`: the loop's trip count where it is smaller than the axis (a stage computed at a tile).
    """
    n = extent or axis.extent  # type: ignore[attr-defined]
    if n > 1 and n <= 64 and n & (n - 1) == 0:
        st.vectorize(axis)  # type: ignore[arg-type]


def schedule_flat(s: Schedule, st: Stage, lanes: int = 16) -> None:
    """An element-wise stage: outer loops fused and parallel, the last one vectorized (split by
    `lanes` when longer, a guarded tail when they do not divide it); trailing one-trip axes (a
    block of one channel) are left out of that choice."""
    axes = list(st.leaf)
    while len(axes) > 1 and axes[-1].extent == 1:
        axes[-2:] = [st.fuse(axes[-2], axes[-1])]
    inner = axes[-1]
    if len(axes) > 1:
        outer = axes[0]
        for ax in axes[1:-1]:
            outer = st.fuse(outer, ax)
        st.parallel(outer)
    if inner.extent > lanes:
        _, vi = st.split(inner, lanes)
        st.vectorize(vi)
    else:
        vectorize(st, inner)


def _fuse_parallel(st: Stage, axes: Sequence) -> object:
    """Adjacent loops `axes` fused into one parallel loop (None when there are none)."""
    if not axes:
        return None
    fused = axes[0]
    for ax in axes[1:]:
        fused = st.fuse(fused, ax)
    st.parallel(fused)
    return fused


@register_schedule("matmul")
def schedule_matmul(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Register-blocked tiles (see the module doc); knobs: kernel, tile_m, tile_n, k_block, k_unroll,
    order, pack_b; defaults pick tiles that divide the sizes."""
    op = anchor.op
    attrs = op.attrs
    acc_st = s[anchor]
    materialize_inputs(s, acc_st)
    if not (attrs["has_m"] and attrs["has_n"]):
        _schedule_matvec(s, anchor, outputs)
        return
    m_ext, n_ext = anchor.shape[-2], anchor.shape[-1]
    k_ext = acc_st.reduce_axes[0].extent
    batch = math.prod(anchor.shape[:-2])
    rhs = _rhs_tensor(acc_st)
    constant_b = rhs is not None and isinstance(rhs.op, PlaceholderOp) and rhs.op.constant
    # the default register tile: rows dividing M x groups of 16 columns (see tiling.tile_shape)
    rows, groups = 1, 1
    if n_ext % LANES == 0:
        b_batched = rhs is not None and math.prod(rhs.shape[:-2]) > 1  # each batch item reads its own B
        rows, groups = tile_shape(m_ext, n_ext // LANES, LANES,
                                  lambda r, g: batch * (m_ext // r) * (n_ext // LANES // g), steps=k_ext, pad=False,
                                  b_rows=m_ext * (1 if b_batched else batch))
    # the largest divisors up to 16 rows / 64 columns: whole tiles for the micro-kernel, no tail to guard
    m_div, n_div = divisor(m_ext, 16), divisor(n_ext, 64)
    m_opts = tuple(sorted({1, 2, 4, 6, 8, 12, 16, m_div, rows}))
    n_opts = tuple(sorted({16, 32, 64, n_div, groups * LANES}))
    tiled = n_ext % LANES == 0 and anchor.dtype == "float32"
    kernel = cfg.knob("kernel", ("tile", "gemm", "vector") if tiled else ("gemm", "vector"),
                      default="tile" if tiled else "gemm")
    default_m = rows if kernel == "tile" else _divisor_default(m_ext, m_opts, (8, 12, 6, 4, 16, m_div))
    default_n = groups * LANES if kernel == "tile" else _divisor_default(n_ext, n_opts, (32, 64, 16, n_div))
    tile_m = cfg.knob("tile_m", m_opts, default=default_m)
    tile_n = cfg.knob("tile_n", n_opts, default=default_n)
    k_unroll = cfg.knob("k_unroll", (1, 2, 4, 8), default=1)
    k_block = cfg.knob("k_block", (64, 128, 256, 512, 1 << 30), default=1 << 30)
    order = cfg.knob("order", ("mn", "nm"), default="nm")
    # packed panels of B: free for a weight (packed once, at compile time), else worth it when A has rows to reuse them
    pack = cfg.knob("pack_b", (False, True), default=constant_b or (m_ext >= 16 and k_ext >= 16 and n_ext >= 32))
    tile_m, tile_n = min(tile_m, m_ext), min(tile_n, n_ext)
    if m_ext % tile_m or n_ext % tile_n:
        kernel = "vector"  # the micro-kernels compute whole tiles only; the vector loops guard the tails
    elif kernel == "tile" and tile_n % LANES:
        kernel = "gemm"

    # `main` writes the output tiles: an element-wise consumer reading the matmul tile by tile, or
    # the matmul itself; `acc` accumulates a tile (the anchor computed at main's tile, or a cache_write)
    consumers = [s[t] for t in outputs if t.op is not op]
    main = next((st for st in consumers if reads_identity(s, st, anchor)), None)
    if main is None or anchor in outputs or len(live_readers(s, anchor)) != 1:
        main = acc_st
        if kernel == "vector":
            acc_st = s[s.cache_write(anchor, "local")]
    rhs = _rhs_tensor(acc_st)
    if pack and rhs is not None:
        packed = pack_panels(s, rhs, acc_st, tile_n)
        pst = s[packed]
        *outer, _k, ji = pst.leaf
        _fuse_parallel(pst, outer)
        vectorize(pst, ji)

    *batch_axes, i, j = main.leaf[: len(main.axes)]
    io, ii = main.split(i, tile_m)
    jo, ji = main.split(j, tile_n)
    tiles = [io, jo] if order == "mn" else [jo, io]
    main.reorder(*batch_axes, *tiles, ii, ji)
    tiles = [_fuse_parallel(main, [*batch_axes, *tiles])]  # batch and both tile loops: one parallel loop
    if acc_st is main:  # the micro-kernel writes the output tile in place
        _tile_kernel(main, kernel, tiles, ii, ji, tile_m, tile_n, k_block)
    else:
        if kernel == "vector" or tile_n % LANES:
            vectorize(main, ji)
        else:  # the epilogue takes the tile (a plain array the micro-kernel writes) a vector at a time
            _, jv = main.split(ji, LANES)
            main.vectorize(jv)
        acc_st.compute_at(main, tiles[0])
        *_, ai, aj = acc_st.leaf[: len(acc_st.axes)]
        if kernel != "vector":
            _tile_kernel(acc_st, kernel, [], ai, aj, tile_m, tile_n, k_block)
        else:
            (k,) = acc_st.reduce_axes
            if k_unroll > 1 and k_ext % k_unroll == 0:
                ko, ki = acc_st.split(k, k_unroll)
                acc_st.reorder(ko, ki, ai, aj)
                acc_st.unroll(ki)
            else:
                acc_st.reorder(k, ai, aj)
            acc_st.unroll(ai)
            vectorize(acc_st, aj, tile_n)

    for st in consumers:
        if st is not main:
            schedule_flat(s, st)


def _tile_kernel(st: Stage, kernel: str, tiles: Sequence, ii: object, ji: object, tile_m: int, tile_n: int,
                 k_block: int) -> None:
    """Loops (tiles..., [k blocks], rows, cols, k) with the inner ones replaced by a micro-kernel:
    the register tile (`TileIntrin`, the columns as groups of 16 lanes) or the gemm one."""
    (k,) = [ax for ax in st.leaf if ax.reduce]
    k_ext = k.extent
    k_tile = k_ext if k_block >= k_ext or k_ext % k_block else k_block
    if k_tile < k_ext:
        ko, k = st.split(k, k_tile)
        st.reorder(*tiles, ko, ii, ji, k)
    else:
        st.reorder(*tiles, ii, ji, k)
    if kernel == "tile":
        jg, jl = st.split(ji, LANES)
        st.reorder(ii, jg, jl, k)
        st.tensorize(ii, TileIntrin("tile", tile_m, tile_n // LANES, LANES, (k_tile,)))
    else:
        st.tensorize(ii, GemmIntrin("gemm", tile_m, tile_n, k_tile))


def _schedule_matvec(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor]) -> None:
    """A matrix-vector product (a 1-D operand): parallel rows, the reduction left to gcc."""
    st = s[anchor]
    data = list(st.leaf[: len(st.axes)])
    if len(data) > 1:
        _fuse_parallel(st, data)
    for t in outputs:
        if t.op is not anchor.op:
            schedule_flat(s, s[t])

