"""Pooling over NCHW or the blocked NCHW[x]c: max and average windows (pattern "pool") and the
global average ("reduction"). The window runs over axes 2 and 3; a trailing block axis (the
channels within a block) is carried through, so the schedule vectorizes it.

A window's cells outside the input (its padding, or the overhang of a ceil-mode window)
read as the reduction's identity, so one reduction covers every window; each window
holds at least one real cell because pads are smaller than the kernel and a ceil-mode
window never starts in the end padding (the shape rule drops it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from taso_py.codegen import te
from taso_py.codegen.schedule.schedule import Schedule, Stage
from taso_py.codegen.te.expr import Expr, const
from taso_py.codegen.te.tensor import IterVar, Tensor
from taso_py.codegen.topi.injective import VECTOR_WIDTHS, fuse_all, schedule_elementwise, vectorize_lanes
from taso_py.codegen.topi.layout import clamp
from taso_py.codegen.topi.linalg import live_readers
from taso_py.codegen.topi.registry import register_compute, register_schedule
from taso_py.codegen.tune.space import Config
from taso_py.ops import conv as conv_ops
from taso_py.ops.conv import AvgPoolAttrs, MaxPoolAttrs
from taso_py.types import TensorType


def _window(x: Tensor, a: MaxPoolAttrs, idx: Sequence[Expr], ri: IterVar, rj: IterVar, outside: Expr) -> Expr:
    """The window cell (ri, rj) of output element `idx` (n, c, i, j[, lane])."""
    h, w = x.shape[2:4]
    n, c, i, j, *lane = idx
    r = i * a.stride[0] - a.pad[0] + ri
    q = j * a.stride[1] - a.pad[1] + rj
    inside = te.all_of(r >= 0, r < h, q >= 0, q < w)
    return te.if_then_else(inside, x[(n, c, clamp(r, h), clamp(q, w), *lane)], outside)


def _shape(x: Tensor, out: TensorType) -> tuple[int, ...]:
    """The output shape in x's layout: NCHW as the type says, or with x's block axis after it."""
    return tuple(out.known_shape[:2]) + tuple(out.known_shape[2:4]) + tuple(x.shape[4:])


@register_compute(conv_ops.maxpool2d)
def maxpool2d(inputs: Sequence[Tensor], attrs: MaxPoolAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    (x,) = inputs
    low = te.min_value(x.dtype)
    ri, rj = te.reduce_axis(attrs.kernel[0], "ri"), te.reduce_axis(attrs.kernel[1], "rj")
    return (te.compute(_shape(x, out[0]), lambda *idx: te.max_reduce(_window(x, attrs, idx, ri, rj, low), [ri, rj]),
                       name="maxpool2d", tag="pool"),)


def _count(i: Expr, kernel: int, stride: int, lo: int, hi: int, pad0: int) -> Expr:
    """How many of window i's cells lie in [lo, hi)."""
    start = i * stride - pad0
    return te.min_(start + kernel, const(hi)) - te.max_(start, const(lo))


