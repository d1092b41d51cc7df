"""Transposed 2-D convolution (`conv_transpose2d`) in gather form, split by stride phase, with its CPU template.

Output row y reads input row i through kernel row k where y + pad = i * stride + k * dilation.
With g = gcd(stride, dilation), s = stride / g and d = dilation / g, only rows with
(y + pad) % g == 0 have taps, and their kernel rows are k0 + j * s for j = 0, 1, ... where
k0 = ((y + pad) / g * d^-1) mod s (d is invertible mod s); the input row is then
(y + pad - k0 * dilation) / stride - j * d. So each output pixel sums over ceil(kh / s) x
ceil(kw / s) taps that all contribute (a U-Net's 2x2 kernel at stride 2: one), instead of
kh x kw taps of which most read the zeros of a dilated input. The input is zero-padded so every
tap reads inside it, and the weights are transposed to [group, ci, ky, kx, o] with the kernel
zero-padded to whole periods (a weight-only stage, hoisted by the graph compiler), so the
reduction has no branches: a select remains only where g > 1, around each tap.

The accumulator is pixel-major, acc[n, y, x, group, o] (as conv2d's), so a tile of `tile_w`
pixels x `tile_oc` output channels accumulates in vector registers from contiguous weight
vectors; the NCHW output (bias, fused element-wise consumers) is written from the tile.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from taso_py.codegen import isa, te
from taso_py.codegen.schedule.schedule import Schedule
from taso_py.codegen.te.expr import Expr
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.topi.conv import pad_spatial, tile_grouped_output
from taso_py.codegen.topi.linalg import divisor, live_readers, materialize_inputs, schedule_flat, vectorize
from taso_py.codegen.topi.registry import register_compute, register_schedule
from taso_py.codegen.tune.space import Config
from taso_py.ops import conv as conv_ops
from taso_py.ops.conv import ConvTranspose2dAttrs
from taso_py.types import TensorType


@dataclass(frozen=True)
class Phases:
    """The taps of one spatial axis (see the module doc)."""

    stride: int
    dilation: int
    pad: int  # the crop at the start (ONNX's begin pad)
    g: int  # gcd(stride, dilation): rows with (y + pad) % g != 0 have no taps
    period: int  # stride / g: consecutive taps of a row are this many kernel rows apart
    inverse: int  # (dilation / g)^-1 mod period
    taps: int  # ceil(kernel / period): taps per output row
    low: int  # input rows read before row 0 (zero padding)
    high: int  # input rows read after the last one

    @staticmethod
    def of(size: int, kernel: int, out: int, stride: int, dilation: int, pad: int) -> Phases:
        g = math.gcd(stride, dilation)
        period = stride // g
        inverse = pow(dilation // g, -1, period) if period > 1 else 0
        taps = -(-kernel // period)
        rows = [
            (y + pad - _first(y + pad, g, period, inverse) * dilation) // stride - j * (dilation // g)
            for y in range(out)
            for j in range(taps)
        ]
        return Phases(
            stride, dilation, pad, g, period, inverse, taps, max(0, -min(rows)), max(0, max(rows) - (size - 1))
        )

    def kernel_index(self, y: Expr, j: Expr) -> Expr:
        return _first(y + self.pad, self.g, self.period, self.inverse) + j * self.period

    def input_index(self, y: Expr, j: Expr) -> Expr:
        """The input row (in the padded input) tap j of output row y reads."""
        k0 = _first(y + self.pad, self.g, self.period, self.inverse)
        return (y + self.pad + self.low * self.stride - k0 * self.dilation) // self.stride - j * (
            self.dilation // self.g
        )

    def has_taps(self, y: Expr) -> Expr | None:
        """The condition for row y to have taps, None when every row has them."""
        return te.equal((y + self.pad) % self.g, 0) if self.g > 1 else None


def _first(m: Expr | int, g: int, period: int, inverse: int) -> Expr | int:
    """The first kernel row of output position m = y + pad (where m % g == 0)."""
    return (m // g * inverse) % period if period > 1 else 0


@register_compute(conv_ops.conv_transpose2d)
def conv_transpose2d(
    inputs: Sequence[Tensor], attrs: ConvTranspose2dAttrs, out_types: Sequence[TensorType]
) -> tuple[Tensor, ...]:
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    n, o, oh, ow = out_types[0].known_shape
    c, opg, kh, kw = w.shape
    groups = attrs.groups
    cpg = c // groups
    py, px = (
        Phases.of(x.shape[2 + i], (kh, kw)[i], (oh, ow)[i], attrs.stride[i], attrs.dilation[i], attrs.pad[i])
        for i in range(2)
    )
    xp = pad_spatial(x, (py.low, px.low, py.high, px.high))
    ky_all, kx_all = py.taps * py.period, px.taps * px.period

    def weight(gi: Expr, ci: Expr, a: Expr, b: Expr, oc: Expr) -> Expr:
        read = w[gi * cpg + ci, oc, te.min_(a, kh - 1), te.min_(b, kw - 1)]
        if (ky_all, kx_all) == (kh, kw):
            return read
        return te.if_then_else(te.all_of(a < kh, b < kw), read, te.const(0, w.dtype))

    wt = te.compute((groups, cpg, ky_all, kx_all, opg), weight, name="conv_transpose_weight", tag="injective")
    r = te.reduce_axis(py.taps * px.taps * cpg, "r")  # (tap row, tap column, input channel), channels innermost

    def body(b: Expr, y: Expr, z: Expr, gi: Expr, oc: Expr) -> Expr:
        ci, tap = r.var % cpg, r.var // cpg
        jy, jx = tap // px.taps, tap % px.taps
        value = (
            xp[b, gi * cpg + ci, py.input_index(y, jy), px.input_index(z, jx)]
            * wt[gi, ci, py.kernel_index(y, jy), px.kernel_index(z, jx), oc]
        )
        conds = [c for c in (py.has_taps(y), px.has_taps(z)) if c is not None]
        if conds:
            value = te.if_then_else(te.all_of(*conds), value, te.const(0, x.dtype))
        return te.sum(value, axis=r)

    acc = te.compute(
        (n, oh, ow, groups, opg),
        body,
        name="conv_transpose2d",
        tag="conv_transpose2d",
        attrs={"layout": "NHWC", "channels": cpg},
    )

    def out(b: Expr, oc: Expr, y: Expr, z: Expr) -> Expr:
        v = acc[b, y, z, oc // opg, oc % opg]
        return v if bias is None else v + bias[(oc,)]

    return (te.compute((n, o, oh, ow), out, name="conv_transpose_out", tag="injective"),)


@register_schedule("conv_transpose2d")
def schedule_conv_transpose2d(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Tiles of tile_w pixels of an output row x tile_oc output channels of one group, the pixels
    unrolled and the channels a vector, computed where the NCHW output writes them; parallel over
    images, else rows. Knobs: tile_w, tile_oc (defaults: divisors, so no tail is guarded)."""
    acc = s[anchor]
    materialize_inputs(s, acc)  # the padded input and the transposed weights: stages at the root
    _, _, ow, _, opg = anchor.shape
    w_div, oc_div = divisor(ow, 8), divisor(opg, isa.host().lanes)  # one vector register of channels
    tile_w = min(cfg.knob("tile_w", tuple(sorted({1, 2, 4, 6, 8, w_div})), default=w_div), ow)
    tile_oc = min(cfg.knob("tile_oc", tuple(sorted({1, 2, 4, 8, 16, 32, oc_div})), default=oc_div), opg)
    readers = live_readers(s, anchor)
    main = readers[0] if len(readers) == 1 and readers[0].is_output else None
    if main is None:  # the accumulator is a buffer of its own
        b, y, x, g, o = acc.leaf[:5]
        xo, xi = acc.split(x, tile_w)
        ob, oi = acc.split(o, tile_oc)
        acc.reorder(b, y, xo, g, ob, *(a for a in acc.leaf if a.reduce), xi, oi)
        acc.parallel(acc.fuse(b, y))
        acc.unroll(xi)
        vectorize(acc, oi, tile_oc)
    else:
        acc.compute_at(main, tile_grouped_output(main, opg, tile_oc, tile_w))
        _, _, ax, _, ao = acc.leaf[:5]
        (red,) = [a for a in acc.leaf if a.reduce]
        ro, rc = acc.split(red, anchor.op.attrs["channels"])  # taps, then channels: the simplifier splits r
        acc.reorder(ro, rc, ax, ao)
        acc.unroll(ax)
        vectorize(acc, ao, tile_oc)
    for t in outputs:
        if s[t] is not main:
            schedule_flat(s, s[t])
