"""Schedules: *how* to compute, kept apart from the tensor expressions (TVM's `te.schedule`).

A `Schedule` holds one `Stage` per compute operation reachable from its outputs. Each
primitive is a short method that checks its arguments, records a relation or an
annotation and returns the new axes; nothing is lowered until `codegen.lower` runs.
Stages keep their own copy of the body, so `cache_read`/`cache_write` never change the
tensor expressions that other schedules (e.g. tuning candidates) share.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from taso_py.codegen.errors import ScheduleError
from taso_py.codegen.te.expr import Expr, Var, rebuild
from taso_py.codegen.te.tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Reduce, Tensor, TensorRead


class LoopKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD = "thread"  # bound to a GPU thread or block index (see Stage.bind)


@dataclass(frozen=True)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int


@dataclass(frozen=True)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(eq=False)
class Stage:
    """The schedule of one operation: its loop axes, their order, kinds and where it is computed."""

    op: ComputeOp
    body: Expr
    scope: str = "global"
    leaf: list[IterVar] = field(default_factory=list)
    relations: list[Split | Fuse] = field(default_factory=list)
    kinds: dict[IterVar, LoopKind] = field(default_factory=dict)
    thread_tags: dict[IterVar, str] = field(default_factory=dict)
    threads: dict[IterVar, int] = field(default_factory=dict)  # parallel loops with a thread count
    tensorized: dict[IterVar, Any] = field(default_factory=dict)  # axis -> codegen.lower.TensorIntrin
    attach: str = "root"  # root | inline | at
    attach_stage: Stage | None = None
    attach_axis: IterVar | None = None
    is_output: bool = False

    def __post_init__(self) -> None:
        self.leaf = list(self.root_axes)

    # ---- what the stage iterates ------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def tensor(self) -> Tensor:
        return Tensor(self.op)

    @property
    def axes(self) -> tuple[IterVar, ...]:
        return self.op.axes

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    @property
    def root_axes(self) -> tuple[IterVar, ...]:
        return self.axes + self.reduce_axes

    def reads(self) -> list[Tensor]:
        from taso_py.codegen.te.expr import walk
        seen: dict[Operation, Tensor] = {}
        for e in walk(self.body):
            if isinstance(e, TensorRead):
                seen.setdefault(e.tensor.op, e.tensor)
        return list(seen.values())

    def _check_leaf(self, *axes: IterVar) -> None:
        for ax in axes:
            if ax not in self.leaf:
                raise ScheduleError(f"stage {self.name!r}: axis {ax.name!r} is not a current loop axis "
                                    f"(current: {', '.join(a.name for a in self.leaf)})")

    # ---- primitives -------------------------------------------------------------------------

    def split(self, axis: IterVar, factor: int | None = None, nparts: int | None = None) -> tuple[IterVar, IterVar]:
        """`axis` -> (outer, inner) with inner of `factor` (or outer of `nparts`); a guard covers the tail."""
        self._check_leaf(axis)
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"stage {self.name!r}: split {axis.name!r} needs exactly one of factor, nparts")
        if nparts is not None:
            if nparts < 1:
                raise ScheduleError(f"stage {self.name!r}: split {axis.name!r}: nparts must be >= 1, got {nparts}")
            factor = -(-axis.extent // nparts)
        assert factor is not None
        if factor < 1:
            raise ScheduleError(f"stage {self.name!r}: split {axis.name!r}: factor must be >= 1, got {factor}")
        factor = min(factor, axis.extent)
        outer = IterVar(Var(f"{axis.name}.o"), -(-axis.extent // factor), axis.reduce)
        inner = IterVar(Var(f"{axis.name}.i"), factor, axis.reduce)
        self.relations.append(Split(axis, outer, inner, factor))
        k = self.leaf.index(axis)
        self.leaf[k:k + 1] = [outer, inner]
        return outer, inner

    def fuse(self, outer: IterVar, inner: IterVar) -> IterVar:
        """Two adjacent loops (outer directly around inner) -> one loop over their product."""
        self._check_leaf(outer, inner)
        if self.leaf.index(inner) != self.leaf.index(outer) + 1:
            raise ScheduleError(f"stage {self.name!r}: fuse needs {outer.name!r} directly outside {inner.name!r}")
        if outer.reduce != inner.reduce:
            raise ScheduleError(f"stage {self.name!r}: cannot fuse a reduce axis with a data axis "
                                f"({outer.name!r}, {inner.name!r})")
        fused = IterVar(Var(f"{outer.name}.{inner.name}.f"), outer.extent * inner.extent, outer.reduce)
        self.relations.append(Fuse(outer, inner, fused))
        k = self.leaf.index(outer)
        self.leaf[k:k + 2] = [fused]
        return fused

    def reorder(self, *axes: IterVar) -> None:
        """Put `axes` in this order, in the slots they occupy now."""
        self._check_leaf(*axes)
        if len(set(axes)) != len(axes):
            raise ScheduleError(f"stage {self.name!r}: reorder names an axis twice")
        slots = sorted(self.leaf.index(a) for a in axes)
        for slot, ax in zip(slots, axes):
            self.leaf[slot] = ax

    def tile(self, x: IterVar, y: IterVar, x_factor: int, y_factor: int) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def parallel(self, axis: IterVar, threads: int | None = None) -> None:
        """Run the loop's iterations on `threads` OpenMP threads (default: all cores)."""
        if axis.reduce:
            raise ScheduleError(f"stage {self.name!r}: cannot run reduce axis {axis.name!r} in parallel (a race)")
        if threads is not None and threads < 1:
            raise ScheduleError(f"stage {self.name!r}: parallel {axis.name!r} needs threads >= 1, got {threads}")
        self._set_kind(axis, LoopKind.PARALLEL)
        if threads is not None:
            self.threads[axis] = threads

    def vectorize(self, axis: IterVar) -> None:
        if axis.reduce:  # the lanes would add into one element at once
            raise ScheduleError(f"stage {self.name!r}: cannot vectorize reduce axis {axis.name!r} "
                                f"(reorder a data axis inside it)")
        self._check_leaf(axis)
        if self.leaf[-1] is not axis:
            raise ScheduleError(f"stage {self.name!r}: only the innermost loop can be vectorized, "
                                f"not {axis.name!r}")
        self._set_kind(axis, LoopKind.VECTORIZED)

    def unroll(self, axis: IterVar) -> None:
        self._set_kind(axis, LoopKind.UNROLLED)

    def bind(self, axis: IterVar, thread_tag: str) -> None:
        """Map a loop to a GPU index (blockIdx.x, threadIdx.y, ...)."""
        valid = {f"{s}.{d}" for s in ("blockIdx", "threadIdx") for d in "xyz"}
        if thread_tag not in valid:
            raise ScheduleError(f"stage {self.name!r}: unknown thread tag {thread_tag!r} (one of {sorted(valid)})")
        if axis.reduce:
            raise ScheduleError(f"stage {self.name!r}: cannot bind reduce axis {axis.name!r} to {thread_tag}")
        self._set_kind(axis, LoopKind.THREAD)
        self.thread_tags[axis] = thread_tag

    def tensorize(self, axis: IterVar, intrin: Any) -> None:
        """Replace the loops from `axis` inwards by a hardware intrinsic (checked when lowered)."""
        self._check_leaf(axis)
        self.tensorized[axis] = intrin

    def compute_at(self, parent: Stage, axis: IterVar) -> None:
        """Compute this stage inside `parent`'s loop `axis`, only the region that loop needs."""
        parent._check_leaf(axis)
        if self.is_output:
            raise ScheduleError(f"stage {self.name!r} is an output: it cannot be computed at another stage")
        cur: Stage | None = parent
        while cur is not None:
            if cur is self:
                raise ScheduleError(f"stage {self.name!r}: compute_at {parent.name!r} forms a cycle "
                                    f"({parent.name!r} is computed inside {self.name!r})")
            cur = cur.attach_stage if cur.attach == "at" else None
        self.attach, self.attach_stage, self.attach_axis = "at", parent, axis

    def compute_inline(self) -> None:
        """Substitute this stage's body into its readers (it gets no loops or buffer)."""
        if isinstance(self.body, Reduce):
            raise ScheduleError(f"stage {self.name!r} is a reduction: it cannot be inlined")
        if self.is_output:
            raise ScheduleError(f"stage {self.name!r} is an output: it cannot be inlined")
        self.attach = "inline"

    # ---- helpers ----------------------------------------------------------------------------

    def _set_kind(self, axis: IterVar, kind: LoopKind) -> None:
        self._check_leaf(axis)
        old = self.kinds.get(axis, LoopKind.SERIAL)
        if old not in (LoopKind.SERIAL, kind):
            raise ScheduleError(f"stage {self.name!r}: axis {axis.name!r} is already {old.value}, cannot make it "
                                f"{kind.value}")
        self.kinds[axis] = kind


