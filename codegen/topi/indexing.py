"""Computes of the indexing family (taso_py/ops/indexing.py).

All are injective: each output element reads one element of each input at an index that is an
affine function of the output index (slice, expand), a constant table lookup (gather), or a select
between two such reads (select), so the injective CPU and CUDA schedules take them as they are.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from taso_py.codegen import te
from taso_py.codegen.te.expr import Expr, const
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.topi.injective import broadcast_read
from taso_py.codegen.topi.registry import register_compute
from taso_py.ops import indexing as ops
from taso_py.ops.indexing import CastAttrs, ExpandAttrs, GatherAttrs, SliceAttrs
from taso_py.types import TensorType


@register_compute(ops.slice_)
def slice_(inputs: Sequence[Tensor], attrs: SliceAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """Canonical bounds: output index i on a sliced axis reads start + i * step (never out of range)."""
    (x,) = inputs
    attrs = ops.slice_.canonical(attrs, [TensorType(x.shape)])  # idempotent: a graph's are canonical already
    first = dict(zip(attrs.axes, attrs.starts))
    step = dict(zip(attrs.axes, attrs.steps))

    def element(*i: Expr) -> Expr:
        return x[tuple(v * step[k] + first[k] if k in first else v for k, v in enumerate(i))]

    return (te.compute(out[0].known_shape, element, name="slice", tag="injective"),)


def _lookup(table: Sequence[int], flat: Expr) -> Expr:
    """table[flat] for a constant table: affine when its entries are evenly spaced, else a chain of selects."""
    if len(table) == 1:
        return const(table[0])
    stride = table[1] - table[0]
    if all(b - a == stride for a, b in itertools.pairwise(table)):
        return flat * stride + table[0]
    value: Expr = const(table[-1])
    for p in reversed(range(len(table) - 1)):
        value = te.if_then_else(te.equal(flat, p), const(table[p]), value)
    return value


@register_compute(ops.gather)
def gather(inputs: Sequence[Tensor], attrs: GatherAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """The index axes of the output address the constant index array; its entry is the data index."""
    (x,) = inputs
    attrs = ops.gather.canonical(attrs, [TensorType(x.shape)])
    k, m = attrs.axis, len(attrs.shape)

    def element(*i: Expr) -> Expr:
        flat: Expr = const(0)
        for v, d in zip(i[k:k + m], attrs.shape):
            flat = flat * d + v
        return x[(*i[:k], _lookup(attrs.indices, flat), *i[k + m:])]

    return (te.compute(out[0].known_shape, element, name="gather", tag="injective"),)


@register_compute(ops.expand)
def expand(inputs: Sequence[Tensor], attrs: ExpandAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    (x,) = inputs
    shape = out[0].known_shape
    return (te.compute(shape, lambda *i: broadcast_read(x, shape, i), name="expand", tag="injective"),)


@register_compute(ops.select_)
def select(inputs: Sequence[Tensor], attrs: object, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """A select between two in-range reads (both may be evaluated, which is safe); non-zero is true."""
    cond, x, y = inputs
    shape = out[0].known_shape

    def element(*i: Expr) -> Expr:
        c = broadcast_read(cond, shape, i)
        c = c if cond.dtype == "bool" else te.not_equal(c, const(0, cond.dtype))
        return te.if_then_else(c, broadcast_read(x, shape, i), broadcast_read(y, shape, i))

    return (te.compute(shape, element, name="select", tag="injective"),)


@register_compute(ops.cast)
def cast(inputs: Sequence[Tensor], attrs: CastAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    (x,) = inputs
    return (te.compute(out[0].known_shape, lambda *i: te.cast(attrs.to, x[i]), name="cast", tag="injective"),)
