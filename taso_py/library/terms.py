"""The AST of rewrite rules: tensor terms on both sides, attribute expressions, side conditions.

The nodes are frozen dataclasses so that rules can be compared, hashed and used as keys; they keep
attribute values as expressions (literals, attribute variables, dims of tensor variables) because
only a consumer that knows the matched graph can evaluate them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeAlias


@dataclass(frozen=True, slots=True)
class Var:
    """A tensor pattern variable (`x`, `w1`): matches any tensor, the same one at every use."""

    name: str


@dataclass(frozen=True, slots=True)
class Apply:
    """An operator applied to tensor terms; attrs stay in written order so printing is faithful.

    The hash is computed once: terms are keys of every memo in the generator and the matcher, and
    a dataclass would otherwise hash the whole tree again at each lookup."""

    op: str
    args: tuple[Term, ...]
    attrs: tuple[tuple[str, Expr], ...] = ()
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.op, self.args, self.attrs)))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True, slots=True)
class Pick:
    """Output `index` of a multi-output operator (`split(...)[1]`): terms are single tensors."""

    term: Term
    index: int


@dataclass(frozen=True, slots=True, eq=False)
class Lit:
    """A constant; equality includes the type so that `1`, `1.0` and `true` stay different rules."""

    value: int | float | bool | str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lit) and type(other.value) is type(self.value) and other.value == self.value

    def __hash__(self) -> int:
        return hash((type(self.value).__name__, self.value))


@dataclass(frozen=True, slots=True)
class AttrVar:
    """An attribute variable (`?s`): binds an attribute value of the matched source."""

    name: str


@dataclass(frozen=True, slots=True)
class Dim:
    """`dim(x, axis)`: a size of a tensor variable, known only once the rule is matched."""

    var: str
    axis: Expr


@dataclass(frozen=True, slots=True)
class Rank:
    """`rank(x)`: the rank of a tensor variable, known only once the rule is matched."""

    var: str


@dataclass(frozen=True, slots=True)
class BinOp:
    """Integer arithmetic (`+ - * // %`) over expressions; unary minus is `BinOp('*', Lit(-1), e)`."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Call:
    """`max(...)` or `min(...)` of expressions, e.g. for padding that depends on sizes."""

    fn: str
    args: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Seq:
    """A list value (`[1, 0, ?a]`), for tuple attributes such as perm, stride or sizes."""

    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Cond:
    """A side condition `left op right` (op in == != < <= > >=) that must hold for the rule to fire."""

    op: str
    left: Expr
    right: Expr


Term: TypeAlias = Var | Apply | Pick
Expr: TypeAlias = Lit | AttrVar | Dim | Rank | BinOp | Call | Seq


@dataclass(frozen=True, slots=True)
class Rule:
    """`src == dst where ...`: the sides are tuples so one rule can rewrite several outputs at once."""

    src: tuple[Term, ...]
    dst: tuple[Term, ...]
    where: tuple[Cond, ...] = ()

    def variables(self) -> tuple[str, ...]:
        """Tensor variable names in order of first appearance (src, dst, where), for stable binding."""
        return tuple(dict.fromkeys(name for kind, name in self._names() if kind == "tensor"))

    def attr_variables(self) -> tuple[str, ...]:
        """Attribute variable names (without '?') in order of first appearance."""
        return tuple(dict.fromkeys(name for kind, name in self._names() if kind == "attr"))

    def _names(self) -> Iterator[tuple[str, str]]:
        """('tensor' | 'attr', name) in textual order, so both helpers agree on 'first appearance'."""
        for term in (*self.src, *self.dst):
            yield from term_names(term)
        for cond in self.where:
            yield from _expr_names(cond.left)
            yield from _expr_names(cond.right)


def walk(term: Term) -> Iterator[Term]:
    """Every subterm of `term`, pre-order (the term itself first); attribute expressions are not terms."""
    yield term
    if isinstance(term, Apply):
        for arg in term.args:
            yield from walk(arg)
    elif isinstance(term, Pick):
        yield from walk(term.term)


def walk_expr(expr: Expr) -> Iterator[Expr]:
    """Every subexpression of `expr`, pre-order, for consumers that look for dims or attribute variables."""
    yield expr
    children: tuple[Expr, ...] = ()
    if isinstance(expr, BinOp):
        children = (expr.left, expr.right)
    elif isinstance(expr, Call):
        children = expr.args
    elif isinstance(expr, Seq):
        children = expr.items
    elif isinstance(expr, Dim):
        children = (expr.axis,)
    for child in children:
        yield from walk_expr(child)


def term_names(term: Term) -> Iterator[tuple[str, str]]:
    """Names in a term in textual order: an Apply's tensor arguments come before its attributes."""
    if isinstance(term, Var):
        yield "tensor", term.name
    elif isinstance(term, Pick):
        yield from term_names(term.term)
    else:
        for arg in term.args:
            yield from term_names(arg)
        for _, value in term.attrs:
            yield from _expr_names(value)


def _expr_names(expr: Expr) -> Iterator[tuple[str, str]]:
    """Tensor variables named by dim/rank and attribute variables, in textual order."""
    for node in walk_expr(expr):
        if isinstance(node, (Dim, Rank)):
            yield "tensor", node.var
        elif isinstance(node, AttrVar):
            yield "attr", node.name
