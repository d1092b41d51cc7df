"""Element-wise operators: activations and broadcasting arithmetic."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from taso_py.errors import AttrError, ShapeError, Unsupported
from taso_py.ops.onnx_map import (
    ExportContext,
    ExportNode,
    ImportContext,
    ImportFn,
    OnnxMapping,
    direct_export,
    direct_import,
)
from taso_py.ops.schema import Axiom, Fusion, OpDef, ShapeFn, float_only, same_dtype, set_attr
from taso_py.ops.symbolic import Arith, Dim, ScalarDomain, SymShape, broadcast, elementwise, same_shape
from taso_py.types import TensorType

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _same_type(in_types: Sequence[TensorType], _attrs: object) -> tuple[TensorType, ...]:
    return (in_types[0],)


def _float_type(in_types: Sequence[TensorType], attrs: object) -> tuple[TensorType, ...]:
    float_only(in_types[0])
    return _same_type(in_types, attrs)


SIGNED_INTS = ("int8", "int16", "int32", "int64")


def _signed_type(in_types: Sequence[TensorType], attrs: object) -> tuple[TensorType, ...]:
    float_only(in_types[0], also=SIGNED_INTS)
    return _same_type(in_types, attrs)


def unary(name: str, ref: Callable[[np.ndarray], np.ndarray], onnx: str | OnnxMapping,
          scalar: Callable[[ScalarDomain, object], object], *, float_only: bool = True, activation: bool = False,
          shape: ShapeFn | None = None, defined_as: str | None = None, doc: str = "") -> OpDef:
    """An element-wise activation: one entry per op, the family shares everything else.

    `scalar(D, v)` is the activation on one element of a scalar domain; `onnx` is the ONNX op type it
    maps to one to one, or its mapping; `activation` lets a convolution fuse it (see OpDef); `shape`
    replaces the element-type check that `float_only` picks."""
    mapping = onnx if isinstance(onnx, OnnxMapping) else OnnxMapping({onnx: direct_import(name)}, direct_export(onnx))
    return OpDef(
        name, ("x",), shape=shape or (_float_type if float_only else _same_type),
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


# ONNX defines HardSwish as x * HardSigmoid(x) with alpha 1/6, a float32 attribute (what exporters write)
HARDSWISH_ALPHA = float(np.float32(1 / 6))


def _hardswish(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x * np.clip(x * HARDSWISH_ALPHA + 0.5, 0.0, 1.0)


def _clamp(D: ScalarDomain, v: Any, low: float, high: float) -> Any:
    """min(max(v, low), high) with max alone (min(a, b) = -max(-a, -b)): exact in floats and in Z3."""
    return -D.max(-D.max(v, D.const(low)), -D.const(high))


def _hardsigmoid_scalar(D: ScalarDomain, v: Any, alpha: float, beta: float) -> Any:
    return _clamp(D, v * D.const(alpha) + D.const(beta), 0.0, 1.0)


def _hardswish_scalar(D: ScalarDomain, v: Any) -> Any:
    """x * hardsigmoid(x) with ONNX's float32 alpha, so the `hardswish-def` axiom holds exactly (Z3)."""
    return v * _hardsigmoid_scalar(D, v, HARDSWISH_ALPHA, 0.5)


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
                  _hardswish_scalar, activation=True,
                  defined_as=f"mul(x, hardsigmoid(x, alpha={HARDSWISH_ALPHA!r}, beta=0.5))",
                  doc="x * max(0, min(1, x / 6 + 1/2)) (ONNX: HardSwish, or x * HardSigmoid(x) before opset 14)")
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


# ---- unary math and parametric activations (ONNX semantics on floats) -------------------------

def _quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with IEEE results and no warnings: overflow gives inf, a domain error NaN (as ONNX Runtime)."""
    def run(*args: Any) -> Any:
        with np.errstate(all="ignore"):
            return fn(*args)
    return run


def _math(name: str, fn: Callable[[np.ndarray], np.ndarray]
          ) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[ScalarDomain, object], object]]:
    """A numpy function computed in float64 (the reference) and as an uninterpreted scalar function (the verifier)."""
    quiet = _quiet(fn)
    return (lambda x: quiet(x.astype(np.float64))), transcendental(name, lambda v: float(quiet(np.float64(v))))


def _require_type(ctx: ImportContext, op: str, also: Sequence[str] = ()) -> None:
    """An input type outside the operator's (floats, and `also`) keeps the ONNX node opaque."""
    dtype = ctx.type(0).dtype
    if dtype is None or not (dtype.is_float or dtype.value in also):
        raise Unsupported(f"{op} is in the algebra on {', '.join(('floats', *also))} only")


