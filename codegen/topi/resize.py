"""The compute of resize (taso_py/ops/resize.py): injective, so the CPU and CUDA injective schedules take it.

Nearest reads one input element per output element at an index computed in integers: ONNX's
mapping with the scale taken as a fraction p/q is `(A*i + B) // C` for every coordinate and
rounding mode, clamped to the axis. Where float32 rounding (which the reference follows, as ONNX
Runtime does) picks another index, that output index is patched with a select, so the kernel picks
exactly the reference's indices. Linear computes the source coordinate in float32 as the reference
does and reads the two neighbours on each interpolated axis (2^m reads for m axes).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from taso_py.codegen import te
from taso_py.codegen.te.expr import Expr, const
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.topi.registry import register_compute
from taso_py.ops import resize as ops
from taso_py.ops.resize import ResizeAttrs
from taso_py.types import TensorType

INT32_MAX = 2**31 - 1
MAX_DENOMINATOR = 1 << 10  # scales are taken as fractions p/q with q up to this


def _scale_fractions(a: ResizeAttrs, k: int, n_in: int) -> list[Fraction]:
    """Fractions the float32 scale may stand for: out / in when it was derived, and short approximations."""
    s = Fraction(float(ops.axis_scale(a, k, n_in)))
    return [
        *([Fraction(a.sizes[k], n_in)] if not a.scales else []),
        *(s.limit_denominator(q) for q in (MAX_DENOMINATOR, 64)),
    ]


def _floor_form(a: ResizeAttrs, k: int, n_in: int, s: Fraction) -> tuple[int, int, int] | None:
    """(A, B, C) with nearest index = (A*i + B) // C before clamping, in exact arithmetic with the scale
    taken as `s`; None where the mapping ignores i (one output)."""
    n_out, mode = a.sizes[k], a.coordinate_transformation_mode
    if n_out == 1 and mode in ("align_corners", "pytorch_half_pixel"):
        return None
    if mode == "align_corners":  # x = i * (n_in - 1) / (n_out - 1)
        num, off, den = n_in - 1, 0, n_out - 1
    else:  # x = (i + h) * q / p - g with 2h, 2g in {0, 1}: (2q*i + 2hq - 2gp) / 2p
        p, q = s.numerator, s.denominator
        h = 0 if mode == "asymmetric" else 1
        g = 1 if mode in ("half_pixel", "pytorch_half_pixel") else 0
        num, off, den = 2 * q, h * q - g * p, 2 * p
    match a.nearest_mode:  # floor(N/D), ceil(N/D) = floor((N+D-1)/D), floor(N/D + 1/2), ceil(N/D - 1/2)
        case "floor":
            return num, off, den
        case "ceil":
            return num, off + den - 1, den
        case "round_prefer_ceil":
            return 2 * num, 2 * off + den, 2 * den
        case _:
            return 2 * num, 2 * off + den - 1, 2 * den


def _nearest_index(a: ResizeAttrs, k: int, n_in: int, i: Expr) -> Expr:
    """The reference's input index for output index `i` of axis k."""
    table = ops.nearest_indices(a, k, n_in)
    steps = np.arange(len(table))
    best: tuple[np.ndarray, Expr] = (np.full(len(table), table[0]), const(int(table[0])))
    for s in _scale_fractions(a, k, n_in):
        form = _floor_form(a, k, n_in, s)
        if form is None or max(abs(form[0]) * len(table) + abs(form[1]), abs(form[2])) > INT32_MAX:
            continue
        num, off, den = form
        formula = np.clip((steps * num + off) // den, 0, n_in - 1)
        if np.count_nonzero(formula != table) < np.count_nonzero(best[0] != table):
            best = formula, te.min_(te.max_((i * num + off) // den, 0), n_in - 1)
    formula, index = best
    for p in np.flatnonzero(formula != table):  # where float32 rounding picks another index than the fraction
        index = te.if_then_else(te.equal(i, int(p)), int(table[p]), index)
    return index


def _source(a: ResizeAttrs, k: int, n_in: int, i: Expr) -> Expr:
    """x(i) in float32, clamped to the axis: the same operations as `ops.source_coords`."""
    n_out, s = a.sizes[k], float(ops.axis_scale(a, k, n_in))
    f = te.cast("float32", i)
    half = const(0.5, "float32")
    match a.coordinate_transformation_mode:
        case "asymmetric":
            x = f / const(s, "float32")
        case "tf_half_pixel_for_nn":
            x = (f + half) / const(s, "float32")
        case "align_corners" | "pytorch_half_pixel" if n_out == 1:
            x = const(0.0, "float32")
        case "align_corners":
            x = f * const(float(n_in - 1), "float32") / const(float(n_out - 1), "float32")
        case _:
            x = (f + half) / const(s, "float32") - half
    return te.min_(te.max_(x, const(0.0, "float32")), const(float(n_in - 1), "float32"))


@register_compute(ops.resize)
def resize(inputs: Sequence[Tensor], attrs: ResizeAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    (x,) = inputs
    attrs = ops.resize.canonical(attrs, [TensorType(x.shape)])
    moved = [k for k, n in enumerate(x.shape) if not ops.is_copy(attrs, k, n)]

    def nearest(*i: Expr) -> Expr:
        return x[tuple(_nearest_index(attrs, k, x.shape[k], v) if k in moved else v for k, v in enumerate(i))]

    def linear(*i: Expr) -> Expr:
        """The sum over the 2^m corners of the neighbours' box, each weighted by its per-axis weights."""
        taps = {}
        for k in moved:
            src = _source(attrs, k, x.shape[k], i[k])
            lo = te.cast("int32", src)  # src >= 0: truncation is floor
            w_lo, w_hi = te.cast("float32", lo + 1) - src, src - te.cast("float32", lo)  # the reference's weights
            taps[k] = ((lo, te.cast(x.dtype, w_lo)), (te.min_(lo + 1, x.shape[k] - 1), te.cast(x.dtype, w_hi)))
        total: Expr | None = None
        for corner in itertools.product(*(taps[k] for k in moved)):
            chosen = dict(zip(moved, corner))
            weight = corner[0][1]
            for _, w in corner[1:]:
                weight = weight * w
            value = x[tuple(chosen[k][0] if k in chosen else v for k, v in enumerate(i))] * weight
            total = value if total is None else total + value
        return total if total is not None else x[i]

    body = linear if attrs.mode == "linear" and moved else nearest
    return (te.compute(out[0].known_shape, body, name="resize", tag="injective"),)
