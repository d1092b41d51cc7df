"""From fingerprinted graphs to candidate rules: buckets, pairing, a second test, syntactic pruning.

Graphs with equal fingerprints over the same input variables compute the same function with
overwhelming probability. Each bucket is paired as a star around its smallest graph (fewest
operators, then text): every other member becomes `member == smallest`, so all equalities of
the bucket follow by transitivity while the candidates stay linear in the bucket's size, and
each rule points from the larger graph to the smaller one, the direction an optimizer wants.

Then the cheap filters, before anything reaches Z3:
* a second, independent numeric test: the numpy reference semantics in float64 on fresh
  random inputs (the fingerprint used residues and random functions);
* renaming: rules equal up to a renaming of their variables are one rule;
* common subgraph (TASO): an operator application present on both sides means the rule is a
  smaller rule applied in a context;
* products: a two-output rule whose outputs share no operator on either side is two rules.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from taso_py.generator.enumerate import Graph
from taso_py.generator.world import World
from taso_py.library.instances import Instance
from taso_py.library.syntax import format_rule, format_term
from taso_py.library.terms import Apply, BinOp, Call, Dim, Expr, Pick, Rank, Rule, Seq, Term, Var, walk
from taso_py.verifier.refuter import check_instance


@dataclass(frozen=True)
class Candidate:
    rule: Rule
    text: str  # canonical text (variables renamed by first appearance)
    world: str
    size: int  # operators on both sides


def pair(graphs: Iterable[Graph]) -> Iterator[tuple[Graph, Graph]]:
    """(member, smallest) for every bucket of graphs with equal fingerprints and variables."""
    buckets: dict[tuple, list[Graph]] = defaultdict(list)
    for g in graphs:
        buckets[(g.world, g.prints, g.variables)].append(g)
    for key in sorted(buckets, key=repr):
        members = sorted(buckets[key], key=lambda g: (g.size, _text(g.outputs)))
        for g in members[1:]:
            yield g, members[0]


def _text(terms: tuple[Term, ...]) -> str:
    return ", ".join(format_term(t) for t in terms)


def rule_of(src: Graph, dst: Graph) -> Rule:
    return Rule(src.outputs, dst.outputs)


def second_test(rule: Rule, world: World, seed: int) -> bool:
    """The rule holds on the world's shapes with float64 inputs and the numpy semantics."""
    return holds(rule, {i.name: i.shape for i in world.inputs if i.name in rule.variables()}, seed)


def holds(rule: Rule, shapes: dict[str, Any], seed: int) -> bool:
    """The rule holds on these shapes of its variables with float64 inputs and the numpy semantics."""
    inst = Instance({v: tuple(s) for v, s in shapes.items()}, {})
    return check_instance(rule, inst, np.random.default_rng(seed)) is None


# ---- syntactic pruning -----------------------------------------------------------------------

NAMES = "abcdefgh"


def canonical(rule: Rule) -> tuple[Rule, str, dict[str, str]]:
    """The rule with its output pairs in a renaming-invariant order and variables named a, b, ...

    Output pairs are ordered by their text with variables erased; where that ties, every order
    is tried and the smallest text wins, so two renamings of one rule always print the same.
    Also returns the renaming (old name -> new name)."""
    pairs = list(zip(rule.src, rule.dst))
    skeleton = [(_erased(s), _erased(d)) for s, d in pairs]
    best: tuple[str, Rule, dict[str, str]] | None = None
    for order in _orders(pairs, skeleton):
        r = Rule(tuple(s for s, _ in order), tuple(d for _, d in order), rule.where)
        names = {v: NAMES[i] for i, v in enumerate(r.variables())}
        renamed = rename(r, names)
        text = format_rule(renamed)
        if best is None or text < best[0]:
            best = (text, renamed, names)
    assert best is not None
    return best[1], best[0], best[2]


def _orders(pairs: list, skeleton: list) -> Iterator[list]:
    idx = sorted(range(len(pairs)), key=lambda i: skeleton[i])
    yield [pairs[i] for i in idx]
    if len(pairs) == 2 and skeleton[0] == skeleton[1]:
        yield [pairs[i] for i in reversed(idx)]


