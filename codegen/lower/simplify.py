"""Integer simplification and bounds: what makes lowered index arithmetic exact and readable.

Index expressions are put in a linear form (atom -> coefficient, plus a constant). With
the ranges of the loop variables, `x // c` and `x % c` fold when the remainder part is
known to stay inside [0, c), comparisons fold when bounds decide them, and `min`/`max`
fold when one side always wins. Floating-point expressions only get constant folding.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

from taso_py.codegen.te.expr import (
    FLOAT_TYPES,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Load,
    Not,
    Select,
    Var,
    children,
    const,
    rebuild,
)
from taso_py.codegen.te.tensor import TensorRead

Ranges = dict[Var, tuple[int, int]]  # inclusive [lo, hi] of each loop variable


@dataclass
class Linear:
    """sum(coeff * atom) + constant, atoms being variables or expressions that are not linear."""

    terms: dict[Expr, int]
    constant: int

    def add(self, other: Linear, sign: int = 1) -> Linear:
        terms = dict(self.terms)
        for a, c in other.terms.items():
            terms[a] = terms.get(a, 0) + sign * c
        return Linear({a: c for a, c in terms.items() if c}, self.constant + sign * other.constant)

    def scale(self, k: int) -> Linear:
        return Linear({a: c * k for a, c in self.terms.items()} if k else {}, self.constant * k)

    def to_expr(self) -> Expr:
        out: Expr | None = None
        for a, c in sorted(self.terms.items(), key=lambda t: _order(t[0])):
            term = a if c == 1 else Binary("*", a, const(c))
            out = term if out is None else Binary("+", out, term)
        if out is None:
            return const(self.constant)
        return out if self.constant == 0 else Binary("+", out, const(self.constant)) if self.constant > 0 \
            else Binary("-", out, const(-self.constant))


def _order(e: Expr) -> tuple[int, str]:
    return (0, e.name) if isinstance(e, Var) else (1, _key(e))


def _key(e: Expr) -> str:
    """A structural key: equal for expressions that compute the same thing from the same variables."""
    if isinstance(e, Var):
        return f"{e.name}#{id(e)}"
    if isinstance(e, Const):
        return f"{e.value!r}:{e.dtype}"
    if isinstance(e, Binary):
        return f"({_key(e.a)} {e.op} {_key(e.b)})"
    kids = ", ".join(_key(c) for c in children(e))
    if isinstance(e, Load):
        return f"{e.buffer.name}#{id(e.buffer)}[{kids}]"
    if isinstance(e, (Call, Cast, Select, Not)):
        return f"{type(e).__name__}:{getattr(e, 'name', '')}:{e.dtype}({kids})"
    if isinstance(e, TensorRead):
        return f"{e.tensor.name}#{id(e.tensor.op)}[{kids}]"
    return f"{type(e).__name__}#{id(e)}"  # anything else only equals itself


_ATOMS: weakref.WeakValueDictionary[str, Expr] = weakref.WeakValueDictionary()


def _atom(e: Expr) -> Expr:
    """One object per structure, so that `linear` sees `i // 2` and another `i // 2` as one term."""
    k = _key(e)
    got = _ATOMS.get(k)
    if got is None:
        _ATOMS[k] = e
        return e
    return got


def is_int(e: Expr) -> bool:
    return e.dtype not in FLOAT_TYPES and e.dtype != "bool"


def linear(e: Expr) -> Linear:
    """The linear form of an integer expression (non-linear parts become atoms); a fused loop's
    index rebuilt from its parts, m*k*(x // k) + m*(x % k), is m*x again."""
    if isinstance(e, Const):
        return Linear({}, int(e.value))
    if isinstance(e, Binary) and e.op in ("+", "-"):
        return _recombine(linear(e.a).add(linear(e.b), 1 if e.op == "+" else -1))
    if isinstance(e, Binary) and e.op == "*":
        la, lb = linear(e.a), linear(e.b)
        if not la.terms:
            return lb.scale(la.constant)
        if not lb.terms:
            return la.scale(lb.constant)
    return Linear({_atom(e): 1}, 0)


def _recombine(lin: Linear) -> Linear:
    """Replace each pair m*(x % k) + m*k*(x // k) by m*x, and m*(x % k) + m*k*((x // k) % j) by
    m*(x % (k*j)) (floor division: both hold for every integer x), so that an index split into
    mixed-radix digits and put back together (a reshape inside a fused loop) is the loop variable."""
    for mod, m in lin.terms.items():
        if not (isinstance(mod, Binary) and mod.op == "%" and isinstance(mod.b, Const)):
            continue
        k = int(mod.b.value)
        div_key = _key(Binary("//", mod.a, mod.b))
        div = _ATOMS.get(div_key)
        if div is not None and lin.terms.get(div) == m * k:
            rest = Linear({a: c for a, c in lin.terms.items() if a is not mod and a is not div}, lin.constant)
            return _recombine(rest.add(linear(mod.a).scale(m)))
        for digit, c in lin.terms.items():
            if (c == m * k and isinstance(digit, Binary) and digit.op == "%" and isinstance(digit.b, Const)
                    and digit.b.value > 0 and _key(digit.a) == div_key):
                rest = Linear({a: v for a, v in lin.terms.items() if a is not mod and a is not digit}, lin.constant)
                wider = Binary("%", mod.a, const(k * int(digit.b.value)))
                return _recombine(rest.add(Linear({_atom(wider): m}, 0)))
    return lin


def bounds(e: Expr, ranges: Ranges) -> tuple[float, float]:
    """Inclusive numeric bounds of an integer expression (+-inf where unknown)."""
    if isinstance(e, Const):
        return (float(e.value), float(e.value))
    if isinstance(e, Var):
        lo, hi = ranges.get(e, (-math.inf, math.inf))
        return (float(lo), float(hi))
    if isinstance(e, Binary):
        (al, ah), (bl, bh) = bounds(e.a, ranges), bounds(e.b, ranges)
        if e.op == "+":
            return (al + bl, ah + bh)
        if e.op == "-":
            return (al - bh, ah - bl)
        if e.op == "*":
            cands = [x * y for x in (al, ah) for y in (bl, bh) if not (math.isinf(x) and y == 0)
                     and not (math.isinf(y) and x == 0)]
            return (min(cands), max(cands)) if cands else (-math.inf, math.inf)
        if e.op == "//" and bl == bh and bl > 0:
            return (al if math.isinf(al) else math.floor(al / bl), ah if math.isinf(ah) else math.floor(ah / bl))
        if e.op == "%" and bl == bh and bl > 0:
            if al >= 0 and ah < bl:
                return (al, ah)
            return (0.0, bl - 1)
        if e.op == "min":
            return (min(al, bl), min(ah, bh))
        if e.op == "max":
            return (max(al, bl), max(ah, bh))
    if isinstance(e, Select):
        (tl, th), (fl, fh) = bounds(e.t, ranges), bounds(e.f, ranges)
        return (min(tl, fl), max(th, fh))
    return (-math.inf, math.inf)


def simplify(e: Expr, ranges: Ranges | None = None) -> Expr:
    """An equal expression with constants folded and index arithmetic reduced."""
    ranges = ranges or {}

    def go(x: Expr) -> Expr:
        x = rebuild(x, go)
        if isinstance(x, Binary):
            return _binary(x, ranges)
        if isinstance(x, Select) and isinstance(x.cond, Const):
            return x.t if x.cond.value else x.f
        if isinstance(x, Not) and isinstance(x.a, Const):
            return const(not x.a.value)
        if isinstance(x, Cast) and isinstance(x.value, Const):
            return const(x.value.value, x.dtype)
        return x

    return go(e)


def _fold(op: str, a: float, b: float) -> float | bool | None:
    if op in ("/", "//", "%") and b == 0:
        return None
    return {
        "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
        "//": lambda: a // b, "%": lambda: a % b, "min": lambda: min(a, b), "max": lambda: max(a, b),
        "<": lambda: a < b, "<=": lambda: a <= b, "==": lambda: a == b, "!=": lambda: a != b,
        "&&": lambda: bool(a) and bool(b), "||": lambda: bool(a) or bool(b),
    }[op]()


def _binary(x: Binary, ranges: Ranges) -> Expr:
    a, b, op = x.a, x.b, x.op
    if isinstance(a, Const) and isinstance(b, Const):
        v = _fold(op, a.value, b.value)
        if v is not None:
            return const(v, x.dtype)
    if op == "&&":
        for p, q in ((a, b), (b, a)):
            if isinstance(p, Const):
                return q if p.value else const(False)
        return x
    if op == "||":
        for p, q in ((a, b), (b, a)):
            if isinstance(p, Const):
                return const(True) if p.value else q
        return x
    if not is_int(x) and op not in ("<", "<=", "==", "!="):
        return _float_identities(x)
    if op in ("+", "-", "*") and is_int(x):
        return linear(x).to_expr()
    if op in ("//", "%") and isinstance(b, Const) and b.value > 0 and is_int(x):
        folded = _divmod(op, a, int(b.value), ranges)
        return x if folded is None else folded
    if op in ("min", "max"):
        (al, ah), (bl, bh) = bounds(a, ranges), bounds(b, ranges)
        if (ah <= bl) if op == "min" else (al >= bh):
            return a
        if (bh <= al) if op == "min" else (bl >= ah):
            return b
        return x
    if op in ("<", "<=", "==", "!=") and is_int(a) and is_int(b):
        lo, hi = bounds(linear(a).add(linear(b), -1).to_expr(), ranges)
        decided = {"<": (hi < 0, lo >= 0), "<=": (hi <= 0, lo > 0),
                   "==": (lo == hi == 0, lo > 0 or hi < 0), "!=": (lo > 0 or hi < 0, lo == hi == 0)}[op]
        if decided[0]:
            return const(True)
        if decided[1]:
            return const(False)
    return x


def _float_identities(x: Binary) -> Expr:
    a, b = x.a, x.b
    if x.op == "*":
        for p, q in ((a, b), (b, a)):
            if isinstance(p, Const) and p.value == 1:
                return q
    if x.op == "+":
        for p, q in ((a, b), (b, a)):
            if isinstance(p, Const) and p.value == 0:
                return q
    return x


def _divmod(op: str, a: Expr, c: int, ranges: Ranges) -> Expr | None:
    """(q*c + r) // c -> q + r // c and (q*c + r) % c -> r % c; r // c -> k when r is in [k*c, (k+1)*c)."""
    lin = linear(a)
    quot = Linear({t: k // c for t, k in lin.terms.items() if k % c == 0}, lin.constant // c)
    rest = Linear({t: k for t, k in lin.terms.items() if k % c != 0}, lin.constant % c)
    lo, hi = bounds(rest.to_expr(), ranges)
    if math.isinf(lo) or math.isinf(hi):
        if not quot.terms and quot.constant == 0:
            return None
        r = rest.to_expr()
        return quot.to_expr() + Binary("//", r, const(c)) if op == "//" else Binary("%", r, const(c))
    k_lo, k_hi = math.floor(lo / c), math.floor(hi / c)
    if k_lo == k_hi:
        if op == "//":
            return linear(quot.to_expr() + const(k_lo)).to_expr()
        return linear(rest.to_expr() - const(k_lo * c)).to_expr()
    r = rest.to_expr()
    if op == "//":
        return linear(quot.to_expr()).to_expr() + Binary("//", r, const(c)) if quot.terms or quot.constant \
            else Binary("//", r, const(c))
    return Binary("%", r, const(c))
