"""The lowered loop IR: buffers, loops, stores and intrinsic calls (TVM's `tir`, much smaller).

Expressions are `codegen.te.expr` nodes with `Load` for buffer reads; statements are the
frozen dataclasses below. Every backend (C, CUDA, the accelerator) consumes this IR, and
`stmt_str` / `func_str` print it so a user can see what a schedule did.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from taso_py.codegen.schedule.schedule import LoopKind
from taso_py.codegen.te.expr import Expr, Var, expr_str
from taso_py.codegen.te.names import Names


@dataclass(frozen=True, eq=False)
class Buffer:
    """A flat, row-major array; `scope` is global (argument or heap), local, shared or an on-chip buffer."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str = "global"

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        out, acc = [], 1
        for s in reversed(self.shape):
            out.append(acc)
            acc *= s
        return tuple(reversed(out))

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.shape}, {self.dtype}, {self.scope})"


class Stmt:
    """Base of the statements."""

    def __str__(self) -> str:
        return stmt_str(self)


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    var: Var
    extent: int
    kind: LoopKind
    body: Stmt
    thread_tag: str = ""
    threads: int = 0  # a parallel loop's thread count (0: as many as the runtime has)


@dataclass(frozen=True, eq=False, repr=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(frozen=True, eq=False, repr=False)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    otherwise: Stmt | None = None


@dataclass(frozen=True, eq=False, repr=False)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False, repr=False)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True)
class Region:
    """The tile of a buffer a tensorized loop nest touches: the flat offset of its origin and,
    per replaced loop, how far one step of that loop moves in the buffer (0: not at all)."""

    buffer: Buffer
    offset: Expr
    loop_strides: tuple[int, ...]


@dataclass(frozen=True, eq=False, repr=False)
class Intrinsic(Stmt):
    """A call of a tensor intrinsic on tiles (from `tensorize`); backends know each by name."""

    name: str
    regions: tuple[Region, ...]  # output first
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class PrimFunc:
    """A lowered kernel: its buffer parameters (inputs then outputs) and its body."""

    name: str
    params: list[Buffer]
    body: Stmt

    def __str__(self) -> str:
        return func_str(self)


def seq(stmts: Sequence[Stmt]) -> Stmt:
    flat: list[Stmt] = []
    for s in stmts:
        flat.extend(s.stmts if isinstance(s, Seq) else (s,))
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def stmt_children(s: Stmt) -> Iterator[Stmt]:
    if isinstance(s, (For, Allocate, LetStmt)):
        yield s.body
    elif isinstance(s, IfThenElse):
        yield s.then
        if s.otherwise is not None:
            yield s.otherwise
    elif isinstance(s, Seq):
        yield from s.stmts


def walk_stmts(s: Stmt) -> Iterator[Stmt]:
    stack = [s]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(list(stmt_children(x))))


def map_stmt(s: Stmt, f: Callable[[Stmt], Stmt]) -> Stmt:
    """`s` with `f` applied to each direct child statement."""
    if isinstance(s, For):
        return dataclasses.replace(s, body=f(s.body))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, f(s.body))
    if isinstance(s, LetStmt):
        return LetStmt(s.var, s.value, f(s.body))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, f(s.then), None if s.otherwise is None else f(s.otherwise))
    if isinstance(s, Seq):
        return seq([f(x) for x in s.stmts])
    return s


def map_exprs(s: Stmt, f: Callable[[Expr], Expr]) -> Stmt:
    """`s` with `f` applied to every expression it holds, at any depth."""
    def go(x: Stmt) -> Stmt:
        if isinstance(x, Store):
            return Store(x.buffer, f(x.index), f(x.value))
        if isinstance(x, IfThenElse):
            return IfThenElse(f(x.cond), go(x.then), None if x.otherwise is None else go(x.otherwise))
        if isinstance(x, LetStmt):
            return LetStmt(x.var, f(x.value), go(x.body))
        if isinstance(x, Intrinsic):
            return Intrinsic(x.name, tuple(Region(r.buffer, f(r.offset), r.loop_strides) for r in x.regions), x.params)
        return map_stmt(x, go)
    return go(s)


# ---- text (what `taso compile --print-ir` shows) ----

def stmt_str(s: Stmt, indent: int = 0, names: Names | None = None) -> str:
    names = names or Names()

    def ex(e: Expr) -> str:
        return expr_str(e, 0, names)

    pad = "  " * indent
    if isinstance(s, For):
        kind = "" if s.kind is LoopKind.SERIAL else f" {s.kind.value}" + (f"({s.threads})" if s.threads else "")
        tag = f" ({s.thread_tag})" if s.thread_tag else ""
        return f"{pad}for{kind} {names(s.var)} in 0..{s.extent}{tag}:\n{stmt_str(s.body, indent + 1, names)}"
    if isinstance(s, Allocate):
        b = s.buffer
        return (f"{pad}allocate {names(b)}[{' x '.join(map(str, b.shape))}] {b.dtype} in {b.scope}\n"
                f"{stmt_str(s.body, indent, names)}")
    if isinstance(s, Store):
        return f"{pad}{names(s.buffer)}[{ex(s.index)}] = {ex(s.value)}"
    if isinstance(s, IfThenElse):
        text = f"{pad}if {ex(s.cond)}:\n{stmt_str(s.then, indent + 1, names)}"
        return text + (f"\n{pad}else:\n{stmt_str(s.otherwise, indent + 1, names)}" if s.otherwise else "")
    if isinstance(s, Seq):
        return "\n".join(stmt_str(x, indent, names) for x in s.stmts)
    if isinstance(s, LetStmt):
        return f"{pad}let {names(s.var)} = {ex(s.value)}\n{stmt_str(s.body, indent, names)}"
    if isinstance(s, Intrinsic):
        regs = ", ".join(f"{names(r.buffer)}[{ex(r.offset)}, steps={r.loop_strides}]"
                         for r in s.regions)
        params = "".join(f", {k}={v}" for k, v in s.params.items())
        return f"{pad}{s.name}({regs}{params})"
    return f"{pad}{type(s).__name__}"


def func_str(f: PrimFunc) -> str:
    names = Names()
    params = ", ".join(f"{names(b)}: {b.dtype}[{', '.join(map(str, b.shape))}]" for b in f.params)
    return f"def {f.name}({params}):\n{stmt_str(f.body, 1, names)}"
