"""The operator library's tables: a compute definition per operator, a CPU schedule per pattern.

Family modules (`elementwise.py`, `linalg.py`, `conv.py`, ...) register with the decorators
below, so adding an operator is one local entry, like the op table in `taso_py.ops`.
A compute function maps te inputs to te outputs; the pattern in each output's `tag`
(TVM's names: "injective", "reduction", "matmul", "conv2d", "pool", ...) picks the schedule.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from taso_py import ops
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.schedule.schedule import LoopKind, Schedule
from taso_py.codegen.target import CPU, Target
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.tune.space import Config
from taso_py.ops import OpDef
from taso_py.types import TensorType

ComputeFn = Callable[[Sequence[Tensor], Any, Sequence[TensorType]], tuple[Tensor, ...]]
# (schedule, the group's anchor tensor, the group's outputs, knobs) -> None; edits the schedule in place
ScheduleFn = Callable[[Schedule, Tensor, Sequence[Tensor], Config], None]


COMPUTE: dict[OpDef, ComputeFn] = {}  # each operator's compute, keyed by its table entry
SCHEDULE: dict[tuple[str, str], ScheduleFn] = {}  # (a target's `schedules` key, pattern tag) -> template


def register_compute(*entries: OpDef) -> Callable[[ComputeFn], ComputeFn]:
    """Register the compute of the operators `entries` (taso_py.ops entries)."""
    def deco(fn: ComputeFn) -> ComputeFn:
        for op in entries:
            if op in COMPUTE:
                raise RuntimeError(f"compute for {op.name!r} registered twice")
            COMPUTE[op] = fn
        return fn
    return deco


def register_schedule(*tags: str, target: Target = CPU) -> Callable[[ScheduleFn], ScheduleFn]:
    """Register a template for `tags` on `target` (each target has its own schedules, as in TVM's topi;
    targets with the same `schedules` key share them)."""
    def deco(fn: ScheduleFn) -> ScheduleFn:
        for tag in tags:
            if (target.schedules, tag) in SCHEDULE:
                raise RuntimeError(f"{target.schedules} schedule for tag {tag!r} registered twice")
            SCHEDULE[(target.schedules, tag)] = fn
        return fn
    return deco


def compute(op: OpDef | str, inputs: Sequence[Tensor], attrs: Any, out_types: Sequence[TensorType]
            ) -> tuple[Tensor, ...]:
    """The te outputs of operator `op` (a node's table entry; a name is looked up) applied to `inputs`."""
    entry = ops.get(op) if isinstance(op, str) else op
    fn = COMPUTE.get(entry)
    if fn is None:
        raise CodegenError(f"no code generator for operator {entry.name!r} "
                           f"(the operator library has: {', '.join(sorted(e.name for e in COMPUTE))})")
    return fn(inputs, attrs, out_types)


def schedule_group(outputs: Sequence[Tensor], cfg: Config | None = None, target: Target = CPU) -> Schedule:
    """The schedule of a fused group for `target` (TVM's rule: one anchor, injective ops around it).

    The anchor is the stage whose tag is not "injective" (fusion puts at most one in a
    group), else the first output. An operator computed in several stages (softmax: max,
    sum, normalize) tags each stage that must not be inlined with its one pattern; the
    last of them (producers come first) is the anchor, and its schedule places the others.
    Injective stages that are not outputs are inlined (a template may override that, e.g.
    keep a padding stage to compute it at a tile); the anchor's pattern then schedules the rest.
    """
    from taso_py.codegen.schedule.schedule import create_schedule
    cfg = cfg or Config()
    s = create_schedule(list(outputs))
    anchors = [st for st in s.stages if st.op.tag not in ("injective", "")]
    if len({st.op.tag for st in anchors}) > 1:
        raise CodegenError(f"a fused group has {len(anchors)} anchors ({', '.join(a.name for a in anchors)}); "
                           f"fusion puts at most one in a group")
    for st in s.stages:
        if st.op.tag in ("injective", "") and not st.is_output:
            st.compute_inline()
    anchor = anchors[-1].tensor if anchors else outputs[0]
    tag = anchor.op.tag if anchors else "injective"
    fn = SCHEDULE.get((target.schedules, tag))
    if fn is None:
        known = ", ".join(sorted(t for key, t in SCHEDULE if key == target.schedules)) or "none"
        raise CodegenError(f"no {target.name} schedule for pattern {tag!r} (known: {known})")
    fn(s, anchor, list(outputs), cfg)
    _threads_knob(s, cfg)
    return s


def _threads_knob(s: Schedule, cfg: Config) -> None:
    """A knob shared by every template: how many threads the parallel loops use (small kernels
    can lose more to waking threads than they gain)."""
    cores = os.cpu_count() or 1
    parallel = [(st, iv) for st in s.stages for iv, kind in st.kinds.items() if kind is LoopKind.PARALLEL]
    if cores < 2 or not parallel:
        return
    threads = cfg.knob("threads", tuple(sorted({1, max(cores // 2, 1), cores})), default=cores)
    if threads != cores:
        for st, iv in parallel:
            st.threads[iv] = threads
