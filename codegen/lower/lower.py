"""Lowering a schedule to the loop IR, as one ordered list of passes.

1. `inline`: substitute inlined stages into their readers.
2. `attach`: build the tree of which stage is computed inside which loop; bound inference
   gives each attached stage the region its parent's inner loops read (a constant extent
   and an origin that depends on the enclosing loop variables).
3. `nest`: per stage, loops over the leaf axes, root axis values rebuilt from the split and
   fuse relations, guards for split tails, reduction init before the first reduce loop,
   attached stages inside the loop they are attached at, intrinsics where tensorized.
4. `simplify`: index arithmetic reduced with the loop ranges.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from taso_py.codegen.errors import ScheduleError
from taso_py.codegen.lower.ir import (
    Allocate,
    Buffer,
    For,
    IfThenElse,
    Intrinsic,
    PrimFunc,
    Region,
    Stmt,
    Store,
    map_exprs,
    map_stmt,
    seq,
)
from taso_py.codegen.lower.simplify import Ranges, bounds, linear, simplify
from taso_py.codegen.schedule.schedule import Fuse, LoopKind, Schedule, Split, Stage
from taso_py.codegen.te.expr import (
    Expr,
    Load,
    Var,
    all_of,
    const,
    rebuild,
    substitute,
)
from taso_py.codegen.te.tensor import IterVar, Operation, Reduce, Tensor, TensorRead


@dataclass
class Placement:
    """Where a tensor lives while the kernel runs: its buffer and the origin of the region it holds."""

    buffer: Buffer
    origin: tuple[Expr, ...]
    guard: bool = False  # the region may reach outside the tensor: guard the producer


@dataclass
class _Lowering:
    sch: Schedule
    bodies: dict[Stage, Expr] = field(default_factory=dict)
    places: dict[Operation, Placement] = field(default_factory=dict)
    children: dict[tuple[int, IterVar | None], list[Stage]] = field(default_factory=dict)
    ranges: Ranges = field(default_factory=dict)
    extents: dict[IterVar, int] = field(default_factory=dict)
    values: dict[Stage, dict[IterVar, Expr]] = field(default_factory=dict)


def lower(sch: Schedule, args: Sequence[Tensor], name: str = "kernel") -> PrimFunc:
    """The kernel computing `sch`'s outputs; `args` are its buffer parameters, in order."""
    low = _Lowering(sch)
    params = _bind_args(low, args)
    _inline(low)
    _attach_tree(low)
    roots = [st for st in sch.stages if st.attach == "root"]
    temps = []
    for st in roots:
        if st.op not in low.places:
            buf = Buffer(_c_name(st.name), st.op.shape, st.op.dtype, st.scope)
            low.places[st.op] = Placement(buf, tuple(const(0) for _ in st.op.shape))
            temps.append(buf)
    body = seq([_stage_nest(low, st, tuple((const(0), e) for e in st.op.shape)) for st in roots])
    for buf in reversed(temps):
        body = Allocate(buf, body)
    return PrimFunc(name, params, _simplify_stmt(body, {}))


# ---- 0. arguments -----------------------------------------------------------------------

def _bind_args(low: _Lowering, args: Sequence[Tensor]) -> list[Buffer]:
    params = []
    for t in args:
        if t.op in low.places:
            raise ScheduleError(f"tensor {t.name!r} is passed twice")
        buf = Buffer(_c_name(t.name), t.shape, t.dtype)
        low.places[t.op] = Placement(buf, tuple(const(0) for _ in t.shape))
        params.append(buf)
    for t in low.sch.placeholders:
        if t.op not in low.places:
            raise ScheduleError(f"input {t.name!r} is read but not among the kernel's arguments")
    for t in low.sch.outputs:
        if t.op not in low.places:
            raise ScheduleError(f"output {t.name!r} is not among the kernel's arguments")
    return params


def _c_name(name: str) -> str:
    out = "".join(ch if ch.isalnum() else "_" for ch in name)
    return out if out and not out[0].isdigit() else f"t_{out}"


# ---- 1. inline --------------------------------------------------------------------------

def _inline(low: _Lowering) -> None:
    inlined: dict[Operation, Stage] = {}

    def expand(e: Expr) -> Expr:
        if isinstance(e, TensorRead) and e.tensor.op in inlined:
            st = inlined[e.tensor.op]
            idx = [expand(i) for i in e.indices]
            return substitute(low.bodies[st], {a.var: i for a, i in zip(st.axes, idx)})
        return rebuild(e, expand)

    for st in low.sch.stages:
        low.bodies[st] = expand(st.body)
        if st.attach == "inline":
            inlined[st.op] = st


