"""Reductions over axes: reduce_mean, reduce_sum, reduce_max (ReduceMean/Sum/Max, axes as attribute or input).

Attributes are ONNX's `axes` and `keepdims`; the canonical form spells the axes out (positive,
sorted; none given means all of them), so `axes=[-1]`, `axes=[3]` and, on a vector, no axes
hash equal. The verifier models `keepdims=true` only: its shape model needs the output rank
as a plain number, and a symbolic `keepdims` would make the rank symbolic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from itertools import pairwise
from typing import Any

import numpy as np

from taso_py.errors import AttrError, ShapeError, Unsupported
from taso_py.ops.onnx_map import ExportContext, ExportNode, ImportContext, OnnxMapping
from taso_py.ops.schema import Axiom, Fusion, OpDef, set_attr
from taso_py.ops.symbolic import Arith, ScalarDomain, SymShape, axis_in_range
from taso_py.types import DType, TensorType


@dataclass(frozen=True)
class ReduceAttrs:
    axes: tuple[int, ...] = ()  # empty: every axis (ONNX's default)
    keepdims: bool = True

    def __post_init__(self) -> None:
        set_attr(self, "axes", tuple(int(a) for a in self.axes))
        set_attr(self, "keepdims", bool(self.keepdims))
        if len(set(self.axes)) != len(self.axes):
            raise AttrError(f"axes {list(self.axes)} name an axis twice")


def reduced_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """`axes` positive and sorted, all of them when empty; a ShapeError when out of range or repeated."""
    if not axes:
        return tuple(range(rank))
    if any(not -rank <= a < rank for a in axes):
        raise ShapeError(f"axes {list(axes)} out of range for rank {rank}")
    out = sorted(a % rank for a in axes)
    if len(set(out)) != len(out):
        raise ShapeError(f"axes {list(axes)} name an axis twice")
    return tuple(out)


def _canonical(a: ReduceAttrs, in_types: Sequence[TensorType]) -> ReduceAttrs:
    return replace(a, axes=reduced_axes(a.axes, in_types[0].rank))


def _out_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


_NUMERIC = frozenset({DType.FLOAT16, DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64})


def _shape_rule(float_only: bool, empty_ok: bool) -> Callable[[Sequence[TensorType], ReduceAttrs],
                                                               tuple[TensorType, ...]]:
    """A mean of integers would round, and a mean or maximum of nothing has no value: those are refused."""

    def shape(in_types: Sequence[TensorType], a: ReduceAttrs) -> tuple[TensorType, ...]:
        t = in_types[0]
        if t.dtype not in _NUMERIC or (float_only and not t.dtype.is_float):
            raise ShapeError(f"cannot reduce a tensor of {t.dtype.value}")
        axes = reduced_axes(a.axes, t.rank)
        if not empty_ok and any(t.known_shape[k] == 0 for k in axes):
            raise ShapeError(f"reduces an empty axis of {list(t.known_shape)}")
        return (TensorType(_out_shape(t.known_shape, axes, a.keepdims), t.dtype),)

    return shape


def _sum_ref(xs: Sequence[np.ndarray], a: ReduceAttrs) -> tuple[np.ndarray, ...]:
    x = xs[0]
    axes = reduced_axes(a.axes, x.ndim)
    wide = x.astype(np.float64) if x.dtype.kind == "f" else x  # integers wrap, as ONNX Runtime's do
    return (np.asarray(wide.sum(axis=axes, keepdims=a.keepdims, dtype=wide.dtype)).astype(x.dtype),)


def _mean_ref(xs: Sequence[np.ndarray], a: ReduceAttrs) -> tuple[np.ndarray, ...]:
    x = xs[0]
    mean = x.astype(np.float64).mean(axis=reduced_axes(a.axes, x.ndim), keepdims=a.keepdims)
    return (np.asarray(mean).astype(x.dtype),)


def _max_ref(xs: Sequence[np.ndarray], a: ReduceAttrs) -> tuple[np.ndarray, ...]:
    x = xs[0]
    return (np.asarray(x.max(axis=reduced_axes(a.axes, x.ndim), keepdims=a.keepdims)),)


def _sym_reduce(s: Sequence[tuple], a: Any, A: Arith) -> SymShape:
    """keepdims only (see the module doc); the axes as the canonical form has them: in range, increasing."""
    x = s[0]
    axes = tuple(a.axes) or tuple(range(len(x)))
    out = tuple(A.ite(A.any(*(ax == k for ax in axes)), 1, d) for k, d in enumerate(x))
    conds = (a.keepdims, *(c for ax in axes for c in axis_in_range(ax, len(x))),
             *(lo < hi for lo, hi in pairwise(axes)))
    return (out,), conds


def _fold(x: np.ndarray, a: ReduceAttrs, combine: Callable[[Any, Any], Any]) -> np.ndarray:
    """`combine` over the reduced axes of an object array, one axis at a time (it is associative)."""
    axes = reduced_axes(a.axes, x.ndim)
    ufunc = np.frompyfunc(combine, 2, 1)
    for k in axes:
        x = ufunc.reduce(x, axis=k, keepdims=True)
    return x if a.keepdims else x.reshape(_out_shape(x.shape, axes, False))


def _sum_sym(xs: Sequence[np.ndarray], a: ReduceAttrs, _D: ScalarDomain) -> tuple[np.ndarray, ...]:
    return (_fold(xs[0], a, lambda p, q: p + q),)


def _mean_sym(xs: Sequence[np.ndarray], a: ReduceAttrs, D: ScalarDomain) -> tuple[np.ndarray, ...]:
    x = xs[0]
    count = int(np.prod([x.shape[k] for k in reduced_axes(a.axes, x.ndim)], dtype=np.int64))
    scale = D.const(Fraction(1, count))
    return (_fold(x, a, lambda p, q: p + q) * scale,)


def _max_sym(xs: Sequence[np.ndarray], a: ReduceAttrs, D: ScalarDomain) -> tuple[np.ndarray, ...]:
    return (_fold(xs[0], a, D.max),)


def _flops(ins: Sequence[TensorType], _outs: Sequence[TensorType], _a: object) -> int:
    return ins[0].size


# ---- ONNX: axes an attribute before `input_from`, an optional int64 input from it on ----------

def _import(op: str, input_from: int, float_only: bool) -> Callable[[ImportContext], tuple]:
    def translate(ctx: ImportContext) -> tuple:
        dtype = ctx.type(0).dtype
        if dtype not in _NUMERIC or (float_only and not dtype.is_float):
            raise Unsupported(f"{ctx.op_type} of {dtype.value if dtype else 'an unknown type'}")
        if ctx.opset < input_from:
            axes = list(ctx.attr("axes") or ())
        else:
            value = ctx.const(1) if ctx.n_inputs > 1 else None
            if value is None and ctx.n_inputs > 1 and ctx.input(1) is not None:
                raise Unsupported(f"{ctx.op_type} with axes computed at run time")
            if value is not None and value.dtype.kind not in "iu":
                raise ShapeError(f"{ctx.op_type} axes must be integers, got a tensor of {value.dtype}")
            axes = [] if value is None else [int(v) for v in value.reshape(-1)]
        if not axes and ctx.attr("noop_with_empty_axes", 0):
            return (ctx.input(0),)
        return ctx.add(op, [ctx.input(0)], axes=tuple(axes), keepdims=bool(ctx.attr("keepdims", 1)))

    return translate


def _export(op_type: str, input_from: int) -> Callable[[ExportContext, ExportNode], None]:
    """Canonical axes are explicit, except on a scalar (none: all zero of them, which ONNX means too)."""

    def write(ctx: ExportContext, node: ExportNode) -> None:
        a: ReduceAttrs = node.attrs
        if ctx.opset < input_from:
            ctx.emit(op_type, node.inputs, node.outputs, keepdims=int(a.keepdims),
                     **({"axes": list(a.axes)} if a.axes else {}))
            return
        inputs = [node.inputs[0], *([ctx.const(np.array(a.axes, np.int64), "axes")] if a.axes else [])]
        ctx.emit(op_type, inputs, node.outputs, keepdims=int(a.keepdims))

    return write


def _reduction(name: str, op_type: str, input_from: int, ref: Callable, sym: Callable, *, float_only: bool = False,
               empty_ok: bool = False, doc: str) -> OpDef:
    return OpDef(
        name, ("x",), shape=_shape_rule(float_only, empty_ok), ref=ref, attrs=ReduceAttrs, normalize=_canonical,
        fusion=Fusion.REDUCTION, flops=_flops,
        onnx=OnnxMapping({op_type: _import(name, input_from, float_only)}, _export(op_type, input_from)),
        sym_shape=_sym_reduce, sym_value=sym, doc=doc,
    )


reduce_sum = _reduction("reduce_sum", "ReduceSum", 13, _sum_ref, _sum_sym, empty_ok=True,
                        doc="sum over `axes` (all when none are given), keeping them as size-1 dims with keepdims")
reduce_mean = _reduction("reduce_mean", "ReduceMean", 18, _mean_ref, _mean_sym, float_only=True,
                         doc="mean over `axes` (all when none are given)")
reduce_max = _reduction("reduce_max", "ReduceMax", 18, _max_ref, _max_sym,
                        doc="maximum over `axes` (all when none are given)")

OPS: tuple[OpDef, ...] = (reduce_sum, reduce_mean, reduce_max)

_REDUCERS = ("reduce_sum", "reduce_mean", "reduce_max")

AXIOMS: tuple[Axiom, ...] = (
    *(Axiom(f"{r}-concat", f"{r}(concat(a, b, axis=?k), axes=[?j], keepdims=true) == "
          f"concat({r}(a, axes=[?j], keepdims=true), {r}(b, axes=[?j], keepdims=true), axis=?k) where ?k != ?j",
          "a reduction along another axis treats the two parts independently") for r in _REDUCERS),
    Axiom("reduce_sum-concat-same-axis", "reduce_sum(concat(a, b, axis=?k), axes=[?k], keepdims=true) == "
          "add(reduce_sum(a, axes=[?k], keepdims=true), reduce_sum(b, axes=[?k], keepdims=true))",
          "a sum along the concatenated axis is the sum of the parts' sums"),
    Axiom("reduce_sum-scalar", "reduce_sum(scalar_mul(x, scale=?s), axes=[?j], keepdims=true) == "
          "scalar_mul(reduce_sum(x, axes=[?j], keepdims=true), scale=?s)", "a sum is linear"),
    Axiom("reduce_mean-global-avgpool", "reduce_mean(x, axes=[2, 3], keepdims=true) == global_avgpool(x) "
          "where rank(x) == 4", "the global average of an NCHW tensor is its mean over height and width"),
    Axiom("reduce_max-relu", "relu(reduce_max(x, axes=[?j], keepdims=true)) == "
          "reduce_max(relu(x), axes=[?j], keepdims=true)", "relu is monotone"),
)
