"""Element-wise operators: activations and broadcasting arithmetic."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

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
from taso_py.ops.schema import Axiom, Fusion, OpDef, float_only, same_dtype
from taso_py.ops.symbolic import Arith, ScalarDomain, SymShape, broadcast, elementwise, same_shape
from taso_py.types import TensorType

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _same_type(in_types: Sequence[TensorType], _attrs: object) -> tuple[TensorType, ...]:
    return (in_types[0],)


def _float_type(in_types: Sequence[TensorType], attrs: object) -> tuple[TensorType, ...]:
    float_only(in_types[0])
    return _same_type(in_types, attrs)


def unary(name: str, ref: Callable[[np.ndarray], np.ndarray], onnx: str | OnnxMapping,
          scalar: Callable[[ScalarDomain, object], object], *, float_only: bool = True, activation: bool = False,
          defined_as: str | None = None, doc: str = "") -> OpDef:
    """An element-wise activation: one entry per op, the family shares everything else.

    `scalar(D, v)` is the activation on one element of a scalar domain; `onnx` is the ONNX op type it
    maps to one to one, or its mapping; `activation` lets a convolution fuse it (see OpDef)."""
    mapping = onnx if isinstance(onnx, OnnxMapping) else OnnxMapping({onnx: direct_import(name)}, direct_export(onnx))
    return OpDef(
        name, ("x",), shape=_float_type if float_only else _same_type,
        ref=lambda xs, _a: (np.asarray(ref(xs[0])).astype(xs[0].dtype, copy=False),),
        fusion=Fusion.INJECTIVE, onnx=mapping, sym_shape=same_shape,
        sym_value=lambda xs, _a, D: (elementwise(lambda v: scalar(D, v), xs[0]),), activation=activation,
        defined_as=defined_as, doc=doc,
    )


def transcendental(name: str, impl: Callable[[float], float]) -> Callable[[ScalarDomain, object], object]:
    """A scalar function the verifier treats as uninterpreted: only its name and float meaning."""
    return lambda D, v: D.apply(name, impl, v)


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy/ONNX multidirectional broadcasting; a ShapeError when the shapes do not fit."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(a, b))
    except ValueError:
        raise ShapeError(f"shapes {list(a)} and {list(b)} do not broadcast") from None


def _broadcast(in_types: Sequence[TensorType], _attrs: object) -> tuple[TensorType, ...]:
    same_dtype(in_types)
    return (TensorType(broadcast_shapes(in_types[0].known_shape, in_types[1].known_shape), in_types[0].dtype),)


def _sym_broadcast(s: Sequence[tuple], _a: object, A: Arith) -> SymShape:
    out, conds = broadcast(A, s[0], s[1])
    return (out,), conds


def binary(name: str, ref: Callable[[np.ndarray, np.ndarray], np.ndarray], onnx: str,
           scalar: Callable[[ScalarDomain, object, object], object], *, commutative: bool = False,
           imports: dict | None = None, doc: str = "") -> OpDef:
    """A broadcasting element-wise binary operator; `scalar(D, a, b)` is it on one pair of elements."""

    def sym_value(xs: Sequence[np.ndarray], _a: object, D: ScalarDomain) -> tuple[np.ndarray, ...]:
        a, b = np.broadcast_arrays(xs[0], xs[1])
        out = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(a.shape):
            out[idx] = scalar(D, a[idx], b[idx])
        return (out,)

    return OpDef(
        name, ("a", "b"), shape=_broadcast,
        ref=lambda xs, _a: (np.asarray(ref(xs[0], xs[1])).astype(xs[0].dtype, copy=False),),
        fusion=Fusion.INJECTIVE, commutative=commutative,
        onnx=OnnxMapping({onnx: direct_import(name), **(imports or {})}, direct_export(onnx)),
        sym_shape=_sym_broadcast, sym_value=sym_value, doc=doc,
    )


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):  # ONNX integer Div truncates toward zero
        return np.trunc(a / b).astype(a.dtype)
    return a / b


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x.astype(np.float64)))  # no overflow for large |x|


def _gelu_scalar(v: float, approximate: str) -> float:
    if approximate == "tanh":
        return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


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


def _import_swish(ctx: ImportContext) -> tuple:
    """Swish (opset 24) is x * sigmoid(alpha * x): silu where alpha is 1."""
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha == 1.0:
        return ctx.add("silu", [ctx.input(0)])
    (gate,) = ctx.add("sigmoid", [ctx.add("scalar_mul", [ctx.input(0)], scale=alpha)[0]])
    return ctx.add("mul", [ctx.input(0), gate])


def _export_silu(ctx: ExportContext, node: ExportNode) -> None:
    """Swish from opset 24; older opsets get its definition x * Sigmoid(x)."""
    if ctx.opset >= 24:
        ctx.emit("Swish", node.inputs, node.outputs)
        return
    (gate,) = ctx.emit("Sigmoid", node.inputs)
    ctx.emit("Mul", [node.inputs[0], gate], node.outputs)


def _hardswish(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)


def _hardswish_scalar(D: ScalarDomain, v: Any) -> Any:
    """The clamp to [0, 1] of t = v/6 + 1/2 is relu(t) - relu(t - 1): exact where relu is (Z3)."""
    t = v * D.const(Fraction(1, 6)) + D.const(0.5)
    return v * (D.relu(t) - D.relu(t - D.const(1)))


def _export_hardswish(ctx: ExportContext, node: ExportNode) -> None:
    """HardSwish from opset 14; older opsets get x * HardSigmoid(x) with alpha 1/6 (its ONNX definition)."""
    if ctx.opset >= 14:
        ctx.emit("HardSwish", node.inputs, node.outputs)
        return
    (gate,) = ctx.emit("HardSigmoid", node.inputs, alpha=1.0 / 6.0, beta=0.5)
    ctx.emit("Mul", [node.inputs[0], gate], node.outputs)


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


_sigmoid_scalar = transcendental("sigmoid", lambda v: 0.5 * (1.0 + math.tanh(0.5 * v)))

relu = unary("relu", lambda x: np.maximum(x, 0), "Relu", lambda D, v: D.relu(v), float_only=False,
             activation=True, doc="max(x, 0)")
sigmoid = unary("sigmoid", _sigmoid, "Sigmoid", _sigmoid_scalar, activation=True, doc="1 / (1 + exp(-x))")
tanh = unary("tanh", np.tanh, "Tanh", transcendental("tanh", math.tanh), activation=True, doc="hyperbolic tangent")
erf = unary("erf", lambda x: _erf(x.astype(np.float64)), "Erf", transcendental("erf", math.erf),
            doc="the error function (GELU's erf form)")
gelu = OpDef(
    "gelu", ("x",), shape=_float_type, attrs=GeluAttrs,
    ref=lambda xs, a: (_gelu(xs[0], a.approximate).astype(xs[0].dtype),), fusion=Fusion.INJECTIVE,
    onnx=OnnxMapping({"Gelu": direct_import("gelu", approximate="approximate")}, _export_gelu),
    sym_shape=same_shape,
    sym_value=lambda xs, a, D: (elementwise(
        lambda v: D.apply(f"gelu_{a.approximate}", lambda f: _gelu_scalar(f, a.approximate), v), xs[0]),),
    doc="x * Phi(x); approximate='tanh' uses the tanh formula",
)
silu = unary("silu", lambda x: x * _sigmoid(x), OnnxMapping({"Swish": _import_swish}, _export_silu),
             lambda D, v: v * _sigmoid_scalar(D, v), activation=True, defined_as="mul(x, sigmoid(x))",
             doc="x * sigmoid(x), SiLU (ONNX: Swish with alpha 1, or Sigmoid and Mul)")
hardswish = unary("hardswish", _hardswish, OnnxMapping({"HardSwish": direct_import("hardswish")}, _export_hardswish),
                  _hardswish_scalar, activation=True, doc="x * max(0, min(1, x / 6 + 1/2)) (ONNX: HardSwish)")
add = binary("add", np.add, "Add", lambda D, a, b: a + b, commutative=True, imports={"Sum": _import_sum},
             doc="a + b, broadcasting")
mul = binary("mul", np.multiply, "Mul", lambda D, a, b: a * b, commutative=True, imports={"Mul": _import_mul},
             doc="a * b, broadcasting")
sub = binary("sub", np.subtract, "Sub", lambda D, a, b: a - b, doc="a - b, broadcasting")
div = binary("div", _divide, "Div", lambda D, a, b: D.div(a, b), doc="a / b, broadcasting (floats)")
scalar_mul = OpDef(
    "scalar_mul", ("x",), shape=_same_type, attrs=ScalarAttrs,
    ref=lambda xs, a: ((xs[0] * np.asarray(a.scale, xs[0].dtype)).astype(xs[0].dtype),),
    fusion=Fusion.INJECTIVE, onnx=OnnxMapping({}, _export_scalar_mul),
    sym_shape=same_shape, sym_value=lambda xs, a, D: (xs[0] * D.const(a.scale),),
    doc="x * scale for a constant scalar (ONNX: Mul by a one-element constant)",
)

OPS = (relu, sigmoid, tanh, erf, gelu, add, mul, sub, div, scalar_mul, silu, hardswish)

# Fused activations (conv2d's `act`): the entries marked `activation`, whose semantics the fusion reuses.
ACTIVATIONS: dict[str, OpDef] = {op.name: op for op in OPS if op.activation}

AXIOMS = (
    Axiom("add-comm", "add(a, b) == add(b, a)"),
    Axiom("add-assoc", "add(add(a, b), c) == add(a, add(b, c))"),
    Axiom("mul-comm", "mul(a, b) == mul(b, a)"),
    Axiom("mul-assoc", "mul(mul(a, b), c) == mul(a, mul(b, c))"),
    Axiom("mul-add-dist", "mul(add(a, b), c) == add(mul(a, c), mul(b, c))", "multiplication distributes over add"),
    Axiom("sub-as-add", "sub(a, b) == add(a, scalar_mul(b, scale=-1.0))", "subtraction is adding the negation"),
    Axiom("scalar-add", "scalar_mul(add(a, b), scale=?s) == add(scalar_mul(a, scale=?s), scalar_mul(b, scale=?s))"),
    Axiom("scalar-mul", "scalar_mul(mul(a, b), scale=?s) == mul(scalar_mul(a, scale=?s), b)"),
    Axiom("scalar-compose", "scalar_mul(scalar_mul(x, scale=?s), scale=?t) == scalar_mul(x, scale=?s * ?t)"),
    Axiom("scalar-one", "scalar_mul(x, scale=1.0) == x"),
    Axiom("relu-idem", "relu(relu(x)) == relu(x)", "relu is idempotent"),
    Axiom("relu-scale", "relu(scalar_mul(x, scale=?s)) == scalar_mul(relu(x), scale=?s) where ?s >= 0",
          "relu is positively homogeneous"),
)
