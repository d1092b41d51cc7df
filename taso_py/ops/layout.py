"""Operators that move data without arithmetic: concat, split, transpose, reshape, flatten, pad."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from taso_py.errors import AttrError, ShapeError, Unsupported
from taso_py.ops.elementwise import ACTIVATIONS
from taso_py.ops.onnx_map import (
    ExportContext,
    ExportNode,
    ImportContext,
    OnnxMapping,
    direct_export,
    direct_import,
)
from taso_py.ops.schema import Axiom, Fusion, OpDef, norm_axis, same_dtype, set_attr
from taso_py.ops.symbolic import Arith, ScalarDomain, SymShape, axis_in_range, select
from taso_py.types import TensorType


@dataclass(frozen=True)
class AxisAttrs:
    axis: int


@dataclass(frozen=True)
class SplitAttrs:
    axis: int
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        set_attr(self, "sizes", tuple(int(s) for s in self.sizes))
        if not self.sizes or any(s < 0 for s in self.sizes):
            raise AttrError(f"sizes must be non-negative and not empty, got {self.sizes}")


@dataclass(frozen=True)
class PermAttrs:
    perm: tuple[int, ...]

    def __post_init__(self) -> None:
        set_attr(self, "perm", tuple(int(p) for p in self.perm))


@dataclass(frozen=True)
class ShapeAttrs:
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        set_attr(self, "shape", tuple(int(d) for d in self.shape))
        if any(d < 0 for d in self.shape):
            raise AttrError(f"target shape must be explicit (no -1 or 0 placeholders), got {self.shape}")


@dataclass(frozen=True)
class FlattenAttrs:
    axis: int = 1


@dataclass(frozen=True)
class PadAttrs:
    """`pads` as in ONNX: all begins, then all ends (negative ones crop); constant mode only."""

    pads: tuple[int, ...]
    value: float = 0.0

    def __post_init__(self) -> None:
        set_attr(self, "pads", tuple(int(p) for p in self.pads))
        set_attr(self, "value", float(self.value))


def _positive_axis(a: AxisAttrs | SplitAttrs | FlattenAttrs, in_types: Sequence[TensorType]) -> object:
    rank = in_types[0].rank
    if isinstance(a, FlattenAttrs):
        return replace(a, axis=_flatten_axis(a.axis, rank))
    return replace(a, axis=norm_axis(a.axis, rank))


def _flatten_axis(axis: int, rank: int) -> int:
    """ONNX Flatten's axis lies in [-rank, rank]; a negative one counts from the back."""
    if not -rank <= axis <= rank:
        raise ShapeError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _axis(a: AxisAttrs | FlattenAttrs) -> dict[str, int]:
    return {"axis": a.axis}


# ---- concat / split ---------------------------------------------------------------------

def _concat_shape(in_types: Sequence[TensorType], a: AxisAttrs) -> tuple[TensorType, ...]:
    same_dtype(in_types)
    first = in_types[0].known_shape
    axis = norm_axis(a.axis, len(first))
    for t in in_types[1:]:
        s = t.known_shape
        if len(s) != len(first) or any(x != y for i, (x, y) in enumerate(zip(s, first)) if i != axis):
            raise ShapeError(f"shapes {list(first)} and {list(s)} differ outside axis {axis}")
    total = sum(t.known_shape[axis] for t in in_types)
    return (TensorType((*first[:axis], total, *first[axis + 1:]), in_types[0].dtype),)


def _split_shape(in_types: Sequence[TensorType], a: SplitAttrs) -> tuple[TensorType, ...]:
    s = in_types[0].known_shape
    axis = norm_axis(a.axis, len(s))
    if sum(a.sizes) != s[axis]:
        raise ShapeError(f"sizes {list(a.sizes)} do not add up to dimension {axis} of {list(s)}")
    return tuple(TensorType((*s[:axis], n, *s[axis + 1:]), in_types[0].dtype) for n in a.sizes)


