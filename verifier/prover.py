"""`prove(rule)`: refute on concrete shapes first, then ask Z3 whether the axioms imply the rule.

The query: the relevant axioms (tracked, so the unsat core names the ones used), the shape axioms
of every function symbol involved, the rule's hypotheses (both sides defined, equal shapes) and
its `where` clause (tracked), and the negation `src != dst`. Unsat is a proof. Sat or unknown,
including a timeout, is UNKNOWN: never a proof.

Unsat hypotheses would make that query unsat too, so a rule the refuter found no shapes for is
first checked for vacuity (`verifier.vacuity`): no shapes at all is VACUOUS, and a rule whose
vacuity Z3 cannot decide is never PROVED.
"""

from __future__ import annotations

import time

import z3

from taso_py.errors import AttrError, InputError
from taso_py.library.terms import Lit, Rule, Seq, walk
from taso_py.verifier.axioms import Compiled, compile_all, op_names
from taso_py.verifier.encoding import MAX_RANK, RANK, EncodedRule, encode_rule, shape_axiom
from taso_py.verifier.refuter import search
from taso_py.verifier.results import Proved, Refuted, Result, Unknown, Vacuous
from taso_py.verifier.vacuity import decide, explain

DEFAULT_TIMEOUT = 10.0
RETRY_SHAPES = 32  # shape instances of the second refutation, when Z3 finds no proof


def prove(rule: Rule, timeout: float = DEFAULT_TIMEOUT, *, refute_first: bool = True, seed: int = 0) -> Result:
    start = time.perf_counter()
    try:
        encoded = encode_rule(rule)
    except AttrError:
        raise  # a malformed rule (act=foo), not a question the verifier can answer
    except InputError as e:
        return Unknown(str(e), time.perf_counter() - start)
    tried = 0
    if refute_first:
        counterexample, tried = search(rule, encoded=encoded, seed=seed)
        if counterexample is not None:
            return Refuted(counterexample, time.perf_counter() - start)
    vacuous = False if tried else decide(encoded)  # an instance was tried: some shapes fit
    if vacuous and _needs_higher_rank(rule):
        return Unknown(f"the rule's attributes need tensors of rank above {MAX_RANK}, beyond the ranks the "
                       "verifier models", time.perf_counter() - start)
    if vacuous:
        reason, cases = explain(encoded)
        return Vacuous(reason, cases, time.perf_counter() - start)
    axioms = relevant(op_names((*rule.src, *rule.dst)))
    deadline = start + timeout
    outcome = _check(encoded, axioms, [], deadline)
    if isinstance(outcome, Unknown) and outcome.reason != "timeout":
        outcome = _by_ranks(encoded, axioms, deadline)
    if isinstance(outcome, Unknown):
        if refute_first and tried:  # no proof: a wider search for a counterexample (broadcasting, strides)
            counterexample, _ = search(rule, shapes=RETRY_SHAPES, seed=seed + 1, encoded=encoded)
            if counterexample is not None:
                return Refuted(counterexample, time.perf_counter() - start)
        return Unknown(outcome.reason, time.perf_counter() - start)
    if vacuous is None:
        return Unknown("Z3 cannot decide whether any shapes make both sides defined with equal shapes, "
                       "so a proof could be vacuous", time.perf_counter() - start)
    axioms_used, pre_used = outcome
    same = all(s.eq(d) for s, d in zip(encoded.src, encoded.dst))
    return Proved(tuple(sorted(axioms_used)), tuple(p for p, _ in encoded.preconditions if p in pre_used),
                  time.perf_counter() - start, same_term=same)


MAX_RANK_CASES = 64


def _needs_higher_rank(rule: Rule) -> bool:
    """Whether a literal attribute names an axis at or past MAX_RANK (a permutation or a target
    shape longer than MAX_RANK, an axis >= MAX_RANK): no shapes the verifier models can fit such
    a rule, which says nothing about whether real ones do."""
    for top in (*rule.src, *rule.dst):
        for term in walk(top):
            for name, value in getattr(term, "attrs", ()):
                if isinstance(value, Seq) and name in ("perm", "shape") and len(value.items) > MAX_RANK:
                    return True
                if isinstance(value, Lit) and name == "axis" and isinstance(value.value, int) \
                        and value.value >= MAX_RANK:
                    return True
    return False


