"""Data movement with constant indices: slice, gather, expand, select (ONNX Where), cast.

Indices, bounds and target shapes are attributes: an ONNX node whose indices are computed at run
time stays opaque. Attributes are canonical for the input types (positive axes and indices, slice
bounds clamped, expand's full output shape), so equal selections hash equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import helper

from taso_py.errors import AttrError, ShapeError, Unsupported
from taso_py.ops.elementwise import ACTIVATIONS
from taso_py.ops.onnx_map import ExportContext, ExportNode, ImportContext, OnnxMapping
from taso_py.ops.schema import Axiom, Fusion, OpDef, norm_axis, same_dtype, set_attr
from taso_py.ops.symbolic import Arith, SymShape, axis_in_range, broadcast, select
from taso_py.types import DType, TensorType

FLOATS = ("float16", "float32", "float64")
NO_END = (np.iinfo(np.int32).max, np.iinfo(np.int64).max)  # an end that ONNX Runtime reads as none


def _ints(ctx: ImportContext, i: int, what: str) -> list[int] | None:
    """Constant integer input `i` as a list; None when absent. Computed at run time: Unsupported."""
    if ctx.n_inputs <= i or ctx.input(i) is None:
        return None
    value = ctx.const(i)
    if value is None:
        raise Unsupported(f"{ctx.op_type} with {what} computed at run time")
    if value.dtype.kind not in "iu":
        raise ShapeError(f"{ctx.op_type} {what} must be integers, got a tensor of {value.dtype}")
    return [int(v) for v in value.reshape(-1)]


# ---- slice -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SliceAttrs:
    """ONNX Slice: per listed axis, elements start, start + step, ... before end (clamped to the axis)."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    axes: tuple[int, ...]
    steps: tuple[int, ...]

    def __post_init__(self) -> None:
        for name in ("starts", "ends", "axes", "steps"):
            set_attr(self, name, tuple(int(v) for v in getattr(self, name)))
        if not len(self.starts) == len(self.ends) == len(self.axes) == len(self.steps):
            raise AttrError(f"starts, ends, axes and steps need one value per axis, got {len(self.starts)}, "
                            f"{len(self.ends)}, {len(self.axes)} and {len(self.steps)}")
        if 0 in self.steps:
            raise AttrError(f"steps must not be 0, got {self.steps}")