def _sym_concat(s: Sequence[tuple], a: AxisAttrs, A: Arith) -> SymShape | None:
    r = len(s[0])
    if any(len(t) != r for t in s):
        return None
    k = a.axis
    out = tuple(A.ite(k == i, sum((t[i] for t in s[1:]), s[0][i]), s[0][i]) for i in range(r))  # in argument order
    same = tuple(A.any(k == i, t[i] == s[0][i]) for t in s[1:] for i in range(r))
    return (out,), (*axis_in_range(k, r), *same)


def _sym_split(s: Sequence[tuple], a: SplitAttrs, A: Arith) -> SymShape:
    x, k = s[0], a.axis
    outs = tuple(tuple(A.ite(k == i, n, d) for i, d in enumerate(x)) for n in a.sizes)
    return outs, (*axis_in_range(k, len(x)), sum(a.sizes[1:], a.sizes[0]) == select(A, x, k),
                  *(n >= 1 for n in a.sizes))


def _split_ref(xs: Sequence[np.ndarray], a: SplitAttrs) -> tuple[np.ndarray, ...]:
    return tuple(np.split(xs[0], np.cumsum(a.sizes)[:-1], axis=a.axis))


def _ints(ctx: ImportContext, i: int, what: str) -> list[int] | None:
    """Constant input `i` (sizes, a shape, axes, pads) as ints; None when computed at run time.
    ONNX types these int64, and onnx's checker does not check an initializer's type: a float
    tensor here (NaN, even) is an invalid model, refused by name."""
    value = ctx.const(i)
    if value is None:
        return None
    if value.dtype.kind not in "iu":
        raise ShapeError(f"{ctx.op_type} {what} must be integers, got a tensor of {value.dtype}")
    return [int(v) for v in value.reshape(-1)]