class Schedule:
    """Stages for every compute operation the outputs depend on, producers first."""

    def __init__(self, outputs: Sequence[Tensor]) -> None:
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self.stage_map: dict[Operation, Stage] = {}
        self.placeholders: list[Tensor] = []
        order: list[Operation] = []
        seen: set[Operation] = set()

        def visit(op: Operation) -> None:
            if op in seen:
                return
            seen.add(op)
            for t in op.inputs():
                visit(t.op)
            order.append(op)

        for t in self.outputs:
            visit(t.op)
        for op in order:
            if isinstance(op, PlaceholderOp):
                self.placeholders.append(Tensor(op))
            elif isinstance(op, ComputeOp):
                stage = Stage(op, op.body)
                stage.is_output = any(t.op is op for t in self.outputs)
                self.stages.append(stage)
                self.stage_map[op] = stage
            else:
                raise ScheduleError(f"cannot schedule operation {op!r}")

    def __getitem__(self, tensor: Tensor) -> Stage:
        try:
            return self.stage_map[tensor.op]
        except KeyError:
            raise ScheduleError(f"tensor {tensor.name!r} has no stage in this schedule "
                                f"(placeholders and tensors the outputs do not read have none)") from None

    def readers(self, tensor: Tensor) -> list[Stage]:
        return [s for s in self.stages if s.attach != "inline" and any(t.op is tensor.op for t in s.reads())]

    def cache_read(self, tensor: Tensor, scope: str, readers: Sequence[Tensor]) -> Tensor:
        """A copy of `tensor` in `scope` that `readers` read instead (pack it with compute_at)."""
        if not readers:
            raise ScheduleError(f"cache_read of {tensor.name!r}: name at least one reader")
        reader_stages = [self[r] for r in readers]
        for st in reader_stages:
            if not any(t.op is tensor.op for t in st.reads()):
                raise ScheduleError(f"cache_read: stage {st.name!r} does not read {tensor.name!r}")
        from taso_py.codegen.te.tensor import compute
        cache = compute(tensor.shape, lambda *i: tensor[i], name=f"{tensor.name}.{scope}", tag="copy")
        stage = Stage(cache.op, cache.op.body, scope=scope)
        for st in reader_stages:
            st.body = replace_reads(st.body, tensor, cache)
        first = min(self.stages.index(st) for st in reader_stages)
        self.stages.insert(first, stage)
        self.stage_map[cache.op] = stage
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute `tensor` into a `scope` buffer first (local accumulators); the stage copies it out."""
        st = self[tensor]
        if st.relations or st.kinds:
            raise ScheduleError(f"cache_write of {tensor.name!r}: call it before scheduling that stage")
        op = st.op
        new_axes = tuple(IterVar(Var(a.name), a.extent) for a in op.axes)
        from taso_py.codegen.te.expr import substitute
        body = substitute(st.body, {a.var: b.var for a, b in zip(op.axes, new_axes)})
        cache_op = ComputeOp(f"{op.name}.{scope}", new_axes, body, op.tag, dict(op.attrs))
        cache = Tensor(cache_op)
        stage = Stage(cache_op, body, scope=scope)
        st.body = TensorRead(cache, tuple(a.var for a in op.axes))
        st.leaf = list(st.root_axes)
        self.stages.insert(self.stages.index(st), stage)
        self.stage_map[cache_op] = stage
        return cache


def replace_reads(body: Expr, old: Tensor, new: Tensor) -> Expr:
    def go(e: Expr) -> Expr:
        if isinstance(e, TensorRead) and e.tensor.op is old.op:
            return TensorRead(new, tuple(go(i) for i in e.indices))
        return rebuild(e, go)
    return go(body)


def create_schedule(outputs: Tensor | Sequence[Tensor]) -> Schedule:
    return Schedule([outputs] if isinstance(outputs, Tensor) else list(outputs))
