"""Convolution, transposed convolution and pooling over NCHW tensors, and TASO's kernel `enlarge`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

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
from taso_py.ops.schema import Axiom, Fusion, OpDef, float_only, int_tuple, same_dtype, set_attr
from taso_py.ops.symbolic import INT, Arith, Dim, ScalarDomain, SymShape, window
from taso_py.types import TensorType

ACTS = ("none", *ACTIVATIONS)


@dataclass(frozen=True)
class Conv2dAttrs:
    """Pads are (top, left, bottom, right) as in ONNX; `act` is a fused activation."""

    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    act: str = "none"

    def __post_init__(self) -> None:
        set_attr(self, "stride", int_tuple(self.stride, 2, "stride", low=1))
        set_attr(self, "pad", int_tuple(self.pad, 4, "pad", low=0))
        set_attr(self, "dilation", int_tuple(self.dilation, 2, "dilation", low=1))
        set_attr(self, "groups", int(self.groups))
        if self.groups < 1:
            raise AttrError(f"groups must be >= 1, got {self.groups}")
        if self.act not in ACTS:
            raise AttrError(f"act must be one of {', '.join(ACTS)}, got {self.act!r}")


@dataclass(frozen=True)
class ConvTranspose2dAttrs:
    """ONNX ConvTranspose's: pads (top, left, bottom, right) crop the full output, `output_padding`
    adds rows and columns at its end, fewer than the stride (ONNX Runtime refuses more, even where torch
    allows up to the dilation)."""

    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    output_padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1

    def __post_init__(self) -> None:
        set_attr(self, "stride", int_tuple(self.stride, 2, "stride", low=1))
        set_attr(self, "pad", int_tuple(self.pad, 4, "pad", low=0))
        set_attr(self, "output_padding", int_tuple(self.output_padding, 2, "output_padding", low=0))
        set_attr(self, "dilation", int_tuple(self.dilation, 2, "dilation", low=1))
        set_attr(self, "groups", int(self.groups))
        if self.groups < 1:
            raise AttrError(f"groups must be >= 1, got {self.groups}")
        if any(p >= s for p, s in zip(self.output_padding, self.stride)):
            raise AttrError(f"output_padding {self.output_padding} must be less than the stride {self.stride}")


@dataclass(frozen=True)
class MaxPoolAttrs:
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    ceil_mode: bool = False

    def __post_init__(self) -> None:
        set_attr(self, "kernel", int_tuple(self.kernel, 2, "kernel", low=1))
        set_attr(self, "stride", int_tuple(self.stride, 2, "stride", low=1))
        set_attr(self, "pad", int_tuple(self.pad, 4, "pad", low=0))
        set_attr(self, "ceil_mode", bool(self.ceil_mode))
        if any(p >= k for p, k in zip(self.pad, self.kernel * 2)):
            raise AttrError(f"pad {self.pad} must be smaller than kernel {self.kernel}")


@dataclass(frozen=True)
class AvgPoolAttrs(MaxPoolAttrs):
    count_include_pad: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        set_attr(self, "count_include_pad", bool(self.count_include_pad))


@dataclass(frozen=True)
class EnlargeAttrs:
    kernel: tuple[int, int]

    def __post_init__(self) -> None:
        set_attr(self, "kernel", int_tuple(self.kernel, 2, "kernel", low=1))


def window_count(size: int, kernel: int, stride: int, pad0: int, pad1: int, dilation: int = 1,
                 ceil: bool = False) -> int:
    """Output length of a sliding window; in ceil mode no window may start in the end padding."""
    span = (kernel - 1) * dilation + 1
    room = size + pad0 + pad1 - span
    if room < 0:
        raise ShapeError(f"window of {span} does not fit in {size} padded by ({pad0}, {pad1})")
    out = (-(-room // stride) if ceil else room // stride) + 1
    if ceil and (out - 1) * stride >= size + pad0:
        out -= 1
    return out


def _nchw(t: TensorType, what: str = "x") -> tuple[int, int, int, int]:
    if t.rank != 4:
        raise ShapeError(f"{what} must be NCHW (rank 4), got rank {t.rank}")
    return t.known_shape  # type: ignore[return-value]


def _conv_shape(in_types: Sequence[TensorType], a: Conv2dAttrs) -> tuple[TensorType, ...]:
    same_dtype(in_types)
    float_only(in_types[0])
    n, c, h, w = _nchw(in_types[0])
    o, cg, kh, kw = _nchw(in_types[1], "weight")
    if c % a.groups or o % a.groups or cg * a.groups != c:
        raise ShapeError(f"{c} input channels, weight {[o, cg, kh, kw]} and groups={a.groups} do not fit")
    if len(in_types) == 3 and in_types[2].known_shape != (o,):
        raise ShapeError(f"bias must have shape [{o}], got {list(in_types[2].known_shape)}")
    ho = window_count(h, kh, a.stride[0], a.pad[0], a.pad[2], a.dilation[0])
    wo = window_count(w, kw, a.stride[1], a.pad[1], a.pad[3], a.dilation[1])
    return (TensorType((n, o, ho, wo), in_types[0].dtype),)


def _windows(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
             dilation: tuple[int, int] = (1, 1)) -> np.ndarray:
    """View of all kernel windows of an already padded NCHW array: [N, C, Ho, Wo, kh, kw]."""
    span = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilation))
    view = sliding_window_view(x, span, axis=(2, 3))
    return view[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]


def _conv_ref(xs: Sequence[np.ndarray], a: Conv2dAttrs) -> tuple[np.ndarray, ...]:
    out = _convolve(xs, a)
    if a.act != "none":
        (out,) = ACTIVATIONS[a.act].evaluate([out], None)
    return (out.astype(xs[0].dtype, copy=False),)


def _conv_sym(xs: Sequence[np.ndarray], a: Conv2dAttrs, D: ScalarDomain) -> tuple[np.ndarray, ...]:
    out = _convolve(xs, a)
    return ACTIVATIONS[a.act].sym_value([out], None, D) if a.act != "none" else (out,)


def _sym_conv(s: Sequence[tuple], a: Conv2dAttrs, A: Arith) -> SymShape | None:
    if len(s[0]) != 4 or len(s[1]) != 4 or (len(s) == 3 and len(s[2]) != 1):
        return None
    (n, c, h, w), (o, cg, kh, kw) = s[0], s[1]
    ho, fits_h = window(A, h, kh, a.stride[0], a.pad[0], a.pad[2], a.dilation[0])
    wo, fits_w = window(A, w, kw, a.stride[1], a.pad[1], a.pad[3], a.dilation[1])
    conds = (*fits_h, *fits_w, a.groups >= 1, cg * a.groups == c, A.mod(o, a.groups) == 0,
             *(v >= 1 for v in (*a.stride, *a.dilation)), *(p >= 0 for p in a.pad))
    if len(s) == 3:
        conds += (s[2][0] == o,)
    return ((n, o, ho, wo),), conds


def _convolve(xs: Sequence[np.ndarray], a: Conv2dAttrs) -> np.ndarray:
    """Convolution and bias, written with numpy calls that also work on object arrays."""
    x, w = xs[0], xs[1]
    n, _c = x.shape[:2]
    o, cg, kh, kw = w.shape
    g = a.groups
    top, left, bottom, right = a.pad
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    win = _windows(xp, (kh, kw), a.stride, a.dilation)
    ho, wo = win.shape[2:4]
    win = win.reshape(n, g, cg, ho, wo, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", win, w.reshape(g, o // g, cg, kh, kw), optimize=True)
    out = out.reshape(n, o, ho, wo)
    if len(xs) == 3:
        out = out + xs[2].reshape(1, o, 1, 1)
    return out


def transposed_size(size: Dim, kernel: Dim, stride: Dim, pad0: Dim, pad1: Dim, dilation: Dim,
                    output_padding: Dim) -> Dim:
    """Output length of a transposed convolution (over ints or symbolic terms): the full scatter, cropped."""
    return (size - 1) * stride + dilation * (kernel - 1) + 1 + output_padding - pad0 - pad1


def _conv_transpose_shape(in_types: Sequence[TensorType], a: ConvTranspose2dAttrs) -> tuple[TensorType, ...]:
    same_dtype(in_types)
    float_only(in_types[0])
    n, c, h, w = _nchw(in_types[0])
    ci, opg, kh, kw = _nchw(in_types[1], "weight")
    if ci != c or c % a.groups:
        raise ShapeError(f"{c} input channels, weight {[ci, opg, kh, kw]} and groups={a.groups} do not fit")
    o = opg * a.groups
    if len(in_types) == 3 and in_types[2].known_shape != (o,):
        raise ShapeError(f"bias must have shape [{o}], got {list(in_types[2].known_shape)}")
    ho, wo = (transposed_size(size, k, a.stride[i], a.pad[i], a.pad[i + 2], a.dilation[i], a.output_padding[i])
              for i, (size, k) in enumerate(((h, kh), (w, kw))))
    if ho < 1 or wo < 1:
        raise ShapeError(f"pads {list(a.pad)} crop the whole output")
    return (TensorType((n, o, ho, wo), in_types[0].dtype),)


def _sym_conv_transpose(s: Sequence[tuple], a: ConvTranspose2dAttrs, A: Arith) -> SymShape | None:
    if len(s[0]) != 4 or len(s[1]) != 4 or (len(s) == 3 and len(s[2]) != 1):
        return None
    (n, c, h, w), (ci, opg, kh, kw) = s[0], s[1]
    ho, wo = (transposed_size(size, k, a.stride[i], a.pad[i], a.pad[i + 2], a.dilation[i], a.output_padding[i])
              for i, (size, k) in enumerate(((h, kh), (w, kw))))
    conds = (ho >= 1, wo >= 1, a.groups >= 1, ci == c, A.mod(c, a.groups) == 0,
             *(v >= 1 for v in (*a.stride, *a.dilation)), *(p >= 0 for p in (*a.pad, *a.output_padding)),
             *(p < st for p, st in zip(a.output_padding, a.stride)))
    if len(s) == 3:
        conds += (s[2][0] == opg * a.groups,)
    return ((n, opg * a.groups, ho, wo),), conds


def _convolve_transpose(xs: Sequence[np.ndarray], a: ConvTranspose2dAttrs) -> np.ndarray:
    """Each kernel tap scatters a channel mix of the whole input onto a strided grid of the full
    output, which the pads then crop; numpy calls that also work on object arrays (the verifier's)."""
    x, w = xs[0], xs[1]
    n, c, h, wd = x.shape
    _, opg, kh, kw = w.shape
    g, (sh, sw), (dh, dw) = a.groups, a.stride, a.dilation
    full = np.zeros((n, g * opg, (h - 1) * sh + dh * (kh - 1) + 1 + a.output_padding[0],
                     (wd - 1) * sw + dw * (kw - 1) + 1 + a.output_padding[1]), dtype=x.dtype)
    xg, wg = x.reshape(n, g, c // g, h, wd), w.reshape(g, c // g, opg, kh, kw)
    for ky in range(kh):
        for kx in range(kw):
            tap = np.einsum("ngchw,gco->ngohw", xg, wg[..., ky, kx], optimize=True).reshape(n, g * opg, h, wd)
            full[:, :, ky * dh: ky * dh + (h - 1) * sh + 1: sh, kx * dw: kx * dw + (wd - 1) * sw + 1: sw] += tap
    top, left, bottom, right = a.pad
    out = full[:, :, top: full.shape[2] - bottom, left: full.shape[3] - right]
    if len(xs) == 3:
        out = out + xs[2].reshape(1, g * opg, 1, 1)
    return out


def _conv_transpose_ref(xs: Sequence[np.ndarray], a: ConvTranspose2dAttrs) -> tuple[np.ndarray, ...]:
    return (np.ascontiguousarray(_convolve_transpose(xs, a), dtype=xs[0].dtype),)


def _pool_shape(in_types: Sequence[TensorType], a: MaxPoolAttrs) -> tuple[TensorType, ...]:
    float_only(in_types[0], () if isinstance(a, AvgPoolAttrs) else ("int8", "uint8"))
    n, c, h, w = _nchw(in_types[0])
    ho = window_count(h, a.kernel[0], a.stride[0], a.pad[0], a.pad[2], ceil=a.ceil_mode)
    wo = window_count(w, a.kernel[1], a.stride[1], a.pad[1], a.pad[3], ceil=a.ceil_mode)
    return (TensorType((n, c, ho, wo), in_types[0].dtype),)


def _pool_padding(shape: tuple[int, ...], out_hw: tuple[int, ...], a: MaxPoolAttrs) -> list[tuple[int, int]]:
    """np.pad widths: the declared pads plus, in ceil mode, the overhang of the last window."""
    widths = [(0, 0), (0, 0)]
    for axis in (0, 1):
        before, after = a.pad[axis], a.pad[axis + 2]
        needed = (out_hw[axis] - 1) * a.stride[axis] + a.kernel[axis]
        widths.append((before, max(after, needed - shape[2 + axis] - before)))
    return widths


def _maxpool_ref(xs: Sequence[np.ndarray], a: MaxPoolAttrs) -> tuple[np.ndarray, ...]:
    x = xs[0]
    (t,) = _pool_shape([TensorType.of(x)], a)
    low = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    xp = np.pad(x, _pool_padding(x.shape, t.known_shape[2:], a), constant_values=low)
    win = _windows(xp, a.kernel, a.stride)[:, :, : t.known_shape[2], : t.known_shape[3]]
    return (win.max(axis=(4, 5)).astype(x.dtype),)


def _avgpool_ref(xs: Sequence[np.ndarray], a: AvgPoolAttrs) -> tuple[np.ndarray, ...]:
    x = xs[0]
    (t,) = _pool_shape([TensorType.of(x)], a)
    ho, wo = t.known_shape[2:]
    widths = _pool_padding(x.shape, (ho, wo), a)
    # Count the cells each window averages: the input, plus the declared pads if included.
    counted = np.ones((1, 1, *x.shape[2:]), np.float64)
    if a.count_include_pad:
        counted = np.pad(counted, [(0, 0), (0, 0), (a.pad[0], a.pad[2]), (a.pad[1], a.pad[3])], constant_values=1)
        extra = [(0, 0), (0, 0)] + [(w[0] - a.pad[i], w[1] - a.pad[i + 2]) for i, w in enumerate(widths[2:])]
        counted = np.pad(counted, extra)
    else:
        counted = np.pad(counted, widths)
    sums = _windows(np.pad(x.astype(np.float64), widths), a.kernel, a.stride)[:, :, :ho, :wo].sum(axis=(4, 5))
    counts = _windows(counted, a.kernel, a.stride)[:, :, :ho, :wo].sum(axis=(4, 5))
    return ((sums / counts).astype(x.dtype),)


def _sym_pool(s: Sequence[tuple], a: MaxPoolAttrs, A: Arith) -> SymShape | None:
    """The verifier models floor mode only."""
    if len(s[0]) != 4:
        return None
    n, c, h, w = s[0]
    ho, fits_h = window(A, h, a.kernel[0], a.stride[0], a.pad[0], a.pad[2])
    wo, fits_w = window(A, w, a.kernel[1], a.stride[1], a.pad[1], a.pad[3])
    conds = (*fits_h, *fits_w, A.not_(a.ceil_mode), *(v >= 1 for v in (*a.kernel, *a.stride)),
             *(p >= 0 for p in a.pad), *(p < k for p, k in zip(a.pad, a.kernel * 2)))
    return ((n, c, ho, wo),), conds


def _pool_cells(x: np.ndarray, a: MaxPoolAttrs) -> tuple[tuple[int, int], dict]:
    """For each output position (floor mode) the list of input cells its window covers."""
    h, w = x.shape[2:]
    ho, _ = window(INT, h, a.kernel[0], a.stride[0], a.pad[0], a.pad[2])
    wo, _ = window(INT, w, a.kernel[1], a.stride[1], a.pad[1], a.pad[3])
    cells = {}
    for i in range(ho):
        for j in range(wo):
            rows = range(i * a.stride[0] - a.pad[0], i * a.stride[0] - a.pad[0] + a.kernel[0])
            cols = range(j * a.stride[1] - a.pad[1], j * a.stride[1] - a.pad[1] + a.kernel[1])
            cells[i, j] = [(r, q) for r in rows for q in cols if 0 <= r < h and 0 <= q < w]
    return (ho, wo), cells


def _pool_sym(x: np.ndarray, a: MaxPoolAttrs, reduce: object) -> np.ndarray:
    (ho, wo), cells = _pool_cells(x, a)
    out = np.empty((*x.shape[:2], ho, wo), dtype=object)
    for n, c in np.ndindex(x.shape[:2]):
        for (i, j), where in cells.items():
            out[n, c, i, j] = reduce([x[n, c, r, q] for r, q in where])  # type: ignore[operator]
    return out


def _maxpool_sym(xs: Sequence[np.ndarray], a: MaxPoolAttrs, D: ScalarDomain) -> tuple[np.ndarray, ...]:
    def biggest(values: list) -> object:
        top = values[0]
        for v in values[1:]:
            top = D.max(top, v)
        return top

    return (_pool_sym(xs[0], a, biggest),)


def _avgpool_sym(xs: Sequence[np.ndarray], a: AvgPoolAttrs, D: ScalarDomain) -> tuple[np.ndarray, ...]:
    area = a.kernel[0] * a.kernel[1]
    return (_pool_sym(xs[0], a, lambda v: sum(v[1:], v[0]) * D.const(Fraction(1, area if a.count_include_pad
                                                                                else len(v)))),)


def _global_pool_shape(in_types: Sequence[TensorType], _a: object) -> tuple[TensorType, ...]:
    t = in_types[0]
    float_only(t)
    if t.rank < 3:
        raise ShapeError(f"needs rank >= 3 (N, C, spatial...), got rank {t.rank}")
    return (TensorType(t.known_shape[:2] + (1,) * (t.rank - 2), t.dtype),)


def _sym_global_pool(s: Sequence[tuple], _a: object, A: Arith) -> SymShape | None:
    if len(s[0]) < 3:
        return None
    return ((*s[0][:2], *(1,) * (len(s[0]) - 2)),), ()


def _global_pool_sym(xs: Sequence[np.ndarray], _a: object, D: ScalarDomain) -> tuple[np.ndarray, ...]:
    x = xs[0]
    axes = tuple(range(2, x.ndim))
    count = int(np.prod(x.shape[2:]))
    return (x.sum(axis=axes, keepdims=True) * D.const(Fraction(1, count)),)


def _global_pool_ref(xs: Sequence[np.ndarray], _a: object) -> tuple[np.ndarray, ...]:
    x = xs[0]
    axes = tuple(range(2, x.ndim))
    return (x.astype(np.float64).mean(axis=axes, keepdims=True).astype(x.dtype),)


def _enlarge_shape(in_types: Sequence[TensorType], a: EnlargeAttrs) -> tuple[TensorType, ...]:
    o, i, kh, kw = _nchw(in_types[0], "kernel")
    for have, want in zip((kh, kw), a.kernel):
        if want < have or (want - have) % 2:
            raise ShapeError(f"cannot center a {kh}x{kw} kernel in {a.kernel[0]}x{a.kernel[1]}")
    return (TensorType((o, i, *a.kernel), in_types[0].dtype),)


def _sym_enlarge(s: Sequence[tuple], a: EnlargeAttrs, A: Arith) -> SymShape | None:
    if len(s[0]) != 4:
        return None
    o, i, kh, kw = s[0]
    conds = tuple(c for have, want in zip((kh, kw), a.kernel) for c in (want >= have, A.mod(want - have, 2) == 0))
    return ((o, i, *a.kernel),), conds


def _enlarge_pads(shape: tuple[int, ...], a: EnlargeAttrs) -> tuple[int, int]:
    return (a.kernel[0] - shape[2]) // 2, (a.kernel[1] - shape[3]) // 2


def _enlarge_ref(xs: Sequence[np.ndarray], a: EnlargeAttrs) -> tuple[np.ndarray, ...]:
    ph, pw = _enlarge_pads(xs[0].shape, a)
    return (np.pad(xs[0], ((0, 0), (0, 0), (ph, ph), (pw, pw))),)


def _export_enlarge(ctx: ExportContext, node: ExportNode) -> None:
    ph, pw = _enlarge_pads(node.in_types[0].known_shape, node.attrs)
    pads = [0, 0, ph, pw, 0, 0, ph, pw]
    if ctx.opset < 11:
        ctx.emit("Pad", node.inputs, node.outputs, pads=pads)
    else:
        ctx.emit("Pad", [node.inputs[0], ctx.const(np.array(pads, np.int64), "pads")], node.outputs)


# ---- ONNX translation -----------------------------------------------------------------

def spatial_pads(ctx: ImportContext, kernel: tuple[int, int], stride: tuple[int, int],
                 dilation: tuple[int, int]) -> tuple[int, int, int, int]:
    """Explicit (top, left, bottom, right) pads from ONNX's `pads` or `auto_pad`."""
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return int_tuple(ctx.attr("pads", (0, 0, 0, 0)), 4, "pads")
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"auto_pad={auto}")
    begins, ends = [], []
    for size, k, s, d in zip(ctx.type(0).known_shape[2:], kernel, stride, dilation):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if auto == "SAME_UPPER" else large)
        ends.append(large if auto == "SAME_UPPER" else small)
    return (begins[0], begins[1], ends[0], ends[1])


