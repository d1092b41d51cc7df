"""Normalizations: batch norm (inference, "injective"), softmax and layer norm (row reductions).

Softmax and layer norm are several stages each, all tagged with the operator's pattern
("softmax", "layernorm") so that `schedule_group` inlines none of them and takes the last
(the normalized output) as the anchor. Their schedules run the rows in parallel and
compute each row's statistics inside the innermost row loop, so the passes over a row
find it in cache. Two constraints shape the stages:

- a row reduction is two stages (`row_reduce`): 16 partial results whose lanes are
  consecutive elements — vector code, accumulators in registers — then their combination;
  a plain reduction would be one serial chain of scalar adds;
- `compute_at` needs a stage's one reader as its parent, so a statistic read twice is
  computed twice (layer norm's mean, for the variance and for the output: the same
  computation, so the same value) or materialized (softmax's exponentials, one `expf`
  per element, which the output pass and the sum both read).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from taso_py.codegen import te
from taso_py.codegen.schedule.schedule import Schedule, Stage
from taso_py.codegen.te.expr import Expr, const
from taso_py.codegen.te.tensor import IterVar, Tensor
from taso_py.codegen.topi.injective import (
    VECTOR_WIDTHS,
    broadcast_read,
    fuse_all,
    schedule_elementwise,
    vectorize_lanes,
)
from taso_py.codegen.topi.registry import register_compute, register_schedule
from taso_py.codegen.tune.space import Config
from taso_py.ops import norm as norm_ops
from taso_py.ops.norm import EpsAttrs, LayerNormAttrs, SoftmaxAttrs
from taso_py.types import TensorType


@register_compute(norm_ops.batchnorm)
def batchnorm(inputs: Sequence[Tensor], attrs: EpsAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """(x - mean) * (scale / sqrt(var + eps)) + bias over channel axis 1; the factor is
    invariant along the inner axes, so it is computed once per vector of them."""
    x, scale, bias, mean, var = inputs
    eps = const(attrs.epsilon, x.dtype)

    def element(*i: Expr) -> Expr:
        c = i[1]
        return (x[i] - mean[c]) * (scale[c] / te.sqrt(var[c] + eps)) + bias[c]

    return (te.compute(x.shape, element, name="batchnorm", tag="injective"),)


LANES = 16  # partial results per row reduction: one AVX-512 register of float32


def row_reduce(combiner: str, rows: tuple[int, ...], n: int, value: Callable[[tuple[Expr, ...], Expr], Expr],
               name: str, tag: str) -> Tensor:
    """`combiner` ("sum", "max") of value(row, k) over k in [0, n), for every row.

    With n >= LANES it is `name`_part[row, l], the reduction over chunks c of the element
    c * LANES + l (the identity past n), then `name`[row] over the LANES lanes."""
    reducer = te.sum if combiner == "sum" else te.max_reduce
    if n < LANES:
        k = te.reduce_axis(n, "k")
        return te.compute(rows, lambda *r: reducer(value(r, k.var), k), name=name, tag=tag)
    kc = te.reduce_axis(-(-n // LANES), "kc")

    def part(*idx: Expr) -> Expr:
        r, k = idx[:-1], kc * LANES + idx[-1]
        if n % LANES == 0:
            return reducer(value(r, k), kc)
        v = value(r, te.min_(k, const(n - 1)))
        identity = const(0, v.dtype) if combiner == "sum" else te.min_value(v.dtype)
        return reducer(te.if_then_else(k < n, v, identity), kc)

    partial = te.compute((*rows, LANES), part, name=f"{name}_part", tag=tag)
    kl = te.reduce_axis(LANES, "kl")
    return te.compute(rows, lambda *r: reducer(partial[(*r, kl)], kl), name=name, tag=tag)


def _insert(rest: Sequence[Expr], axis: int, v: Expr) -> tuple:
    return (*rest[:axis], v, *rest[axis:])


@register_compute(norm_ops.softmax)
def softmax(inputs: Sequence[Tensor], attrs: SoftmaxAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """exp(x - max) materialized, its row sums, then the exponentials times 1 / sum."""
    (x,) = inputs
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    n = x.shape[axis]
    rows = x.shape[:axis] + x.shape[axis + 1:]

    def drop(i: Sequence[Expr]) -> tuple:
        return (*i[:axis], *i[axis + 1:])

    shift = row_reduce("max", rows, n, lambda r, k: x[_insert(r, axis, k)], "softmax_max", "softmax")
    exps = te.compute(x.shape, lambda *i: te.exp(x[i] - shift[drop(i)]), name="softmax_exp", tag="softmax",
                      attrs={"axis": axis})
    total = row_reduce("sum", rows, n, lambda r, k: exps[_insert(r, axis, k)], "softmax_sum", "softmax")
    one = const(1.0, x.dtype)
    return (te.compute(x.shape, lambda *i: exps[i] * (one / total[drop(i)]), name="softmax", tag="softmax",
                       attrs={"axis": axis}),)


@register_compute(norm_ops.layernorm)
def layernorm(inputs: Sequence[Tensor], attrs: LayerNormAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """Two passes for the statistics (mean, then the mean square of x - mean), as the reference.
    The mean is summed and divided in float64 and then rounded: a row of equal values then has a
    mean equal to them and x - mean exactly 0, which 1 / sqrt(var + eps) would otherwise amplify
    to ~1e-4 (a float32 sum of three equal values divided by 3 misses them one time in seven)."""
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    rows, norm = x.shape[:axis], x.shape[axis:]
    count = math.prod(norm)
    strides = [math.prod(norm[j + 1:]) for j in range(len(norm))]
    n, n64 = const(float(count), x.dtype), const(float(count), "float64")

    def element(r: tuple[Expr, ...], k: Expr) -> Expr:
        return x[(*r, *((k // st) % d for st, d in zip(strides, norm)))]

    def wide(r: tuple[Expr, ...], k: Expr) -> Expr:
        return te.cast("float64", element(r, k))

    def mean_of(total: Tensor, r: tuple[Expr, ...]) -> Expr:
        return te.cast(x.dtype, total[r] / n64)

    def centred(total: Tensor) -> Callable[[tuple[Expr, ...], Expr], Expr]:
        def f(r: tuple[Expr, ...], k: Expr) -> Expr:
            d = element(r, k) - mean_of(total, r)
            return d * d
        return f

    tag = "layernorm"
    var = row_reduce("sum", rows, count, centred(row_reduce("sum", rows, count, wide, "layernorm_mean_v", tag)),
                     "layernorm_var", tag)
    total = row_reduce("sum", rows, count, wide, "layernorm_mean", tag)
    one, eps = const(1.0, x.dtype), const(attrs.epsilon, x.dtype)

    def y(*i: Expr) -> Expr:
        r = i[:axis]
        v = (x[i] - mean_of(total, r)) * (one / te.sqrt(var[r] / n + eps)) * broadcast_read(scale, x.shape, i)
        return v + broadcast_read(bias, x.shape, i) if bias is not None else v

    return (te.compute(x.shape, y, name="layernorm", tag=tag, attrs={"axis": axis}),)


def _vectorize_last(stage: Stage, cfg: Config) -> None:
    last = stage.leaf[-1]
    width = cfg.knob("vector_width", VECTOR_WIDTHS, default=16)
    _, inner = stage.split(last, min(width, last.extent))
    vectorize_lanes(stage, inner)


def _row_loop(stage: Stage, axis: int, cfg: Config, move_axis_last: bool) -> IterVar | None:
    """The axes before `axis` (or, for softmax, all but `axis`) fused into one parallel row
    loop, the normalized axes inside it, the innermost vectorized when it is contiguous.
    Returns the row loop, where the statistics are computed; None when there is one row."""
    axes = list(stage.leaf)
    if move_axis_last:
        outer = axes[:axis] + axes[axis + 1:]
        stage.reorder(*outer, axes[axis])
    else:
        outer = axes[:axis]
    if axes[-1] is stage.leaf[-1]:  # the innermost loop reads memory contiguously
        _vectorize_last(stage, cfg)
    if not outer:
        return None
    rows = fuse_all(stage, outer)
    if rows.extent > 1:
        stage.parallel(rows)
    return rows


def _read(s: Schedule, reader: Stage, name: str) -> Stage:
    (stage,) = (s[t] for t in reader.reads() if t.op.name == name)
    return stage


def _attach_reduction(s: Schedule, total: Stage, parent: Stage, axis: IterVar | None) -> tuple[Stage, IterVar | None]:
    """Compute a `row_reduce` result at `parent`'s row loop `axis` (None: a single row, all at
    the root), its partial stage inside it with the lanes vectorized. Returns the stage that
    reads the reduced values and its innermost row loop (where what it reads is computed)."""
    rows = len(total.axes)
    if axis is not None:
        total.compute_at(parent, axis)
    parts = [s[t] for t in total.reads() if t.op.name == f"{total.name}_part"]
    if not parts:
        return total, total.leaf[rows - 1] if rows and axis is not None else None
    (part,) = parts
    if rows and axis is not None:
        part.compute_at(total, total.leaf[rows - 1])
    (chunks,) = part.reduce_axes
    lanes = part.axes[-1]
    part.reorder(chunks, lanes)
    part.vectorize(lanes)
    return part, part.leaf[rows - 1] if rows and axis is not None else None


def _others(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> Stage:
    for out in outputs:
        if out != anchor:
            schedule_elementwise(s, s[out], cfg)
    return s[anchor]


@register_schedule("softmax")
def schedule_softmax(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Two parallel row nests: max then exponentials; sum then normalized output."""
    st = _others(s, anchor, outputs, cfg)
    axis = st.op.attrs["axis"]
    _attach_reduction(s, _read(s, st, "softmax_sum"), st, _row_loop(st, axis, cfg, move_axis_last=True))
    exps = _read(s, st, "softmax_exp")
    _attach_reduction(s, _read(s, exps, "softmax_max"), exps, _row_loop(exps, axis, cfg, move_axis_last=True))


@register_schedule("layernorm")
def schedule_layernorm(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """One parallel row nest: per row, the mean, the variance (and its own mean), the output."""
    st = _others(s, anchor, outputs, cfg)
    rows = _row_loop(st, st.op.attrs["axis"], cfg, move_axis_last=False)
    _attach_reduction(s, _read(s, st, "layernorm_mean"), st, rows)
    reader, loop = _attach_reduction(s, _read(s, st, "layernorm_var"), st, rows)
    _attach_reduction(s, _read(s, reader, "layernorm_mean_v"), reader, loop)
