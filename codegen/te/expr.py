"""Scalar expressions shared by tensor expressions and the lowered loop IR.

An expression is an immutable tree. Python operators build it (`i * 4 + j`, `a < b`);
`==` keeps Python's identity meaning, so expressions and axes can be dict keys, and
`equal(a, b)` builds the comparison. Integers and floats are lifted to constants of the
other operand's type.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taso_py.codegen.te.intrinsics import SCALAR_INTRINSICS
from taso_py.codegen.te.names import Names

FLOAT_TYPES = ("float32", "float64", "float16")
INT_TYPES = ("int8", "uint8", "int16", "int32", "int64")


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_TYPES


def promote(a: str, b: str) -> str:
    """Result type of an arithmetic operation on two element types (numpy's rule)."""
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    return np.promote_types(a, b).name


class Expr:
    """Base of every scalar expression; the operators build new expressions."""

    dtype: str

    def __add__(self, o: Any) -> Expr: return binary("+", self, o)
    def __radd__(self, o: Any) -> Expr: return binary("+", o, self)
    def __sub__(self, o: Any) -> Expr: return binary("-", self, o)
    def __rsub__(self, o: Any) -> Expr: return binary("-", o, self)
    def __mul__(self, o: Any) -> Expr: return binary("*", self, o)
    def __rmul__(self, o: Any) -> Expr: return binary("*", o, self)
    def __truediv__(self, o: Any) -> Expr: return binary("/", self, o)
    def __rtruediv__(self, o: Any) -> Expr: return binary("/", o, self)
    def __floordiv__(self, o: Any) -> Expr: return binary("//", self, o)
    def __rfloordiv__(self, o: Any) -> Expr: return binary("//", o, self)
    def __mod__(self, o: Any) -> Expr: return binary("%", self, o)
    def __rmod__(self, o: Any) -> Expr: return binary("%", o, self)
    def __neg__(self) -> Expr: return binary("-", const(0, self.dtype), self)
    def __lt__(self, o: Any) -> Expr: return binary("<", self, o)
    def __le__(self, o: Any) -> Expr: return binary("<=", self, o)
    def __gt__(self, o: Any) -> Expr: return binary("<", o, self)
    def __ge__(self, o: Any) -> Expr: return binary("<=", o, self)
    def __and__(self, o: Any) -> Expr: return binary("&&", self, o)
    def __or__(self, o: Any) -> Expr: return binary("||", self, o)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError("an expression has no truth value: use te.if_then_else / te.all_of")

    def __str__(self) -> str:
        return expr_str(self)

    __repr__ = __str__


@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    value: int | float | bool
    dtype: str = "int32"


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A loop variable or a scalar parameter."""

    name: str
    dtype: str = "int32"


@dataclass(frozen=True, eq=False, repr=False)
class Binary(Expr):
    """`a op b`; op is one of + - * / // % min max < <= == != && ||."""

    op: str
    a: Expr
    b: Expr
    dtype: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown binary operator {self.op!r}")
        t = "bool" if self.op in COMPARE else promote(self.a.dtype, self.b.dtype)
        object.__setattr__(self, "dtype", t)


@dataclass(frozen=True, eq=False, repr=False)
class Not(Expr):
    a: Expr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """`cond ? t : f`; both branches may be evaluated (they must be safe to)."""

    cond: Expr
    t: Expr
    f: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return promote(self.t.dtype, self.f.dtype)


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    dtype: str
    value: Expr


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A pure math intrinsic, one of `te.intrinsics.SCALAR_INTRINSICS` (exp, tanh, sigmoid, ...)."""

    name: str
    args: tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Load(Expr):
    """Lowered IR only: element `index` of a flat buffer."""

    buffer: Any  # codegen.lower.ir.Buffer
    index: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.buffer.dtype


ARITH = ("+", "-", "*", "/", "//", "%", "min", "max")
COMPARE = ("<", "<=", "==", "!=", "&&", "||")
OPS = ARITH + COMPARE

ExprLike = Expr | int | float | bool


def const(value: int | float | bool, dtype: str | None = None) -> Const:
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else "int32" if isinstance(value, (int, np.integer)) else "float32"
    if dtype == "bool":
        return Const(bool(value), "bool")
    return Const(float(value) if is_float(dtype) else int(value), dtype)


def lift(x: ExprLike, like: str | None = None) -> Expr:
    """An expression from a Python number; a float next to an int expression is a float."""
    if isinstance(x, Expr):
        return x
    if isinstance(getattr(x, "var", None), Var):  # an axis (te.IterVar) stands for its variable
        return x.var  # type: ignore[union-attr]
    if isinstance(x, (bool, np.bool_)):
        return const(bool(x), "bool")
    if isinstance(x, (int, np.integer)):
        return const(int(x), like if like and like != "bool" else "int32")
    if isinstance(x, (float, np.floating)):
        return const(float(x), like if like and is_float(like) else "float32")
    raise TypeError(f"cannot use {type(x).__name__} in an expression")


def binary(op: str, a: ExprLike, b: ExprLike) -> Expr:
    ea = lift(a, b.dtype if isinstance(b, Expr) else None)
    eb = lift(b, ea.dtype)
    return Binary(op, ea, eb)


def min_(a: ExprLike, b: ExprLike) -> Expr: return binary("min", a, b)
def max_(a: ExprLike, b: ExprLike) -> Expr: return binary("max", a, b)
def equal(a: ExprLike, b: ExprLike) -> Expr: return binary("==", a, b)
def not_equal(a: ExprLike, b: ExprLike) -> Expr: return binary("!=", a, b)


def all_of(*conds: Expr) -> Expr:
    out: Expr = const(True)
    for c in conds:
        out = c if isinstance(out, Const) else binary("&&", out, c)
    return out


def if_then_else(cond: ExprLike, t: ExprLike, f: ExprLike) -> Expr:
    et = lift(t, f.dtype if isinstance(f, Expr) else None)
    return Select(lift(cond), et, lift(f, et.dtype))


def cast(dtype: str, value: ExprLike) -> Expr:
    v = lift(value)
    return v if v.dtype == dtype else Cast(dtype, v)


def call(name: str, *args: ExprLike) -> Expr:
    if name not in SCALAR_INTRINSICS:
        raise ValueError(f"unknown intrinsic {name!r} (known: {', '.join(SCALAR_INTRINSICS)})")
    xs = tuple(lift(a) for a in args)
    return Call(name, xs, xs[0].dtype)


def exp(x: ExprLike) -> Expr: return call("exp", x)
def log(x: ExprLike) -> Expr: return call("log", x)
def sqrt(x: ExprLike) -> Expr: return call("sqrt", x)
def tanh(x: ExprLike) -> Expr: return call("tanh", x)
def erf(x: ExprLike) -> Expr: return call("erf", x)
def sigmoid(x: ExprLike) -> Expr: return call("sigmoid", x)


def min_value(dtype: str) -> Const:
    return const(-math.inf if is_float(dtype) else int(np.iinfo(dtype).min), dtype)


def max_value(dtype: str) -> Const:
    return const(math.inf if is_float(dtype) else int(np.iinfo(dtype).max), dtype)


# ---- generic traversal ------------------------------------------------------------------

def children(e: Expr) -> Iterator[Expr]:
    """The direct sub-expressions (tensor reads and reductions define their own, see te.tensor)."""
    kids = getattr(e, "sub_exprs", None)
    if kids is not None:
        yield from kids()
    elif isinstance(e, Binary):
        yield e.a
        yield e.b
    elif isinstance(e, Not):
        yield e.a
    elif isinstance(e, Select):
        yield from (e.cond, e.t, e.f)
    elif isinstance(e, Cast):
        yield e.value
    elif isinstance(e, Call):
        yield from e.args
    elif isinstance(e, Load):
        yield e.index


def rebuild(e: Expr, f: Callable[[Expr], Expr]) -> Expr:
    """`e` with `f` applied to each direct child (the same object when nothing changed)."""
    remake = getattr(e, "with_children", None)
    if remake is not None:
        return remake(f)
    if isinstance(e, Binary):
        a, b = f(e.a), f(e.b)
        return e if a is e.a and b is e.b else Binary(e.op, a, b)
    if isinstance(e, Not):
        a = f(e.a)
        return e if a is e.a else Not(a)
    if isinstance(e, Select):
        c, t, g = f(e.cond), f(e.t), f(e.f)
        return e if (c, t, g) == (e.cond, e.t, e.f) else Select(c, t, g)
    if isinstance(e, Cast):
        v = f(e.value)
        return e if v is e.value else Cast(e.dtype, v)
    if isinstance(e, Call):
        args = tuple(f(a) for a in e.args)
        return e if all(x is y for x, y in zip(args, e.args)) else Call(e.name, args, e.dtype)
    if isinstance(e, Load):
        i = f(e.index)
        return e if i is e.index else Load(e.buffer, i)
    return e


def substitute(e: Expr, mapping: dict[Expr, Expr]) -> Expr:
    """Replace variables (or any sub-expression, by identity) according to `mapping`."""
    if not mapping:
        return e

    def go(x: Expr) -> Expr:
        hit = mapping.get(x)
        return hit if hit is not None else rebuild(x, go)

    return go(e)


def walk(e: Expr) -> Iterator[Expr]:
    """Every sub-expression, pre-order."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(children(x))


def free_vars(e: Expr) -> set[Var]:
    return {x for x in walk(e) if isinstance(x, Var)}


# ---- text (what `taso compile --print-ir` shows) ----

_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6}


