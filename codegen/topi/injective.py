"""The "injective" pattern: element-wise, broadcasting and data-movement groups.

Every stage of such a group but its outputs is inlined by `schedule_group`, so each output
is one loop nest that reads the group's inputs directly. The nest runs the output's
elements in memory order: the innermost axis split by the vector width (its inner part
vectorized, so contiguous reads become vector loads and a broadcast read stays a splat),
everything outside it fused into one parallel loop.
"""

from __future__ import annotations

from collections.abc import Sequence

from taso_py.codegen.schedule.schedule import Schedule, Stage
from taso_py.codegen.te.expr import Expr, Var, const, rebuild, substitute, walk
from taso_py.codegen.te.tensor import IterVar, Tensor, TensorRead
from taso_py.codegen.topi.registry import register_schedule
from taso_py.codegen.tune.space import Config

VECTOR_WIDTHS = (4, 8, 16, 32, 64)  # lanes; 16 float32 lanes fill an AVX-512 register
PARALLEL_MIN = (0, 4096, 16384, 65536)  # below this many elements a parallel region costs more than it saves


def broadcast_read(t: Tensor, out_shape: Sequence[int], idx: Sequence[Expr]) -> Expr:
    """`t` read at output position `idx` under numpy broadcasting (shapes aligned at the right)."""
    lead = len(out_shape) - t.ndim
    return t[tuple(const(0) if d == 1 and out_shape[lead + k] != 1 else idx[lead + k]
                   for k, d in enumerate(t.shape))]


def fuse_all(stage: Stage, axes: Sequence[IterVar]) -> IterVar:
    """Adjacent `axes` fused into one loop (outermost first)."""
    fused = axes[0]
    for ax in axes[1:]:
        fused = stage.fuse(fused, ax)
    return fused


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def vectorize_lanes(stage: Stage, axis: IterVar) -> None:
    """Vectorize `axis` if it has a power-of-two extent above one (gcc's vector types need it)."""
    if axis.extent > 1 and _power_of_two(axis.extent):
        stage.vectorize(axis)


def expanded_body(s: Schedule, st: Stage) -> Expr:
    """`st`'s body with the stages inlined into it substituted (what lowering will see)."""
    def go(e: Expr) -> Expr:
        if isinstance(e, TensorRead) and e.tensor.op in s.stage_map and s[e.tensor].attach == "inline":
            src = s[e.tensor]
            idx = [go(i) for i in e.indices]
            return go(substitute(src.body, {a.var: i for a, i in zip(src.axes, idx)}))
        return rebuild(e, go)
    return go(st.body)


def contiguous_tail(s: Schedule, st: Stage) -> int:
    """How many trailing axes of `st` every read (inlined stages substituted) walks in memory order
    or not at all: fused into one loop, they are still one contiguous run for every operand."""
    axes = st.axes
    reads = [e for e in walk(expanded_body(s, st)) if isinstance(e, TensorRead)]
    best = 0
    for n in range(1, len(axes) + 1):
        tail = axes[-n:]
        names = {a.var for a in tail}
        for r in reads:
            used = [i for i in r.indices if any(isinstance(x, Var) and x in names for x in walk(i))]
            if not used:
                continue
            if len(r.indices) < n or any(i is not a.var for i, a in zip(r.indices[-n:], tail)) \
                    or len(used) != n or r.tensor.shape[len(r.indices) - n + 1:] != tuple(a.extent for a in tail[1:]):
                return best
        best = n
    return best


def schedule_elementwise(s: Schedule, stage: Stage, cfg: Config) -> None:
    """Memory order, innermost axis vectorized, the rest fused and parallel (see module doc).

    When the innermost axis is not a whole number of vectors, the trailing axes every operand
    reads contiguously are fused first (a 56 x 56 plane is 196 vectors); a short innermost
    axis that is not a power of two (gcc's vector lanes must be one) and cannot be fused so
    is not split: from 8 wide it runs whole, as an `omp simd` loop under the other axes fused
    (a resize's row: the coordinates along the other axes computed once a row, not divided
    back out of a flat index for every element, which ran at half the speed); a shorter one is
    fused with the rest of the output and split instead, so it still runs in vector-width
    chunks, through `#pragma omp simd` since its reads are no longer contiguous.
    """
    axes = list(stage.leaf)
    if not axes:
        return
    width = cfg.knob("vector_width", VECTOR_WIDTHS, default=16)
    size = 1
    for ax in axes:
        size *= ax.extent
    if axes[-1].extent % width and axes == list(stage.axes):
        n = contiguous_tail(s, stage)
        if n > 1:
            axes = [*axes[:-n], fuse_all(stage, axes[-n:])]
    last = axes[-1]
    if last.extent >= width or _power_of_two(last.extent):
        outer, inner = stage.split(last, min(width, last.extent))
        fused = fuse_all(stage, [*axes[:-1], outer])
    elif last.extent >= 8 and len(axes) > 1:
        fused, inner = fuse_all(stage, axes[:-1]), last
        stage.vectorize(inner)
    else:
        fused, inner = stage.split(fuse_all(stage, axes), width)
    vectorize_lanes(stage, inner)
    if fused.extent > 1 and size >= cfg.knob("parallel_min_elements", PARALLEL_MIN, default=16384):
        stage.parallel(fused)


@register_schedule("injective")
def schedule_injective(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Each output (a split has several) gets its own vectorized, parallel nest."""
    for out in outputs:
        schedule_elementwise(s, s[out], cfg)
