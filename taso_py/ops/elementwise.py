"""Element-wise operators: activations and broadcasting arithmetic."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from taso_py.errors import AttrError, ShapeError
from taso_py.ops.onnx_map import (
    ExportContext,
    ExportNode,
    ImportContext,
    OnnxMapping,
    direct_export,
    direct_import,
)
from taso_py.ops.schema import Fusion, OpDef, float_only, same_dtype
from taso_py.types import TensorType

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _same_type(in_types: Sequence[TensorType], _attrs: object) -> tuple[TensorType, ...]:
    return (in_types[0],)


def _float_type(in_types: Sequence[TensorType], attrs: object) -> tuple[TensorType, ...]:
    float_only(in_types[0])
    return _same_type(in_types, attrs)


def unary(name: str, ref: Callable[[np.ndarray], np.ndarray], onnx: str, *, float_only: bool = True,
          doc: str = "") -> OpDef:
    """An element-wise activation: one entry per op, the family shares everything else."""
    return OpDef(
        name, ("x",), shape=_float_type if float_only else _same_type,
        ref=lambda xs, _a: (np.asarray(ref(xs[0])).astype(xs[0].dtype, copy=False),),
        fusion=Fusion.INJECTIVE, onnx=OnnxMapping({onnx: direct_import(name)}, direct_export(onnx)), doc=doc,
    )


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy/ONNX multidirectional broadcasting; a ShapeError when the shapes do not fit."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(a, b))
    except ValueError:
        raise ShapeError(f"shapes {list(a)} and {list(b)} do not broadcast") from None


def _broadcast(in_types: Sequence[TensorType], _attrs: object) -> tuple[TensorType, ...]:
    same_dtype(in_types)
    return (TensorType(broadcast_shapes(in_types[0].known_shape, in_types[1].known_shape), in_types[0].dtype),)


def binary(name: str, ref: Callable[[np.ndarray, np.ndarray], np.ndarray], onnx: str, *,
           commutative: bool = False, imports: dict | None = None, doc: str = "") -> OpDef:
    """A broadcasting element-wise binary operator."""
    return OpDef(
        name, ("a", "b"), shape=_broadcast,
        ref=lambda xs, _a: (np.asarray(ref(xs[0], xs[1])).astype(xs[0].dtype, copy=False),),
        fusion=Fusion.INJECTIVE, commutative=commutative,
        onnx=OnnxMapping({onnx: direct_import(name), **(imports or {})}, direct_export(onnx)), doc=doc,
    )


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):  # ONNX integer Div truncates toward zero
        return np.trunc(a / b).astype(a.dtype)
    return a / b


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x.astype(np.float64)))  # no overflow for large |x|


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    x = x.astype(np.float64)
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


@dataclass(frozen=True)
class GeluAttrs:
    approximate: str = "none"  # "none" (erf form) or "tanh"

    def __post_init__(self) -> None:
        if self.approximate not in ("none", "tanh"):
            raise AttrError(f"approximate must be 'none' or 'tanh', got {self.approximate!r}")


def _export_gelu(ctx: ExportContext, node: ExportNode) -> None:
    """Gelu is an ONNX op from opset 20; older opsets get its defining formula."""
    if ctx.opset >= 20:
        ctx.emit("Gelu", node.inputs, node.outputs, approximate=node.attrs.approximate)
        return
    x, dtype = node.inputs[0], node.in_types[0].dtype.numpy

    def c(v: float) -> str:
        return ctx.const(np.array(v, dtype), "gelu_c")

    if node.attrs.approximate == "tanh":
        (cube,) = ctx.emit("Mul", [ctx.emit("Mul", [x, x])[0], x])
        (inner,) = ctx.emit("Add", [x, ctx.emit("Mul", [cube, c(0.044715)])[0]])
        (t,) = ctx.emit("Tanh", [ctx.emit("Mul", [inner, c(math.sqrt(2.0 / math.pi))])[0]])
    else:
        (t,) = ctx.emit("Erf", [ctx.emit("Div", [x, c(math.sqrt(2.0))])[0]])
    (half_x,) = ctx.emit("Mul", [x, c(0.5)])
    ctx.emit("Mul", [half_x, ctx.emit("Add", [t, c(1.0)])[0]], node.outputs)


@dataclass(frozen=True)
class ScalarAttrs:
    scale: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", float(self.scale))


def _import_mul(ctx: ImportContext) -> tuple:
    """Mul by a one-element constant that does not change the other side's shape is scalar_mul."""
    for i in (0, 1):
        c = ctx.const(1 - i)
        t = ctx.type(i)
        if (c is not None and ctx.const(i) is None and c.size == 1 and t.dtype is not None
                and t.dtype.is_float and c.ndim <= t.rank and c.dtype == t.dtype.numpy):
            return ctx.add("scalar_mul", [ctx.input(i)], scale=float(c.reshape(())))
    return ctx.add("mul", [ctx.input(0), ctx.input(1)])


def _import_sum(ctx: ImportContext) -> tuple:
    """Variadic Sum (older models) is a chain of adds."""
    total = ctx.input(0)
    for i in range(1, ctx.n_inputs):
        (total,) = ctx.add("add", [total, ctx.input(i)])
    return (total,)


def _export_scalar_mul(ctx: ExportContext, node: ExportNode) -> None:
    scale = ctx.const(np.array(node.attrs.scale, node.in_types[0].dtype.numpy), "scale")
    ctx.emit("Mul", [node.inputs[0], scale], node.outputs)


relu = unary("relu", lambda x: np.maximum(x, 0), "Relu", float_only=False, doc="max(x, 0)")
sigmoid = unary("sigmoid", _sigmoid, "Sigmoid", doc="1 / (1 + exp(-x))")
tanh = unary("tanh", np.tanh, "Tanh", doc="hyperbolic tangent")
erf = unary("erf", lambda x: _erf(x.astype(np.float64)), "Erf", doc="the error function (GELU's erf form)")
gelu = OpDef(
    "gelu", ("x",), shape=_float_type, attrs=GeluAttrs,
    ref=lambda xs, a: (_gelu(xs[0], a.approximate).astype(xs[0].dtype),), fusion=Fusion.INJECTIVE,
    onnx=OnnxMapping({"Gelu": direct_import("gelu", approximate="approximate")}, _export_gelu),
    doc="x * Phi(x); approximate='tanh' uses the tanh formula",
)
add = binary("add", np.add, "Add", commutative=True, imports={"Sum": _import_sum}, doc="a + b, broadcasting")
mul = binary("mul", np.multiply, "Mul", commutative=True, imports={"Mul": _import_mul}, doc="a * b, broadcasting")
sub = binary("sub", np.subtract, "Sub", doc="a - b, broadcasting")
div = binary("div", _divide, "Div", doc="a / b, broadcasting")
scalar_mul = OpDef(
    "scalar_mul", ("x",), shape=_same_type, attrs=ScalarAttrs,
    ref=lambda xs, a: ((xs[0] * np.asarray(a.scale, xs[0].dtype)).astype(xs[0].dtype),),
    fusion=Fusion.INJECTIVE, onnx=OnnxMapping({}, _export_scalar_mul),
    doc="x * scale for a constant scalar (ONNX: Mul by a one-element constant)",
)

OPS = (relu, sigmoid, tanh, erf, gelu, add, mul, sub, div, scalar_mul)

# Fused activations (conv2d's `act`) reuse the activations' reference semantics.
ACTIVATIONS: dict[str, OpDef] = {op.name: op for op in (relu, sigmoid, tanh)}
