"""Rules implied by other rules: a bounded rewrite search over terms.

Any rule is redundant when it is an instance of a rule with more tensor variables: that rule with
some of its variables made equal (and attribute variables perhaps fixed). "More variables" is a
strict order, so two rules never remove each other this way.

A single-output rule `l == r` is also redundant when rewriting `l` and `r` with the rules before
it (ordered by size, then generality, then text), each usable in both directions, reaches a
common term within `DEPTH` steps from each side. Commutative operators are compared up to
argument order, as the optimizer's graph hashing does.

A multi-output rule is also redundant when each of its outputs rewrites into the other side's in both
directions by single-output rules alone: applying those one output at a time reaches the same
graph once equal nodes are merged. The merges that matter are never redundant, because one
direction needs a variable that the smaller side lacks (`matmul(a, b)` cannot become
`split(matmul(a, concat(b, c)))[0]` without inventing `c`). Parametric rules are kept unless
they are instances: the literal rules before them need not cover their other attribute values.

Shapes are symbolic (CDims over the rule's variables, see `concolic`): a rewrite fires only
where its attributes are *symbolically* equal to the matched ones (`dim(a, 1)` matches
`dim(a, 1)`, not merely a 4 that happens to equal it) and where the replacement is defined
(a proved rule then guarantees the same shape).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections import defaultdict
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from taso_py import ops
from taso_py.generator.concolic import CONCOLIC, CDim, Lin
from taso_py.generator.enumerate import as_cdim, to_expr
from taso_py.library.syntax import format_rule, format_term, parse_rule
from taso_py.library.terms import (
    Apply,
    AttrVar,
    BinOp,
    Call,
    Dim,
    Expr,
    Lit,
    Pick,
    Rank,
    Rule,
    Seq,
    Term,
    Var,
    term_names,
)

DEPTH = 2
MAX_STATES = 300

Env = dict[str, Any]  # tensor variable -> Term, "?name" -> attribute value


def task_derivable(chunk: list[str], order: list[str], shapes: dict[str, dict[str, list[int]]]) -> list[str]:
    """The texts of `chunk` redundant given the rules before them in `order` (and more general ones)."""
    position = {t: i for i, t in enumerate(order)}
    return _redundant(chunk, order, shapes, lambda text: position[text])


def task_implied(chunk: list[str], kept: list[str], shapes: dict[str, dict[str, list[int]]]) -> list[str]:
    """The texts of `chunk` (not in `kept`) redundant given all of the `kept` rules."""
    return _redundant(chunk, kept, shapes, lambda _text: len(kept))


def _redundant(chunk: list[str], order: list[str], shapes: dict[str, dict[str, list[int]]], before: Any
               ) -> list[str]:
    known = _known(tuple(order))
    out = []
    for text in chunk:
        rule = _parse(text)
        world = Shapes(shapes[text])
        if _instance(rule, known, world):
            redundant = True
        elif rule.attr_variables():
            redundant = False
        elif len(rule.src) > 1:
            everything = len(known.rules)
            redundant = all(_rewrites_to(s, d, known.index, everything, world)
                            and _rewrites_to(d, s, known.index, everything, world) for s, d in zip(rule.src, rule.dst))
        else:
            redundant = _joinable(rule.src[0], rule.dst[0], world, known.index, before(text))
        if redundant:
            out.append(text)
    return out


@functools.cache
def _parse(text: str) -> Rule:
    return parse_rule(text)


Side = tuple[int, tuple[Term, ...], tuple[Term, ...]]  # a rule's position, one side and the other
# a rule's position, its left and right sides, and the roots of the left side's arguments (see `_kids`)
Rewrite = tuple[int, Term, Term, tuple[str | None, ...]]


@dataclasses.dataclass(frozen=True)
class _Known:
    """The rules a chunk is judged against, parsed and indexed once per worker process: the
    pruning of a `--max-ops 4` library sends the same 5,000 rules with each of its 200 chunks, and
    parsing them and trying every one against every rule was most of its time."""

    rules: list[Rule]
    index: dict[str, list[Rewrite]]  # single-output rewrites by the root of their left side
    sides: dict[tuple[int, tuple[str, ...]], list[Side]]  # rules without `where`, by outputs and side roots
    anywhere: dict[int, list[Side]]  # sides with a bare variable among their roots, by outputs
    tensor_vars: list[int]


@functools.lru_cache(maxsize=2)
def _known(order: tuple[str, ...]) -> _Known:
    rules = [_parse(t) for t in order]
    index: dict[str, list[Rewrite]] = defaultdict(list)
    sides: dict[tuple[int, tuple[str, ...]], list[Side]] = defaultdict(list)
    anywhere: dict[int, list[Side]] = defaultdict(list)
    for i, r in enumerate(rules):
        if r.where:
            continue
        for lhs, rhs in ((r.src, r.dst), (r.dst, r.src)):
            roots = _roots(lhs)
            (anywhere[len(lhs)] if None in roots else sides[len(lhs), tuple(sorted(roots))]).append((i, lhs, rhs))
        if len(r.src) != 1:
            continue
        for lhs, rhs in ((r.src[0], r.dst[0]), (r.dst[0], r.src[0])):
            if not isinstance(lhs, Var) and _vars(rhs) <= _vars(lhs):
                index[_root(lhs)].append((i, lhs, rhs, _kids(lhs)))
    return _Known(rules, dict(index), dict(sides), dict(anywhere), [_tensor_vars(r) for r in rules])


def _roots(terms: tuple[Term, ...]) -> list[str | None]:
    """The root operator of each term (None for a bare variable, which matches any term)."""
    return [None if isinstance(t, Var) else _root(t) for t in terms]


def _instance(rule: Rule, known: _Known, shapes: Shapes) -> bool:
    """Whether `rule` is a rule with more distinct tensor variables, some of them made equal
    (and attribute variables perhaps fixed), in either orientation and any order of outputs. Only
    sides whose root operators are the rule's source's (or a bare variable) can match it."""
    mine = _tensor_vars(rule)
    n = len(rule.src)
    roots = _roots(rule.src)
    candidates = [*known.anywhere.get(n, ())]
    if None not in roots:
        candidates += known.sides.get((n, tuple(sorted(roots))), ())
    for i, lhs, rhs in candidates:
        if known.tensor_vars[i] <= mine:
            continue
        for order in itertools.permutations(range(n)):
            for env in _match_all([lhs[k] for k in order], list(rule.src), {}, shapes):
                try:
                    if all(key(instantiate(rhs[k], env, shapes)) == key(d) for k, d in zip(order, rule.dst)):
                        return True
                except (_NoMatch, KeyError):
                    continue
    return False


def _match_all(patterns: list[Term], terms: list[Term], env: Env, shapes: Shapes) -> Iterator[Env]:
    if not patterns:
        yield env
        return
    for e in match(patterns[0], terms[0], env, shapes):
        yield from _match_all(patterns[1:], terms[1:], e, shapes)


def _tensor_vars(rule: Rule) -> int:
    return len({n for t in (*rule.src, *rule.dst) for kind, n in term_names(t) if kind == "tensor"})


def _vars(t: Term) -> set[tuple[str, str]]:
    """Tensor and attribute variables of a term: a rewrite may not invent any."""
    return set(term_names(t))


def _root(t: Term) -> str:
    return f"{t.term.op}[{t.index}]" if isinstance(t, Pick) else t.op  # type: ignore[union-attr]


class Shapes:
    """Symbolic shapes of terms over the rule's variables (None where a term is ill-shaped)."""

    def __init__(self, shapes: dict[str, list[int]]) -> None:
        self.vars = {v: tuple(CDim.of(v, k, n) for k, n in enumerate(s)) for v, s in shapes.items()}
        self._memo: dict[Term, Any] = {}

    def of(self, t: Term) -> tuple[CDim, ...] | None:
        if t not in self._memo:
            self._memo[t] = self._compute(t)
        return self._memo[t]

    def _outputs(self, t: Apply) -> tuple[tuple[CDim, ...], ...] | None:
        key = ("outputs", t)
        if key not in self._memo:
            self._memo[key] = None
            args = [self.of(a) for a in t.args]
            if all(a is not None for a in args):
                op = ops.get(t.op)
                attrs = attribute_values(t, lambda e: value(e, {}, self))
                result = op.sym_shape(args, SimpleNamespace(**attrs), CONCOLIC)
                if result is not None and all(result[1]) and all(int(d) >= 1 for o in result[0] for d in o):
                    self._memo[key] = tuple(tuple(as_cdim(d) for d in o) for o in result[0])
        return self._memo[key]

    def _compute(self, t: Term) -> tuple[CDim, ...] | None:
        if isinstance(t, Var):
            return self.vars.get(t.name)
        if isinstance(t, Pick):
            outs = self._outputs(t.term)  # type: ignore[arg-type]
            return outs[t.index] if outs is not None and t.index < len(outs) else None
        outs = self._outputs(t)
        return outs[0] if outs is not None and len(outs) == 1 else None