def _typed_import(op: str, also: Sequence[str] = (), **attr_names: str) -> ImportFn:
    """`direct_import` for an operator ONNX also defines on types the algebra's does not take."""
    translate = direct_import(op, **attr_names)

    def run(ctx: ImportContext) -> tuple:
        _require_type(ctx, op, also)
        return translate(ctx)
    return run


def _number(value: Any, what: str) -> float:
    """A real attribute as a float; an AttrError for NaN or what is no number."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise AttrError(f"{what} must be a number, got {value!r}") from None
    if math.isnan(v):
        raise AttrError(f"{what} must be a number, got nan")
    return v


def _f32(value: Any, what: str) -> float:
    """A float attribute as ONNX stores it (float32), so an imported one equals one written in a rule."""
    return float(np.float32(_number(value, what)))


def parametric(name: str, attrs: type, ref: Callable[[np.ndarray, Any], np.ndarray], onnx: OnnxMapping,
               scalar: Callable[[ScalarDomain, Any, Any], Any], doc: str) -> OpDef:
    """An element-wise unary operator on floats with attributes: `scalar(D, v, attrs)` on one element."""
    return OpDef(
        name, ("x",), shape=_float_type, attrs=attrs,
        ref=lambda xs, a: (np.asarray(_quiet(ref)(xs[0], a)).astype(xs[0].dtype, copy=False),),
        fusion=Fusion.INJECTIVE, onnx=onnx, sym_shape=same_shape,
        sym_value=lambda xs, a, D: (elementwise(lambda v: scalar(D, v, a), xs[0]),), doc=doc,
    )


FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class ClipAttrs:
    """The bounds. Left out, ONNX's defaults for float32: its lowest and largest finite values (so an
    infinity clamps to them, as in ONNX Runtime); finite, so the verifier models them as reals."""

    min: float = -FLOAT32_MAX
    max: float = FLOAT32_MAX

    def __post_init__(self) -> None:
        for name in ("min", "max"):
            set_attr(self, name, _number(getattr(self, name), name))


def _clip(x: np.ndarray, a: ClipAttrs) -> np.ndarray:
    """In x's type, as ONNX Runtime compares with bounds of the input's type (min > max gives max)."""
    return np.minimum(np.maximum(x, np.asarray(a.min, x.dtype)), np.asarray(a.max, x.dtype))


def _import_clip(ctx: ImportContext) -> tuple:
    """Clip: min and max attributes before opset 11, optional one-element constant inputs from it."""
    _require_type(ctx, "clip")
    bounds = {}
    for i, k in ((1, "min"), (2, "max")):
        if ctx.opset < 11:
            bounds[k] = ctx.attr(k)
        elif i < ctx.n_inputs and (value := ctx.const(i)) is not None:
            bounds[k] = float(np.asarray(value).reshape(()))
        elif i < ctx.n_inputs and ctx.input(i) is not None:
            raise Unsupported(f"Clip's {k} is computed at run time")
    return ctx.add("clip", [ctx.input(0)], **{k: v for k, v in bounds.items() if v is not None})


def _export_clip(ctx: ExportContext, node: ExportNode) -> None:
    """Attributes before opset 11; from it, constants of the input's type. A default bound is left out."""
    given = {k: v for k, v in (("min", node.attrs.min), ("max", node.attrs.max)) if v != _CLIP_DEFAULTS[k]}
    if ctx.opset < 11:
        if node.attrs.min > node.attrs.max:  # every element is max; Clip-6 refuses min > max, min == max says it
            given["min"] = node.attrs.max
        ctx.emit("Clip", node.inputs, node.outputs, **given)
        return
    dtype = node.in_types[0].dtype.numpy
    bounds = [ctx.const(np.array(given[k], dtype), f"clip_{k}") if k in given else "" for k in ("min", "max")]
    while bounds and not bounds[-1]:
        bounds.pop()
    ctx.emit("Clip", [node.inputs[0], *bounds], node.outputs)


_CLIP_DEFAULTS = {"min": -FLOAT32_MAX, "max": FLOAT32_MAX}


@dataclass(frozen=True)
class HardSigmoidAttrs:
    alpha: float = 0.2
    beta: float = 0.5

    def __post_init__(self) -> None:
        set_attr(self, "alpha", _f32(self.alpha, "alpha"))
        set_attr(self, "beta", _f32(self.beta, "beta"))


@dataclass(frozen=True)
class LeakyReluAttrs:
    alpha: float = 0.01

    def __post_init__(self) -> None:
        set_attr(self, "alpha", _f32(self.alpha, "alpha"))


@dataclass(frozen=True)
class PowAttrs:
    """The exponent: ONNX Pow's second input when it is a one-element constant."""

    exponent: float

    def __post_init__(self) -> None:
        set_attr(self, "exponent", _number(self.exponent, "exponent"))