# ---- 2. attach tree and bound inference -------------------------------------------------

def _attach_tree(low: _Lowering) -> None:
    live = [st for st in low.sch.stages if st.attach != "inline"]
    for st in live:
        if st.attach != "at":
            continue
        parent, axis = st.attach_stage, st.attach_axis
        assert parent is not None and axis is not None
        if parent.attach == "inline":
            raise ScheduleError(f"stage {st.name!r} is computed at {parent.name!r}, which is inlined")
        readers = [r for r in live if r is not st and _reads(low, r, st.op)]
        if readers != [parent]:
            names = ", ".join(r.name for r in readers) or "nothing"
            raise ScheduleError(f"stage {st.name!r} is computed at {parent.name!r} but read by {names} "
                                f"(compute_at needs its one reader as the parent)")
        if axis not in parent.leaf:
            raise ScheduleError(f"stage {st.name!r}: axis {axis.name!r} is no longer a loop of {parent.name!r}")
        low.children.setdefault((id(parent), axis), []).append(st)
    # an attached stage must be lowered after... its parent: detect cycles
    for st in live:
        seen, cur = set(), st
        while cur.attach == "at":
            if id(cur) in seen:
                raise ScheduleError(f"compute_at forms a cycle through stage {st.name!r}")
            seen.add(id(cur))
            cur = cur.attach_stage  # type: ignore[assignment]


def _reads(low: _Lowering, st: Stage, op: Operation) -> list[TensorRead]:
    from taso_py.codegen.te.expr import walk
    return [e for e in walk(low.bodies[st]) if isinstance(e, TensorRead) and e.tensor.op is op]


def _region(low: _Lowering, consumer: Stage, op: Operation, shape: tuple[int, ...],
            free: Sequence[IterVar]) -> tuple[tuple[Expr, ...], tuple[int, ...], bool]:
    """Origin, extents and whether it may leave the tensor, of what `consumer` reads of `op`
    while the loops `free` run over their whole range (the enclosing ones held fixed)."""
    free_ranges = {iv.var: (0, low.extents[iv] - 1) for iv in free}
    values = low.values[consumer]
    reads = _reads(low, consumer, op)
    origin: list[Expr] = []
    extents: list[int] = []
    may_leave = False
    for d, size in enumerate(shape):
        lows: list[tuple[Expr, int, int]] = []  # (fixed part, min offset, max offset)
        for r in reads:
            idx = simplify(substitute(r.indices[d], values), low.ranges)
            lin = linear(idx)
            fixed = {a: c for a, c in lin.terms.items() if a not in free_ranges}
            moving = {a: c for a, c in lin.terms.items() if a in free_ranges}
            if any(not isinstance(a, Var) and _mentions(a, free_ranges) for a in fixed):
                lows = []
                break
            lo = sum(min(0, c * free_ranges[a][1]) for a, c in moving.items())  # type: ignore[index]
            hi = sum(max(0, c * free_ranges[a][1]) for a, c in moving.items())  # type: ignore[index]
            base = type(lin)(fixed, 0).to_expr()
            lows.append((base, lin.constant + lo, lin.constant + hi))
        same_base = lows and all(_same(low, lows[0][0], b) for b, _, _ in lows)
        if not same_base:
            origin.append(const(0))
            extents.append(size)
            continue
        lo_off = min(lo for _, lo, _ in lows)
        hi_off = max(h for _, _, h in lows)
        ext = hi_off - lo_off + 1
        start = simplify(lows[0][0] + lo_off, low.ranges)
        s_lo, s_hi = bounds(start, low.ranges)
        if ext >= size and s_lo == 0 and s_hi == 0:
            origin.append(const(0))
            extents.append(size)
            continue
        may_leave |= s_lo < 0 or s_hi + ext > size
        origin.append(start)
        extents.append(ext)
    return tuple(origin), tuple(extents), may_leave


def _mentions(e: Expr, vars_: dict[Var, tuple[int, int]]) -> bool:
    from taso_py.codegen.te.expr import walk
    return any(isinstance(x, Var) and x in vars_ for x in walk(e))


def _same(low: _Lowering, a: Expr, b: Expr) -> bool:
    d = simplify(a - b, low.ranges)
    return isinstance(d, type(const(0))) and d.value == 0


# ---- 3. loop nests ----------------------------------------------------------------------