def attribute_values(t: Apply, evaluate: Any) -> dict[str, Any]:
    """Every attribute of `t` as a value: the written ones evaluated, the others their defaults."""
    values = {f.name: f.default for f in dataclasses.fields(ops.get(t.op).attrs)
              if f.default is not dataclasses.MISSING}
    values.update({k: evaluate(e) for k, e in t.attrs})
    return values


def value(e: Expr, env: Env, shapes: Shapes) -> Any:
    """An attribute expression's value: ints and sizes as CDims, strings and floats as they are."""
    if isinstance(e, Lit):
        return e.value
    if isinstance(e, AttrVar):
        return env[f"?{e.name}"]
    if isinstance(e, Seq):
        return tuple(value(i, env, shapes) for i in e.items)
    if isinstance(e, Dim):
        shape = shapes.of(env[e.var]) if e.var in env else shapes.vars.get(e.var)
        axis = int(value(e.axis, env, shapes))
        if shape is None or not -len(shape) <= axis < len(shape):
            raise _NoMatch
        return shape[axis]
    if isinstance(e, Rank):
        shape = shapes.of(env[e.var]) if e.var in env else shapes.vars.get(e.var)
        if shape is None:
            raise _NoMatch
        return len(shape)
    if isinstance(e, BinOp):
        a, b = as_cdim(value(e.left, env, shapes)), as_cdim(value(e.right, env, shapes))
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                "//": lambda: CONCOLIC.div(a, b), "%": lambda: CONCOLIC.mod(a, b)}[e.op]()
    assert isinstance(e, Call)
    items = [as_cdim(value(a, env, shapes)) for a in e.args]
    return (max if e.fn == "max" else min)(items, key=int)