def slice_bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int, int]:
    """ONNX's clamping: (first index, end, length); for a negative step the end may be -1. An end of
    INT32_MAX or INT64_MAX means "to the end in the step's direction", as ONNX Runtime reads it."""
    end = (dim if step > 0 else -dim - 1) if end in NO_END else end
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        return start, end, max(0, -(-(end - start) // step))
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return start, end, max(0, -(-(start - end) // -step))


def _slice_axes(a: SliceAttrs, rank: int) -> list[int]:
    axes = [norm_axis(k, rank) for k in a.axes]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"axes {list(a.axes)} repeat an axis")
    return axes


def _slice_shape(in_types: Sequence[TensorType], a: SliceAttrs) -> tuple[TensorType, ...]:
    s = list(in_types[0].known_shape)
    for k, start, end, step in zip(_slice_axes(a, len(s)), a.starts, a.ends, a.steps):
        s[k] = slice_bounds(s[k], start, end, step)[2]
    return (TensorType(tuple(s), in_types[0].dtype),)


def _slice_normalize(a: SliceAttrs, in_types: Sequence[TensorType]) -> SliceAttrs:
    """Positive axes in order, clamped bounds; an end before index 0 is written -dim-1 (-1 means the last)."""
    s = in_types[0].known_shape
    bounds = []
    for k, start, end, step in sorted(zip(_slice_axes(a, len(s)), a.starts, a.ends, a.steps)):
        first, stop, _ = slice_bounds(s[k], start, end, step)
        bounds.append((k, first, stop if stop >= 0 else -s[k] - 1, step))
    axes, starts, ends, steps = (tuple(v) for v in zip(*bounds)) if bounds else ((), (), (), ())
    return SliceAttrs(starts, ends, axes, steps)


def _slices(a: SliceAttrs, rank: int) -> tuple[slice, ...]:
    """Python slices (numpy's and object arrays') with ONNX's meaning, for canonical attributes."""
    out = [slice(None)] * rank
    for k, start, end, step in zip(a.axes, a.starts, a.ends, a.steps):
        out[k] = slice(start, end if end >= 0 else None, step)
    return tuple(out)


def _slice_ref(xs: Sequence[np.ndarray], a: SliceAttrs) -> tuple[np.ndarray, ...]:
    x = xs[0]
    canon = _slice_normalize(a, [TensorType(x.shape)])
    return (np.ascontiguousarray(x[_slices(canon, x.ndim)]),)


def _sym_slice(s: Sequence[tuple], a: SliceAttrs, A: Arith) -> SymShape | None:
    """Clamping written with `ite`, so bounds, axes and steps may be symbolic; empty results are outside."""
    x, r = s[0], len(s[0])
    out, conds = list(x), []
    for j, (k, start, end, step) in enumerate(zip(a.axes, a.starts, a.ends, a.steps)):
        conds += [*axis_in_range(k, r), step != 0, *(k != q for q in a.axes[:j])]
        d = select(A, x, k)
        end = A.ite(A.any(*(end == n for n in NO_END)), A.ite(step > 0, d, -d - 1), end)
        b, e = A.ite(start < 0, start + d, start), A.ite(end < 0, end + d, end)
        up_b, up_e = A.ite(b < 0, 0, A.ite(b > d, d, b)), A.ite(e < 0, 0, A.ite(e > d, d, e))
        dn_b, dn_e = A.ite(b < 0, 0, A.ite(b > d - 1, d - 1, b)), A.ite(e < -1, -1, A.ite(e > d - 1, d - 1, e))
        size = A.ite(step > 0, A.div(up_e - up_b + step - 1, A.ite(step > 0, step, 1)),
                     A.div(dn_b - dn_e - step - 1, A.ite(step < 0, -step, 1)))
        out = [A.ite(k == i, size, o) for i, o in enumerate(out)]
    return (tuple(out),), tuple(conds)


def _import_slice(ctx: ImportContext) -> tuple:
    rank = ctx.type(0).rank
    if ctx.opset < 10:
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
    else:
        starts, ends = _ints(ctx, 1, "starts"), _ints(ctx, 2, "ends")
        axes, steps = _ints(ctx, 3, "axes"), _ints(ctx, 4, "steps")
    if starts is None or ends is None:
        raise ShapeError("Slice needs starts and ends")
    axes = list(range(len(starts))) if axes is None else [norm_axis(k, rank) for k in axes]
    steps = [1] * len(starts) if steps is None else steps
    return ctx.add("slice", [ctx.input(0)], starts=tuple(starts), ends=tuple(ends), axes=tuple(axes),
                   steps=tuple(steps))


def _export_slice(ctx: ExportContext, node: ExportNode) -> None:
    a: SliceAttrs = node.attrs
    if ctx.opset < 10:
        if any(st != 1 for st in a.steps):
            raise Unsupported(f"a slice with steps {list(a.steps)} has no Slice form before opset 10")
        ctx.emit("Slice", node.inputs, node.outputs, starts=list(a.starts), ends=list(a.ends), axes=list(a.axes))
        return
    consts = [ctx.const(np.array(v, np.int64), name) for v, name in
              ((a.starts, "starts"), (a.ends, "ends"), (a.axes, "axes"), (a.steps, "steps"))]
    ctx.emit("Slice", [node.inputs[0], *consts], node.outputs)


# ---- gather ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GatherAttrs:
    """ONNX Gather with constant indices: `indices` row-major in an array of `shape` (() for a scalar)."""

    indices: tuple[int, ...]
    shape: tuple[int, ...]
    axis: int = 0

    def __post_init__(self) -> None:
        set_attr(self, "indices", tuple(int(i) for i in self.indices))
        set_attr(self, "shape", tuple(int(d) for d in self.shape))
        if any(d < 0 for d in self.shape) or int(np.prod(self.shape, dtype=np.int64)) != len(self.indices):
            raise AttrError(f"{len(self.indices)} indices do not fill an array of shape {list(self.shape)}")


def _gather_shape(in_types: Sequence[TensorType], a: GatherAttrs) -> tuple[TensorType, ...]:
    s = in_types[0].known_shape
    axis = norm_axis(a.axis, len(s))
    bad = [i for i in a.indices if not -s[axis] <= i < s[axis]]
    if bad:
        raise ShapeError(f"index {bad[0]} out of range for dimension {axis} of {list(s)}")
    return (TensorType((*s[:axis], *a.shape, *s[axis + 1:]), in_types[0].dtype),)


def _gather_normalize(a: GatherAttrs, in_types: Sequence[TensorType]) -> GatherAttrs:
    s = in_types[0].known_shape
    axis = norm_axis(a.axis, len(s))
    return replace(a, axis=axis, indices=tuple(i % s[axis] for i in a.indices))


def _gather(x: np.ndarray, a: GatherAttrs) -> np.ndarray:
    axis = a.axis % max(x.ndim, 1)
    return np.asarray(np.take(x, np.array(a.indices, np.int64).reshape(a.shape), axis=axis), x.dtype)  # 0-d too


def _sym_gather(s: Sequence[tuple], a: GatherAttrs, A: Arith) -> SymShape:
    """Output axis j is data axis j before the gathered axis k, index axis j - k, then data axis j - m + 1."""
    x, k, m = s[0], a.axis, len(a.shape)
    d = select(A, x, k)
    out = []
    for j in range(len(x) - 1 + m):
        after = select(A, x, j - m + 1)
        inner = A.ite(j < k + m, select(A, a.shape, j - k), after) if m else after
        out.append(A.ite(j < k, select(A, x, j), inner))
    filled = np.prod(np.array(a.shape, dtype=object)) if m else 1
    return (tuple(out),), (*axis_in_range(k, len(x)), filled == len(a.indices),
                           *(c for i in a.indices for c in (i >= -d, i < d)))


def _import_gather(ctx: ImportContext) -> tuple:
    indices = ctx.const(1)
    if indices is None:
        raise Unsupported("Gather with indices computed at run time")
    if indices.dtype.kind not in "iu":
        raise ShapeError(f"Gather indices must be integers, got a tensor of {indices.dtype}")
    return ctx.add("gather", [ctx.input(0)], indices=tuple(int(i) for i in indices.reshape(-1)),
                   shape=indices.shape, axis=ctx.attr("axis", 0))


def _export_gather(ctx: ExportContext, node: ExportNode) -> None:
    a: GatherAttrs = node.attrs
    indices = ctx.const(np.array(a.indices, np.int64).reshape(a.shape), "indices")
    ctx.emit("Gather", [node.inputs[0], indices], node.outputs, axis=a.axis)


# ---- expand ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExpandAttrs:
    """ONNX Expand: broadcast to `shape` (both ways: a 1 in `shape` keeps the input's dim)."""

    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        set_attr(self, "shape", tuple(int(d) for d in self.shape))
        if any(d < 0 for d in self.shape):
            raise AttrError(f"shape must not be negative, got {self.shape}")


def _expand_shape(in_types: Sequence[TensorType], a: ExpandAttrs) -> tuple[TensorType, ...]:
    s = in_types[0].known_shape
    try:
        out = np.broadcast_shapes(s, a.shape)
    except ValueError:
        raise ShapeError(f"cannot broadcast {list(s)} to {list(a.shape)}") from None
    return (TensorType(tuple(int(d) for d in out), in_types[0].dtype),)


def _expand_normalize(a: ExpandAttrs, in_types: Sequence[TensorType]) -> ExpandAttrs:
    """The whole output shape, so that expand(x, [1, 5]) and expand(x, [3, 5]) of a 3 x 1 x hash equal."""
    return ExpandAttrs(_expand_shape(in_types, a)[0].known_shape)


def _expand(x: np.ndarray, a: ExpandAttrs) -> np.ndarray:
    return np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, a.shape)))


