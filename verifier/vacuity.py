"""Vacuous rules: no shapes make both sides defined with equal output shapes (and the `where` hold).

Such a rule never applies, so a proof of it says nothing: Z3 proves anything from contradictory
hypotheses, which is how `verify-rule` once answered PROVED for rules nobody could use. Whether
a rule is vacuous is decided over the same ground shape facts as the refuter's instances (every
rank 1..4 at once, from each operator's `sym_shape`); when Z3 cannot decide that query, once per
assignment of ranks to the variables. The explanation then names, for a few rank assignments
under which both sides are defined, the two sides' symbolic shapes and an unsat core of the
constraints that cannot all hold, written over the variables' dims (`dim(x, 1)`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

from taso_py.verifier.encoding import DIM, MAX_RANK, OK, RANK, Z3A, Encoded, EncodedRule, tensor_facts
from taso_py.verifier.results import RankCase

TIMEOUT_MS = 5000  # the global query (the refuter's shape solver has the same)
CASE_TIMEOUT_MS = 2000  # one rank assignment
MAX_RANK_CASES = 256  # rank assignments tried one by one when the global query is undecided
SHOWN = 3  # rank assignments explained


def decide(encoded: EncodedRule) -> bool | None:
    """True when the rule is vacuous, False when some shapes satisfy it, None when Z3 cannot tell."""
    solver = encoded.shape_solver()
    solver.set("timeout", TIMEOUT_MS)
    result = solver.check()
    if result != z3.unknown:
        return result == z3.unsat
    xs = list(encoded.env.tensors.values())
    if MAX_RANK ** len(xs) > MAX_RANK_CASES:
        return None
    solver.set("timeout", CASE_TIMEOUT_MS)
    undecided = False
    for ranks in itertools.product(range(1, MAX_RANK + 1), repeat=len(xs)):
        result = solver.check(*(RANK(x) == r for x, r in zip(xs, ranks)))
        if result == z3.sat:
            return False
        undecided |= result == z3.unknown
    return None if undecided else True


class _Undecided(Exception):
    """Z3 could not say under which ranks some terms are defined."""


def explain(encoded: EncodedRule) -> tuple[str, tuple[RankCase, ...]]:
    """A one-line reason and, for up to SHOWN rank assignments, the shapes and the conflict."""
    try:
        return _explain(encoded)
    except _Undecided:
        return "no shapes make both sides defined with equal output shapes: the rule can never apply", ()


def _explain(encoded: EncodedRule) -> tuple[str, tuple[RankCase, ...]]:
    sides = (encoded.src, encoded.dst)
    where = [f for _, f in encoded.preconditions]
    both = [OK(t) for t in (*encoded.src, *encoded.dst)]
    joint = (_rank_cases(encoded, both + where, SHOWN) if where else []) or _rank_cases(encoded, both, SHOWN)
    if joint:
        cases = tuple(_case(encoded, ranks) for ranks in joint)
        for name, side in zip(("left", "right"), sides):
            if where and not _rank_cases(encoded, [*(OK(t) for t in side), *where], 1):
                return f"the {name} side is never defined where the where clause holds: the rule can never apply", cases
        uses_where = any(c.startswith("where ") for case in cases for c in case.conflict)
        what = "defined with equal output shapes" + (" and the where clause hold" if uses_where else "")
        return f"no shapes make both sides {what}: the rule can never apply", cases
    alone = [_rank_cases(encoded, [OK(t) for t in side], SHOWN) for side in sides]
    for name, found in zip(("left", "right"), alone):
        if not found:
            return f"the {name} side is never defined, whatever the shapes: the rule can never apply", ()
    left, right = (", ".join("{" + ranks_text(r) + "}" for r in found) for found in alone)
    return (f"the two sides are never defined at the same ranks (left: {left}; right: {right}): "
            "the rule can never apply"), ()


def _rank_cases(encoded: EncodedRule, facts: Sequence[z3.BoolRef], limit: int) -> list[dict[str, int]]:
    """Up to `limit` assignments of ranks to the variables in `facts` under which they can hold."""
    solver = z3.Solver()
    solver.set("timeout", CASE_TIMEOUT_MS)
    used = _variables(encoded, facts)
    solver.add(*(tensor_facts(x) for x in used.values()), *encoded.ground_shape_facts(), *facts)
    ranks = {v: RANK(x) for v, x in used.items()}
    cases: list[dict[str, int]] = []
    while len(cases) < limit:
        result = solver.check()
        if result == z3.unknown and not cases:
            raise _Undecided
        if result != z3.sat:
            break
        model = solver.model()
        case = {v: model.eval(r, model_completion=True).as_long() for v, r in ranks.items()}
        cases.append(case)
        solver.add(z3.Or(*(ranks[v] != n for v, n in case.items())) if case else z3.BoolVal(False))
    return cases


def _variables(encoded: EncodedRule, terms: Sequence[z3.ExprRef]) -> dict[str, z3.ExprRef]:
    """The tensor variables that occur in `terms` (or formulas), by name."""
    ids = {x.get_id(): name for name, x in encoded.env.tensors.items()}
    seen: dict[str, z3.ExprRef] = {}
    todo = list(terms)
    while todo:
        t = todo.pop()
        if t.get_id() in ids:
            seen[ids[t.get_id()]] = t
        todo.extend(t.children())
    return dict(sorted(seen.items()))


def _case(encoded: EncodedRule, ranks: dict[str, int]) -> RankCase:
    """Both sides' shapes at `ranks` and the tracked constraints in Z3's unsat core."""
    walker = _Shapes(encoded, ranks)
    shapes = [[walker.shape(t) for t in side] for side in (encoded.src, encoded.dst)]
    tracked: list[tuple[str, z3.BoolRef]] = []
    for name, side in zip(("left", "right"), (encoded.src, encoded.dst)):
        for t in side:
            tracked += [(f"{name} side defined: {show(c)}", c) for c in walker.conditions(t)]
    multi = len(encoded.src) > 1
    for i, (left, right) in enumerate(zip(*shapes)):
        out = f"output {i} " if multi else ""
        if len(left) != len(right):
            tracked.append((f"equal shapes: {out}the left side has rank {len(left)}, the right side {len(right)}",
                            z3.BoolVal(False)))
            continue
        tracked += [(f"equal shapes: {out}dim {k}: {show(a)} == {show(b)}", _eq(a, b))
                    for k, (a, b) in enumerate(zip(left, right)) if not z3.is_true(_eq(a, b))]
    tracked += [(f"where {text}", f) for text, f in encoded.preconditions]
    solver = z3.Solver()
    solver.set("timeout", CASE_TIMEOUT_MS)
    for name, x in encoded.env.tensors.items():
        if name in ranks:
            solver.add(RANK(x) == ranks[name], *(DIM(x, k) >= 1 for k in range(ranks[name])))
    labels = {}
    for i, (text, formula) in enumerate(tracked):
        label = z3.Bool(f"c{i}")
        labels[str(label)] = text
        solver.assert_and_track(formula, label)
    if solver.check() == z3.unsat:
        conflict = tuple(labels[str(c)] for c in solver.unsat_core())
    else:  # undecided at these ranks: name everything rather than a subset
        conflict = tuple(text for text, _ in tracked)
    return RankCase(dict(ranks), tuple(_shape_text(s) for s in shapes[0]), tuple(_shape_text(s) for s in shapes[1]),
                    tuple(sorted(conflict, key=_order)))


def _order(text: str) -> tuple[int, str]:
    return (("left", "right", "equal", "where").index(text.split()[0]), text)


def _eq(a: Any, b: Any) -> z3.BoolRef:
    """`a == b` as a simplified Z3 formula, whether the dims are Python ints or Z3 terms."""
    return z3.simplify(z3.IntVal(a) == b if not z3.is_expr(a) else a == b)


@dataclass
class _Shapes:
    """Each term's symbolic shape and definedness conditions at fixed variable ranks (`sym_shape`)."""

    encoded: EncodedRule
    ranks: dict[str, int]
    memo: dict[int, tuple[tuple, list]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.apps: dict[int, Encoded] = {a.term.get_id(): a for a in self.encoded.encoder.applications}
        self.vars = {x.get_id(): name for name, x in self.encoded.env.tensors.items()}

    def shape(self, t: z3.ExprRef) -> tuple:
        return self._of(t)[0]

    def conditions(self, t: z3.ExprRef) -> list[z3.BoolRef]:
        """Every non-trivial condition under which `t` and its subterms are defined, once each."""
        seen: dict[int, z3.BoolRef] = {}
        for c in self._of(t)[1]:
            c = z3.simplify(c) if z3.is_expr(c) else z3.BoolVal(bool(c))
            if not z3.is_true(c):
                seen.setdefault(c.get_id(), c)
        return list(seen.values())

    def _of(self, t: z3.ExprRef) -> tuple[tuple, list]:
        key = t.get_id()
        if key in self.memo:
            return self.memo[key]
        if key in self.vars:
            out: tuple[tuple, list] = (tuple(DIM(t, k) for k in range(self.ranks[self.vars[key]])), [])
        else:
            app = self.apps[key]
            inner = [self._of(a) for a in app.args]
            result = app.symbol.opdef.sym_shape([s for s, _ in inner], app.symbol.attrs(app.params), Z3A)
            if result is None:  # cannot happen at ranks where the encoding says the term is defined
                out = ((), [z3.BoolVal(False)])
            else:
                outs, conds = result
                shape = outs[app.symbol.output or 0]
                own = [*conds, *(d >= 1 for d in shape)] + ([z3.BoolVal(False)] if len(shape) > MAX_RANK else [])
                out = (tuple(z3.simplify(d) if z3.is_expr(d) else d for d in shape),
                       [c for _, cs in inner for c in cs] + own)
        self.memo[key] = out
        return out


def _shape_text(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(show(d) for d in shape) + "]"


def ranks_text(ranks: dict[str, int]) -> str:
    """`rank(x) = 2, rank(y) = 2`: how a rank assignment is shown."""
    return ", ".join(f"rank({v}) = {r}" for v, r in ranks.items())


# ---- readable Z3 arithmetic ----------------------------------------------------------------

_CMP = {z3.Z3_OP_EQ: "==", z3.Z3_OP_LE: "<=", z3.Z3_OP_LT: "<", z3.Z3_OP_GE: ">=", z3.Z3_OP_GT: ">"}


def show(e: Any) -> str:
    """A shape expression or condition as the rule syntax writes it: `dim(x, 2) - dim(w, 2) + 3`."""
    if not z3.is_expr(e):
        return str(e).lower() if isinstance(e, bool) else str(e)
    return _show(e, 0)


def _show(e: z3.ExprRef, outer: int) -> str:
    """`outer` is the binding strength around `e`: 0 anywhere, 1 in a sum, 2 in a product."""
    if z3.is_int_value(e):
        v = e.as_long()
        return f"({v})" if v < 0 and outer >= 2 else str(v)
    if z3.is_rational_value(e) or z3.is_true(e) or z3.is_false(e):
        return str(e).lower() if z3.is_bool(e) else str(e)
    k = e.decl().kind()
    kids = e.children()
    if k == z3.Z3_OP_ADD:
        kids = sorted(kids, key=z3.is_int_value)  # constants last: dim(x, 2) - dim(w, 2) + 3
        text = _show(kids[0], 1)
        for c in kids[1:]:
            neg = _negated(c)
            text += f" - {_show(neg, 2)}" if neg is not None else f" + {_show(c, 1)}"
        return f"({text})" if outer >= 2 else text
    if k == z3.Z3_OP_SUB:
        text = " - ".join([_show(kids[0], 1), *(_show(c, 2) for c in kids[1:])])
        return f"({text})" if outer >= 1 else text
    if k == z3.Z3_OP_UMINUS:
        return f"-{_show(kids[0], 2)}"
    if k == z3.Z3_OP_MUL:
        neg = _negated(e)
        if neg is not None:
            return f"-{_show(neg, 2)}"
        return " * ".join(_show(c, 2) for c in kids)
    if k in (z3.Z3_OP_IDIV, z3.Z3_OP_DIV, z3.Z3_OP_MOD):
        op = {z3.Z3_OP_IDIV: "//", z3.Z3_OP_DIV: "/", z3.Z3_OP_MOD: "%"}[k]
        text = f"{_show(kids[0], 2)} {op} {_show(kids[1], 3)}"
        return f"({text})" if outer >= 2 else text
    if k in _CMP:
        return f"{_show(kids[0], 0)} {_CMP[k]} {_show(kids[1], 0)}"
    if k == z3.Z3_OP_DISTINCT and len(kids) == 2:
        return f"{_show(kids[0], 0)} != {_show(kids[1], 0)}"
    if k in (z3.Z3_OP_AND, z3.Z3_OP_OR):
        text = (" and " if k == z3.Z3_OP_AND else " or ").join(_show(c, 3) for c in kids)
        return f"({text})" if outer >= 3 else text
    if k == z3.Z3_OP_NOT:
        inner = kids[0]
        if inner.decl().kind() == z3.Z3_OP_EQ:
            return f"{_show(inner.children()[0], 0)} != {_show(inner.children()[1], 0)}"
        return f"not {_show(inner, 3)}"
    if k == z3.Z3_OP_ITE:
        return f"({_show(kids[1], 0)} if {_show(kids[0], 0)} else {_show(kids[2], 0)})"
    if e.decl().name() in ("dim", "rank"):
        return f"{e.decl().name()}({', '.join(_show(c, 0) for c in kids)})"
    return str(e)


def _negated(e: z3.ExprRef) -> z3.ExprRef | None:
    """`x` when `e` is `-1 * x` (or `-c * x`: then `c * x`), else None."""
    if e.decl().kind() != z3.Z3_OP_MUL:
        return None
    first, rest = e.children()[0], e.children()[1:]
    if not (z3.is_int_value(first) and first.as_long() < 0):
        return None
    c = -first.as_long()
    if c == 1 and len(rest) == 1:
        return rest[0]
    return z3.simplify(z3.IntVal(c) * (rest[0] if len(rest) == 1 else z3.Product(*rest)), som=False)