def _require_2d(ctx: ImportContext) -> None:
    if ctx.type(0).rank != 4:
        raise Unsupported(f"{ctx.op_type} over rank {ctx.type(0).rank} (only 2-D NCHW is in the algebra)")


def _weight_kernel(ctx: ImportContext) -> tuple[int, int]:
    """The (kh, kw) of a 2-D convolution's OIHW weight; a weight of another rank is a malformed model."""
    weight = ctx.type(1)
    if weight.rank != 4:
        raise ShapeError(f"{ctx.op_type} weight of rank {weight.rank} over a 4-D input (OIHW expected)")
    kh, kw = weight.known_shape[2:]
    return kh, kw


def _import_conv(ctx: ImportContext) -> tuple:
    _require_2d(ctx)
    kernel = _weight_kernel(ctx)
    stride = int_tuple(ctx.attr("strides", 1), 2, "strides")
    dilation = int_tuple(ctx.attr("dilations", 1), 2, "dilations")
    pad = spatial_pads(ctx, kernel, stride, dilation)
    inputs = [ctx.input(i) for i in range(ctx.n_inputs) if ctx.input(i) is not None]
    return ctx.add("conv2d", inputs, stride=stride, pad=pad, dilation=dilation, groups=ctx.attr("group", 1))


def _export_conv(ctx: ExportContext, node: ExportNode) -> None:
    a: Conv2dAttrs = node.attrs
    attrs = dict(kernel_shape=list(node.in_types[1].known_shape[2:]), strides=list(a.stride),
                 pads=list(a.pad), dilations=list(a.dilation), group=a.groups)
    if a.act == "none":
        ctx.emit("Conv", node.inputs, node.outputs, **attrs)
        return
    (y,) = ctx.emit("Conv", node.inputs, **attrs)
    ACTIVATIONS[a.act].onnx.export(ctx, ExportNode([y], node.outputs, None, node.out_types, node.out_types))