def _sym_expand(s: Sequence[tuple], a: ExpandAttrs, A: Arith) -> SymShape:
    out, conds = broadcast(A, s[0], a.shape)
    return (out,), conds


def _import_expand(ctx: ImportContext) -> tuple:
    shape = _ints(ctx, 1, "shape")
    if shape is None:
        raise ShapeError("Expand needs a shape")
    return ctx.add("expand", [ctx.input(0)], shape=tuple(shape))


def _export_expand(ctx: ExportContext, node: ExportNode) -> None:
    if ctx.opset < 8:
        raise Unsupported("expand has no ONNX form before opset 8")
    shape = ctx.const(np.array(node.attrs.shape, np.int64), "shape")
    ctx.emit("Expand", [node.inputs[0], shape], node.outputs)


# ---- select (ONNX Where) ----------------------------------------------------------------------

def _where_shape(in_types: Sequence[TensorType], _a: object) -> tuple[TensorType, ...]:
    cond, x, y = in_types
    same_dtype([x, y])
    try:
        out = np.broadcast_shapes(cond.known_shape, x.known_shape, y.known_shape)
    except ValueError:
        raise ShapeError("condition and values do not broadcast") from None
    return (TensorType(tuple(int(d) for d in out), x.dtype),)


def _export_where(ctx: ExportContext, node: ExportNode) -> None:
    if ctx.opset < 9:
        raise Unsupported("select (ONNX Where) has no ONNX form before opset 9")
    cond = node.inputs[0]
    if node.in_types[0].dtype is not DType.BOOL:
        cond = ctx.emit("Cast", [cond], 1, to=onnx.TensorProto.BOOL)[0]
    ctx.emit("Where", [cond, *node.inputs[1:]], node.outputs)


