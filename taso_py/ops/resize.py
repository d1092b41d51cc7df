"""Resize (ONNX Resize at opsets 10 to 19, Upsample at 7 and 9): nearest and linear interpolation.

The attributes are the output shape (`sizes`), the modes, and the scales only where the coordinate
mapping needs a scale that is not sizes / input dims: ONNX maps output index i to input coordinate
x(i) with the scale it was given, which differs from out / in when `floor(in * scale)` rounded. A
scale is a float32, kept exactly as a fraction (`scale_num` / `scale_den`: the verifier's attributes
are integers). Scales and sizes must be constants; computed at run time the node stays opaque, like slice's bounds.

The semantics are ONNX Runtime's, float32 arithmetic included, so nearest neighbours agree exactly:
an axis whose scale is 1 is copied as it is, x(i) is clamped to the input, a coordinate within 1e-6
of a half rounds as a tie (as ORT 1.32 does, measured), and linear weights are ORT's (0.5 each where
both neighbours are the last element). Before opset 11 the mapping is
`asymmetric` and the nearest index rounds down on an upsampled axis and up on a downsampled one;
import picks `floor` or `ceil` where that is the same, and export writes the old forms where they
mean the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from taso_py.errors import AttrError, ShapeError, Unsupported
from taso_py.ops.onnx_map import ExportContext, ExportNode, ImportContext, OnnxMapping
from taso_py.ops.schema import Axiom, Fusion, OpDef, set_attr
from taso_py.ops.symbolic import Arith, ScalarDomain, SymShape
from taso_py.types import TensorType

MODES = ("nearest", "linear")
COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
SIMPLE = "simple"  # the nearest rounding before opset 11 (ORT's name): floor when upsampling, ceil when downsampling
F32 = np.float32
TIE = float(F32(1e-6))  # how close to a half ORT's nearest rounding counts a coordinate as halfway


@dataclass(frozen=True)
class ResizeAttrs:
    """The output shape, the interpolation, and the scales the coordinate mapping uses as fractions (none:
    sizes / dims)."""

    sizes: tuple[int, ...]
    mode: str = "nearest"
    coordinate_transformation_mode: str = "half_pixel"
    nearest_mode: str = "round_prefer_floor"
    scale_num: tuple[int, ...] = ()
    scale_den: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        set_attr(self, "sizes", tuple(int(d) for d in self.sizes))
        if any(d < 1 for d in self.sizes):
            raise AttrError(f"sizes must be >= 1, got {list(self.sizes)}")
        num, den = tuple(int(v) for v in self.scale_num), tuple(int(v) for v in self.scale_den)
        if len(num) != len(den) or any(v < 1 for v in num + den):
            raise AttrError(f"scale_num {list(num)} and scale_den {list(den)} need positive values, as many of each")
        exact = scale_fractions(n / d for n, d in zip(num, den))  # ONNX's scales are float32
        set_attr(self, "scale_num", exact["scale_num"])
        set_attr(self, "scale_den", exact["scale_den"])
        for name, allowed in (
            ("mode", MODES),
            ("coordinate_transformation_mode", COORDINATE_MODES),
            ("nearest_mode", NEAREST_MODES),
        ):
            if getattr(self, name) not in allowed:
                raise AttrError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")

    @property
    def scales(self) -> tuple[float, ...]:
        return tuple(n / d for n, d in zip(self.scale_num, self.scale_den))


def scale_fractions(scales: Iterable[float]) -> dict[str, tuple[int, ...]]:
    """`scale_num` and `scale_den` holding float32 scales exactly."""
    exact = [Fraction(float(F32(v))) for v in scales]
    return {"scale_num": tuple(f.numerator for f in exact), "scale_den": tuple(f.denominator for f in exact)}


# ---- the coordinate mapping, per axis, as ONNX Runtime computes it ------------------------------


def axis_scale(a: ResizeAttrs, k: int, n_in: int) -> np.float32:
    """ORT's scale of axis k: the given one, else float32(out) / float32(in)."""
    return F32(a.scales[k]) if a.scales else F32(a.sizes[k]) / F32(n_in)


