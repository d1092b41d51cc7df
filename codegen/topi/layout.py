"""Data movement without arithmetic: concat, split, transpose, reshape, flatten, pad, enlarge.

All are "injective": each output element reads one input element, so they inline into
their consumers. Reads under a condition (concat's parts, pad's interior) clamp their
index into the tensor, because a select may evaluate both branches (see te.Select).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from taso_py.codegen import te
from taso_py.codegen.te.expr import Expr, const
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.topi.registry import register_compute
from taso_py.ops import conv as conv_ops
from taso_py.ops import layout as layout_ops
from taso_py.ops.conv import EnlargeAttrs
from taso_py.ops.layout import AxisAttrs, FlattenAttrs, PadAttrs, PermAttrs, ShapeAttrs, SplitAttrs
from taso_py.types import TensorType


def clamp(i: Expr, size: int) -> Expr:
    return te.min_(te.max_(i, const(0)), const(size - 1))


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


@register_compute(layout_ops.concat)
def concat(inputs: Sequence[Tensor], attrs: AxisAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """A chain of selects on the concatenated axis: the last part is the default."""
    axis = _axis(attrs.axis, inputs[0].ndim)
    starts = np.cumsum([0] + [t.shape[axis] for t in inputs]).tolist()

    def element(*i: Expr) -> Expr:
        value: Expr | None = None
        for k in reversed(range(len(inputs))):
            t = inputs[k]
            idx = list(i)
            idx[axis] = clamp(i[axis] - starts[k], t.shape[axis])
            read = t[tuple(idx)]
            value = read if value is None else te.if_then_else(i[axis] < starts[k + 1], read, value)
        assert value is not None
        return value

    return (te.compute(out[0].known_shape, element, name="concat", tag="injective"),)


def padded_position(c: Expr, segments: Sequence[int], block: int) -> Expr:
    """Where real channel `c` of a blocked tensor with these segments sits on its padded channel
    axis (each segment starts on a block)."""
    starts = np.cumsum([0, *segments]).tolist()
    padded = np.cumsum([0, *(-(-k // block) * block for k in segments)]).tolist()
    value: Expr = c - starts[-2] + padded[-2]
    for k in reversed(range(len(segments) - 1)):
        value = te.if_then_else(c < starts[k + 1], c - starts[k] + padded[k], value)
    return value


def concat_blocks(inputs: Sequence[Tensor]) -> Tensor:
    """Channel concat of blocked tensors: each part keeps its blocks (padding lanes included), so
    the parts are appended block by block and the result's segments are the parts' segments."""
    n, _, h, w, block = inputs[0].shape
    starts = np.cumsum([0, *(t.shape[1] for t in inputs)]).tolist()

    def element(b: Expr, ob: Expr, y: Expr, x: Expr, lane: Expr) -> Expr:
        value: Expr | None = None
        for k in reversed(range(len(inputs))):
            t = inputs[k]
            read = t[b, clamp(ob - starts[k], t.shape[1]), y, x, lane]
            value = read if value is None else te.if_then_else(ob < starts[k + 1], read, value)
        assert value is not None
        return value

    return te.compute((n, starts[-1], h, w, block), element, name="concat", tag="injective")


def split_blocks(x: Tensor, counts: Sequence[int]) -> tuple[Tensor, ...]:
    """A blocked tensor cut into runs of `counts` blocks (split points between its segments)."""
    n, _, h, w, block = x.shape
    starts = np.cumsum([0, *counts]).tolist()
    return tuple(te.compute((n, c, h, w, block), lambda b, ob, y, z, lane, s=s: x[b, ob + s, y, z, lane],
                            name=f"split{k}", tag="injective") for k, (c, s) in enumerate(zip(counts, starts)))


def split_lanes(x: Tensor, segments: Sequence[int], sizes: Sequence[int]) -> tuple[Tensor, ...]:
    """A blocked tensor of `segments` split into parts of `sizes` real channels where a split point
    falls inside a segment: each part is one segment, gathered lane by lane (zeros past its end)."""
    n, xb, h, w, block = x.shape
    starts = np.cumsum([0, *sizes]).tolist()

    def part(k: int) -> Tensor:
        def element(b: Expr, ob: Expr, y: Expr, z: Expr, lane: Expr) -> Expr:
            c = ob * block + lane
            p = padded_position(c + starts[k], segments, block)
            read = x[b, clamp(p // block, xb), y, z, clamp(p % block, block)]
            return te.if_then_else(c < sizes[k], read, const(0.0, x.dtype))
        return te.compute((n, -(-sizes[k] // block), h, w, block), element, name=f"split{k}", tag="injective")

    return tuple(part(k) for k in range(len(sizes)))


@register_compute(layout_ops.split)
def split(inputs: Sequence[Tensor], attrs: SplitAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """One output per part, each a shifted window of the input."""
    (x,) = inputs
    axis = _axis(attrs.axis, x.ndim)
    starts = np.cumsum([0, *attrs.sizes]).tolist()

    def part(k: int) -> Tensor:
        def element(*i: Expr) -> Expr:
            idx = list(i)
            idx[axis] = i[axis] + starts[k]
            return x[tuple(idx)]
        return te.compute(out[k].known_shape, element, name=f"split{k}", tag="injective")

    return tuple(part(k) for k in range(len(attrs.sizes)))


@register_compute(layout_ops.transpose)
def transpose(inputs: Sequence[Tensor], attrs: PermAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """Output axis k is input axis perm[k]."""
    (x,) = inputs

    def element(*i: Expr) -> Expr:
        idx: list[Expr] = [const(0)] * x.ndim
        for k, p in enumerate(attrs.perm):
            idx[p] = i[k]
        return x[tuple(idx)]

    return (te.compute(out[0].known_shape, element, name="transpose", tag="injective"),)


def reshape_to(x: Tensor, shape: Sequence[int], name: str) -> Tensor:
    """Same elements in row-major order: output index -> flat offset -> input index."""
    in_strides = [math.prod(x.shape[k + 1:]) for k in range(x.ndim)]
    out_strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]

    def element(*i: Expr) -> Expr:
        flat: Expr = const(0)
        for v, stride in zip(i, out_strides):
            flat = flat + v * stride
        return x[tuple((flat // stride) % size for stride, size in zip(in_strides, x.shape))]

    return te.compute(shape, element, name=name, tag="injective")


@register_compute(layout_ops.reshape)
def reshape(inputs: Sequence[Tensor], attrs: ShapeAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    return (reshape_to(inputs[0], out[0].known_shape, "reshape"),)


@register_compute(layout_ops.flatten)
def flatten(inputs: Sequence[Tensor], attrs: FlattenAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    return (reshape_to(inputs[0], out[0].known_shape, "flatten"),)


def pad_to(x: Tensor, before: Sequence[int], shape: Sequence[int], value: float, name: str) -> Tensor:
    """out[i] = x[i - before] inside x, else `value`; a negative `before` crops."""
    fill = const(np.asarray(value, x.dtype).item(), x.dtype)

    def element(*i: Expr) -> Expr:
        src = [v - b for v, b in zip(i, before)]
        inside = te.all_of(*(c for s, n, b, size in zip(src, x.shape, before, shape) for c in
                             ((s >= 0,) if b > 0 else ()) + ((s < n,) if size - b > n else ())))
        read = x[tuple(clamp(s, n) for s, n in zip(src, x.shape))]
        return read if isinstance(inside, te.Const) else te.if_then_else(inside, read, fill)

    return te.compute(shape, element, name=name, tag="injective")


@register_compute(layout_ops.pad)
def pad(inputs: Sequence[Tensor], attrs: PadAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    (x,) = inputs
    return (pad_to(x, attrs.pads[:x.ndim], out[0].known_shape, attrs.value, "pad"),)


@register_compute(conv_ops.enlarge)
def enlarge(inputs: Sequence[Tensor], attrs: EnlargeAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """A kernel zero-padded, centered, to a larger kernel size."""
    (w,) = inputs
    ph, pw = ((k - n) // 2 for k, n in zip(attrs.kernel, w.shape[2:]))
    return (pad_to(w, (0, 0, ph, pw), out[0].known_shape, 0.0, "enlarge"),)