def _import_conv_transpose(ctx: ImportContext) -> tuple:
    """Both opset forms (1 and 11+): `output_shape` becomes pads (and output padding where it asks
    for more than the full output, as ONNX Runtime computes it), `auto_pad` SAME_* pads to input x stride."""
    _require_2d(ctx)
    x_hw, kernel = ctx.type(0).known_shape[2:], _weight_kernel(ctx)
    if tuple(ctx.attr("kernel_shape", kernel)) != tuple(kernel):
        raise Unsupported(f"ConvTranspose with kernel_shape {ctx.attr('kernel_shape')} unlike its weight's {kernel}")
    stride = int_tuple(ctx.attr("strides", 1), 2, "strides")
    dilation = int_tuple(ctx.attr("dilations", 1), 2, "dilations")
    extra = list(int_tuple(ctx.attr("output_padding", 0), 2, "output_padding"))
    auto = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"auto_pad={auto}")
    wanted = ctx.attr("output_shape")
    if wanted is None and auto.startswith("SAME"):
        if any(extra):  # ONNX Runtime then ignores output_padding in the size, onnx's shape inference does not
            raise Unsupported("ConvTranspose with auto_pad SAME_* and output_padding")
        wanted = [size * st for size, st in zip(x_hw, stride)]
    if wanted is None:
        pad = (0, 0, 0, 0) if auto == "VALID" else int_tuple(ctx.attr("pads", (0, 0, 0, 0)), 4, "pads")
    else:
        if len(wanted) != 2:
            raise Unsupported(f"ConvTranspose with output_shape {list(wanted)} (2 spatial sizes expected)")
        begins, ends = [], []
        for i in range(2):
            total = transposed_size(x_hw[i], kernel[i], stride[i], 0, 0, dilation[i], extra[i]) - int(wanted[i])
            if total < 0 and ctx.attr("output_shape") is not None:  # a larger output: more output padding
                extra[i], total = extra[i] - total, 0
            total = max(total, 0)  # SAME_* on a kernel shorter than the stride: the full output
            small, large = total // 2, total - total // 2
            begins.append(small if auto == "SAME_UPPER" else large)
            ends.append(large if auto == "SAME_UPPER" else small)
        pad = (begins[0], begins[1], ends[0], ends[1])
    inputs = [ctx.input(i) for i in range(ctx.n_inputs) if ctx.input(i) is not None]
    return ctx.add("conv_transpose2d", inputs, stride=stride, pad=pad, output_padding=tuple(extra),
                   dilation=dilation, groups=ctx.attr("group", 1))