class _NoMatch(Exception):
    pass


def same(a: Any, b: Any) -> bool:
    """Equal for every shape: sizes compare by their symbolic sums, the rest by value."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(map(same, a, b))
    if _is_int(a) and _is_int(b):
        return _lin(a).key() == _lin(b).key()
    return type(a) is type(b) and a == b


def _is_int(v: Any) -> bool:
    return isinstance(v, CDim) or (isinstance(v, int) and not isinstance(v, bool))


def _lin(v: Any) -> Lin:
    return as_cdim(v).sym if isinstance(v, CDim) else Lin((), int(v))


def match(pattern: Term, term: Term, env: Env, shapes: Shapes) -> Iterator[Env]:
    if isinstance(pattern, Var):
        bound = env.get(pattern.name)
        if bound is None:
            yield {**env, pattern.name: term}
        elif key(bound) == key(term):
            yield env
        return
    if isinstance(pattern, Pick):
        if isinstance(term, Pick) and term.index == pattern.index:
            yield from match(pattern.term, term.term, env, shapes)
        return
    if not isinstance(term, Apply) or term.op != pattern.op or len(term.args) != len(pattern.args):
        return
    orders = [term.args]
    if ops.get(term.op).commutative and len(term.args) == 2:
        orders.append(term.args[::-1])
    for args in orders:
        for e in _match_args(pattern.args, args, env, shapes):
            bound = _match_attrs(pattern, term, e, shapes)
            if bound is not None:
                yield bound


def _match_args(patterns: tuple[Term, ...], terms: tuple[Term, ...], env: Env, shapes: Shapes) -> Iterator[Env]:
    if not patterns:
        yield env
        return
    for e in match(patterns[0], terms[0], env, shapes):
        yield from _match_args(patterns[1:], terms[1:], e, shapes)


def _match_attrs(pattern: Apply, term: Apply, env: Env, shapes: Shapes) -> Env | None:
    try:
        have = attribute_values(term, lambda e: value(e, {}, shapes))
        env = dict(env)
        written = dict(pattern.attrs)
        for name, actual in have.items():
            expr = written.get(name)
            if expr is None:
                want = attribute_values(pattern, lambda _e: None)[name]
            elif isinstance(expr, AttrVar) and f"?{expr.name}" not in env:
                env[f"?{expr.name}"] = actual
                continue
            elif isinstance(expr, Seq) and isinstance(actual, tuple) and len(expr.items) == len(actual):
                for item, got in zip(expr.items, actual):
                    if isinstance(item, AttrVar) and f"?{item.name}" not in env:
                        env[f"?{item.name}"] = got
                want = value(expr, env, shapes)
            else:
                want = value(expr, env, shapes)
            if not same(want, actual):
                return None
        return env
    except (_NoMatch, KeyError, ZeroDivisionError):
        return None


def instantiate(t: Term, env: Env, shapes: Shapes) -> Term:
    if isinstance(t, Var):
        return env[t.name]
    if isinstance(t, Pick):
        return Pick(instantiate(t.term, env, shapes), t.index)
    return Apply(t.op, tuple(instantiate(a, env, shapes) for a in t.args),
                 tuple((k, to_expr(_plain(value(e, env, shapes)))) for k, e in t.attrs))


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return tuple(_plain(i) for i in v)
    if isinstance(v, CDim):
        v = as_cdim(v)
        return v.value if not v.sym.parts else v
    return v


def key(t: Term) -> str:
    """Text up to the order of commutative arguments."""
    return format_term(_sorted(t))


def _sorted(t: Term) -> Term:
    if isinstance(t, Var):
        return t
    if isinstance(t, Pick):
        return Pick(_sorted(t.term), t.index)
    args = tuple(_sorted(a) for a in t.args)
    if ops.get(t.op).commutative:
        args = tuple(sorted(args, key=format_term))
    return Apply(t.op, args, t.attrs)


def _positions(t: Term) -> Iterator[tuple[Term, Any]]:
    """(subterm, rebuild) for every subterm, where rebuild(new) puts `new` in its place."""
    yield t, lambda new: new
    if isinstance(t, Pick):
        for sub, rebuild in _positions(t.term):
            yield sub, lambda new, rebuild=rebuild: Pick(rebuild(new), t.index)
    elif isinstance(t, Apply):
        for i, arg in enumerate(t.args):
            for sub, rebuild in _positions(arg):
                yield sub, lambda new, i=i, rebuild=rebuild: Apply(
                    t.op, (*t.args[:i], rebuild(new), *t.args[i + 1:]), t.attrs)


def _kids(t: Term) -> tuple[str | None, ...]:
    """The root operators of the arguments of `t`'s operator (None for a bare variable)."""
    apply = t.term if isinstance(t, Pick) else t
    return tuple(_roots(apply.args))  # type: ignore[union-attr]