# ---- cast --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CastAttrs:
    """The element type to convert to: a float type (casts to other types stay opaque)."""

    to: str

    def __post_init__(self) -> None:
        if self.to not in FLOATS:
            raise AttrError(f"to must be one of {', '.join(FLOATS)}, got {self.to!r}")


def _cast_shape(in_types: Sequence[TensorType], a: CastAttrs) -> tuple[TensorType, ...]:
    x = in_types[0]
    if not x.dtype.is_float:
        raise ShapeError(f"casts between float types only, got {x.dtype.value}")
    return (TensorType(x.known_shape, DType(a.to)),)


def _import_cast(ctx: ImportContext) -> tuple:
    """A Cast to the input's own type is no node at all; one between float types is a cast."""
    source = ctx.type(0).dtype
    to = ctx.attr("to")
    try:
        target = np.dtype(helper.tensor_dtype_to_np_dtype(to)).name
    except (KeyError, TypeError, ValueError):  # a damaged or hand-written file
        raise AttrError(f"Cast to {to!r}, which is not an ONNX element type") from None
    if source is not None and source.value == target:
        return (ctx.input(0),)
    if source is None or not source.is_float or target not in FLOATS:
        raise Unsupported(f"Cast from {source.value if source else 'unknown'} to {target}")
    return ctx.add("cast", [ctx.input(0)], to=target)


def _export_cast(ctx: ExportContext, node: ExportNode) -> None:
    ctx.emit("Cast", node.inputs, node.outputs, to=helper.np_dtype_to_tensor_dtype(np.dtype(node.attrs.to)))


# ---- the entries -------------------------------------------------------------------------------

slice_ = OpDef(
    "slice", ("x",), shape=_slice_shape, ref=_slice_ref, attrs=SliceAttrs, normalize=_slice_normalize,
    fusion=Fusion.INJECTIVE, onnx=OnnxMapping({"Slice": _import_slice}, _export_slice),
    sym_shape=_sym_slice, sym_value=lambda xs, a, _D: _slice_ref(xs, a),
    doc="every step-th element from start up to end on each listed axis (ONNX clamping; negative steps)",
)
gather = OpDef(
    "gather", ("x",), shape=_gather_shape, ref=lambda xs, a: (_gather(xs[0], a),), attrs=GatherAttrs,
    normalize=_gather_normalize, fusion=Fusion.INJECTIVE,
    onnx=OnnxMapping({"Gather": _import_gather}, _export_gather),
    sym_shape=_sym_gather, sym_value=lambda xs, a, _D: (_gather(xs[0], a),),
    doc="constant indices taken along an axis; the index array's axes replace it (a scalar drops it)",
)
expand = OpDef(
    "expand", ("x",), shape=_expand_shape, ref=lambda xs, a: (_expand(xs[0], a),), attrs=ExpandAttrs,
    normalize=_expand_normalize, fusion=Fusion.INJECTIVE,
    onnx=OnnxMapping({"Expand": _import_expand}, _export_expand),
    sym_shape=_sym_expand, sym_value=lambda xs, a, _D: (_expand(xs[0], a),),
    doc="broadcast to a shape",
)
# bool conditions are outside the verifier's real-valued model: select is not verifiable. (Named as TVM's
# select, not ONNX's Where: `where` is the rule syntax's keyword.)
select_ = OpDef(
    "select", ("cond", "x", "y"), shape=_where_shape, ref=lambda xs, _a: (np.where(*xs),), fusion=Fusion.INJECTIVE,
    onnx=OnnxMapping({"Where": lambda ctx: ctx.add("select", [ctx.input(i) for i in range(3)])}, _export_where),
    doc="x where the condition is true (non-zero), else y, all three broadcast; often a constant bool mask",
)
# rounding between float types is outside the verifier's model over the reals: cast is not verifiable
cast = OpDef(
    "cast", ("x",), shape=_cast_shape, ref=lambda xs, a: (xs[0].astype(a.to),), attrs=CastAttrs,
    fusion=Fusion.INJECTIVE, onnx=OnnxMapping({"Cast": _import_cast}, _export_cast),
    doc="convert between float types (a Cast to the same type is dropped at import)",
)

