"""Element-wise operators: activations and numpy-broadcasting arithmetic (pattern "injective").

An element-wise unary operator's compute is a function of one element (`register_unary`), so
a convolution fusing it as its `act` applies the same function to its result (see `activation`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from taso_py.codegen import te
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.te.expr import Expr, const
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.topi.injective import broadcast_read
from taso_py.codegen.topi.registry import register_compute
from taso_py.ops import OpDef, get
from taso_py.ops import elementwise as elementwise_ops
from taso_py.ops.elementwise import GeluAttrs, ScalarAttrs
from taso_py.types import TensorType

ScalarFn = Callable[[Expr], Expr]
UNARY: dict[OpDef, ScalarFn] = {}  # an element-wise unary operator's compute on one element


def map_unary(x: Tensor, f: ScalarFn, name: str) -> Tensor:
    return te.compute(x.shape, lambda *i: f(x[i]), name=name, tag="injective")


def register_unary(op: OpDef, f: ScalarFn) -> None:
    """Register `op`'s compute as `f` on each element of its input."""
    def compute(inputs: Sequence[Tensor], _attrs: object, _out: Sequence[TensorType]) -> tuple[Tensor, ...]:
        return (map_unary(inputs[0], f, op.name),)
    register_compute(op)(compute)
    UNARY[op] = f


def activation(x: Expr, act: str) -> Expr:
    """A fused activation (`act`: "none" or an element-wise operator of the table) applied to `x`."""
    if act == "none":
        return x
    f = UNARY.get(get(act))
    if f is None:
        raise CodegenError(f"no element-wise compute for operator {act!r}, which a convolution fuses as its act")
    return f(x)


def _gelu(x: Expr, approximate: str) -> Expr:
    def c(v: float) -> Expr:
        return const(v, x.dtype)
    if approximate == "tanh":
        return c(0.5) * x * (c(1.0) + te.tanh(c(math.sqrt(2.0 / math.pi)) * (x + c(0.044715) * x * x * x)))
    return c(0.5) * x * (c(1.0) + te.erf(x * c(1.0 / math.sqrt(2.0))))


def _hardswish(x: Expr) -> Expr:
    """x * clamp(x / 6 + 1/2, 0, 1): a min and a max, which vectorize."""
    def c(v: float) -> Expr:
        return const(v, x.dtype)
    return x * te.min_(te.max_(x * c(1 / 6) + c(0.5), c(0)), c(1))


# relu is max(x, 0), which the C backend emits as a vector compare-and-blend
register_unary(elementwise_ops.relu, lambda v: te.max_(v, const(0, v.dtype)))
register_unary(elementwise_ops.sigmoid, te.sigmoid)
register_unary(elementwise_ops.tanh, te.tanh)
register_unary(elementwise_ops.erf, te.erf)
register_unary(elementwise_ops.silu, lambda v: v * te.sigmoid(v))
register_unary(elementwise_ops.hardswish, _hardswish)


@register_compute(elementwise_ops.gelu)
def gelu(inputs: Sequence[Tensor], attrs: GeluAttrs, _out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    return (map_unary(inputs[0], lambda v: _gelu(v, attrs.approximate), "gelu"),)


@register_compute(elementwise_ops.scalar_mul)
def scalar_mul(inputs: Sequence[Tensor], attrs: ScalarAttrs, _out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """x * scale, the scale cast to x's type first as the reference does (2.5 is 2 for ints)."""
    (x,) = inputs
    scale = const(np.asarray(attrs.scale, x.dtype).item(), x.dtype)
    return (map_unary(x, lambda v: v * scale, "scalar_mul"),)


def _binary(op: OpDef, f: Callable[[Expr, Expr], Expr]) -> None:
    def compute(inputs: Sequence[Tensor], _attrs: object, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
        a, b = inputs
        shape = out[0].known_shape
        return (te.compute(shape, lambda *i: f(broadcast_read(a, shape, i), broadcast_read(b, shape, i)),
                           name=op.name, tag="injective"),)
    register_compute(op)(compute)


# integer division truncates toward zero in C, as ONNX's (and the reference's) Div does
_binary(elementwise_ops.add, lambda a, b: a + b)
_binary(elementwise_ops.sub, lambda a, b: a - b)
_binary(elementwise_ops.mul, lambda a, b: a * b)
_binary(elementwise_ops.div, lambda a, b: a / b)