def _by_ranks(encoded: EncodedRule, axioms: list[Compiled], deadline: float) -> tuple[set, set] | Unknown:
    """Prove once per feasible assignment of ranks to the tensor variables, each fixed up front.

    E-matching is complete enough once ranks are known: axis parameters such as `rank(x) - 1`
    then reduce to numerals. A case Z3 cannot prove makes the whole rule UNKNOWN."""
    cases = rank_cases(encoded, MAX_RANK_CASES + 1)
    if len(cases) > MAX_RANK_CASES:
        return Unknown(f"more than {MAX_RANK_CASES} rank combinations to prove separately")
    axioms_used: set[str] = set()
    pre_used: set[str] = set()
    for ranks in cases:
        fixed = [RANK(encoded.env.tensors[v]) == r for v, r in ranks.items()]
        outcome = _check(encoded, axioms, fixed, deadline)
        if isinstance(outcome, Unknown):
            shown = ", ".join(f"rank({v}) = {r}" for v, r in ranks.items())
            return Unknown(f"{outcome.reason} (where {shown})")
        axioms_used |= outcome[0]
        pre_used |= outcome[1]
    return axioms_used, pre_used


def rank_cases(encoded: EncodedRule, limit: int) -> list[dict[str, int]]:
    """The assignments of ranks to tensor variables under which both sides can be defined."""
    solver = encoded.shape_solver()
    ranks = {v: RANK(x) for v, x in encoded.env.tensors.items()}
    cases = []
    while len(cases) < limit and solver.check() == z3.sat:
        model = solver.model()
        case = {v: model.eval(r, model_completion=True).as_long() for v, r in ranks.items()}
        cases.append(case)
        solver.add(z3.Or(*(ranks[v] != n for v, n in case.items())))
    return cases


def _check(encoded: EncodedRule, axioms: list[Compiled], extra: list[z3.BoolRef], deadline: float
           ) -> tuple[set[str], set[str]] | Unknown:
    """One Z3 query; the axioms and preconditions in the unsat core, or why there is no proof."""
    left = deadline - time.perf_counter()
    if left <= 0:
        return Unknown("timeout")
    solver = z3.Solver()
    solver.set("timeout", max(1, int(left * 1000)))
    solver.set("smt.mbqi", False)
    symbols = set(encoded.encoder.symbols).union(*(a.symbols for a in axioms))
    solver.add(*(shape_axiom(s) for s in sorted(symbols, key=repr)), *encoded.hypotheses, *extra)
    for a in axioms:
        solver.assert_and_track(a.formula, z3.Bool(f"axiom:{a.axiom.name}"))
    for text, formula in encoded.preconditions:
        solver.assert_and_track(formula, z3.Bool(f"where:{text}"))
    solver.add(z3.Or(*(s != d for s, d in zip(encoded.src, encoded.dst))))
    result = solver.check()
    if result == z3.unsat:
        core = [str(c) for c in solver.unsat_core()]
        return ({c.removeprefix("axiom:") for c in core if c.startswith("axiom:")},
                {c.removeprefix("where:") for c in core if c.startswith("where:")})
    if result == z3.sat:
        return Unknown("the axioms do not imply it (Z3 found a model of them where it fails)")
    reason = solver.reason_unknown()
    return Unknown("timeout" if "timeout" in reason or "canceled" in reason else f"Z3: {reason}")


def relevant(rule_ops: frozenset[str]) -> list[Compiled]:
    """Axioms whose one side only uses operators reachable from the rule's, closed under rewriting."""
    reach = set(rule_ops)
    chosen: dict[str, Compiled] = {}
    changed = True
    while changed:
        changed = False
        for a in compile_all():
            if a.axiom.name not in chosen and any(side and side <= reach for side in (
                    op_names(a.rule.src), op_names(a.rule.dst))):
                chosen[a.axiom.name] = a
                reach |= a.ops
                changed = True
    return list(chosen.values())