def _export_conv_transpose(ctx: ExportContext, node: ExportNode) -> None:
    a: ConvTranspose2dAttrs = node.attrs
    attrs = dict(kernel_shape=list(node.in_types[1].known_shape[2:]), strides=list(a.stride), pads=list(a.pad),
                 dilations=list(a.dilation), group=a.groups)
    if any(a.output_padding):
        attrs["output_padding"] = list(a.output_padding)
    ctx.emit("ConvTranspose", node.inputs, node.outputs, **attrs)


def _pool_import(op: str) -> object:
    def translate(ctx: ImportContext) -> tuple:
        _require_2d(ctx)
        if ctx.output_used(1):
            raise Unsupported(f"{ctx.op_type} with an Indices output")
        if int_tuple(ctx.attr("dilations", 1), 2, "dilations") != (1, 1):
            raise Unsupported(f"{ctx.op_type} with dilations")
        kernel = int_tuple(ctx.attr("kernel_shape"), 2, "kernel_shape")
        stride = int_tuple(ctx.attr("strides", 1), 2, "strides")
        extra = {"count_include_pad": ctx.attr("count_include_pad", 0)} if op == "avgpool2d" else {}
        return ctx.add(op, [ctx.input(0)], kernel=kernel, stride=stride, ceil_mode=ctx.attr("ceil_mode", 0),
                       pad=spatial_pads(ctx, kernel, stride, (1, 1)), **extra)

    return translate