def _place_attached(low: _Lowering, st: Stage, parent: Stage, axis: IterVar) -> None:
    """Give an attached stage a buffer holding the region its parent reads inside `axis`."""
    k = parent.leaf.index(axis)
    origin, extents, may_leave = _region(low, parent, st.op, st.op.shape, parent.leaf[k + 1:])
    buf = Buffer(_c_name(st.name), extents, st.op.dtype, st.scope if st.scope != "global" else "local")
    low.places[st.op] = Placement(buf, origin, may_leave)


def _leaf_extents(st: Stage, root_extents: dict[IterVar, int]) -> dict[IterVar, int]:
    ext = dict(root_extents)
    for rel in st.relations:
        if isinstance(rel, Split):
            p = ext[rel.parent]
            f = min(rel.factor, p)
            ext[rel.inner], ext[rel.outer] = f, -(-p // f)
        else:
            ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
    return ext


def _root_values(st: Stage, ext: dict[IterVar, int]) -> tuple[dict[IterVar, Expr], list[tuple[IterVar, Expr]]]:
    """Each root axis's value (relative to its region) in terms of the leaf loop variables,
    and the split tails to guard: (parent axis, its relative value). `ext` are the extents in
    the region (an attached stage's are smaller than its axes')."""
    val: dict[IterVar, Expr] = {iv: iv.var for iv in st.leaf}
    tails: list[Split] = []
    for rel in reversed(st.relations):
        if isinstance(rel, Split):
            val[rel.parent] = val[rel.outer] * rel.factor + val[rel.inner]
            tails.append(rel)
        elif isinstance(rel, Fuse):
            val[rel.outer] = val[rel.fused] // ext[rel.inner]
            val[rel.inner] = val[rel.fused] % ext[rel.inner]
    return val, [(rel.parent, val[rel.parent]) for rel in tails]


def _stage_nest(low: _Lowering, st: Stage, domain: Sequence[tuple[Expr, int]]) -> Stmt:
    root = dict(zip(st.axes, domain))
    root_ext = {iv: e for iv, (_, e) in root.items()} | {iv: iv.extent for iv in st.reduce_axes}
    ext = _leaf_extents(st, root_ext)
    low.extents.update(ext)
    for iv in st.leaf:
        low.ranges[iv.var] = (0, ext[iv] - 1)
        if st.kinds.get(iv) is LoopKind.VECTORIZED and ext[iv] > 64:
            raise ScheduleError(f"stage {st.name!r}: vectorized loop {iv.name!r} has {ext[iv]} lanes "
                                f"(at most 64; split it first)")
    rel_val, tails = _root_values(st, ext)
    absolute = {iv.var: start + rel_val[iv] for iv, (start, _) in root.items()}
    absolute |= {iv.var: rel_val[iv] for iv in st.reduce_axes}
    low.values[st] = absolute
    for (owner, axis), kids in low.children.items():
        if owner == id(st):
            for kid in kids:
                _place_attached(low, kid, st, axis)
    guards = [v < ext[p] for p, v in tails if _needs_tail_guard(st, p, ext)]
    place = low.places[st.op]
    if place.guard:
        for iv, (start, _) in root.items():
            guards += [start + rel_val[iv] >= 0, start + rel_val[iv] < iv.extent]
    out_index = _flat(place.buffer, [rel_val[iv] for iv in st.axes])
    body = low.bodies[st]
    reduce = body if isinstance(body, Reduce) else None
    data_guard = [g for g in guards if not _mentions_reduce(st, g)]

    def load(e: Expr) -> Expr:
        if isinstance(e, TensorRead):
            p = low.places.get(e.tensor.op)
            if p is None:
                raise ScheduleError(f"stage {st.name!r} reads {e.tensor.name!r}, which has no buffer here "
                                    f"(is it computed at a loop that does not enclose this read?)")
            idx = [load(i) - o for i, o in zip(e.indices, p.origin)]
            return Load(p.buffer, _flat(p.buffer, idx))
        return rebuild(e, load)

    value = load(substitute(reduce.source if reduce is not None else body, absolute))
    if reduce is not None:
        acc = Load(place.buffer, out_index)
        main: Stmt = Store(place.buffer, out_index, reduce.combine(acc, value))
    else:
        main = Store(place.buffer, out_index, value)
    if guards:
        main = IfThenElse(all_of(*guards), main)
    first_reduce = next((k for k, iv in enumerate(st.leaf) if iv.reduce), None)
    first_tz = next((k for k, iv in enumerate(st.leaf) if iv in st.tensorized), len(st.leaf))
    # an intrinsic whose tile holds the whole reduction (outer reduce loops of one trip) resets it
    tz_resets = (reduce is not None and first_tz < len(st.leaf)
                 and all(ext[iv] == 1 for iv in st.leaf[:first_tz] if iv.reduce))

    def init_nest() -> Stmt:
        assert reduce is not None and first_reduce is not None
        s: Stmt = Store(place.buffer, out_index, reduce.identity())
        if data_guard:
            s = IfThenElse(all_of(*data_guard), s)
        for iv in reversed([iv for iv in st.leaf[first_reduce:] if not iv.reduce]):
            s = For(iv.var, ext[iv], _init_kind(st, iv), s)
        return s

    def nest(k: int) -> Stmt:
        if k == len(st.leaf):
            return main
        iv = st.leaf[k]
        if iv in st.tensorized:
            call: Stmt = _tensorize(low, st, k, ext, tz_resets)
            tile = {x.var for x in st.leaf[k:]}
            if any(_mentions(g, dict.fromkeys(tile, (0, 0))) for g in guards):
                raise ScheduleError(f"stage {st.name!r}: tensorize needs tiles that divide their loops "
                                    f"(a split leaves a tail: {', '.join(str(g) for g in guards)})")
            return IfThenElse(all_of(*guards), call) if guards else call
        inner = nest(k + 1)
        kids = low.children.get((id(st), iv), [])
        for kid in reversed(kids):
            kid_place = low.places[kid.op]
            kid_domain = tuple(zip(kid_place.origin, kid_place.buffer.shape))
            inner = Allocate(kid_place.buffer, seq([_stage_nest(low, kid, kid_domain), inner]))
        loop: Stmt = For(iv.var, ext[iv], st.kinds.get(iv, LoopKind.SERIAL), inner, st.thread_tags.get(iv, ""),
                         st.threads.get(iv, 0))
        if reduce is not None and k == first_reduce and not (k < first_tz and tz_resets):
            loop = seq([init_nest(), loop])
        return loop

    _check_parallel(st)
    return nest(0)


def _init_kind(st: Stage, iv: IterVar) -> LoopKind:
    kind = st.kinds.get(iv, LoopKind.SERIAL)
    return kind if kind in (LoopKind.VECTORIZED, LoopKind.UNROLLED) else LoopKind.SERIAL


def _needs_tail_guard(st: Stage, parent: IterVar, ext: dict[IterVar, int]) -> bool:
    for rel in st.relations:
        if isinstance(rel, Split) and rel.parent is parent:
            return ext[rel.outer] * ext[rel.inner] != ext[parent]
    return False


def _mentions_reduce(st: Stage, e: Expr) -> bool:
    from taso_py.codegen.te.expr import walk
    reduce_vars = {iv.var for iv in _all_axes(st) if iv.reduce}
    return any(x in reduce_vars for x in walk(e) if isinstance(x, Var))


def _all_axes(st: Stage) -> list[IterVar]:
    out = list(st.root_axes)
    for rel in st.relations:
        out += [rel.outer, rel.inner] if isinstance(rel, Split) else [rel.fused]
    return out


def _check_parallel(st: Stage) -> None:
    par = [iv for iv in st.leaf if st.kinds.get(iv) is LoopKind.PARALLEL]
    if len(par) > 1:
        raise ScheduleError(f"stage {st.name!r}: nested parallel loops ({', '.join(iv.name for iv in par)}); "
                            f"fuse them and parallelize the fused loop")
    inner = [iv for iv in st.leaf[:-1] if st.kinds.get(iv) is LoopKind.VECTORIZED]
    if inner:  # vectorize checks this, but a later reorder or split may have moved loops inside
        raise ScheduleError(f"stage {st.name!r}: vectorized loop {inner[0].name!r} is no longer the innermost "
                            f"(inside it: {', '.join(iv.name for iv in st.leaf[st.leaf.index(inner[0]) + 1:])})")


def _flat(buf: Buffer, idx: Sequence[Expr]) -> Expr:
    out: Expr = const(0)
    for i, stride in zip(idx, buf.strides):
        out = out + i * stride
    return out


# ---- tensorize ----------------------------------------------------------------------------

def _tensorize(low: _Lowering, st: Stage, k: int, ext: dict[IterVar, int], first: bool) -> Intrinsic:
    """Replace the loops st.leaf[k:] with an intrinsic call on the tiles they touch."""
    intrin = st.tensorized[st.leaf[k]]
    inner = st.leaf[k:]
    got = tuple(ext[iv] for iv in inner)
    if got != tuple(intrin.loop_extents):
        raise ScheduleError(f"stage {st.name!r}: tensorize {intrin.name!r} needs inner loops of extents "
                            f"{tuple(intrin.loop_extents)}, got {got} ({', '.join(iv.name for iv in inner)})")
    if any(iv in st.kinds for iv in inner):
        raise ScheduleError(f"stage {st.name!r}: loops replaced by {intrin.name!r} cannot also be annotated")
    intrin.check(st, low.bodies[st])
    free = {iv.var: (0, ext[iv] - 1) for iv in inner}
    values = low.values[st]
    if not _linear_in(low, st, values, [iv.var for iv in inner]):  # a one-trip loop moves nothing: drop it
        one_trip = {iv.var: const(0) for iv in inner if ext[iv] == 1}
        values = {k: substitute(v, one_trip) for k, v in values.items()}
    place = low.places[st.op]
    out_idx = [simplify(substitute(iv.var, values), low.ranges) - o for iv, o in zip(st.axes, place.origin)]
    loops = [iv.var for iv in inner]
    regions = [Region(place.buffer, _origin(low, place.buffer, out_idx, free), _steps(place.buffer, out_idx, loops))]
    factors = []
    for read in intrin.operands(low.bodies[st]):
        p = low.places[read.tensor.op]
        idx = [simplify(substitute(i, values), low.ranges) - o for i, o in zip(read.indices, p.origin)]
        factors.append(Region(p.buffer, _origin(low, p.buffer, idx, free), _steps(p.buffer, idx, loops)))
    regions += intrin.arrange(*factors)
    return Intrinsic(intrin.name, tuple(regions), {"reset": first, **intrin.params})


def _linear_in(low: _Lowering, st: Stage, values: dict[Var, Expr], loops: Sequence[Var]) -> bool:
    """Whether every read of the stage's body indexes linearly in `loops` (what `_steps` needs)."""
    from taso_py.codegen.te.expr import walk
    for read in (e for e in walk(low.bodies[st]) if isinstance(e, TensorRead)):
        for i in read.indices:
            lin = linear(simplify(substitute(i, values), low.ranges))
            if any(not isinstance(a, Var) and _mentions(a, dict.fromkeys(loops, (0, 0))) for a in lin.terms):
                return False
    return True


def _origin(low: _Lowering, buf: Buffer, idx: Sequence[Expr], free: dict[Var, tuple[int, int]]) -> Expr:
    zero = {v: const(0) for v in free}
    return simplify(_flat(buf, [substitute(i, zero) for i in idx]), low.ranges)


def _steps(buf: Buffer, idx: Sequence[Expr], loops: Sequence[Var]) -> tuple[int, ...]:
    lin = linear(simplify(_flat(buf, idx)))
    for atom in lin.terms:
        if not isinstance(atom, Var) and _mentions(atom, dict.fromkeys(loops, (0, 0))):
            raise ScheduleError(f"tensorize: the index of {buf.name!r} is not linear in the replaced loops")
    return tuple(lin.terms.get(v, 0) for v in loops)


# ---- 4. simplify ----------------------------------------------------------------------------

def _simplify_stmt(s: Stmt, ranges: Ranges) -> Stmt:
    if isinstance(s, For) and s.extent == 1 and s.kind is not LoopKind.THREAD:
        zero = {s.var: const(0)}
        return _simplify_stmt(map_exprs(s.body, lambda e: substitute(e, zero)), ranges)
    if isinstance(s, For):
        inner = dict(ranges)
        inner[s.var] = (0, s.extent - 1)
        return dataclasses.replace(s, body=_simplify_stmt(s.body, inner))
    if isinstance(s, Store):
        return Store(s.buffer, simplify(s.index, ranges), simplify(s.value, ranges))
    if isinstance(s, IfThenElse):
        cond = simplify(s.cond, ranges)
        if isinstance(cond, type(const(True))) and cond.value is True:
            return _simplify_stmt(s.then, ranges)
        return IfThenElse(cond, _simplify_stmt(s.then, ranges),
                          None if s.otherwise is None else _simplify_stmt(s.otherwise, ranges))
    if isinstance(s, Intrinsic):
        return Intrinsic(s.name, tuple(Region(r.buffer, simplify(r.offset, ranges), r.loop_strides) for r in s.regions),
                         s.params)
    return map_stmt(s, lambda x: _simplify_stmt(x, ranges))


