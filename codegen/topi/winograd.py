"""Winograd convolution F(m x m, 3 x 3) on the blocked layout (Lavin & Gray, 2016).

A 3x3, stride-1 convolution computes each m x m output tile from an a x a input tile
(a = m + 2) as A^T [ (G g G^T) . (B^T d B) ] A: the product runs over a*a points instead of
9*m*m taps, so F(4x4, 3x3) does 36 multiplies per output where direct convolution does 144.
As tensor expressions, in the blocked layout (channels in the lanes throughout):

- the input padded to whole tiles (`conv.pad_spatial`), then transformed in two passes,
  rows then columns: T1 = B^T d, V = T1 B, laid out [N][a*a][C/c][tiles][c];
- the weights, transformed once at compile time (`weight_transform`, numpy):
  U = G g G^T laid out [a*a][O/c][C/c][c_in][c_out];
- a*a independent matrix products M[e] = V[e] U[e] over the channels: the `TileIntrin`
  register tile (rows = tiles, columns = output channels), tag "conv2d_winograd";
- the output transform in two passes, S1 = A^T M then Y = S1 A, computed tile by tile
  inside the output stage, which takes the bias, activation and any fused consumer.

Each transform's coefficient is a select over the transform's row (a loop the schedule
unrolls, so the compiler folds it to the constant); only nonzero terms are written out.
The numerics: F(2x2) is exact in its transforms; F(4x4) multiplies rounding errors by its
transform's magnitudes (up to 10 in B, 8 in A), about 1e-6 relative per layer in float32,
inside the equivalence check's 1e-4.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from fractions import Fraction as F

import numpy as np

from taso_py.codegen import te
from taso_py.codegen.lower.intrin import TileIntrin
from taso_py.codegen.schedule.schedule import Schedule, Stage
from taso_py.codegen.te.expr import Expr, const
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.topi.conv import PAD_NAME, _epilogue, pad_spatial
from taso_py.codegen.topi.injective import fuse_all, vectorize_lanes
from taso_py.codegen.topi.linalg import schedule_flat
from taso_py.codegen.topi.registry import register_schedule
from taso_py.codegen.topi.tiling import tile_shape
from taso_py.codegen.tune.space import Config
from taso_py.ops.conv import Conv2dAttrs

# (B^T, G, A^T) for the output tile sizes m; interpolation points 0, +-1, +-2 and infinity
MATRICES: dict[int, tuple[list[list[F]], list[list[F]], list[list[F]]]] = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [F(1, 2), F(1, 2), F(1, 2)], [F(1, 2), F(-1, 2), F(1, 2)], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[F(1, 4), 0, 0], [F(-1, 6), F(-1, 6), F(-1, 6)], [F(-1, 6), F(1, 6), F(-1, 6)],
         [F(1, 24), F(1, 12), F(1, 6)], [F(1, 24), F(-1, 12), F(1, 6)], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}
T1, V, S1 = "wino_t1", "wino_v", "wino_s1"


def applies(attrs: Conv2dAttrs, weight_shape: Sequence[int]) -> bool:
    """A 3x3 kernel at stride 1, dilation 1, one group."""
    return (tuple(weight_shape[2:]) == (3, 3) and attrs.stride == (1, 1) and attrs.dilation == (1, 1)
            and attrs.groups == 1)


def tile_size(out_shape: Sequence[int], in_segments: Sequence[int], block: int) -> int:
    """The output tile m for a convolution of this output (0: direct is faster): F(4x4) where the
    tiles fill the output well, F(2x2) on small outputs; direct when there are few channels (the
    transforms, memory-bound, would cost more than the products save). TASO_WINOGRAD=0 turns
    Winograd off (direct convolution everywhere: exact to the last bit of the reduction order)."""
    if os.environ.get("TASO_WINOGRAD", "1") == "0":
        return 0
    channels = sum(in_segments)
    _, o, oh, ow = out_shape
    if channels * o < 64 * 64:  # measured: 48 -> 64 channels at 35 x 35 runs faster direct
        return 0
    waste4 = (-(-oh // 4) * 4 * -(-ow // 4) * 4) / (oh * ow)
    return 4 if min(oh, ow) >= 8 and waste4 < 1.3 else 2


def weight_transform(w: np.ndarray, m: int, block: int, in_positions: np.ndarray | None = None) -> np.ndarray:
    """G g G^T of an OIHW 3x3 kernel, [a*a][O/c][C/c][c_in][c_out], zero-padded; `in_positions`
    places the input channels on a padded channel axis (see graph.layout.positions)."""
    o, c = w.shape[:2]
    g = np.array(MATRICES[m][1], np.float64)
    u = np.einsum("xa,ocab,yb->xyoc", g, w.astype(np.float64), g)  # [a, a, O, C]
    alpha = m + 2
    pos = np.arange(c) if in_positions is None else in_positions
    ob, cb = -(-o // block), -(-max(int(pos.max()) + 1, c) // block)
    full = np.zeros((alpha, alpha, ob * block, cb * block))
    full[:, :, :o, pos] = u
    full = full.reshape(alpha * alpha, ob, block, cb, block).transpose(0, 1, 3, 4, 2)  # [e][ob][cb][ci][co]
    return np.ascontiguousarray(full.astype(w.dtype))


def _combine(coef: Sequence[F], terms: Sequence[Expr]) -> Expr:
    """sum(coef[k] * terms[k]) over the nonzero coefficients, without multiplying by 1."""
    out: Expr | None = None
    for c, t in zip(coef, terms):
        if c == 0:
            continue
        if out is None:
            out = t if c == 1 else t * const(float(c))
        elif abs(c) == 1:
            out = out + t if c > 0 else out - t
        else:
            out = out + t * const(float(c))
    return out if out is not None else const(0.0)


def _by_row(matrix: Sequence[Sequence[F]], row: Expr, terms: Sequence[Expr]) -> Expr:
    """matrix[row] . terms, as a select over the rows (each branch only its nonzero terms)."""
    value = _combine(matrix[-1], terms)
    for k in reversed(range(len(matrix) - 1)):
        value = te.if_then_else(te.equal(row, k), _combine(matrix[k], terms), value)
    return value


def conv2d_winograd(data: Tensor, u: Tensor, bias: Tensor | None, attrs: Conv2dAttrs, m: int,
                    out_shape: Sequence[int]) -> Tensor:
    """The convolution's blocked output [N, O/c, OH, OW, c] (see the module doc); `u` from
    `weight_transform`."""
    bt, _, at = MATRICES[m]
    alpha = m + 2
    n, cb, h, w, block = data.shape
    ob = u.shape[1]
    oh, ow = out_shape[2], out_shape[3]
    th, tw = -(-oh // m), -(-ow // m)
    tiles = th * tw
    rows, _ = tile_shape(tiles, ob, block, lambda r, g: n * alpha * alpha * (ob // g) * -(-tiles // r),
                         steps=cb * block)
    tiles_p = -(-tiles // rows) * rows
    top, left, _, _ = attrs.pad
    p = pad_spatial(data, (top, left, th * m + 2 - h - top, tw * m + 2 - w - left))

    def t1(b: Expr, c: Expr, y: Expr, x: Expr, xi: Expr, col: Expr, lane: Expr) -> Expr:
        return _by_row(bt, xi, [p[b, c, y * m + a, x * m + col, lane] for a in range(alpha)])

    rows_t = te.compute((n, cb, th, tw, alpha, alpha, block), t1, name=T1, tag="injective")

    def v(b: Expr, e: Expr, c: Expr, t: Expr, lane: Expr) -> Expr:
        y, x = te.min_(t // tw, th - 1), t % tw  # past the last tile (rows padding): any tile, never read
        return _by_row(bt, e % alpha, [rows_t[b, c, y, x, e // alpha, col, lane] for col in range(alpha)])

    vt = te.compute((n, alpha * alpha, cb, tiles_p, block), v, name=V, tag="injective")
    rc, ri = te.reduce_axis(cb, "rc"), te.reduce_axis(block, "ri")
    prod = te.compute((n, alpha * alpha, ob, tiles_p, block),
                      lambda b, e, o, t, lane: te.sum(vt[b, e, rc, t, ri] * u[e, o, rc, ri, lane], axis=[rc, ri]),
                      name="conv2d_winograd", tag="conv2d_winograd", attrs={"rows": rows, "m": m, "steps": cb * block})

    def s1(b: Expr, o: Expr, y: Expr, x: Expr, i: Expr, nu: Expr, lane: Expr) -> Expr:
        return _by_row(at, i, [prod[b, xi * alpha + nu, o, y * tw + x, lane] for xi in range(alpha)])

    cols_t = te.compute((n, ob, th, tw, m, alpha, block), s1, name=S1, tag="injective")
    acc = te.compute((n, ob, oh, ow, block),
                     lambda b, o, y, x, lane: _by_row(at, x % m, [cols_t[b, o, y // m, x // m, y % m, nu, lane]
                                                                 for nu in range(alpha)]),
                     name="winograd_out", tag="injective")
    return _epilogue(acc, bias, attrs.act, 1, block=block)


def _stage(s: Schedule, name: str) -> Stage:
    return next(st for st in s.stages if st.name == name)


@register_schedule("conv2d_winograd")
def schedule_winograd(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Input transform per tile (rows then columns, the tile in registers), the a*a products on the
    register tile, the output transform per tile inside the output's loops. Knobs: rows, tile_ob."""
    m = anchor.op.attrs["m"]
    pad = next((st for st in s.stages if st.name == PAD_NAME), None)
    if pad is not None:
        pad.attach = "root"
        schedule_flat(s, pad)

    v = _stage(s, V)
    v.attach = "root"
    b, e, c, t, lane = v.leaf
    v.reorder(b, c, t, e, lane)
    v.parallel(fuse_all(v, [b, c, t]))
    v.unroll(e)
    vectorize_lanes(v, lane)
    t1 = _stage(s, T1)
    t1.compute_at(v, v.leaf[0])
    *_, xi, col, lane1 = t1.leaf
    t1.unroll(xi)
    t1.unroll(col)
    vectorize_lanes(t1, lane1)

    prod = s[anchor]
    _, _, ob, tiles, block = anchor.shape
    rows = cfg.knob("rows", tuple(d for d in range(1, 29) if tiles % d == 0), default=anchor.op.attrs["rows"])
    tile_ob = cfg.knob("tile_ob", tuple(d for d in range(1, min(ob, 8) + 1) if ob % d == 0),
                       default=tile_shape(tiles, ob, block, lambda r, g: 1, steps=anchor.op.attrs["steps"],
                                          pad=False)[1])
    b, e, o, t, lane, rc, ri = prod.leaf
    oo, oi = prod.split(o, tile_ob)
    to, ti = prod.split(t, rows)
    prod.reorder(b, e, oo, to, ti, oi, lane, rc, ri)
    prod.parallel(fuse_all(prod, [b, e, oo, to]))
    prod.tensorize(ti, TileIntrin("tile", rows, tile_ob, block, (rc.extent, ri.extent)))

    # the output transform tile by tile in each output's loops; S1 inside the one output's tile loop
    s1 = _stage(s, S1)
    one = len(outputs) == 1
    if not one:
        s1.attach = "root"
        schedule_flat(s, s1)
    for st in (s[o] for o in outputs):
        n_, o_, y, x, lane_o = st.leaf[:5]
        yo, yi = st.split(y, m)
        xo, xi2 = st.split(x, m)
        st.reorder(n_, o_, yo, xo, yi, xi2, lane_o)
        st.parallel(fuse_all(st, [n_, o_, yo]))
        st.unroll(yi)
        st.unroll(xi2)
        vectorize_lanes(st, lane_o)
        if one:
            s1.compute_at(st, xo)
            *_, i, nu, lane2 = s1.leaf
            s1.unroll(i)
            s1.unroll(nu)
            vectorize_lanes(s1, lane2)
