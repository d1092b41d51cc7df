"""TASO's constant tensors, computed from their attributes alone (pattern "injective").

A group holding one becomes a kernel without inputs; the graph compiler can run it once
at compile time (constant folding) or inline it into its consumer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso_py.codegen import te
from taso_py.codegen.te.expr import Expr, const
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.topi.registry import register_compute
from taso_py.ops import constants as constants_ops
from taso_py.ops.constants import FillAttrs, GroupedKernelAttrs, KernelAttrs, MatrixAttrs
from taso_py.types import TensorType


def _value(v: float, dtype: str) -> Expr:
    return const(np.asarray(v, dtype).item(), dtype)


def _indicator(cond: Expr, dtype: str) -> Expr:
    return te.if_then_else(cond, _value(1, dtype), _value(0, dtype))


@register_compute(constants_ops.const_iconv)
def const_iconv(_inputs: Sequence[Tensor], a: GroupedKernelAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """The identity kernel: a one at the centre of the diagonal of each group's block."""
    per_group = a.channels // a.groups
    ch, cw = a.kernel[0] // 2, a.kernel[1] // 2
    return (te.compute(out[0].known_shape, lambda o, i, y, x: _indicator(
        te.all_of(te.equal(i, o % per_group), te.equal(y, ch), te.equal(x, cw)), a.dtype),
        name="const_iconv", tag="injective"),)


@register_compute(constants_ops.const_pool)
def const_pool(_inputs: Sequence[Tensor], a: KernelAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    value = _value(1.0 / (a.kernel[0] * a.kernel[1]), a.dtype)
    return (te.compute(out[0].known_shape, lambda *_: value, name="const_pool", tag="injective"),)


@register_compute(constants_ops.const_imm)
def const_imm(_inputs: Sequence[Tensor], a: MatrixAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    return (te.compute(out[0].known_shape, lambda i, j: _indicator(te.equal(i, j), a.dtype),
                       name="const_imm", tag="injective"),)


@register_compute(constants_ops.const_one)
def const_one(_inputs: Sequence[Tensor], a: FillAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    return (te.compute(out[0].known_shape, lambda *_: _value(1, a.dtype), name="const_one", tag="injective"),)
