"""Normalizations: batch norm (inference, "injective"), softmax and layer norm (row reductions).

Softmax and layer norm are several stages each, all tagged with the operator's pattern
("softmax", "layernorm") so that `schedule_group` inlines none of them and takes the last
(the normalized output) as the anchor. Their schedules run the output's rows in parallel
and compute each row's statistics inside the innermost row loop, so a row is read from memory once
and stays in cache for the passes over it. `compute_at` needs a stage's one reader as its
parent, so the stages are shaped for that:

- softmax: the row maximum is computed twice, once for the exp-sum and once for the
  normalizing pass (the same computation, so both shift by the same value) — comparisons
  over a cached row are cheap next to a second pass over memory;
- layer norm: the sum and the sum of squares, both read only by the output, accumulated
  in float64 so E[x^2] - E[x]^2 does not cancel away the variance of a row with a large mean.
"""

from __future__ import annotations

from collections.abc import Sequence

from codegen import te
from codegen.schedule.schedule import Schedule, Stage
from codegen.te.expr import Expr, const
from codegen.te.tensor import IterVar, Tensor
from codegen.topi.injective import broadcast_read, parallel_unfused, schedule_elementwise
from codegen.topi.registry import register_compute, register_schedule
from codegen.tune.space import Config
from taso_py.ops.norm import EpsAttrs, LayerNormAttrs, SoftmaxAttrs
from taso_py.types import TensorType


@register_compute("batchnorm")
def batchnorm(inputs: Sequence[Tensor], attrs: EpsAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    """(x - mean) * (scale / sqrt(var + eps)) + bias over channel axis 1; the factor is
    invariant along the inner axes, so it is computed once per vector of them."""
    x, scale, bias, mean, var = inputs
    eps = const(attrs.epsilon, x.dtype)

    def element(*i: Expr) -> Expr:
        c = i[1]
        return (x[i] - mean[c]) * (scale[c] / te.sqrt(var[c] + eps)) + bias[c]

    return (te.compute(x.shape, element, name="batchnorm", tag="injective"),)


def _insert(rest: Sequence[Expr], axis: int, v: Expr | IterVar) -> tuple:
    return (*rest[:axis], v, *rest[axis:])


@register_compute("softmax")
def softmax(inputs: Sequence[Tensor], attrs: SoftmaxAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    (x,) = inputs
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    n = x.shape[axis]
    rows = x.shape[:axis] + x.shape[axis + 1:]

    def row_max(name: str) -> Tensor:
        k = te.reduce_axis(n, "k")
        return te.compute(rows, lambda *r: te.max_reduce(x[_insert(r, axis, k)], k), name=name, tag="softmax")

    shift_sum = row_max("softmax_max_sum")
    k = te.reduce_axis(n, "k")
    total = te.compute(rows, lambda *r: te.sum(te.exp(x[_insert(r, axis, k)] - shift_sum[r]), k),
                       name="softmax_sum", tag="softmax")
    shift = row_max("softmax_max")

    def element(*i: Expr) -> Expr:
        r = i[:axis] + i[axis + 1:]
        return te.exp(x[i] - shift[r]) * (const(1.0, x.dtype) / total[r])

    return (te.compute(x.shape, element, name="softmax", tag="softmax", attrs={"axis": axis}),)


@register_compute("layernorm")
def layernorm(inputs: Sequence[Tensor], attrs: LayerNormAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    norm = x.shape[axis:]
    count = 1
    for d in norm:
        count *= d

    def moment(power: int, name: str) -> Tensor:
        def f(*r: Expr) -> Expr:
            ks = [te.reduce_axis(d, f"k{j}") for j, d in enumerate(norm)]
            v = te.cast("float64", x[(*r, *ks)])
            return te.sum(v if power == 1 else v * v, ks)
        return te.compute(x.shape[:axis], f, name=name, tag="layernorm")

    s1, s2 = moment(1, "layernorm_sum"), moment(2, "layernorm_sumsq")
    inv = const(1.0 / count, "float64")

    def element(*i: Expr) -> Expr:
        r = i[:axis]
        mean = s1[r] * inv
        rstd = const(1.0, "float64") / te.sqrt(s2[r] * inv - mean * mean + const(attrs.epsilon, "float64"))
        y = (x[i] - te.cast(x.dtype, mean)) * te.cast(x.dtype, rstd) * broadcast_read(scale, x.shape, i)
        return y + broadcast_read(bias, x.shape, i) if bias is not None else y

    return (te.compute(x.shape, element, name="layernorm", tag="layernorm", attrs={"axis": axis}),)


def _vectorize_last(stage: Stage, cfg: Config) -> None:
    last = stage.leaf[-1]
    width = cfg.knob("vector_width", (4, 8, 16, 32), default=16)
    if last.extent >= width or (last.extent > 1 and last.extent & (last.extent - 1) == 0):
        _, inner = stage.split(last, min(width, last.extent))
        stage.vectorize(inner)


def _row_loop(stage: Stage, axis: int, cfg: Config, move_axis_last: bool) -> IterVar | None:
    """The output's axes before `axis` (or, for softmax, all but `axis`) are the row loops,
    the longest run in parallel (not fused: see `parallel_unfused`), the normalized axes
    inside them, the innermost vectorized when it is contiguous. Returns the innermost row
    loop, where the statistics are computed; None when there is a single row."""
    axes = list(stage.leaf)
    if move_axis_last:
        outer = axes[:axis] + axes[axis + 1:]
        stage.reorder(*outer, axes[axis])
    else:
        outer = axes[:axis]
    if axes[-1] is stage.leaf[-1]:  # the innermost loop reads memory contiguously
        _vectorize_last(stage, cfg)
    parallel_unfused(stage, outer)
    return outer[-1] if outer else None


def _others(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> Stage:
    for out in outputs:
        if out != anchor:
            schedule_elementwise(s[out], cfg)
    return s[anchor]


@register_schedule("softmax")
def schedule_softmax(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    st = _others(s, anchor, outputs, cfg)
    shift, total = (s[t] for t in st.reads() if t.op.name in ("softmax_max", "softmax_sum"))
    if shift.name == "softmax_sum":
        shift, total = total, shift
    (shift_sum,) = (s[t] for t in total.reads() if t.op.name == "softmax_max_sum")
    rows = _row_loop(st, st.op.attrs["axis"], cfg, move_axis_last=True)
    if rows is None:  # one row: the statistics are scalars computed first
        return
    shift.compute_at(st, rows)
    total.compute_at(st, rows)
    shift_sum.compute_at(total, total.leaf[len(total.axes) - 1])


@register_schedule("layernorm")
def schedule_layernorm(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    st = _others(s, anchor, outputs, cfg)
    rows = _row_loop(st, st.op.attrs["axis"], cfg, move_axis_last=False)
    if rows is None:
        return
    for t in st.reads():
        if t.op.name in ("layernorm_sum", "layernorm_sumsq"):
            s[t].compute_at(st, rows)