def expr_str(e: Expr, outer: int = 0, names: Names | None = None) -> str:
    names = names or Names()

    def sub(x: Expr, o: int = 0) -> str:
        return expr_str(x, o, names)

    if isinstance(e, Const):
        return repr(e.value) if not isinstance(e.value, bool) else str(e.value).lower()
    if isinstance(e, Var):
        return names(e)
    if isinstance(e, Binary):
        if e.op in ("min", "max"):
            return f"{e.op}({sub(e.a)}, {sub(e.b)})"
        p = _PREC[e.op]
        text = f"{sub(e.a, p)} {e.op} {sub(e.b, p + 1)}"
        return f"({text})" if p < outer else text
    if isinstance(e, Not):
        return f"!{sub(e.a, 9)}"
    if isinstance(e, Select):
        return f"select({sub(e.cond)}, {sub(e.t)}, {sub(e.f)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({sub(e.value)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(sub(a) for a in e.args)})"
    if isinstance(e, Load):
        return f"{names(e.buffer)}[{sub(e.index)}]"
    indices = getattr(e, "indices", None)
    if indices is not None:  # a tensor read
        return f"{e.tensor.name}[{', '.join(sub(i) for i in indices)}]"  # type: ignore[attr-defined]
    if hasattr(e, "combiner"):
        axes = ", ".join(a.name for a in e.axes)  # type: ignore[attr-defined]
        return f"{e.combiner}({sub(e.source)}, axis=[{axes}])"  # type: ignore[attr-defined]
    return type(e).__name__