def _pow_scalar(D: ScalarDomain, v: Any, e: float) -> Any:
    """Small integer powers are products (exact in Z3), x ** 0.5 is sqrt's function; others are uninterpreted."""
    if e == int(e) and abs(e) <= 8:
        p = D.const(1)
        for _ in range(int(abs(e))):
            p = p * v
        return D.div(D.const(1), p) if e < 0 else p
    if e == 0.5:
        return _sqrt_scalar(D, v)
    return D.apply(f"pow[{e!r}]", lambda f: float(_quiet(np.power)(np.float64(f), e)), v)


def _import_pow(ctx: ImportContext) -> tuple:
    """Pow by a one-element constant that leaves the base's shape as it is; other exponents stay opaque."""
    _require_type(ctx, "pow")
    exponent, rank = ctx.const(1), ctx.type(0).rank
    if exponent is None or exponent.size != 1 or exponent.ndim > rank:
        raise Unsupported("Pow is in the algebra with a one-element constant exponent only")
    return ctx.add("pow", [ctx.input(0)], exponent=float(exponent.reshape(())))


def _export_pow(ctx: ExportContext, node: ExportNode) -> None:
    exponent = ctx.const(np.array(node.attrs.exponent, node.in_types[0].dtype.numpy), "exponent")
    ctx.emit("Pow", [node.inputs[0], exponent], node.outputs)


def _prelu_type(in_types: Sequence[TensorType], _attrs: object) -> tuple[TensorType, ...]:
    """ONNX PRelu: the slope broadcasts to x's shape (unidirectionally)."""
    x, slope = in_types
    float_only(x)
    same_dtype(in_types)
    if slope.rank > x.rank or broadcast_shapes(x.known_shape, slope.known_shape) != x.known_shape:
        raise ShapeError(f"slope {list(slope.known_shape)} does not broadcast to x {list(x.known_shape)}")
    return (x,)


def _sym_prelu(s: Sequence[tuple[Dim, ...]], _a: object, A: Arith) -> SymShape | None:
    x, slope = s
    if len(slope) > len(x):
        return None
    return (tuple(x),), tuple(A.any(d == 1, d == n) for n, d in zip(x[len(x) - len(slope):], slope))


def _leaky(D: ScalarDomain, v: Any, slope: Any) -> Any:
    """v for v >= 0, slope * v below: relu(v) - slope * relu(-v), exact in floats and in Z3."""
    return D.relu(v) - slope * D.relu(-v)


def _prelu_value(xs: Sequence[np.ndarray], _a: object, D: ScalarDomain) -> tuple[np.ndarray, ...]:
    x, slope = xs[0], np.broadcast_to(xs[1], xs[0].shape)
    out = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape):
        out[idx] = _leaky(D, x[idx], slope[idx])
    return (out,)


_exp, _exp_scalar = _math("exp", np.exp)
_log, _log_scalar = _math("log", np.log)
_sqrt, _sqrt_scalar = _math("sqrt", np.sqrt)
_softplus, _softplus_scalar = _math("softplus", lambda x: np.logaddexp(0.0, x))

clip = parametric(
    "clip", ClipAttrs, _clip, OnnxMapping({"Clip": _import_clip}, _export_clip),
    lambda D, v, a: _clamp(D, v, a.min, a.max),
    doc="min(max(x, min), max), either bound optional; relu6 is clip(min=0, max=6) (ONNX: Clip)")
hardsigmoid = parametric(
    "hardsigmoid", HardSigmoidAttrs, lambda x, a: np.clip(x.astype(np.float64) * a.alpha + a.beta, 0.0, 1.0),
    OnnxMapping({"HardSigmoid": _typed_import("hardsigmoid", alpha="alpha", beta="beta")},
                direct_export("HardSigmoid", lambda a: {"alpha": a.alpha, "beta": a.beta})),
    lambda D, v, a: _hardsigmoid_scalar(D, v, a.alpha, a.beta),
    doc="max(0, min(1, alpha * x + beta)), alpha and beta float32 as in ONNX (HardSigmoid)")
leaky_relu = parametric(
    "leaky_relu", LeakyReluAttrs, lambda x, a: np.where(x < 0, x.astype(np.float64) * a.alpha, x),
    OnnxMapping({"LeakyRelu": _typed_import("leaky_relu", alpha="alpha")},
                direct_export("LeakyRelu", lambda a: {"alpha": a.alpha})),
    lambda D, v, a: _leaky(D, v, D.const(a.alpha)), doc="x for x >= 0, alpha * x below (ONNX: LeakyRelu)")