def _erased(term: Term) -> str:
    return format_term(rename_term(term, _Erase()))


class _Erase(dict):
    def __missing__(self, key: str) -> str:
        return "_"


def rename(rule: Rule, names: dict[str, str]) -> Rule:
    return Rule(tuple(rename_term(t, names) for t in rule.src), tuple(rename_term(t, names) for t in rule.dst),
                rule.where)


def rename_term(term: Term, names: dict[str, str]) -> Term:
    if isinstance(term, Var):
        return Var(names[term.name])
    if isinstance(term, Pick):
        return Pick(rename_term(term.term, names), term.index)
    return Apply(term.op, tuple(rename_term(a, names) for a in term.args),
                 tuple((k, _rename_expr(v, names)) for k, v in term.attrs))


def _rename_expr(expr: Expr, names: dict[str, str]) -> Expr:
    if isinstance(expr, Dim):
        return Dim(names[expr.var], expr.axis)
    if isinstance(expr, Rank):
        return Rank(names[expr.var])
    if isinstance(expr, BinOp):
        return BinOp(expr.op, _rename_expr(expr.left, names), _rename_expr(expr.right, names))
    if isinstance(expr, Call):
        return Call(expr.fn, tuple(_rename_expr(a, names) for a in expr.args))
    if isinstance(expr, Seq):
        return Seq(tuple(_rename_expr(a, names) for a in expr.items))
    return expr


def applications(term: Term) -> set[Apply]:
    return {t for t in walk(term) if isinstance(t, Apply)}


def has_common_subgraph(rule: Rule) -> bool:
    src = set().union(*(applications(t) for t in rule.src))
    dst = set().union(*(applications(t) for t in rule.dst))
    return bool(src & dst)


def context(rule: Rule) -> Rule | None:
    """The smaller rule that `rule` applies under a common context, if it has that form.

    On every output both sides apply the same operator with the same attributes (or pick the
    same output of one), and the arguments in which they differ, paired up, make the smaller
    rule: `relu(matmul(a, b)) == relu(X)` is `matmul(a, b) == X` under a relu. If the smaller
    rule holds, `rule` follows from it by congruence (TASO's common-subgraph pruning looks at
    the inputs' side; this is the outputs'). At most two pairs, the most outputs a rule has, so
    that the smaller rule is one a library can hold: a merge under a relu on each output is the
    merge, and two outputs over one smaller rule are that rule."""
    pairs: list[tuple[Term, Term]] = []
    for s, d in zip(rule.src, rule.dst):
        found = _differing(s, d)
        if found is None:
            return None
        pairs += [p for p in found if p not in pairs]
    if not pairs or len(pairs) > MAX_PAIRS:
        return None
    return Rule(tuple(p for p, _ in pairs), tuple(q for _, q in pairs))


MAX_PAIRS = 2


def _differing(s: Term, d: Term) -> list[tuple[Term, Term]] | None:
    if isinstance(s, Pick) and isinstance(d, Pick):
        if s.index != d.index:
            return None
        s, d = s.term, d.term
    if not (isinstance(s, Apply) and isinstance(d, Apply)) or (s.op, s.attrs, len(s.args)) != (
            d.op, d.attrs, len(d.args)):
        return None
    return [(a, b) for a, b in zip(s.args, d.args) if a != b]


def in_context(rule: Rule, shapes: dict[str, Any], seed: int) -> bool:
    """`rule` is a smaller rule that holds (numerically, as a candidate must) under a context."""
    smaller = context(rule)
    return smaller is not None and holds(smaller, shapes, seed) and holds(smaller, shapes, seed + 1)


def is_product(rule: Rule) -> bool:
    """Two outputs computed independently on both sides: the rule is two smaller rules."""
    if len(rule.src) != 2:
        return False
    return not (applications(rule.src[0]) & applications(rule.src[1])
                or applications(rule.dst[0]) & applications(rule.dst[1]))


def size(rule: Rule) -> int:
    return len(set().union(*(applications(t) for t in (*rule.src, *rule.dst))))