def _fits(pattern: tuple[str | None, ...], term: tuple[str | None, ...], commutative: bool) -> bool:
    """Whether arguments with roots `term` can match a pattern's with roots `pattern`, in order
    or (two arguments of a commutative operator) swapped: checked before `match`, which most
    rewrites of a 5,000-rule library fail at their first argument."""
    if all(p is None or p == k for p, k in zip(pattern, term)):
        return True
    return commutative and len(term) == 2 and all(p is None or p == k for p, k in zip(pattern, term[::-1]))


def rewrites(t: Term, index: dict, before: int, shapes: Shapes) -> Iterator[Term]:
    for sub, rebuild in _positions(t):
        if isinstance(sub, Var):
            continue
        want = shapes.of(sub)
        kids = _kids(sub)
        commutative = ops.get((sub.term if isinstance(sub, Pick) else sub).op).commutative  # type: ignore[union-attr]
        for i, lhs, rhs, pattern in index.get(_root(sub), ()):
            if i >= before:
                break
            if not _fits(pattern, kids, commutative):
                continue
            for env in match(lhs, sub, {}, shapes):
                try:
                    new = instantiate(rhs, env, shapes)
                except (_NoMatch, KeyError):
                    continue
                got = shapes.of(new)  # defined: then a proved rule guarantees the same shape
                if got is not None and want is not None and [int(d) for d in got] == [int(d) for d in want]:
                    yield rebuild(new)


def _reach(t: Term, index: dict, before: int, shapes: Shapes) -> set[str]:
    seen = {key(t)}
    frontier = [t]
    for _ in range(DEPTH):
        nxt = []
        for term in frontier:
            for new in rewrites(term, index, before, shapes):
                k = key(new)
                if k not in seen:
                    seen.add(k)
                    nxt.append(new)
                    if len(seen) >= MAX_STATES:
                        return seen
        frontier = nxt
    return seen


def _joinable(a: Term, b: Term, shapes: Shapes, index: dict, before: int) -> bool:
    return bool(_reach(a, index, before, shapes) & _reach(b, index, before, shapes))


def _rewrites_to(a: Term, b: Term, index: dict, before: int, shapes: Shapes) -> bool:
    """Whether forward rewrites take `a` to `b` within DEPTH steps (none invents a variable)."""
    goal = key(b)
    seen, frontier = {key(a)}, [a]
    for _ in range(DEPTH):
        nxt = []
        for term in frontier:
            for new in rewrites(term, index, before, shapes):
                k = key(new)
                if k == goal:
                    return True
                if k not in seen and len(seen) < MAX_STATES:
                    seen.add(k)
                    nxt.append(new)
        frontier = nxt
    return goal in seen


def derivable(rule: Rule, earlier: list[Rule], shapes: dict[str, list[int]]) -> bool:
    """Whether single-output `rule` follows from `earlier` (for tests and one-off checks)."""
    texts = [*map(format_rule, earlier), format_rule(rule)]
    return bool(task_derivable([texts[-1]], texts, {texts[-1]: shapes}))