def _pool_export(op_type: str) -> object:
    def attrs(a: MaxPoolAttrs) -> dict:
        out = dict(kernel_shape=list(a.kernel), strides=list(a.stride), pads=list(a.pad))
        if a.ceil_mode:
            out["ceil_mode"] = 1
        if isinstance(a, AvgPoolAttrs):
            out["count_include_pad"] = int(a.count_include_pad)
        return out

    return direct_export(op_type, attrs)


def _conv_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], _a: object) -> int:
    _, cin_per_group, kh, kw = ins[1].known_shape
    return 2 * outs[0].size * cin_per_group * kh * kw


def _conv_transpose_flops(ins: Sequence[TensorType], _outs: Sequence[TensorType], _a: object) -> int:
    """Every input element meets every tap of its group's output channels."""
    _, opg, kh, kw = ins[1].known_shape
    return 2 * ins[0].size * opg * kh * kw


def _pool_flops(_ins: Sequence[TensorType], outs: Sequence[TensorType], a: MaxPoolAttrs | AvgPoolAttrs) -> int:
    return outs[0].size * a.kernel[0] * a.kernel[1]


conv2d = OpDef(
    "conv2d", ("x", "w", "b"), optional=1, shape=_conv_shape, flops=_conv_flops, ref=_conv_ref, attrs=Conv2dAttrs,
    fusion=Fusion.COMPLEX_OUT_FUSABLE, onnx=OnnxMapping({"Conv": _import_conv}, _export_conv),
    sym_shape=_sym_conv, sym_value=_conv_sym,
    doc="2-D convolution, NCHW x and OIHW weight, optional bias, groups, fused activation",
)
conv_transpose2d = OpDef(
    "conv_transpose2d", ("x", "w", "b"), optional=1, shape=_conv_transpose_shape, flops=_conv_transpose_flops,
    ref=_conv_transpose_ref, attrs=ConvTranspose2dAttrs, fusion=Fusion.COMPLEX_OUT_FUSABLE,
    onnx=OnnxMapping({"ConvTranspose": _import_conv_transpose}, _export_conv_transpose),
    sym_shape=_sym_conv_transpose, sym_value=lambda xs, a, _D: (_convolve_transpose(xs, a),),
    doc="2-D transposed convolution, NCHW x and (C_in, C_out/groups, kH, kW) weight, optional bias, groups",
)
maxpool2d = OpDef(
    "maxpool2d", ("x",), shape=_pool_shape, flops=_pool_flops, ref=_maxpool_ref, attrs=MaxPoolAttrs,
    fusion=Fusion.COMPLEX_OUT_FUSABLE,
    onnx=OnnxMapping({"MaxPool": _pool_import("maxpool2d")}, _pool_export("MaxPool")),
    sym_shape=_sym_pool, sym_value=_maxpool_sym,
    doc="2-D max pooling",
)
avgpool2d = OpDef(
    "avgpool2d", ("x",), shape=_pool_shape, flops=_pool_flops, ref=_avgpool_ref, attrs=AvgPoolAttrs,
    fusion=Fusion.COMPLEX_OUT_FUSABLE,
    onnx=OnnxMapping({"AveragePool": _pool_import("avgpool2d")}, _pool_export("AveragePool")),
    sym_shape=_sym_pool, sym_value=_avgpool_sym,
    doc="2-D average pooling; count_include_pad says whether pads count in the divisor",
)
global_avgpool = OpDef(
    "global_avgpool", ("x",), shape=_global_pool_shape, ref=_global_pool_ref, fusion=Fusion.REDUCTION,
    onnx=OnnxMapping({"GlobalAveragePool": direct_import("global_avgpool")}, direct_export("GlobalAveragePool")),
    sym_shape=_sym_global_pool, sym_value=_global_pool_sym,
    doc="mean over all spatial positions, keeping them as size-1 dims",
)
enlarge = OpDef(
    "enlarge", ("w",), shape=_enlarge_shape, ref=_enlarge_ref, attrs=EnlargeAttrs, fusion=Fusion.INJECTIVE,
    onnx=OnnxMapping({}, _export_enlarge), weights_only=True,
    sym_shape=_sym_enlarge, sym_value=lambda xs, a, _D: _enlarge_ref(xs, a),
    doc="zero-pad a conv kernel, centered, to a larger kernel size (TASO's enlarge)",
)