def _import_split(ctx: ImportContext) -> tuple:
    axis = ctx.attr("axis", 0)
    dim = ctx.type(0).known_shape[norm_axis(axis, ctx.type(0).rank)]
    sizes = ctx.attr("split") if ctx.opset < 13 else (_ints(ctx, 1, "sizes") if ctx.n_inputs > 1 and ctx.input(1)
                                                       else None)
    if sizes is None and ctx.n_inputs > 1 and ctx.input(1) is not None:
        raise Unsupported("Split with sizes computed at run time")
    if sizes is None:  # equal parts; from opset 18 the last one may be smaller
        parts = ctx.attr("num_outputs") or ctx.n_outputs
        chunk = -(-dim // parts)
        sizes = [min(chunk, dim - i * chunk) for i in range(parts)]
    return ctx.add("split", [ctx.input(0)], axis=axis, sizes=tuple(int(s) for s in sizes))


def _export_split(ctx: ExportContext, node: ExportNode) -> None:
    a: SplitAttrs = node.attrs
    if ctx.opset < 13:
        ctx.emit("Split", node.inputs, node.outputs, axis=a.axis, split=list(a.sizes))
    else:
        sizes = ctx.const(np.array(a.sizes, np.int64), "split")
        ctx.emit("Split", [node.inputs[0], sizes], node.outputs, axis=a.axis)


# ---- transpose / reshape / flatten -------------------------------------------------------

def _transpose_shape(in_types: Sequence[TensorType], a: PermAttrs) -> tuple[TensorType, ...]:
    s = in_types[0].known_shape
    if sorted(a.perm) != list(range(len(s))):
        raise ShapeError(f"perm {list(a.perm)} is not a permutation of the {len(s)} axes")
    return (TensorType(tuple(s[p] for p in a.perm), in_types[0].dtype),)


def _sym_transpose(s: Sequence[tuple], a: PermAttrs, A: Arith) -> SymShape | None:
    x, p = s[0], a.perm
    if len(p) != len(x):
        return None
    distinct = tuple(p[i] != p[j] for i in range(len(p)) for j in range(i))
    return (tuple(select(A, x, q) for q in p),), (*(c for q in p for c in axis_in_range(q, len(x))), *distinct)


def _import_transpose(ctx: ImportContext) -> tuple:
    perm = ctx.attr("perm") or tuple(reversed(range(ctx.type(0).rank)))
    return ctx.add("transpose", [ctx.input(0)], perm=tuple(perm))


def _reshape_shape(in_types: Sequence[TensorType], a: ShapeAttrs) -> tuple[TensorType, ...]:
    if int(np.prod(a.shape, dtype=np.int64)) != in_types[0].size:
        raise ShapeError(f"cannot reshape {list(in_types[0].known_shape)} to {list(a.shape)}")
    return (TensorType(a.shape, in_types[0].dtype),)


def _product(dims: Sequence) -> object:
    return np.prod(np.array(dims, dtype=object)) if dims else 1


def _sym_reshape(s: Sequence[tuple], a: ShapeAttrs, _A: Arith) -> SymShape:
    return (tuple(a.shape),), (_product(s[0]) == _product(a.shape), *(d >= 1 for d in a.shape))


def resolve_reshape(source: tuple[int, ...], target: Sequence[int], allowzero: bool = False) -> tuple[int, ...]:
    """ONNX Reshape's target with 0 (copy the input dim) and -1 (infer) resolved."""
    copied = [i for i, d in enumerate(target) if d == 0 and not allowzero and i >= len(source)]
    if copied:
        raise ShapeError(f"reshape target {list(target)} copies dim {copied[0]} of a rank-{len(source)} input (a 0 "
                         "there means the input's dim)")
    dims = [source[i] if d == 0 and not allowzero else int(d) for i, d in enumerate(target)]
    if dims.count(-1) > 1:
        raise ShapeError(f"reshape target {list(target)} has more than one -1")
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        total = int(np.prod(source, dtype=np.int64))
        if known == 0 or total % known:
            raise ShapeError(f"cannot reshape {list(source)} to {list(target)}")
        dims[dims.index(-1)] = total // known
    return tuple(dims)


def _import_reshape(ctx: ImportContext) -> tuple:
    target = _ints(ctx, 1, "shape")
    if target is None:
        raise Unsupported("Reshape to a shape computed at run time")
    shape = resolve_reshape(ctx.type(0).known_shape, target, bool(ctx.attr("allowzero", 0)))
    return ctx.add("reshape", [ctx.input(0)], shape=shape)


def _axes_arg(ctx: ImportContext) -> list[int] | None:
    """Squeeze/Unsqueeze axes: an attribute before opset 13, an input from 13 on."""
    if ctx.opset < 13:
        return ctx.attr("axes")
    if ctx.n_inputs < 2 or ctx.input(1) is None:
        return None
    axes = _ints(ctx, 1, "axes")
    if axes is None:
        raise Unsupported(f"{ctx.op_type} with axes computed at run time")
    return axes


def _import_squeeze(ctx: ImportContext) -> tuple:
    shape = ctx.type(0).known_shape
    axes = _axes_arg(ctx)
    drop = {norm_axis(a, len(shape)) for a in axes} if axes is not None else {i for i, d in enumerate(shape) if d == 1}
    if any(shape[a] != 1 for a in drop):
        raise ShapeError(f"Squeeze of axes {sorted(drop)} that are not 1 in {list(shape)}")
    return ctx.add("reshape", [ctx.input(0)], shape=tuple(d for i, d in enumerate(shape) if i not in drop))


def _import_unsqueeze(ctx: ImportContext) -> tuple:
    shape = list(ctx.type(0).known_shape)
    axes = _axes_arg(ctx)
    if axes is None:
        raise ShapeError("Unsqueeze needs axes")
    rank = len(shape) + len(axes)
    for a in sorted(norm_axis(a, rank) for a in axes):
        shape.insert(a, 1)
    return ctx.add("reshape", [ctx.input(0)], shape=tuple(shape))


def _export_reshape(ctx: ExportContext, node: ExportNode) -> None:
    shape, attrs = list(node.attrs.shape), {}
    if 0 in shape:  # ONNX reads a 0 as "copy the input's dim" unless allowzero (opset 14) says otherwise
        if ctx.opset >= 14:
            attrs["allowzero"] = 1
        elif shape.count(0) == 1:  # the tensor is empty: -1 infers the 0
            shape[shape.index(0)] = -1
    target = ctx.const(np.array(shape, np.int64), "shape")
    ctx.emit("Reshape", [node.inputs[0], target], node.outputs, **attrs)


def _flatten_shape(in_types: Sequence[TensorType], a: FlattenAttrs) -> tuple[TensorType, ...]:
    s = in_types[0].known_shape
    axis = _flatten_axis(a.axis, len(s))
    outer = int(np.prod(s[:axis], dtype=np.int64))
    return (TensorType((outer, int(np.prod(s[axis:], dtype=np.int64))), in_types[0].dtype),)


def _sym_flatten(s: Sequence[tuple], a: FlattenAttrs, A: Arith) -> SymShape:
    x = s[0]
    rows = select(A, [_product(x[:i]) for i in range(len(x) + 1)], a.axis)
    cols = select(A, [_product(x[i:]) for i in range(len(x) + 1)], a.axis)
    return ((rows, cols),), (a.axis >= 0, a.axis <= len(x))


def _flatten_ref(xs: Sequence[np.ndarray], a: FlattenAttrs) -> tuple[np.ndarray, ...]:
    x = xs[0]
    return (x.reshape(int(np.prod(x.shape[:a.axis], dtype=np.int64)), -1),)


# ---- pad ---------------------------------------------------------------------------------

def _pad_shape(in_types: Sequence[TensorType], a: PadAttrs) -> tuple[TensorType, ...]:
    s = in_types[0].known_shape
    if len(a.pads) != 2 * len(s):
        raise ShapeError(f"needs {2 * len(s)} pads for rank {len(s)}, got {len(a.pads)}")
    out = tuple(d + a.pads[i] + a.pads[i + len(s)] for i, d in enumerate(s))
    kept = (d + min(a.pads[i], 0) + min(a.pads[i + len(s)], 0) for i, d in enumerate(s))
    if any(d < 0 for d in out) or any(k < 0 for k in kept):
        raise ShapeError(f"pads {list(a.pads)} crop more than {list(s)} holds")
    return (TensorType(out, in_types[0].dtype),)


def _pad_ref(xs: Sequence[np.ndarray], a: PadAttrs) -> tuple[np.ndarray, ...]:
    x, r = xs[0], xs[0].ndim
    crop = tuple(slice(max(-a.pads[i], 0), x.shape[i] - max(-a.pads[i + r], 0)) for i in range(r))
    widths = [(max(a.pads[i], 0), max(a.pads[i + r], 0)) for i in range(r)]
    return (np.pad(x[crop], widths, constant_values=np.asarray(a.value, x.dtype)),)


def _sym_pad(s: Sequence[tuple], a: PadAttrs, A: Arith) -> SymShape | None:
    x, r = s[0], len(s[0])
    if len(a.pads) != 2 * r:
        return None
    crop = [A.ite(p < 0, p, 0) for p in a.pads]
    return (tuple(d + a.pads[i] + a.pads[i + r] for i, d in enumerate(x)),), tuple(
        d + crop[i] + crop[i + r] >= 0 for i, d in enumerate(x))


def _pad_sym(xs: Sequence[np.ndarray], a: PadAttrs, D: ScalarDomain) -> tuple[np.ndarray, ...]:
    x, r = xs[0], xs[0].ndim
    crop = tuple(slice(max(-a.pads[i], 0), x.shape[i] - max(-a.pads[i + r], 0)) for i in range(r))
    out = np.full([d + a.pads[i] + a.pads[i + r] for i, d in enumerate(x.shape)], D.const(a.value), dtype=object)
    out[tuple(slice(max(a.pads[i], 0), max(a.pads[i], 0) + x[crop].shape[i]) for i in range(r))] = x[crop]
    return (out,)


def _import_pad(ctx: ImportContext) -> tuple:
    mode = ctx.attr("mode", "constant")
    if mode != "constant":
        raise Unsupported(f"Pad mode {mode!r}")
    rank = ctx.type(0).rank
    if ctx.opset < 11:
        pads, value = ctx.attr("pads") or ctx.attr("paddings"), ctx.attr("value", 0.0)
    else:
        pads = _ints(ctx, 1, "pads")
        value_in = ctx.const(2) if ctx.n_inputs > 2 and ctx.input(2) is not None else np.zeros(())
        if pads is None or value_in is None:
            raise Unsupported("Pad with pads or value computed at run time")
        if value_in.size != 1:
            raise ShapeError(f"Pad constant_value must be one value, got {value_in.size}")
        value = float(value_in.reshape(()))
        if ctx.n_inputs > 3 and ctx.input(3) is not None:  # opset 18: pads for these axes only
            axes = _ints(ctx, 3, "axes")
            if axes is None:
                raise Unsupported("Pad with axes computed at run time")
            full = [0] * (2 * rank)
            for k, ax in enumerate(norm_axis(x, rank) for x in axes):
                full[ax], full[ax + rank] = pads[k], pads[k + len(axes)]
            pads = full
    return ctx.add("pad", [ctx.input(0)], pads=tuple(pads), value=value)


def _export_pad(ctx: ExportContext, node: ExportNode) -> None:
    a: PadAttrs = node.attrs
    if ctx.opset < 11:
        ctx.emit("Pad", node.inputs, node.outputs, pads=list(a.pads), value=a.value)
        return
    pads = ctx.const(np.array(a.pads, np.int64), "pads")
    value = ctx.const(np.array(a.value, node.in_types[0].dtype.numpy), "pad_value")
    ctx.emit("Pad", [node.inputs[0], pads, value], node.outputs)


concat = OpDef(
    "concat", ("x",), variadic=True, shape=_concat_shape, attrs=AxisAttrs, normalize=_positive_axis,
    ref=lambda xs, a: (np.concatenate(list(xs), axis=a.axis),), fusion=Fusion.INJECTIVE,
    onnx=OnnxMapping({"Concat": direct_import("concat", axis="axis")}, direct_export("Concat", _axis)),
    sym_shape=_sym_concat, sym_value=lambda xs, a, _D: (np.concatenate(list(xs), axis=a.axis),),
    doc="join tensors along an axis",
)
split = OpDef(
    "split", ("x",), shape=_split_shape, ref=_split_ref, attrs=SplitAttrs, normalize=_positive_axis,
    fusion=Fusion.INJECTIVE, onnx=OnnxMapping({"Split": _import_split}, _export_split),
    sym_shape=_sym_split, sym_value=lambda xs, a, _D: _split_ref(xs, a),
    doc="cut a tensor along an axis into parts of the given sizes (one output per part)",
)
transpose = OpDef(
    "transpose", ("x",), shape=_transpose_shape, ref=lambda xs, a: (np.transpose(xs[0], a.perm),),
    attrs=PermAttrs, fusion=Fusion.INJECTIVE,
    onnx=OnnxMapping({"Transpose": _import_transpose}, direct_export("Transpose", lambda a: {"perm": list(a.perm)})),
    sym_shape=_sym_transpose, sym_value=lambda xs, a, _D: (np.transpose(xs[0], a.perm),),
    doc="permute axes: output axis i is input axis perm[i]",
)
reshape = OpDef(
    "reshape", ("x",), shape=_reshape_shape, ref=lambda xs, a: (xs[0].reshape(a.shape),), attrs=ShapeAttrs,
    fusion=Fusion.INJECTIVE,
    onnx=OnnxMapping({"Reshape": _import_reshape, "Squeeze": _import_squeeze, "Unsqueeze": _import_unsqueeze},
                     _export_reshape),
    sym_shape=_sym_reshape, sym_value=lambda xs, a, _D: (xs[0].reshape(a.shape),),
    doc="same elements in row-major order, explicit target shape",
)
flatten = OpDef(
    "flatten", ("x",), shape=_flatten_shape, attrs=FlattenAttrs, normalize=_positive_axis,
    ref=_flatten_ref, fusion=Fusion.INJECTIVE, sym_shape=_sym_flatten, sym_value=lambda xs, a, _D: _flatten_ref(xs, a),
    onnx=OnnxMapping({"Flatten": direct_import("flatten", axis="axis")}, direct_export("Flatten", _axis)),
    doc="2-D view: dims before axis multiply into rows, the rest into columns",
)
pad = OpDef(
    "pad", ("x",), shape=_pad_shape, ref=_pad_ref, attrs=PadAttrs, fusion=Fusion.INJECTIVE,
    onnx=OnnxMapping({"Pad": _import_pad}, _export_pad), sym_shape=_sym_pad, sym_value=_pad_sym,
    doc="constant padding at both ends of every axis",
)

OPS = (concat, split, transpose, reshape, flatten, pad)


def _perm(rank: int) -> str:
    return "[" + ", ".join(f"?p{i}" for i in range(rank)) + "]"


def _dims(name: str, rank: int) -> str:
    return "[" + ", ".join(f"?{name}{i}" for i in range(rank)) + "]"


# element-wise functions with attributes (not fusable as a convolution's `act`), their attributes as variables
_PARAMETRIC_UNARY = (("clip", ", min=?lo, max=?hi"), ("hardsigmoid", ", alpha=?a, beta=?b"),
                     ("leaky_relu", ", alpha=?a"), ("gelu", ""))

AXIOMS = (
    Axiom("concat-assoc", "concat(concat(a, b, axis=?k), c, axis=?k) == concat(a, concat(b, c, axis=?k), axis=?k)"),
    Axiom("split-concat-0", "split(concat(a, b, axis=?k), axis=?k, sizes=[dim(a, ?k), dim(b, ?k)])[0] == a",
          "splitting a concatenation where it was joined gives back the parts"),
    Axiom("split-concat-1", "split(concat(a, b, axis=?k), axis=?k, sizes=[dim(a, ?k), dim(b, ?k)])[1] == b"),
    Axiom("concat-split", "concat(split(x, axis=?k, sizes=[?m, ?n])[0], split(x, axis=?k, sizes=[?m, ?n])[1], "
          "axis=?k) == x", "joining the parts of a split gives back the whole"),
    *(Axiom(f"split3-{side}-{i}", f"split(x, axis=?k, sizes=[?a, ?b, ?c])[{i}] == {nested}",
            "a three-way split is two two-way splits, cut either way" if i == 0 else "")
      for side, forms in (("right", ("split(x, axis=?k, sizes=[?a, ?b + ?c])[0]",
                                     "split(split(x, axis=?k, sizes=[?a, ?b + ?c])[1], axis=?k, sizes=[?b, ?c])[0]",
                                     "split(split(x, axis=?k, sizes=[?a, ?b + ?c])[1], axis=?k, sizes=[?b, ?c])[1]")),
                          ("left", ("split(split(x, axis=?k, sizes=[?a + ?b, ?c])[0], axis=?k, sizes=[?a, ?b])[0]",
                                    "split(split(x, axis=?k, sizes=[?a + ?b, ?c])[0], axis=?k, sizes=[?a, ?b])[1]",
                                    "split(x, axis=?k, sizes=[?a + ?b, ?c])[1]")))
      for i, nested in enumerate(forms)),
    Axiom("concat-swap", "concat(concat(a, b, axis=?k), concat(c, d, axis=?k), axis=?j) == "
          "concat(concat(a, c, axis=?j), concat(b, d, axis=?j), axis=?k) "
          "where ?j != ?k, dim(a, ?k) == dim(c, ?k), dim(a, ?j) == dim(b, ?j)",
          "a 2x2 block matrix can be joined by rows or by columns first"),
    Axiom("transpose-involution", "transpose(transpose(x, perm=[1, 0]), perm=[1, 0]) == x"),
    Axiom("transpose-concat", "transpose(concat(a, b, axis=?k), perm=[1, 0]) == "
          "concat(transpose(a, perm=[1, 0]), transpose(b, perm=[1, 0]), axis=1 - ?k)"),
    *(Axiom(f"transpose-identity-{r}", f"transpose(x, perm={list(range(r))}) == x") for r in range(1, 5)),
    *(Axiom(f"{act}-concat", f"{act}(concat(a, b, axis=?k)) == concat({act}(a), {act}(b), axis=?k)",
            "element-wise functions act on each part") for act in ACTIVATIONS),
    *(Axiom(f"{act}-split-{i}", f"{act}(split(x, axis=?k, sizes=[?m, ?n])[{i}]) == "
            f"split({act}(x), axis=?k, sizes=[?m, ?n])[{i}]") for act in ACTIVATIONS for i in (0, 1)),
    *(Axiom(f"{act}-transpose-{r}", f"{act}(transpose(x, perm={_perm(r)})) == transpose({act}(x), perm={_perm(r)})")
      for act in ACTIVATIONS for r in range(2, 5)),
    *(Axiom(f"{op}-concat", f"{op}(concat(a, b, axis=?k){args}) == concat({op}(a{args}), {op}(b{args}), axis=?k)",
            "element-wise functions with parameters act on each part too") for op, args in _PARAMETRIC_UNARY),
    *(Axiom(f"{op}-split-{i}", f"{op}(split(x, axis=?k, sizes=[?m, ?n])[{i}]{args}) == "
            f"split({op}(x{args}), axis=?k, sizes=[?m, ?n])[{i}]") for op, args in _PARAMETRIC_UNARY for i in (0, 1)),
    *(Axiom(f"transpose-{op}-{r}", f"transpose({op}(a, b), perm={_perm(r)}) == "
            f"{op}(transpose(a, perm={_perm(r)}), transpose(b, perm={_perm(r)}))",
            "operands of equal rank broadcast along the same axes before and after a transpose"
            if op == "add" and r == 2 else "") for op in ("add", "sub", "mul") for r in range(2, 5)),
    Axiom("transpose-add-vector", "transpose(add(a, b), perm=[1, 0]) == "
          "add(transpose(a, perm=[1, 0]), reshape(b, shape=[dim(b, 0), 1])) where rank(b) == 1",
          "a bias along a matrix's rows is a column of the transpose"),
    Axiom("add-vector-as-row", "add(a, reshape(b, shape=[1, ?n])) == add(a, b) where rank(b) == 1, rank(a) >= 2",
          "a vector broadcasts as the row it reshapes to (no pattern on the right side: no matching loop)"),
    *(Axiom(f"reshape-compose-{m}-{n}", f"reshape(reshape(x, shape={_dims('s', m)}), shape={_dims('t', n)}) == "
            f"reshape(x, shape={_dims('t', n)})", "reshapes keep the row-major order, so two are one"
            if m == n == 1 else "") for m in range(1, 5) for n in range(1, 5)),
    *(Axiom(f"reshape-identity-{r}", f"reshape(x, shape=[{', '.join(f'dim(x, {k})' for k in range(r))}]) == x "
            f"where rank(x) == {r}") for r in range(1, 5)),
    *(Axiom(f"{act}-reshape-{n}", f"{act}(reshape(x, shape={_dims('s', n)})) == "
            f"reshape({act}(x), shape={_dims('s', n)})") for act in ACTIVATIONS for n in range(1, 5)),
    Axiom("scalar-concat", "scalar_mul(concat(a, b, axis=?k), scale=?s) == "
          "concat(scalar_mul(a, scale=?s), scalar_mul(b, scale=?s), axis=?k)"),
    *(Axiom(f"{op}-concat", f"{op}(concat(a, b, axis=?k), concat(c, d, axis=?k)) == "
            f"concat({op}(a, c), {op}(b, d), axis=?k) where rank(a) == rank(c), dim(a, ?k) == dim(c, ?k)",
            "element-wise arithmetic on matching parts") for op in ("add", "mul")),
    *(Axiom(f"{op}-concat-vector", f"{op}(concat(a, b, axis=?k), concat(c, d, axis=0)) == "
            f"concat({op}(a, c), {op}(b, d), axis=?k) where ?k == rank(a) - 1, rank(c) == 1, "
            "dim(c, 0) == dim(a, ?k)",
            "a vector broadcast along the last axis (a bias) acts on each part" if op == "add" else "")
      for op in ("add", "mul")),
)
