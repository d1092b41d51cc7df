"""Parametric rules: where a proof holds for every value of an attribute, say so once.

Generated rules carry the literal attributes of the graphs they came from (`stride=[1, 1]`,
`act=relu`, `scale=0.5`). For each attribute that models vary (convolution and pooling
windows, fused activations, scales, activation bounds and slopes), every distinct literal value becomes attribute
variables, and the verifier is asked again. A rule that stays PROVED replaces the literal one,
and the literal rules it covers collapse into it by their canonical text.
"""

from __future__ import annotations

from dataclasses import dataclass

from taso_py.library.terms import Apply, AttrVar, Expr, Lit, Pick, Rule, Seq, Term, Var

# (operator, attribute): the attributes a rule may quantify over
PARAMETRIC = {
    ("conv2d", "stride"), ("conv2d", "pad"), ("conv2d", "act"),
    ("maxpool2d", "kernel"), ("maxpool2d", "stride"), ("maxpool2d", "pad"),
    ("avgpool2d", "kernel"), ("avgpool2d", "stride"), ("avgpool2d", "pad"),
    ("scalar_mul", "scale"),
    ("clip", "min"), ("clip", "max"), ("leaky_relu", "alpha"), ("hardsigmoid", "alpha"), ("hardsigmoid", "beta"),
}


@dataclass(frozen=True)
class Slot:
    """One attribute name with one literal value, wherever it occurs in the rule."""

    attr: str
    value: Expr


def slots(rule: Rule) -> list[Slot]:
    """Literal parametric attributes that occur on both sides (a value on one side only would be
    pinned by shapes alone) and whose value no other attribute repeats (`const_pool(kernel=[3, 3])`
    ties `avgpool2d(kernel=[3, 3])` to it)."""
    def found(terms: tuple[Term, ...], parametric: bool) -> set[Slot]:
        return {Slot(name, value) for t in terms for name, value in _attrs(t, parametric) if _literal(value)}

    both = found(rule.src, True) & found(rule.dst, True)
    tied = {s.value for s in found((*rule.src, *rule.dst), False)}
    return sorted((s for s in both if s.value not in tied), key=repr)


def _attrs(term: Term, parametric: bool) -> list[tuple[str, Expr]]:
    """The (name, value) attributes of the term that are (or, with False, are not) parametric."""
    out: list[tuple[str, Expr]] = []
    if isinstance(term, Pick):
        return _attrs(term.term, parametric)
    if isinstance(term, Apply):
        out += [(k, v) for k, v in term.attrs if ((term.op, k) in PARAMETRIC) == parametric]
        for a in term.args:
            out += _attrs(a, parametric)
    return out


def _literal(value: Expr) -> bool:
    return isinstance(value, Lit) or (isinstance(value, Seq) and all(isinstance(i, Lit) for i in value.items))


def generalize(rule: Rule, chosen: list[Slot]) -> Rule:
    """The rule with each chosen slot's value replaced by fresh attribute variables."""
    names: dict[Slot, Expr] = {}
    for k, slot in enumerate(chosen):
        base = f"{slot.attr[0]}{k}"
        if isinstance(slot.value, Seq):
            names[slot] = Seq(tuple(AttrVar(f"{base}_{i}") for i in range(len(slot.value.items))))
        else:
            names[slot] = AttrVar(base)

    def term(t: Term) -> Term:
        if isinstance(t, Var):
            return t
        if isinstance(t, Pick):
            return Pick(term(t.term), t.index)
        attrs = tuple((k, names.get(Slot(k, v), v) if (t.op, k) in PARAMETRIC else v) for k, v in t.attrs)
        return Apply(t.op, tuple(term(a) for a in t.args), attrs)

    return Rule(tuple(term(t) for t in rule.src), tuple(term(t) for t in rule.dst), rule.where)


def attempts(rule: Rule) -> list[list[Slot]]:
    """What to try, most general first: every slot at once, then each attribute name on its own."""
    all_slots = slots(rule)
    if not all_slots:
        return []
    out = [all_slots]
    for attr in dict.fromkeys(s.attr for s in all_slots):
        group = [s for s in all_slots if s.attr == attr]
        if group != all_slots:
            out.append(group)
    return out