OPS = (conv2d, conv_transpose2d, maxpool2d, avgpool2d, global_avgpool, enlarge)

_CONV = "stride=[?sh, ?sw], pad=[?pt, ?pl, ?pb, ?pr], dilation=[?dh, ?dw], groups=?g"  # any convolution
_CONV1 = "stride=[?sh, ?sw], pad=[?pt, ?pl, ?pb, ?pr], dilation=[?dh, ?dw]"  # groups=1
_POOL = "kernel=[?kh, ?kw], stride=[?sh, ?sw], pad=[?pt, ?pl, ?pb, ?pr]"
# any transposed convolution, and one with groups=1
_CT = "stride=[?sh, ?sw], pad=[?pt, ?pl, ?pb, ?pr], output_padding=[?oh, ?ow], dilation=[?dh, ?dw], groups=?g"
_CT1 = "stride=[?sh, ?sw], pad=[?pt, ?pl, ?pb, ?pr], output_padding=[?oh, ?ow], dilation=[?dh, ?dw]"
# Linearity needs equal heights and widths only: a batch (or a set of kernels) of one broadcasts
# like a constant, and the channels are equal wherever both convolutions are defined.
_SAME_HW = "dim(a, 2) == dim(b, 2), dim(a, 3) == dim(b, 3)"

