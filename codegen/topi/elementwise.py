"""Element-wise operators: activations and numpy-broadcasting arithmetic (pattern "injective")."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from taso_py.codegen import te
from taso_py.codegen.te.expr import Expr, const
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.topi.injective import broadcast_read
from taso_py.codegen.topi.registry import ComputeFn, register_compute

from taso_py.ops.elementwise import GeluAttrs, ScalarAttrs
from taso_py.types import TensorType


def map_unary(x: Tensor, f: Callable[[Expr], Expr], name: str) -> Tensor:
    return te.compute(x.shape, lambda *i: f(x[i]), name=name, tag="injective")


def _unary(name: str, f: Callable[[Expr], Expr]) -> ComputeFn:
    def compute(inputs: Sequence[Tensor], _attrs: object, _out: Sequence[TensorType]) -> tuple[Tensor, ...]:
        return (map_unary(inputs[0], f, name),)
    return register_compute(name)(compute)


def _gelu(x: Expr, approximate: str) -> Expr:
    def c(v: float) -> Expr:
        return const(v, x.dtype)
    if approximate == "tanh":
        return c(0.5) * x * (c(1.0) + te.tanh(c(math.sqrt(2.0 / math.pi)) * (x + c(0.044715) * x * x * x)))
    return c(0.5) * x * (c(1.0) + te.erf(x * c(1.0 / math.sqrt(2.0))))


# relu is max(x, 0), which the C backend emits as a vector compare-and-blend
_unary("relu", lambda v: te.max_(v, const(0, v.dtype)))
_unary("sigmoid", te.sigmoid)
_unary("tanh", te.tanh)
_unary("erf", te.erf)


@register_compute("gelu")
def gelu(inputs: Sequence[Tensor], attrs: GeluAttrs, _out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    return (map_unary(inputs[0], lambda v: _gelu(v, attrs.approximate), "gelu"),)


@register_compute("scalar_mul")
def scalar_mul(inputs: Sequence[Tensor], attrs: ScalarAttrs, _out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """x * scale, the scale cast to x's type first as the reference does (2.5 is 2 for ints)."""
    (x,) = inputs
    scale = const(np.asarray(attrs.scale, x.dtype).item(), x.dtype)
    return (map_unary(x, lambda v: v * scale, "scalar_mul"),)


def _binary(name: str, f: Callable[[Expr, Expr], Expr]) -> ComputeFn:
    def compute(inputs: Sequence[Tensor], _attrs: object, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
        a, b = inputs
        shape = out[0].known_shape
        return (te.compute(shape, lambda *i: f(broadcast_read(a, shape, i), broadcast_read(b, shape, i)),
                           name=name, tag="injective"),)
    return register_compute(name)(compute)


# integer division truncates toward zero in C, as ONNX's (and the reference's) Div does
_binary("add", lambda a, b: a + b)
_binary("sub", lambda a, b: a - b)
_binary("mul", lambda a, b: a * b)
_binary("div", lambda a, b: a / b)
