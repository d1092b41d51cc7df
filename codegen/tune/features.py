"""Features of a lowered kernel for the cost model (AutoTVM's loop features, much smaller).

The model has to tell a cache-friendly, vectorized, well-parallelized nest from a bad one
without running it, so the vector describes the loops: extents per loop kind, the
innermost vector width, unrolling, allocations, and along the heaviest loop path the bytes
each level touches and the arithmetic done per byte (which says where data stops fitting
in cache). Knob values are appended, so the model can also learn what the features miss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taso_py.codegen.lower.ir import Allocate, Buffer, For, IfThenElse, Intrinsic, LetStmt, PrimFunc, Seq, Stmt, Store
from taso_py.codegen.schedule.schedule import LoopKind
from taso_py.codegen.te.expr import Binary, Call, Expr, Load, Var, walk

LEVELS = 6  # levels of the heaviest loop path described one by one
KINDS = (LoopKind.SERIAL, LoopKind.PARALLEL, LoopKind.VECTORIZED, LoopKind.UNROLLED)


def _log2(x: float) -> float:
    return math.log2(x + 1.0)


def _ops(e: Expr) -> int:
    return sum(1 for x in walk(e) if isinstance(x, (Binary, Call)) and x.dtype not in ("int32", "int64", "bool"))


@dataclass
class _Loop:
    loop: For
    depth: int
    work: float  # arithmetic operations of one run of the loop, inner loops included
    touched: float  # distinct bytes one run of the loop touches (an estimate)
    children: list[_Loop] = field(default_factory=list)


Footprint = dict[Buffer, set[Var]]  # per buffer, the loop variables its indices use


def _analyse(s: Stmt, depth: int) -> tuple[float, Footprint, dict[Var, int], list[_Loop]]:
    """(flops, footprint, extents of the loops inside, loop tree) of one run of `s`.

    A buffer's footprint under a loop is the product of the extents of the loops inside it
    (itself included) whose variables its indices use, capped by the buffer's size.
    """
    if isinstance(s, For):
        flops, foot, inner, kids = _analyse(s.body, depth + 1)
        inner = inner | {s.var: s.extent}
        flops *= s.extent
        return flops, foot, inner, [_Loop(s, depth, flops, _bytes(foot, inner), kids)]
    if isinstance(s, (Seq, Allocate, LetStmt, IfThenElse)):
        parts = (s.stmts if isinstance(s, Seq) else (s.then,) + ((s.otherwise,) if s.otherwise else ())
                 if isinstance(s, IfThenElse) else (s.body,))
        flops, foot, inner, loops = 0.0, {}, {}, []
        for p in parts:
            f, ft, ext, lp = _analyse(p, depth)
            flops += f
            for b, used in ft.items():
                foot.setdefault(b, set()).update(used)
            inner |= ext
            loops += lp
        return flops, foot, inner, loops
    accesses: list[tuple[Buffer, Expr]] = []
    flops = 0.0
    if isinstance(s, Store):
        flops = _ops(s.value)
        accesses = [(s.buffer, s.index)] + [(x.buffer, x.index) for x in walk(s.value) if isinstance(x, Load)]
    elif isinstance(s, Intrinsic):
        flops = 2.0 * s.params.get("m", 1) * s.params.get("n", 1) * s.params.get("k", 1)
        accesses = [(r.buffer, r.offset) for r in s.regions]
    foot: Footprint = {}
    for buf, index in accesses:
        foot.setdefault(buf, set()).update(x for x in walk(index) if isinstance(x, Var))
    return flops, foot, {}, []


def _bytes(foot: Footprint, inner: Mapping[Var, int]) -> float:
    return sum(min(math.prod(inner.get(v, 1) for v in used), buf.size) * np.dtype(buf.dtype).itemsize
               for buf, used in foot.items())


def feature_names(knobs: Sequence[str] = ()) -> list[str]:
    names = []
    for k in KINDS:
        names += [f"{k.value}_count", f"{k.value}_log_extent"]
    names += ["vector_width", "unroll_max", "unroll_total", "depth_max", "nests", "intrinsics",
              "alloc_count", "alloc_log_bytes", "alloc_max_log_bytes", "log_flops", "log_touched",
              "intensity", "guards"]
    for level in range(LEVELS):
        names += [f"l{level}_log_extent", f"l{level}_kind", f"l{level}_log_touched", f"l{level}_intensity"]
    names += ["inner_stride0", "inner_stride1", "inner_strided", "inner_log_max_stride"]
    return names + [f"knob_{k}" for k in knobs]


def _knob_value(value: Any, options: Sequence[Any]) -> float:
    """Numbers as their log2 (tile sizes grow geometrically), anything else as its option index."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return float(list(options).index(value)) if value in options else -1.0
    return math.copysign(_log2(abs(value)), value)


