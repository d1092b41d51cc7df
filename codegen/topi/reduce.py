"""Computes of the reduce family (taso_py/ops/reduce.py): one reduction over the reduced axes (pattern "reduce").

The CPU schedule picks its loop order by what the input's innermost axis is. When it is
kept (`x.amax(1)` on NCHW), the output's last axis, split by the vector width, goes inside
the reduce loops, so a vector of neighbouring outputs accumulates from contiguous input
rows. When it is reduced (`x.sum(-1)`, a mean over height and width), the reduce loops stay
innermost and walk the input contiguously. Either way the other output axes are fused
into parallel rows. A mean scales each element before adding it, as `global_avgpool` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from taso_py.codegen import te
from taso_py.codegen.schedule.schedule import Schedule
from taso_py.codegen.te.expr import Expr, const
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.topi.injective import VECTOR_WIDTHS, fuse_all, schedule_elementwise, vectorize_lanes
from taso_py.codegen.topi.registry import register_compute, register_schedule
from taso_py.codegen.tune.space import Config
from taso_py.ops import reduce as reduce_ops
from taso_py.ops.reduce import ReduceAttrs, reduced_axes
from taso_py.types import TensorType

ComputeFn = Callable[[Sequence[Tensor], ReduceAttrs, Sequence[TensorType]], tuple[Tensor, ...]]


def _reduction(combiner: str, name: str, mean: bool = False) -> ComputeFn:
    reducer = te.max_reduce if combiner == "max" else te.sum

    def compute(inputs: Sequence[Tensor], attrs: ReduceAttrs, out: Sequence[TensorType]) -> tuple[Tensor, ...]:
        (x,) = inputs
        shape = tuple(out[0].known_shape)
        axes = reduced_axes(attrs.axes, x.ndim)
        if not axes:  # a scalar: nothing to reduce
            return (te.compute(shape, lambda *i: x[i], name=name, tag="injective"),)
        red = {k: te.reduce_axis(x.shape[k], f"r{k}") for k in axes}
        scale = const(float(np.asarray(1.0 / math.prod(x.shape[k] for k in axes), x.dtype)), x.dtype)

        def element(*idx: Expr) -> Expr:
            kept = iter(i for k, i in enumerate(idx) if k not in red) if attrs.keepdims else iter(idx)
            value = x[tuple(red[k] if k in red else next(kept) for k in range(x.ndim))]
            return reducer(value * scale if mean else value, list(red.values()))

        return (te.compute(shape, element, name=name, tag="reduce", attrs={"inner_kept": x.ndim - 1 not in red}),)

    return compute


register_compute(reduce_ops.reduce_sum)(_reduction("sum", "reduce_sum"))
register_compute(reduce_ops.reduce_mean)(_reduction("sum", "reduce_mean", mean=True))
register_compute(reduce_ops.reduce_max)(_reduction("max", "reduce_max"))


@register_schedule("reduce")
def schedule_reduce(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Parallel rows; the output's last axis vectorized inside the reduce loops when the input's is kept."""
    st = s[anchor]
    data, red = list(st.axes), list(st.reduce_axes)
    if anchor.op.attrs["inner_kept"]:
        last = data.pop()
        width = cfg.knob("vector_width", VECTOR_WIDTHS, default=16)
        lo, li = st.split(last, min(width, last.extent))
        rows = fuse_all(st, data) if data else None
        st.reorder(*([rows] if rows is not None else []), lo, *red, li)
        vectorize_lanes(st, li)
    else:
        rows = fuse_all(st, data) if data else None
    if rows is not None and rows.extent > 1:
        st.parallel(rows)
    for t in outputs:
        if t != anchor:
            schedule_elementwise(s, s[t], cfg)
