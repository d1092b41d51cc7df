"""Concolic dimensions: a concrete size and the expression that computes it from input dims.

The enumerator runs every operator's `sym_shape` over `CDim`s. Comparisons answer with the
concrete value (so the shape rule decides definedness on the world's inputs), while `+ - *`
and floor division also build the symbolic side. That symbolic side is what lets a generated
rule say `sizes=[dim(b, 1), dim(c, 1)]` rather than `sizes=[4, 4]`: attributes that follow from
shapes stay correct for every shape the rule is later matched on.

The symbolic side is kept as an ordered sum of parts plus a constant, because the order of the
parts is the order of concatenation, which is where a split may cut.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taso_py.library.terms import BinOp, Dim, Expr, Lit

Part = tuple[Expr, int]  # an atom (`dim(x, 1)`, a product, a quotient) and its concrete value


@dataclass(frozen=True, slots=True)
class Lin:
    """`parts[0] + parts[1] + ... + const`, each part with its concrete value."""

    parts: tuple[Part, ...] = ()
    const: int = 0

    def key(self) -> tuple[Any, ...]:
        """Order-insensitive identity: two Lins with equal keys are equal for every shape."""
        return tuple(sorted(Counter(e for e, _ in self.parts).items(), key=repr)), self.const

    @property
    def value(self) -> int:
        return sum(v for _, v in self.parts) + self.const

    def expr(self) -> Expr:
        """The Expr this sum prints as (`dim(a, 1) + dim(b, 1)`, `2 * dim(a, 0)`, `3`)."""
        out: Expr | None = None
        i = 0
        while i < len(self.parts):
            j = i
            while j < len(self.parts) and self.parts[j][0] == self.parts[i][0]:
                j += 1
            atom = self.parts[i][0]
            term = atom if j - i == 1 else BinOp("*", Lit(j - i), atom)
            out = term if out is None else BinOp("+", out, term)
            i = j
        if out is None:
            return Lit(self.const)
        if self.const:
            return BinOp("+", out, Lit(self.const)) if self.const > 0 else BinOp("-", out, Lit(-self.const))
        return out


def _lin(value: Any) -> Lin:
    return value.sym if isinstance(value, CDim) else Lin((), int(value))


def _concrete(value: Any) -> int:
    return value.value if isinstance(value, CDim) else int(value)


class CDim:
    """An int that remembers how it was computed (see the module docstring)."""

    __slots__ = ("sym", "value")

    def __init__(self, value: int, sym: Lin) -> None:
        self.value, self.sym = value, sym

    @staticmethod
    def of(var: str, axis: int, value: int) -> CDim:
        return CDim(value, Lin(((Dim(var, Lit(axis)), value),)))

    def expr(self) -> Expr:
        return self.sym.expr()

    def __repr__(self) -> str:
        return f"CDim({self.value}, {self.sym.expr()})"

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __hash__(self) -> int:
        return hash(self.value)

    # comparisons answer concretely: the world's shapes decide definedness
    def __eq__(self, other: object) -> bool:  # type: ignore[override]
        return self.value == _concrete(other)

    def __ne__(self, other: object) -> bool:  # type: ignore[override]
        return self.value != _concrete(other)

    def __lt__(self, other: Any) -> bool:
        return self.value < _concrete(other)

    def __le__(self, other: Any) -> bool:
        return self.value <= _concrete(other)

    def __gt__(self, other: Any) -> bool:
        return self.value > _concrete(other)

    def __ge__(self, other: Any) -> bool:
        return self.value >= _concrete(other)

    def __add__(self, other: Any) -> CDim:
        a, b = self.sym, _lin(other)
        return CDim(self.value + _concrete(other), Lin(a.parts + b.parts, a.const + b.const))

    __radd__ = __add__

    def __neg__(self) -> CDim:
        return scale(self, -1)

    def __sub__(self, other: Any) -> CDim:
        return self + (-other if isinstance(other, CDim) else -int(other))

    def __rsub__(self, other: Any) -> CDim:
        return (-self) + other

    def __mul__(self, other: Any) -> CDim:
        if not isinstance(other, CDim) or not other.sym.parts:
            return scale(self, _concrete(other))
        if not self.sym.parts:
            return scale(other, self.value)
        return atom(BinOp("*", self.expr(), other.expr()), self.value * other.value)

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> CDim:
        d = _concrete(other)
        if not (isinstance(other, CDim) and other.sym.parts):
            if d == 1:
                return self
            if not self.sym.parts:
                return CDim(self.value // d, Lin((), self.sym.const // d))
        return atom(BinOp("//", self.expr(), _lin(other).expr()), self.value // d)

    def __mod__(self, other: Any) -> CDim:
        d = _concrete(other)
        if not self.sym.parts and not (isinstance(other, CDim) and other.sym.parts):
            return CDim(self.value % d, Lin((), self.sym.const % d))
        return atom(BinOp("%", self.expr(), _lin(other).expr()), self.value % d)


def atom(e: Expr, value: int) -> CDim:
    return CDim(value, Lin(((e, value),)))


def scale(x: CDim, k: int) -> CDim:
    """k * x, cancelling parts: `(a + b) - b` is `a` again, so windows with `same` padding stay `dim(x, 2)`."""
    if k == 0:
        return CDim(0, Lin())
    if k > 0:
        return CDim(x.value * k, Lin(x.sym.parts * k, x.sym.const * k))
    neg = tuple((BinOp("*", Lit(-1), e), -v) for e, v in x.sym.parts) * (-k)
    return CDim(x.value * k, Lin(neg, x.sym.const * k))


def _cancel(parts: Sequence[Part]) -> tuple[Part, ...]:
    """Remove each `-1 * p` together with one `p`."""
    out = list(parts)
    for e, v in parts:
        if isinstance(e, BinOp) and e.op == "*" and e.left == Lit(-1) and (e, v) in out and (e.right, -v) in out:
            out.remove((e, v))
            out.remove((e.right, -v))
    return tuple(out)


def simplify(x: Any) -> Any:
    """x with cancelled parts (applied after each operator's shape rule)."""
    if not isinstance(x, CDim):
        return x
    return CDim(x.value, Lin(_cancel(x.sym.parts), x.sym.const))


class ConcolicArith:
    """ops.symbolic.Arith over CDims: conditions are concrete bools, values keep their expressions."""

    def ite(self, c: Any, a: Any, b: Any) -> Any:
        return a if c else b

    def all(self, *cs: Any) -> bool:
        return all(cs)

    def any(self, *cs: Any) -> bool:
        return any(cs)

    def not_(self, c: Any) -> bool:
        return not c

    def div(self, a: Any, b: Any) -> Any:
        if isinstance(a, CDim):
            return simplify(a) // b
        return CDim(int(a), Lin((), int(a))) // b if isinstance(b, CDim) else int(a) // int(b)

    def mod(self, a: Any, b: Any) -> Any:
        if isinstance(a, CDim):
            return simplify(a) % b
        return a % b


CONCOLIC = ConcolicArith()