def extract(f: PrimFunc, knobs: Mapping[str, Any] | None = None,
            space: Mapping[str, Sequence[Any]] | None = None) -> np.ndarray:
    """The feature vector of kernel `f` (and of the knob values that produced it)."""
    flops, _, _, roots = _analyse(f.body, 0)
    loops: list[_Loop] = []
    stack = list(roots)
    while stack:
        node = stack.pop()
        loops.append(node)
        stack.extend(node.children)
    row: list[float] = []
    for k in KINDS:
        mine = [n.loop.extent for n in loops if n.loop.kind is k]
        row += [len(mine), sum(_log2(e) for e in mine)]
    vec = [n.loop.extent for n in loops if n.loop.kind is LoopKind.VECTORIZED and not n.children]
    unrolled = [n.loop.extent for n in loops if n.loop.kind is LoopKind.UNROLLED]
    allocs = [s.buffer for s in _stmts(f.body) if isinstance(s, Allocate)]
    nbytes = [b.size * np.dtype(b.dtype).itemsize for b in allocs]
    touched = sum(b.size * np.dtype(b.dtype).itemsize for b in f.params)
    row += [max(vec, default=0), max(unrolled, default=0), sum(unrolled), max((n.depth for n in loops), default=-1) + 1,
            len(roots), sum(isinstance(s, Intrinsic) for s in _stmts(f.body)), len(allocs),
            _log2(sum(nbytes)), _log2(max(nbytes, default=0)), _log2(flops), _log2(touched), flops / max(touched, 1.0),
            sum(isinstance(s, IfThenElse) for s in _stmts(f.body))]
    path: list[_Loop] = []
    level = roots
    while level and len(path) < LEVELS:
        heaviest = max(level, key=lambda n: n.work)
        path.append(heaviest)
        level = heaviest.children
    for k in range(LEVELS):
        if k < len(path):
            n = path[k]
            row += [_log2(n.loop.extent), float(KINDS.index(n.loop.kind) if n.loop.kind in KINDS else len(KINDS)),
                    _log2(n.touched), n.work / max(n.touched, 1.0)]
        else:
            row += [0.0, -1.0, 0.0, 0.0]
    row += _inner_strides(path[-1].loop) if path else [0.0, 0.0, 0.0, 0.0]
    for name, options in (space or {}).items():
        row.append(_knob_value((knobs or {}).get(name), options))
    return np.asarray(row, dtype=np.float64)


def _stmts(s: Stmt) -> list[Stmt]:
    from taso_py.codegen.lower.ir import walk_stmts
    return list(walk_stmts(s))


def _inner_strides(loop: For) -> list[float]:
    """How the innermost loop of the heaviest path walks memory: its accesses with stride 0 (reuse),
    1 (contiguous, vectorizable) and larger (a cache line per element), and the largest stride."""
    from taso_py.codegen.lower.simplify import linear
    counts = [0.0, 0.0, 0.0]
    largest = 0
    for s in _stmts(loop.body):
        if isinstance(s, Store):
            indices = [s.index] + [x.index for x in walk(s.value) if isinstance(x, Load)]
        else:
            continue
        for index in indices:
            stride = abs(linear(index).terms.get(loop.var, 0))
            counts[min(stride, 2)] += 1
            largest = max(largest, stride)
    return [*counts, _log2(largest)]