AXIOMS = (
    *(Axiom(f"conv-{act}", f"{act}(conv2d(x, w, {_CONV})) == conv2d(x, w, {_CONV}, act={act})",
            f"a {act} after a convolution fuses into it") for act in ACTIVATIONS),
    *(Axiom(f"conv-bias-{act}", f"{act}(conv2d(x, w, b, {_CONV})) == conv2d(x, w, b, {_CONV}, act={act})")
      for act in ACTIVATIONS),
    Axiom("conv-add-weights", f"conv2d(x, add(a, b), {_CONV}) == add(conv2d(x, a, {_CONV}), conv2d(x, b, {_CONV})) "
          f"where {_SAME_HW}", "convolution is linear in the weights (one kernel broadcast to all outputs too)"),
    Axiom("conv-add-input", f"conv2d(add(a, b), w, {_CONV}) == add(conv2d(a, w, {_CONV}), conv2d(b, w, {_CONV})) "
          f"where {_SAME_HW}", "convolution is linear in the input, at any stride, padding and dilation"),
    Axiom("conv-add-input-unpadded", "conv2d(add(a, b), w, stride=[?sh, ?sw], pad=[0, 0, 0, 0], dilation=[?dh, ?dw], "
          "groups=?g) == add(conv2d(a, w, stride=[?sh, ?sw], pad=[0, 0, 0, 0], dilation=[?dh, ?dw], groups=?g), "
          "conv2d(b, w, stride=[?sh, ?sw], pad=[0, 0, 0, 0], dilation=[?dh, ?dw], groups=?g))",
          "without padding, an input broadcast over height or width is only read by a 1x1 kernel, which "
          "commutes with the broadcast"),
    Axiom("conv-scalar-input", f"conv2d(scalar_mul(x, scale=?s), w, {_CONV}) == "
          f"scalar_mul(conv2d(x, w, {_CONV}), scale=?s)"),
    Axiom("conv-scalar-weights", f"conv2d(x, scalar_mul(w, scale=?s), {_CONV}) == "
          f"scalar_mul(conv2d(x, w, {_CONV}), scale=?s)"),
    Axiom("conv-concat-weights", f"conv2d(x, concat(a, b, axis=0), {_CONV1}) == "
          f"concat(conv2d(x, a, {_CONV1}), conv2d(x, b, {_CONV1}), axis=1)",
          "output channels are independent: two convolutions of one input are one with stacked kernels"),
    Axiom("conv-concat-weights-bias", f"conv2d(x, concat(a, b, axis=0), concat(c, d, axis=0), {_CONV1}) == "
          f"concat(conv2d(x, a, c, {_CONV1}), conv2d(x, b, d, {_CONV1}), axis=1)"),
    Axiom("conv-concat-batch", f"conv2d(concat(a, b, axis=0), w, {_CONV}) == "
          f"concat(conv2d(a, w, {_CONV}), conv2d(b, w, {_CONV}), axis=0)"),
    Axiom("conv-concat-channels", f"conv2d(concat(a, b, axis=1), concat(c, d, axis=1), {_CONV1}) == "
          f"add(conv2d(a, c, {_CONV1}), conv2d(b, d, {_CONV1})) where dim(a, 1) == dim(c, 1)",
          "input channels contribute a sum"),
    Axiom("conv-groups-concat", f"conv2d(concat(a, b, axis=1), concat(c, d, axis=0), {_CONV1}, groups=2) == "
          f"concat(conv2d(a, c, {_CONV1}), conv2d(b, d, {_CONV1}), axis=1) "
          "where dim(a, 1) == dim(b, 1), dim(c, 0) == dim(d, 0)",
          "two equal halves make a grouped convolution: only when the shapes line up"),
    *(Axiom(f"conv-enlarge{suffix}", f"conv2d(x, enlarge(w, kernel=[?kh, ?kw]){bias}, stride=[?sh, ?sw], "
            f"pad=[?pt, ?pl, ?pb, ?pr], groups=?g) == conv2d(x, w{bias}, stride=[?sh, ?sw], "
            "pad=[?pt - (?kh - dim(w, 2)) // 2, ?pl - (?kw - dim(w, 3)) // 2, ?pb - (?kh - dim(w, 2)) // 2, "
            "?pr - (?kw - dim(w, 3)) // 2], groups=?g) where ?pt >= (?kh - dim(w, 2)) // 2, "
            "?pb >= (?kh - dim(w, 2)) // 2, ?pl >= (?kw - dim(w, 3)) // 2, ?pr >= (?kw - dim(w, 3)) // 2",
            "a kernel padded with zeros reads the same cells when the input padding shrinks to match"
            if not bias else "") for suffix, bias in (("", ""), ("-bias", ", b"))),
    Axiom("conv-identity", "conv2d(x, const_iconv(channels=?c, kernel=[?kh, ?kw], groups=?g), "
          "pad=[?kh // 2, ?kw // 2, ?kh // 2, ?kw // 2], groups=?g) == x "
          "where ?c == dim(x, 1), ?kh % 2 == 1, ?kw % 2 == 1", "the identity kernel"),
    Axiom("avgpool-as-conv", f"avgpool2d(x, {_POOL}, count_include_pad=true) == "
          f"conv2d(x, const_pool(channels=dim(x, 1), kernel=[?kh, ?kw]), stride=[?sh, ?sw], "
          "pad=[?pt, ?pl, ?pb, ?pr], groups=dim(x, 1))", "average pooling is a depthwise convolution"),
    *(Axiom(f"{pool}-concat", f"{pool}(concat(a, b, axis=?k), {_POOL}) == "
            f"concat({pool}(a, {_POOL}), {pool}(b, {_POOL}), axis=?k) where ?k <= 1",
            "pooling treats batch and channels independently") for pool in ("maxpool2d", "avgpool2d")),
    *(Axiom(f"{pool}-concat-height", f"{pool}(concat(a, b, axis=2), kernel=[?kh, ?kw], stride=[?kh, ?sw], "
            f"pad=[0, ?pl, 0, ?pr]) == concat({pool}(a, kernel=[?kh, ?kw], stride=[?kh, ?sw], pad=[0, ?pl, 0, ?pr]), "
            f"{pool}(b, kernel=[?kh, ?kw], stride=[?kh, ?sw], pad=[0, ?pl, 0, ?pr]), axis=2) "
            "where dim(a, 2) % ?kh == 0",
            "windows that tile the height without overlap never straddle the seam") for pool in ("maxpool2d",
                                                                                                  "avgpool2d")),
    Axiom("conv-transpose-add-weights", f"conv_transpose2d(x, add(a, b), {_CT}) == "
          f"add(conv_transpose2d(x, a, {_CT}), conv_transpose2d(x, b, {_CT})) where {_SAME_HW}",
          "a transposed convolution is linear in the weights"),
    Axiom("conv-transpose-add-input", f"conv_transpose2d(add(a, b), w, {_CT}) == "
          f"add(conv_transpose2d(a, w, {_CT}), conv_transpose2d(b, w, {_CT})) where {_SAME_HW}",
          "and in the input (equal heights and widths, as for conv2d)"),
    Axiom("conv-transpose-concat-batch", f"conv_transpose2d(concat(a, b, axis=0), w, {_CT}) == "
          f"concat(conv_transpose2d(a, w, {_CT}), conv_transpose2d(b, w, {_CT}), axis=0)"),
    Axiom("conv-transpose-concat-weights", f"conv_transpose2d(x, concat(a, b, axis=1), {_CT1}) == "
          f"concat(conv_transpose2d(x, a, {_CT1}), conv_transpose2d(x, b, {_CT1}), axis=1)",
          "output channels are independent (the weight's axis 1 holds them)"),
    Axiom("conv-transpose-concat-channels", f"conv_transpose2d(concat(a, b, axis=1), concat(c, d, axis=0), {_CT1}) "
          f"== add(conv_transpose2d(a, c, {_CT1}), conv_transpose2d(b, d, {_CT1})) where dim(a, 1) == dim(c, 0)",
          "input channels contribute a sum"),
    Axiom("maxpool-relu", f"relu(maxpool2d(x, {_POOL})) == maxpool2d(relu(x), {_POOL})",
          "relu is monotone"),
)
