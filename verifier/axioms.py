"""Operator axioms (written in the rule syntax next to each operator) as quantified Z3 formulas.

An axiom `L == R where G` holds in the strict model wherever both sides are defined and `G`
holds; validation (`verifier.validation`) checks exactly that. It becomes up to two formulas,
one triggered by instances of `L` and one by instances of `R`, so Z3's E-matching can rewrite
in either direction:

    forall vars. G and ok(L) and ok(R) -> L == R        (pattern: L, or R)

Patterns may only hold variables, so every attribute parameter of the pattern side that is not
a bare attribute variable (a literal, `dim(a, ?k)`, a default) becomes a fresh variable with an
equation in the guard. An attribute variable missing from the pattern side is eliminated through
a guard equation `?v == e` where one exists; otherwise that direction is left out.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

import z3

from taso_py import ops
from taso_py.errors import InputError
from taso_py.library import parse_rule
from taso_py.library.terms import Apply, AttrVar, Cond, Expr, Rule, Seq, Term, Var, walk
from taso_py.ops.schema import Axiom
from taso_py.verifier.encoding import OK, Encoder, Env, T, attr_var_kinds, attr_vars, condition, expr, sort_of


@dataclass(frozen=True)
class Compiled:
    """An axiom as Z3: the formulas, the operators it mentions and the symbols it creates."""

    axiom: Axiom
    rule: Rule
    formula: z3.BoolRef
    ops: frozenset[str]
    symbols: frozenset


def parsed(axiom: Axiom) -> Rule:
    rule = parse_rule(axiom.text)
    if len(rule.src) != 1:
        raise InputError(f"axiom {axiom.name}: an axiom equates two single terms")
    return rule


def op_names(terms: Iterable[Term]) -> frozenset[str]:
    return frozenset(sub.op for t in terms for sub in walk(t) if isinstance(sub, Apply))


@functools.cache
def compile_axiom(name: str) -> Compiled:
    axiom = ops.AXIOMS[name]
    rule = parsed(axiom)
    enc = Encoder()
    directions = [f for f in (_direction(rule, rule.src[0], rule.dst[0], rule.where, enc),
                              _direction(rule, rule.dst[0], rule.src[0], rule.where, enc)) if f is not None]
    if not directions:
        raise InputError(f"axiom {name}: neither side binds all variables")
    return Compiled(axiom, rule, z3.And(*directions), op_names((*rule.src, *rule.dst)), frozenset(enc.symbols))


def compile_all() -> list[Compiled]:
    return [compile_axiom(name) for name in ops.AXIOMS]


def _direction(rule: Rule, lhs: Term, rhs: Term, where: tuple[Cond, ...], enc: Encoder) -> z3.BoolRef | None:
    """`forall. guards -> lhs == rhs` with `lhs` as the pattern, or None when it cannot bind everything."""
    if isinstance(lhs, Var):  # a bare variable is no pattern
        return None
    kinds = attr_var_kinds((lhs, rhs), where)
    bound_attrs = _pattern_attr_vars(lhs)
    where = list(where)
    rhs_subst: dict[str, Expr] = {}
    for v in sorted(set(kinds) - bound_attrs):
        defining = next((c for c in where if c.op == "==" and _defines(c, v, bound_attrs)), None)
        if defining is None:
            return None
        rhs_subst[v] = defining.right if defining.left == AttrVar(v) else defining.left
        where.remove(defining)
    tensor_names = sorted({s.name for s in walk(lhs) if isinstance(s, Var)})
    if {s.name for s in walk(rhs) if isinstance(s, Var)} - set(tensor_names):
        return None
    tensors = {n: z3.Const(n, T) for n in tensor_names}
    attrs = {v: z3.Const(f"?{v}", sort_of(kinds[v])) for v in sorted(bound_attrs)}
    env = Env(tensors, attrs)
    fresh: list[z3.ExprRef] = []
    guards: list[z3.BoolRef] = []
    pattern_term = _pattern(lhs, env, enc, fresh, guards)
    env_rhs = Env(tensors, {**attrs, **{v: expr(e, env) for v, e in rhs_subst.items()}})
    right = enc.term(rhs, env_rhs)
    guards += [condition(c, env_rhs) for c in where]
    body = z3.Implies(z3.And(*guards, OK(pattern_term), OK(right)), pattern_term == right)
    variables = [*tensors.values(), *attrs.values(), *fresh]
    return z3.ForAll(variables, body, patterns=[pattern_term])


def _defines(c: Cond, v: str, bound: set[str]) -> bool:
    """Whether `c` reads `?v == e` (either way round) with `e` over bound variables only."""
    for this, other in ((c.left, c.right), (c.right, c.left)):
        if this == AttrVar(v):
            return set(attr_vars(other)) <= bound
    return False


def _pattern_attr_vars(t: Term) -> set[str]:
    """Attribute variables that appear bare as attribute values (or list items) in `t`."""
    names = set()
    for sub in walk(t):
        if isinstance(sub, Apply):
            for _, value in sub.attrs:
                for item in (value.items if isinstance(value, Seq) else (value,)):
                    if isinstance(item, AttrVar):
                        names.add(item.name)
    return names


def _pattern(t: Term, env: Env, enc: Encoder, fresh: list, guards: list) -> z3.ExprRef:
    """Encode `t`, then replace each parameter that is not a bound variable by a fresh one."""
    term = enc.term(t, env)
    bound = {v.get_id() for v in (*env.tensors.values(), *env.attrs.values())}
    return _abstract(term, bound, fresh, guards)


def _abstract(term: z3.ExprRef, bound: set[int], fresh: list, guards: list) -> z3.ExprRef:
    if term.sort() != T:  # a parameter
        if term.get_id() in bound:
            return term
        v = z3.Const(f"_p{len(fresh)}", term.sort())
        fresh.append(v)
        guards.append(v == term)
        return v
    if term.num_args() == 0:
        return term
    args = [_abstract(a, bound, fresh, guards) for a in term.children()]
    return term.decl()(*args)