pow_ = parametric(
    "pow", PowAttrs, lambda x, a: np.power(x.astype(np.float64), a.exponent),
    OnnxMapping({"Pow": _import_pow}, _export_pow), lambda D, v, a: _pow_scalar(D, v, a.exponent),
    doc="x ** exponent for a constant scalar exponent (ONNX: Pow by a one-element constant)")
prelu = OpDef(
    "prelu", ("x", "slope"), shape=_prelu_type,
    ref=lambda xs, _a: (np.where(xs[0] < 0, xs[0] * xs[1], xs[0]).astype(xs[0].dtype, copy=False),),
    fusion=Fusion.INJECTIVE, onnx=OnnxMapping({"PRelu": _typed_import("prelu")}, direct_export("PRelu")),
    sym_shape=_sym_prelu, sym_value=_prelu_value,
    doc="x for x >= 0, slope * x below; the slope broadcasts to x (ONNX: PRelu, floats)")
softplus = unary("softplus", _softplus, "Softplus", _softplus_scalar, activation=True, doc="log(1 + exp(x))")
exp = unary("exp", _exp, "Exp", _exp_scalar, doc="e ** x")
log = unary("log", _log, "Log", _log_scalar, doc="natural logarithm (NaN below 0, -inf at 0)")
sqrt = unary("sqrt", _sqrt, "Sqrt", _sqrt_scalar, doc="square root (NaN below 0)")
reciprocal = unary("reciprocal", _quiet(lambda x: 1.0 / x.astype(np.float64)), "Reciprocal",
                   lambda D, v: D.div(D.const(1), v), doc="1 / x")
neg = unary("neg", np.negative, OnnxMapping({"Neg": _typed_import("neg", SIGNED_INTS)}, direct_export("Neg")),
            lambda D, v: -v, shape=_signed_type, doc="-x (floats and signed integers, which wrap)")
abs_ = unary("abs", np.abs, OnnxMapping({"Abs": _typed_import("abs", SIGNED_INTS)}, direct_export("Abs")),
             lambda D, v: D.max(v, -v), shape=_signed_type, doc="|x| (floats and signed integers)")

OPS = (relu, sigmoid, tanh, erf, gelu, add, mul, sub, div, scalar_mul, silu, hardswish, clip, hardsigmoid,
       leaky_relu, prelu, softplus, exp, log, neg, abs_, sqrt, reciprocal, pow_)

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
    Axiom("clip-relu", "relu(clip(x, min=?a, max=?b)) == clip(x, min=?a, max=?b) where ?a >= 0, ?b >= 0",
          "a clip to non-negative bounds is non-negative"),
    Axiom("clip-after-relu", "clip(relu(x), max=?b) == clip(x, min=0.0, max=?b)", "relu then a clip is relu6's form"),
    Axiom("clip-idem", "clip(clip(x, min=?a, max=?b), min=?a, max=?b) == clip(x, min=?a, max=?b)"),
    Axiom("hardsigmoid-in-unit", "clip(hardsigmoid(x, alpha=?a, beta=?b), min=0.0, max=1.0) == "
          "hardsigmoid(x, alpha=?a, beta=?b)", "hardsigmoid's values lie in [0, 1]"),
    Axiom("leaky-relu-zero", "leaky_relu(x, alpha=0.0) == relu(x)"),
    Axiom("leaky-relu-one", "leaky_relu(x, alpha=1.0) == x"),
    Axiom("leaky-relu-scale", "leaky_relu(scalar_mul(x, scale=?s), alpha=?a) == "
          "scalar_mul(leaky_relu(x, alpha=?a), scale=?s) where ?s >= 0", "leaky relu is positively homogeneous"),
    Axiom("prelu-as-relu", "prelu(x, s) == sub(relu(x), mul(s, relu(neg(x))))", "the negative part scaled by s"),
    Axiom("neg-as-scale", "neg(x) == scalar_mul(x, scale=-1.0)"),
    Axiom("neg-neg", "neg(neg(x)) == x"),
    Axiom("sub-as-neg", "sub(a, b) == add(a, neg(b))"),
    Axiom("abs-neg", "abs(neg(x)) == abs(x)"),
    Axiom("abs-as-relu", "abs(x) == add(relu(x), relu(neg(x)))"),
    Axiom("pow-one", "pow(x, exponent=1.0) == x"),
    Axiom("pow-square", "pow(x, exponent=2.0) == mul(x, x)"),
    Axiom("pow-sqrt", "pow(x, exponent=0.5) == sqrt(x)"),
    Axiom("pow-reciprocal", "pow(x, exponent=-1.0) == reciprocal(x)"),
    *(Axiom(f"{op}-concat", f"{op}(concat(a, b, axis=?k)) == concat({op}(a), {op}(b), axis=?k)",
            "element-wise functions act on each part") for op in ("exp", "log", "sqrt", "reciprocal", "neg", "abs")),
)