OPS = (slice_, gather, expand, select_, cast)


def _step1(start: str, end: str, axis: str = "?k") -> str:
    return f"starts=[{start}], ends=[{end}], axes=[{axis}], steps=[1]"


def _scalar(index: str, axis: str = "?k") -> str:
    return f"indices=[{index}], shape=[], axis={axis}"


AXIOMS = (
    Axiom("slice-concat-0", f"slice(concat(a, b, axis=?k), {_step1('0', 'dim(a, ?k)')}) == a",
          "slicing a concatenation where it was joined gives back a part"),
    Axiom("slice-concat-1", f"slice(concat(a, b, axis=?k), {_step1('dim(a, ?k)', 'dim(a, ?k) + dim(b, ?k)')}) == b"),
    Axiom("split-as-slice-0", f"split(x, axis=?k, sizes=[?m, ?n])[0] == slice(x, {_step1('0', '?m')})",
          "each part of a split is a slice"),
    Axiom("split-as-slice-1", f"split(x, axis=?k, sizes=[?m, ?n])[1] == slice(x, {_step1('?m', '?m + ?n')})"),
    Axiom("slice-full", f"slice(x, {_step1('0', 'dim(x, ?k)')}) == x"),
    Axiom("slice-compose", f"slice(slice(x, {_step1('?a', '?b')}), {_step1('?c', '?d')}) == "
          f"slice(x, {_step1('?a + ?c', '?a + ?d')}) "
          "where 0 <= ?a, ?a <= ?b, ?b <= dim(x, ?k), 0 <= ?c, ?c <= ?d, ?d <= ?b - ?a",
          "a window of a window is one window (bounds inside, so no clamping)"),
    Axiom("gather-concat-0", f"gather(concat(a, b, axis=?k), {_scalar('?i')}) == gather(a, {_scalar('?i')}) "
          "where 0 <= ?i, ?i < dim(a, ?k)", "an index into the first part of a concatenation"),
    Axiom("gather-concat-1", f"gather(concat(a, b, axis=?k), {_scalar('?i')}) == "
          f"gather(b, {_scalar('?i - dim(a, ?k)')}) where dim(a, ?k) <= ?i"),
    Axiom("gather-negative", f"gather(x, {_scalar('?i')}) == gather(x, {_scalar('?i + dim(x, ?k)')}) where ?i < 0",
          "a negative index counts from the end"),
    Axiom("gather-as-slice", f"gather(x, indices=[?i], shape=[1], axis=?k) == slice(x, {_step1('?i', '?i + 1')}) "
          "where 0 <= ?i", "one index kept as an axis of length 1 is a slice"),
    *(Axiom(f"expand-identity-{r}", f"expand(x, shape=[{', '.join(f'dim(x, {k})' for k in range(r))}]) == x "
            f"where rank(x) == {r}") for r in range(1, 5)),
    Axiom("add-expand", "add(expand(a, shape=[?m, ?n]), b) == add(a, b) where rank(b) == 2, dim(b, 0) == ?m, "
          "dim(b, 1) == ?n", "broadcasting in the add does what the expand did"),
    *(Axiom(f"{act}-slice", f"{act}(slice(x, starts=[?a], ends=[?b], axes=[?k], steps=[?s])) == "
            "slice({act}(x), starts=[?a], ends=[?b], axes=[?k], steps=[?s])".replace("{act}", act),
            "element-wise functions commute with data movement" if act == "relu" else "") for act in ACTIVATIONS),
    *(Axiom(f"{act}-gather", f"{act}(gather(x, {_scalar('?i')})) == gather({act}(x), {_scalar('?i')})")
      for act in ACTIVATIONS),
    *(Axiom(f"{act}-expand", f"{act}(expand(x, shape=[?a, ?b])) == expand({act}(x), shape=[?a, ?b])")
      for act in ACTIVATIONS),
)