@register_compute(conv_ops.avgpool2d)
def avgpool2d(inputs: Sequence[Tensor], attrs: AvgPoolAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """The window's sum, then times 1/count (a function of the window, computed once per output).

    The count is the window's cells inside the input, or with `count_include_pad` inside
    the declared pads (a ceil-mode overhang past them never counts, as in ONNX)."""
    (x,) = inputs
    a = attrs
    h, w = x.shape[2:4]
    ri, rj = te.reduce_axis(a.kernel[0], "ri"), te.reduce_axis(a.kernel[1], "rj")
    zero = const(0.0, x.dtype)

    def element(*idx: Expr) -> Expr:
        i, j = idx[2:4]
        if a.count_include_pad:
            rows = _count(i, a.kernel[0], a.stride[0], -a.pad[0], h + a.pad[2], a.pad[0])
            cols = _count(j, a.kernel[1], a.stride[1], -a.pad[1], w + a.pad[3], a.pad[1])
        else:
            rows = _count(i, a.kernel[0], a.stride[0], 0, h, a.pad[0])
            cols = _count(j, a.kernel[1], a.stride[1], 0, w, a.pad[1])
        return const(1.0, x.dtype) / te.cast(x.dtype, rows * cols)

    total = te.compute(_shape(x, out[0]), lambda *idx: te.sum(_window(x, a, idx, ri, rj, zero), [ri, rj]),
                       name="avgpool2d_sum", tag="pool")
    return (te.compute(total.shape, lambda *idx: total[idx] * element(*idx), name="avgpool2d", tag="injective"),)


@register_compute(conv_ops.global_avgpool)
def global_avgpool(inputs: Sequence[Tensor], _attrs: object, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    (x,) = inputs
    shape = tuple(out[0].known_shape)
    blocked = x.ndim == 5 and len(shape) == 5 and shape[4] == x.shape[4] > 1  # [N, C/c, H, W, c] (not NCDHW)
    spatial = x.shape[2:4] if blocked else x.shape[2:]
    axes = [te.reduce_axis(d, f"r{k}") for k, d in enumerate(spatial)]
    scale = const(float(np.asarray(1.0 / math.prod(spatial), x.dtype)), x.dtype)
    if blocked:
        return (te.compute(shape,
                           lambda n, c, _i, _j, lane: te.sum(x[(n, c, *axes, lane)] * scale, axes),
                           name="global_avgpool", tag="reduction"),)
    return (te.compute(shape, lambda n, c, *_: te.sum(x[(n, c, *axes)] * scale, axes),
                       name="global_avgpool", tag="reduction"),)


def _window_loops(stage: Stage, cfg: Config, vector: bool, parallel: bool) -> None:
    """Fuse the data axes but the last into rows (parallel at the root); with `vector`, the
    last one, split by the vector width, goes innermost, after the window loops, so
    neighbouring outputs fill the lanes."""
    data, red = list(stage.axes), list(stage.reduce_axes)
    if len(data) == 5:  # blocked: rows (n, block, i), then j, the window, and the block's lanes as one vector
        rows = fuse_all(stage, data[:3])
        stage.reorder(rows, data[3], *red, data[4])
        vectorize_lanes(stage, data[4])
        _unroll_window(stage)
        if parallel and rows.extent > 1:
            stage.parallel(rows)
        return
    rows = fuse_all(stage, data[:-1]) if len(data) > 1 else None
    if vector:
        last = data[-1]
        width = cfg.knob("pool_vector_width", (4, 8, 16), default=8)
        lo, li = stage.split(last, min(width, last.extent))
        stage.reorder(*([rows] if rows is not None else []), lo, *red, li)
        vectorize_lanes(stage, li)
    if parallel and rows is not None and rows.extent > 1:
        stage.parallel(rows)


def _unroll_window(stage: Stage) -> None:
    """Unroll a small window (up to 7 x 7): its border tests and clamped reads then fold per cell."""
    red = list(stage.reduce_axes)
    if red and all(iv.extent <= 7 for iv in red):
        for iv in red:
            stage.unroll(iv)


def _place_anchor(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config, vector: bool) -> None:
    """When the group's one output is an injective consumer of the anchor (a relu after the
    pool), the anchor is computed a row at a time inside that output's parallel row loop
    instead of into a whole temporary; other outputs get the injective schedule."""
    st = s[anchor]
    readers = live_readers(s, anchor)  # through inlined stages (an average's scale, a fused add)
    consumer = readers[0] if len(readers) == 1 and readers[0].is_output else None
    if not st.is_output and consumer is not None and len(consumer.leaf) == len(st.axes) == 5:
        # blocked: parallel rows (n, block, i); per output pixel, the window's sum of lane vectors
        rows = fuse_all(consumer, consumer.leaf[:3])
        j, lane = consumer.leaf[1:3]
        vectorize_lanes(consumer, lane)
        if rows.extent > 1:
            consumer.parallel(rows)
        st.compute_at(consumer, j)
        *_, lane_in = st.leaf[:5]
        st.reorder(*st.reduce_axes, lane_in)
        vectorize_lanes(st, lane_in)
        _unroll_window(st)
    elif not st.is_output and consumer is not None and len(consumer.leaf) == len(st.axes) > 1:
        last = consumer.leaf[-1]
        rows = fuse_all(consumer, consumer.leaf[:-1])
        width = cfg.knob("vector_width", VECTOR_WIDTHS, default=16)
        _, inner = consumer.split(last, min(width, last.extent))
        vectorize_lanes(consumer, inner)
        if rows.extent > 1:
            consumer.parallel(rows)
        st.compute_at(consumer, rows)
        _window_loops(st, cfg, vector, parallel=False)
    else:
        _window_loops(st, cfg, vector, parallel=True)
    for out in outputs:
        if out != anchor and s[out] is not consumer:
            schedule_elementwise(s, s[out], cfg)


@register_schedule("pool")
def schedule_pool(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    _place_anchor(s, anchor, outputs, cfg, vector=True)


@register_schedule("reduction")
def schedule_reduction(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Plain reductions (global average): one output element per parallel iteration."""
    _place_anchor(s, anchor, outputs, cfg, vector=False)
