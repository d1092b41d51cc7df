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
from taso_py.ops.elementwise import (
    HARDSWISH_ALPHA,
    ClipAttrs,
    GeluAttrs,
    HardSigmoidAttrs,
    LeakyReluAttrs,
    PowAttrs,
    ScalarAttrs,
)
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
    """x * clamp(x / 6 + 1/2, 0, 1) with ONNX's float32 1/6: a min and a max, which vectorize."""
    def c(v: float) -> Expr:
        return const(v, x.dtype)
    return x * te.min_(te.max_(x * c(HARDSWISH_ALPHA) + c(0.5), c(0)), c(1))


def _softplus(x: Expr) -> Expr:
    """max(x, 0) + log1p(exp(-|x|)): log(1 + exp(x)) without overflow for large x."""
    zero = const(0, x.dtype)
    return te.max_(x, zero) + te.call("log1p", te.exp(zero - te.max_(x, zero - x)))


def _pow(x: Expr, exponent: float) -> Expr:
    """Small integer powers as products and square roots as sqrt: powf is a libm call that no loop
    vectorizes (GPT-2's tanh GELU cubes its input: 17 ns an element with powf); powf otherwise."""
    if exponent in (2, 3, 4):
        out = x
        for _ in range(int(exponent) - 1):
            out = out * x
        return out
    if exponent == 0.5:
        return te.sqrt(x)
    return te.call("pow", x, const(exponent, x.dtype))


# relu is max(x, 0), which the C backend emits as a vector compare-and-blend
register_unary(elementwise_ops.relu, lambda v: te.max_(v, const(0, v.dtype)))
register_unary(elementwise_ops.sigmoid, te.sigmoid)
register_unary(elementwise_ops.tanh, te.tanh)
register_unary(elementwise_ops.erf, te.erf)
register_unary(elementwise_ops.silu, lambda v: v * te.sigmoid(v))
register_unary(elementwise_ops.hardswish, _hardswish)
register_unary(elementwise_ops.softplus, _softplus)
register_unary(elementwise_ops.exp, te.exp)
register_unary(elementwise_ops.log, te.log)
register_unary(elementwise_ops.sqrt, te.sqrt)
register_unary(elementwise_ops.reciprocal, lambda v: const(1, v.dtype) / v)
register_unary(elementwise_ops.neg, lambda v: -v)
register_unary(elementwise_ops.abs_, lambda v: te.max_(v, -v))  # |x| as a max vectorizes, on ints too


@register_compute(elementwise_ops.clip)
def clip(inputs: Sequence[Tensor], attrs: ClipAttrs, _out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """min(max(x, min), max) with the bounds in x's type, as the reference compares."""
    (x,) = inputs
    low, high = (const(np.asarray(v, x.dtype).item(), x.dtype) for v in (attrs.min, attrs.max))
    return (map_unary(x, lambda v: te.min_(te.max_(v, low), high), "clip"),)


@register_compute(elementwise_ops.hardsigmoid)
def hardsigmoid(inputs: Sequence[Tensor], attrs: HardSigmoidAttrs, _out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    def f(v: Expr) -> Expr:
        return te.min_(te.max_(v * const(attrs.alpha, v.dtype) + const(attrs.beta, v.dtype), const(0, v.dtype)),
                       const(1, v.dtype))
    return (map_unary(inputs[0], f, "hardsigmoid"),)


@register_compute(elementwise_ops.leaky_relu)
def leaky_relu(inputs: Sequence[Tensor], attrs: LeakyReluAttrs, _out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    return (map_unary(inputs[0], lambda v: te.if_then_else(v < const(0, v.dtype), v * const(attrs.alpha, v.dtype), v),
                      "leaky_relu"),)


@register_compute(elementwise_ops.pow_)
def pow_(inputs: Sequence[Tensor], attrs: PowAttrs, _out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    return (map_unary(inputs[0], lambda v: _pow(v, attrs.exponent), "pow"),)


@register_compute(elementwise_ops.prelu)
def prelu(inputs: Sequence[Tensor], _attrs: object, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """x where x >= 0, else x times its slope (the slope broadcast to x's shape)."""
    x, slope = inputs
    shape = out[0].known_shape

    def f(*i: Expr) -> Expr:
        v = x[i]
        return te.if_then_else(v < const(0, v.dtype), v * broadcast_read(slope, shape, i), v)
    return (te.compute(shape, f, name="prelu", tag="injective"),)


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