def is_copy(a: ResizeAttrs, k: int, n_in: int) -> bool:
    """Whether axis k is copied as it is: ORT skips the mapping where the scale is exactly 1."""
    return bool(axis_scale(a, k, n_in) == 1)


def source_coords(a: ResizeAttrs, k: int, n_in: int, mode: str | None = None) -> np.ndarray:
    """x(i) for every output index i of axis k, in float32, in ORT's order of operations."""
    n_out, s = a.sizes[k], axis_scale(a, k, n_in)
    i = np.arange(n_out, dtype=F32)
    half = F32(0.5)
    match mode or a.coordinate_transformation_mode:
        case "asymmetric":
            return i / s
        case "tf_half_pixel_for_nn":
            return (i + half) / s
        case "align_corners":
            return np.zeros(n_out, F32) if n_out == 1 else i * F32(n_in - 1) / F32(n_out - 1)
        case "pytorch_half_pixel" if n_out == 1:
            return np.zeros(1, F32)
        case _:  # half_pixel, and pytorch_half_pixel on more than one output
            return (i + half) / s - half


def _round(wide: np.ndarray, prefer: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Rounding to the nearest integer where a coordinate within `TIE` of a half is a tie, broken by
    `prefer` (np.floor or np.ceil): ONNX Runtime's rounding, measured (3.4999998 rounds up when ties do)."""
    tie = np.abs(wide - np.floor(wide) - 0.5) < TIE
    return np.where(tie, prefer(wide), np.floor(wide + 0.5))


def nearest_indices(
    a: ResizeAttrs, k: int, n_in: int, coordinate_mode: str | None = None, rounding: str | None = None
) -> np.ndarray:
    """The input index each output index of axis k reads in nearest mode (another mapping or rounding
    may be asked for: the old opsets' `asymmetric` and `simple`)."""
    if is_copy(a, k, n_in):
        return np.arange(a.sizes[k], dtype=np.int64)
    x = source_coords(a, k, n_in, coordinate_mode)
    wide = x.astype(np.float64)
    match rounding or a.nearest_mode:
        case "floor":
            idx = np.floor(wide)
        case "ceil":
            idx = np.ceil(wide)
        case "round_prefer_ceil":
            idx = _round(wide, np.ceil)
        case "round_prefer_floor":
            idx = _round(wide, np.floor)
        case _:  # simple
            idx = np.ceil(wide) if axis_scale(a, k, n_in) < 1 else np.trunc(wide)
    return np.clip(idx, 0, n_in - 1).astype(np.int64)


def linear_taps(a: ResizeAttrs, k: int, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lower index, upper index, lower weight, upper weight) per output index of axis k, as ORT's bilinear
    setup makes them: x clamped to the input, weights |x - other index|, 0.5 each where both are the last."""
    x = np.clip(source_coords(a, k, n_in), F32(0), F32(n_in - 1))
    lo = np.minimum(x.astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    w_lo, w_hi = np.abs(x - hi.astype(F32)), np.abs(x - lo.astype(F32))
    same = lo == hi
    w_lo[same], w_hi[same] = F32(0.5), F32(0.5)
    return lo, hi, w_lo, w_hi


def _resize(x: np.ndarray, a: ResizeAttrs, weights: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """One axis at a time (the interpolation is separable); `weights` turns float32 weights into the
    values they multiply with (the input's type in numpy, domain constants symbolically)."""
    for k in range(x.ndim):
        n_in = x.shape[k]
        if is_copy(a, k, n_in):
            continue
        if a.mode == "nearest":
            x = np.take(x, nearest_indices(a, k, n_in), axis=k)
            continue
        lo, hi, w_lo, w_hi = linear_taps(a, k, n_in)
        along = [1] * x.ndim
        along[k] = -1
        x = np.take(x, lo, axis=k) * weights(w_lo).reshape(along) + np.take(x, hi, axis=k) * weights(w_hi).reshape(
            along
        )
    return x


def _ref(xs: Sequence[np.ndarray], a: ResizeAttrs) -> tuple[np.ndarray, ...]:
    x = xs[0]
    return (np.ascontiguousarray(_resize(x, a, lambda w: w.astype(x.dtype))),)


def _sym_value(xs: Sequence[np.ndarray], a: ResizeAttrs, D: ScalarDomain) -> tuple[np.ndarray, ...]:
    """Nearest is data movement; linear multiplies by the float32 weights, taken exactly."""
    return (_resize(xs[0], a, lambda w: np.array([D.const(Fraction(float(v))) for v in w], dtype=object)),)


# ---- shapes ------------------------------------------------------------------------------------


def _out_dim(n_in: int, scale: float) -> int:
    """ORT's output size for a scale: the float32 product truncated."""
    return int(F32(scale) * F32(n_in))


def _shape(in_types: Sequence[TensorType], a: ResizeAttrs) -> tuple[TensorType, ...]:
    x = in_types[0]
    s = x.known_shape
    if len(s) != len(a.sizes) or (a.scales and len(a.scales) != len(s)):
        raise ShapeError(f"sizes {list(a.sizes)} and scales {list(a.scales)} need one value per axis of {list(s)}")
    if 0 in s:
        raise ShapeError(f"cannot resize the empty axis of {list(s)}")
    if a.scales and tuple(_out_dim(n, f) for n, f in zip(s, a.scales)) != a.sizes:
        raise ShapeError(
            f"scales {list(a.scales)} of {list(s)} make {[_out_dim(n, f) for n, f in zip(s, a.scales)]}, "
            f"not sizes {list(a.sizes)}"
        )
    if a.mode == "linear" and not x.dtype.is_float:
        raise ShapeError(f"linear interpolation needs a floating-point input, got {x.dtype.value}")
    return (TensorType(a.sizes, x.dtype),)


def _normalize(a: ResizeAttrs, in_types: Sequence[TensorType]) -> ResizeAttrs:
    """Drop what the semantics do not read: scales equal to sizes / dims (or all of them under
    align_corners), the rounding of linear interpolation; a rounding that picks the indices an
    earlier one of NEAREST_MODES picks becomes that one (an integer coordinate rounds alike)."""
    s = in_types[0].known_shape
    derived = replace(a, scale_num=(), scale_den=())
    if a.scales and len(a.scales) != len(s):  # the shape rule says what is wrong
        return a
    if a.coordinate_transformation_mode == "align_corners" or all(
        axis_scale(a, k, n) == axis_scale(derived, k, n) for k, n in enumerate(s)
    ):
        a = derived
    if a.mode == "linear":
        return replace(a, nearest_mode="round_prefer_floor")
    tables = [nearest_indices(a, k, n) for k, n in enumerate(s)]
    for rounding in NEAREST_MODES:  # the first rounding that picks the same indices
        same = replace(a, nearest_mode=rounding)
        if all(np.array_equal(t, nearest_indices(same, k, n)) for t, (k, n) in zip(tables, enumerate(s))):
            return same
    return a


def _sym_shape(s: Sequence[tuple], a: ResizeAttrs, _A: Arith) -> SymShape | None:
    """The output is `sizes`; the model leaves out explicit scales (their sizes are float products)."""
    if a.scale_num or len(s[0]) != len(a.sizes):
        return None
    return (tuple(a.sizes),), (*(d >= 1 for d in s[0]), *(d >= 1 for d in a.sizes))


def _flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: ResizeAttrs) -> int:
    """Nearest moves data; linear takes two multiply-adds per interpolated axis and element."""
    if a.mode == "nearest":
        return outs[0].size
    moved = sum(1 for n, m in zip(ins[0].known_shape, a.sizes) if n != m)
    return outs[0].size * max(4 * moved, 1)


# ---- ONNX --------------------------------------------------------------------------------------


def _float_input(ctx: ImportContext, i: int) -> list[float] | None:
    """Constant input i as floats; None when absent or empty (ONNX's "not given")."""
    if ctx.n_inputs <= i or ctx.input(i) is None:
        return None
    value = ctx.const(i)
    if value is None:
        raise Unsupported(f"{ctx.op_type} with scales or sizes computed at run time")
    return None if value.size == 0 else [v.item() for v in value.reshape(-1)]


def _full(values: list, axes: list[int] | None, dims: tuple[int, ...], missing: Callable[[int], object]) -> list:
    """Per-axis values listed for `axes` (opset 18) spread over every axis."""
    if axes is None:
        if len(values) != len(dims):
            raise ShapeError(f"{len(values)} values for an input of rank {len(dims)}")
        return values
    if len(values) != len(axes):
        raise ShapeError(f"{len(values)} values for {len(axes)} axes")
    out = [missing(k) for k in range(len(dims))]
    for k, v in zip(axes, values):
        out[k] = v
    return out


def _import(ctx: ImportContext) -> tuple:
    x = ctx.type(0)
    dims = x.known_shape
    mode = ctx.attr("mode", "nearest")
    if mode not in MODES:
        raise Unsupported(f"{ctx.op_type} in mode {mode!r}")
    if not dims:
        raise Unsupported(f"{ctx.op_type} of a scalar")
    if mode == "linear" and not x.dtype.is_float:
        raise Unsupported(f"linear {ctx.op_type} of {x.dtype.value}")
    legacy = ctx.op_type == "Upsample" or ctx.opset < 11
    if legacy:
        scales = ctx.attr("scales") if ctx.op_type == "Upsample" and ctx.opset < 9 else _float_input(ctx, 1)
        if scales is None:
            raise ShapeError(f"{ctx.op_type} needs scales")
        coord, sizes = "asymmetric", None
    else:
        coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
        if coord not in COORDINATE_MODES:
            raise Unsupported(f"Resize with coordinate_transformation_mode {coord!r}")
        if ctx.attr("antialias", 0) or ctx.attr("exclude_outside", 0):
            raise Unsupported("Resize with antialias or exclude_outside")
        axes = ctx.attr("axes")
        axes = None if axes is None else [k % len(dims) for k in axes]
        scales, sizes = _float_input(ctx, 2), _float_input(ctx, 3)
        if (scales is None) == (sizes is None):
            raise ShapeError("Resize needs exactly one of scales and sizes")
        if sizes is not None and ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            raise Unsupported("Resize with keep_aspect_ratio_policy other than stretch")
        if sizes is not None:
            sizes = _full([int(v) for v in sizes], axes, dims, lambda k: dims[k])
        if scales is not None:
            scales = _full(scales, axes, dims, lambda _k: 1.0)
    if scales is not None:
        scales = [float(F32(v)) for v in scales]
        if len(scales) != len(dims) or any(not v > 0 for v in scales):
            raise ShapeError(f"scales {scales} do not fit an input of rank {len(dims)}")
        sizes = [_out_dim(n, v) for n, v in zip(dims, scales)]
    attrs = {
        "sizes": tuple(sizes),
        "mode": mode,
        "coordinate_transformation_mode": coord,
        **scale_fractions(scales or ()),
    }
    if mode == "nearest":
        attrs["nearest_mode"] = (
            _legacy_rounding(ResizeAttrs(**attrs), dims) if legacy else ctx.attr("nearest_mode", "round_prefer_floor")
        )
    return ctx.add("resize", [ctx.input(0)], **attrs)


def _legacy_rounding(a: ResizeAttrs, dims: tuple[int, ...]) -> str:
    """The nearest_mode that picks the indices the old opsets' rounding picks on these dims."""
    for rounding in ("floor", "ceil"):
        if all(
            np.array_equal(nearest_indices(a, k, n, rounding=SIMPLE), nearest_indices(a, k, n, rounding=rounding))
            for k, n in enumerate(dims)
        ):
            return rounding
    raise Unsupported("nearest Resize before opset 11 that upsamples some axes and downsamples others")


def _legacy_equivalent(a: ResizeAttrs, dims: tuple[int, ...], scales: list[float]) -> bool:
    """Whether the opset < 11 form (asymmetric mapping, `simple` rounding) with `scales` means `a`."""
    old = ResizeAttrs(a.sizes, a.mode, "asymmetric", **scale_fractions(scales))
    if tuple(_out_dim(n, s) for n, s in zip(dims, old.scales)) != a.sizes:
        return False
    for k, n in enumerate(dims):
        if is_copy(a, k, n) and is_copy(old, k, n):
            continue
        if a.mode == "nearest":
            same = np.array_equal(nearest_indices(a, k, n), nearest_indices(old, k, n, rounding=SIMPLE))
        else:
            same = (
                not is_copy(a, k, n)
                and not is_copy(old, k, n)
                and np.array_equal(source_coords(a, k, n), source_coords(old, k, n))
            )
        if not same:
            return False
    return True


def _export(ctx: ExportContext, node: ExportNode) -> None:
    a: ResizeAttrs = node.attrs
    dims = node.in_types[0].known_shape
    scales = list(a.scales) or [float(axis_scale(a, k, n)) for k, n in enumerate(dims)]
    if ctx.opset < 11:
        if ctx.opset < 7 or not _legacy_equivalent(a, dims, scales) or (ctx.opset < 10 and min(scales) < 1):
            raise Unsupported(
                f"this resize ({a.mode}, {a.coordinate_transformation_mode}, {a.nearest_mode}) has "
                f"no {'Upsample' if ctx.opset < 10 else 'Resize'} form at opset {ctx.opset}"
            )
        op_type = "Upsample" if ctx.opset < 10 else "Resize"
        if ctx.opset < 9:
            ctx.emit(op_type, node.inputs, node.outputs, mode=a.mode, scales=scales)
        else:
            ctx.emit(op_type, [node.inputs[0], ctx.const(np.array(scales, F32), "scales")], node.outputs, mode=a.mode)
        return
    empty = "" if ctx.opset >= 13 else ctx.const(np.zeros(0, F32), "roi")
    if a.scales:
        inputs = [node.inputs[0], empty, ctx.const(np.array(a.scales, F32), "scales")]
    else:
        inputs = [node.inputs[0], empty, empty, ctx.const(np.array(a.sizes, np.int64), "sizes")]
    nearest = {"nearest_mode": a.nearest_mode} if a.mode == "nearest" else {}
    ctx.emit(
        "Resize",
        inputs,
        node.outputs,
        mode=a.mode,
        coordinate_transformation_mode=a.coordinate_transformation_mode,
        **nearest,
    )


# ---- the entry ---------------------------------------------------------------------------------

resize = OpDef(
    "resize",
    ("x",),
    shape=_shape,
    ref=_ref,
    attrs=ResizeAttrs,
    normalize=_normalize,
    fusion=Fusion.INJECTIVE,
    flops=_flops,
    onnx=OnnxMapping({"Resize": _import, "Upsample": _import}, _export),
    sym_shape=_sym_shape,
    sym_value=_sym_value,
    doc="nearest or (multi-)linear interpolation to `sizes`, with ONNX's coordinate and rounding modes",
)

OPS = (resize,)

AXIOMS = (
    *(
        Axiom(
            f"resize-identity-{mode}",
            f"resize(x, sizes=[dim(x, 0), dim(x, 1)], mode={mode}) == x where rank(x) == 2",
            "every axis keeps its size: the scales are 1, and such axes are copied",
        )
        for mode in MODES
    ),
    Axiom(
        "relu-resize",
        "relu(resize(x, sizes=[?a, ?b])) == resize(relu(x), sizes=[?a, ?b])",
        "nearest neighbours move data, which commutes with element-wise functions",
    ),
)
