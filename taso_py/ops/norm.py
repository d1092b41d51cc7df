"""Normalizations: batch norm (inference), softmax, layer norm."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from taso_py.errors import ShapeError, Unsupported
from taso_py.ops.elementwise import broadcast_shapes
from taso_py.ops.onnx_map import ExportContext, ExportNode, ImportContext, OnnxMapping, direct_export
from taso_py.ops.schema import Axiom, Fusion, OpDef, float_only, norm_axis, same_dtype, set_attr
from taso_py.ops.symbolic import Arith, ScalarDomain, SymShape, axis_in_range, elementwise
from taso_py.types import TensorType


@dataclass(frozen=True)
class EpsAttrs:
    epsilon: float = 1e-5

    def __post_init__(self) -> None:
        set_attr(self, "epsilon", float(self.epsilon))


@dataclass(frozen=True)
class SoftmaxAttrs:
    axis: int = -1


@dataclass(frozen=True)
class LayerNormAttrs:
    axis: int = -1
    epsilon: float = 1e-5

    def __post_init__(self) -> None:
        set_attr(self, "epsilon", float(self.epsilon))


def _positive_axis(a: SoftmaxAttrs | LayerNormAttrs, in_types: Sequence[TensorType]) -> object:
    return replace(a, axis=norm_axis(a.axis, in_types[0].rank))


def _refuse_extra_outputs(ctx: ImportContext, count: int = 1) -> None:
    for i in range(count, ctx.n_outputs):
        if ctx.output_used(i):
            raise Unsupported(f"{ctx.op_type} with its training or statistics outputs in use")


# ---- batch norm --------------------------------------------------------------------------

def _batchnorm_shape(in_types: Sequence[TensorType], _a: EpsAttrs) -> tuple[TensorType, ...]:
    same_dtype(in_types)
    x = in_types[0]
    float_only(x)
    if x.rank < 2:
        raise ShapeError(f"x needs rank >= 2 (N, C, ...), got rank {x.rank}")
    c = x.known_shape[1]
    for name, t in zip(("scale", "bias", "mean", "var"), in_types[1:]):
        if t.known_shape != (c,):
            raise ShapeError(f"{name} must have shape [{c}], got {list(t.known_shape)}")
    return (x,)


def _batchnorm_ref(xs: Sequence[np.ndarray], a: EpsAttrs) -> tuple[np.ndarray, ...]:
    x, scale, bias, mean, var = (v.astype(np.float64) for v in xs)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + a.epsilon) * scale.reshape(shape)
    return ((y + bias.reshape(shape)).astype(xs[0].dtype),)


def _sym_batchnorm(s: Sequence[tuple], _a: EpsAttrs, _A: Arith) -> SymShape | None:
    x = s[0]
    if len(x) < 2 or any(len(t) != 1 for t in s[1:]):
        return None
    return (tuple(x),), tuple(t[0] == x[1] for t in s[1:])


def _batchnorm_sym(xs: Sequence[np.ndarray], a: EpsAttrs, D: ScalarDomain) -> tuple[np.ndarray, ...]:
    """(x - mean) * scale * r(var) + bias, where r(v) = 1 / sqrt(v + eps) stays uninterpreted."""
    x, scale, bias, mean, var = xs
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = elementwise(lambda v: D.apply(f"rsqrt[{a.epsilon!r}]", lambda f: 1.0 / math.sqrt(f + a.epsilon), v), var)
    k = (scale * inv).reshape(shape)
    return ((x - mean.reshape(shape)) * k + bias.reshape(shape),)


def _import_batchnorm(ctx: ImportContext) -> tuple:
    if ctx.opset < 9 and ctx.attr("spatial", 1) != 1:
        raise Unsupported("BatchNormalization with spatial=0")
    if ctx.attr("training_mode", 0):
        raise Unsupported("BatchNormalization in training mode")
    _refuse_extra_outputs(ctx)
    return ctx.add("batchnorm", [ctx.input(i) for i in range(5)], epsilon=ctx.attr("epsilon", 1e-5))


# ---- softmax -----------------------------------------------------------------------------

def _softmax_shape(in_types: Sequence[TensorType], a: SoftmaxAttrs) -> tuple[TensorType, ...]:
    float_only(in_types[0])
    norm_axis(a.axis, in_types[0].rank)
    return (in_types[0],)


def _softmax_ref(xs: Sequence[np.ndarray], a: SoftmaxAttrs) -> tuple[np.ndarray, ...]:
    x = xs[0].astype(np.float64)
    e = np.exp(x - x.max(axis=a.axis, keepdims=True))
    return ((e / e.sum(axis=a.axis, keepdims=True)).astype(xs[0].dtype),)


def _sym_softmax(s: Sequence[tuple], a: SoftmaxAttrs, _A: Arith) -> SymShape:
    return (tuple(s[0]),), axis_in_range(a.axis, len(s[0]))


def _softmax_sym(xs: Sequence[np.ndarray], a: SoftmaxAttrs, D: ScalarDomain) -> tuple[np.ndarray, ...]:
    e = elementwise(lambda v: D.apply("exp", math.exp, v), xs[0])
    total = e.sum(axis=a.axis, keepdims=True)
    quotient = np.frompyfunc(D.div, 2, 1)
    return (quotient(e, total),)


def _import_softmax(ctx: ImportContext) -> tuple:
    """Before opset 13 Softmax normalizes over all axes from `axis` on (default 1)."""
    shape = ctx.type(0).known_shape
    if ctx.opset >= 13:
        return ctx.add("softmax", [ctx.input(0)], axis=ctx.attr("axis", -1))
    axis = norm_axis(ctx.attr("axis", 1), len(shape))
    if axis == len(shape) - 1:
        return ctx.add("softmax", [ctx.input(0)], axis=axis)
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    (flat,) = ctx.add("reshape", [ctx.input(0)], shape=(rows, int(np.prod(shape[axis:], dtype=np.int64))))
    (y,) = ctx.add("softmax", [flat], axis=1)
    return ctx.add("reshape", [y], shape=shape)


def _export_softmax(ctx: ExportContext, node: ExportNode) -> None:
    """Old opsets only agree with ours on the last axis: move the axis there and back."""
    axis, rank = node.attrs.axis, node.in_types[0].rank
    if ctx.opset >= 13 or axis == rank - 1:
        ctx.emit("Softmax", node.inputs, node.outputs, axis=axis)
        return
    perm = [i for i in range(rank) if i != axis] + [axis]
    (moved,) = ctx.emit("Transpose", node.inputs, perm=perm)
    (y,) = ctx.emit("Softmax", [moved], axis=rank - 1)
    ctx.emit("Transpose", [y], node.outputs, perm=[int(i) for i in np.argsort(perm)])


# ---- layer norm --------------------------------------------------------------------------

def _layernorm_shape(in_types: Sequence[TensorType], a: LayerNormAttrs) -> tuple[TensorType, ...]:
    same_dtype(in_types)
    float_only(in_types[0])
    x = in_types[0].known_shape
    normalized = x[norm_axis(a.axis, len(x)):]
    for name, t in zip(("scale", "bias"), in_types[1:]):
        if broadcast_shapes(t.known_shape, normalized) != normalized:
            raise ShapeError(f"{name} {list(t.known_shape)} does not broadcast to {list(normalized)}")
    return (in_types[0],)


def _layernorm_ref(xs: Sequence[np.ndarray], a: LayerNormAttrs) -> tuple[np.ndarray, ...]:
    x = xs[0].astype(np.float64)
    axes = tuple(range(a.axis, x.ndim))
    d = x - x.mean(axis=axes, keepdims=True)
    y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + a.epsilon) * xs[1]
    if len(xs) > 2:
        y = y + xs[2]
    return (y.astype(xs[0].dtype),)


def _import_layernorm(ctx: ImportContext) -> tuple:
    _refuse_extra_outputs(ctx)
    inputs = [ctx.input(i) for i in range(ctx.n_inputs) if ctx.input(i) is not None]
    return ctx.add("layernorm", inputs, axis=ctx.attr("axis", -1), epsilon=ctx.attr("epsilon", 1e-5))


def _export_layernorm(ctx: ExportContext, node: ExportNode) -> None:
    """LayerNormalization is an ONNX op from opset 17; older opsets get its formula."""
    a: LayerNormAttrs = node.attrs
    if ctx.opset >= 17:
        ctx.emit("LayerNormalization", node.inputs, node.outputs, axis=a.axis, epsilon=a.epsilon)
        return
    axes = list(range(a.axis, node.in_types[0].rank))
    dtype = node.in_types[0].dtype.numpy

    def mean(t: str) -> str:
        return ctx.emit("ReduceMean", [t], axes=axes, keepdims=1)[0]

    x = node.inputs[0]
    (d,) = ctx.emit("Sub", [x, mean(x)])
    var = mean(ctx.emit("Mul", [d, d])[0])
    (std,) = ctx.emit("Sqrt", [ctx.emit("Add", [var, ctx.const(np.array(a.epsilon, dtype), "eps")])[0]])
    (y,) = ctx.emit("Div", [d, std])
    if len(node.inputs) > 2:
        (y,) = ctx.emit("Mul", [y, node.inputs[1]])
        ctx.emit("Add", [y, node.inputs[2]], node.outputs)
    else:
        ctx.emit("Mul", [y, node.inputs[1]], node.outputs)


batchnorm = OpDef(
    "batchnorm", ("x", "scale", "bias", "mean", "var"), shape=_batchnorm_shape, ref=_batchnorm_ref,
    attrs=EpsAttrs, fusion=Fusion.INJECTIVE,
    onnx=OnnxMapping({"BatchNormalization": _import_batchnorm},
                     direct_export("BatchNormalization", lambda a: {"epsilon": a.epsilon})),
    sym_shape=_sym_batchnorm, sym_value=_batchnorm_sym,
    doc="inference batch normalization over axis 1",
)
softmax = OpDef(
    "softmax", ("x",), shape=_softmax_shape, ref=_softmax_ref, attrs=SoftmaxAttrs,
    normalize=_positive_axis, fusion=Fusion.OPAQUE,
    onnx=OnnxMapping({"Softmax": _import_softmax}, _export_softmax),
    sym_shape=_sym_softmax, sym_value=_softmax_sym,
    doc="exp(x) / sum(exp(x)) along one axis",
)
layernorm = OpDef(
    "layernorm", ("x", "scale", "bias"), optional=1, shape=_layernorm_shape, ref=_layernorm_ref,
    attrs=LayerNormAttrs, normalize=_positive_axis, fusion=Fusion.OPAQUE,
    onnx=OnnxMapping({"LayerNormalization": _import_layernorm}, _export_layernorm),
    doc="normalize over the axes from `axis` on, then scale and shift",
)

OPS = (batchnorm, softmax, layernorm)

_W3 = "reshape(w, shape=[1, dim(w, 0), dim(w, 1) * dim(w, 2) * dim(w, 3)])"  # kernels as [1, O, C*kh*kw]
_BN = "s, t, m, v, epsilon=?e"
_CONV = "stride=[?sh, ?sw], pad=[?pt, ?pl, ?pb, ?pr], dilation=[?dh, ?dw], groups=?g"

AXIOMS = (
    Axiom("batchnorm-fold",
          f"batchnorm(conv2d(x, w, b, {_CONV}), {_BN}) == conv2d(x, "
          f"reshape(sub(batchnorm({_W3}, {_BN}), batchnorm(scalar_mul({_W3}, scale=0.0), {_BN})), "
          "shape=[dim(w, 0), dim(w, 1), dim(w, 2), dim(w, 3)]), "
          f"reshape(batchnorm(reshape(b, shape=[1, dim(w, 0)]), {_BN}), shape=[dim(w, 0)]), {_CONV})",
          "batch norm after a convolution folds into its weights and bias (weight-only work on the right)"),
    Axiom("batchnorm-concat-batch", f"batchnorm(concat(a, c, axis=0), {_BN}) == "
          f"concat(batchnorm(a, {_BN}), batchnorm(c, {_BN}), axis=0)"),
)
