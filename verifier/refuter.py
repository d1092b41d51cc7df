"""The refuter: before any proof, run both sides on random inputs at several concrete shapes.

Shapes come from Z3 models of the rule's ground shape facts (both sides defined, equal output
shapes, the `where` clause), so every tried shape is one where the rule claims equality. Inputs
are small random integers in float64, so sums and products are exact and any difference is real;
operators that round (division, transcendental functions) are compared with a tight tolerance.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

import numpy as np
import z3

from taso_py.library.terms import Rule
from taso_py.verifier.concrete import Instance, Undefined, evaluate, numeric
from taso_py.verifier.encoding import DIM, MAX_RANK, RANK, EncodedRule, encode_rule
from taso_py.verifier.results import Counterexample

MAX_DIM = 5
TOLERANCE = 1e-9
FLOAT32_TOLERANCE = 1e-5


def refute(rule: Rule, *, shapes: int = 8, inputs: int = 2, seed: int = 0,
           encoded: EncodedRule | None = None) -> Counterexample | None:
    """A counterexample on one of up to `shapes` shape instances, or None if none was found."""
    return search(rule, shapes=shapes, inputs=inputs, seed=seed, encoded=encoded)[0]


def search(rule: Rule, *, shapes: int = 8, inputs: int = 2, seed: int = 0,
           encoded: EncodedRule | None = None) -> tuple[Counterexample | None, int]:
    """`refute`, and how many shape instances it tried: none means the rule may be vacuous."""
    rng = random.Random(seed)
    tried = 0
    for inst in instances(rule, encoded or encode_rule(rule), shapes, rng):
        tried += 1
        for _ in range(inputs):
            found = check_instance(rule, inst, np.random.default_rng(rng.randrange(2**32)))
            if found is not None:
                return found, tried
    return None, tried


def instances(rule: Rule, enc: EncodedRule, count: int, rng: random.Random, max_dim: int = MAX_DIM,
              extra: list[z3.BoolRef] | None = None) -> list[Instance]:
    """Up to `count` distinct shape instances on which both sides are defined with equal shapes."""
    solver = enc.shape_solver(*(extra or []))
    xs = list(enc.env.tensors.values())
    dims = [DIM(x, k) for x in xs for k in range(MAX_RANK)]
    solver.add(*(d <= max_dim for d in dims))
    for v in enc.env.attrs.values():
        if v.sort() == z3.IntSort():
            solver.add(v >= -4, v <= 8)
        elif v.sort() == z3.RealSort():  # quarters: exact in floats, so attribute arithmetic stays exact
            quarters = z3.Int(f"{v}*4")
            solver.add(v >= -4, v <= 4, v * 4 == z3.ToReal(quarters))
    found: list[Instance] = []
    while len(found) < count:
        wish = [RANK(x) == rng.randint(1, MAX_RANK) for x in xs if rng.random() < 0.5]
        wish += [d == rng.randint(1, 4) for d in dims if rng.random() < 0.5]
        wish += [_wish(v, rng) for v in enc.env.attrs.values() if v.sort() in (z3.IntSort(), z3.RealSort())
                 and rng.random() < 0.5]
        result = solver.check(*wish)
        for _ in range(3):  # fewer wishes, not none: without any Z3 returns its nearest model, one alike
            if result == z3.sat or not wish:
                break
            wish = rng.sample(wish, len(wish) // 2)
            result = solver.check(*wish)
        if result != z3.sat:
            result = solver.check()
        if result != z3.sat:
            break
        model = solver.model()
        inst = _instance(model, enc)
        found.append(inst)
        solver.add(z3.Or(*(RANK(x) != len(inst.shapes[n]) for n, x in enc.env.tensors.items()),
                         *(DIM(x, k) != d for n, x in enc.env.tensors.items() for k, d in enumerate(inst.shapes[n])),
                         *(v != model.eval(v, model_completion=True) for v in enc.env.attrs.values())))
    return found


def _wish(v: z3.ExprRef, rng: random.Random) -> z3.BoolRef:
    """A random value to try for an attribute variable: negative, zero and fractional ones too."""
    if v.sort() == z3.IntSort():
        return v == rng.randint(-2, 4)
    return v == z3.RealVal(rng.choice(("-3/2", "-1", "0", "1/2", "2")))


def _instance(model: z3.ModelRef, enc: EncodedRule) -> Instance:
    shapes = {}
    for name, x in enc.env.tensors.items():
        rank = model.eval(RANK(x), model_completion=True).as_long()
        shapes[name] = tuple(model.eval(DIM(x, k), model_completion=True).as_long() for k in range(rank))
    attrs = {name.lstrip("?"): _python(model.eval(v, model_completion=True)) for name, v in enc.env.attrs.items()}
    return Instance(shapes, attrs)


def _python(v: z3.ExprRef) -> Any:
    if z3.is_int_value(v):
        return v.as_long()
    if z3.is_rational_value(v):
        q = Fraction(v.numerator_as_long(), v.denominator_as_long())
        return int(q) if q.denominator == 1 else float(q)
    if z3.is_true(v) or z3.is_false(v):
        return z3.is_true(v)
    return v.as_string()


def check_instance(rule: Rule, inst: Instance, rng: np.random.Generator) -> Counterexample | None:
    """Both sides on one instance with random small integers (float64): a counterexample or None."""
    values = {v: rng.integers(-3, 4, size=s).astype(np.float64) for v, s in inst.shapes.items()}
    try:
        memo: dict = {}
        src = [np.asarray(evaluate(t, inst, values, numeric, memo)) for t in rule.src]
        dst = [np.asarray(evaluate(t, inst, values, numeric, memo)) for t in rule.dst]
    except Undefined:
        return None  # attribute values the operator table rejects: not an instance after all
    # the constant operators default to float32 (1/9 rounds there): compare at that precision then
    single = any(getattr(v, "dtype", None) == np.float32 for v in memo.values())
    tol = FLOAT32_TOLERANCE if single else TOLERANCE
    for i, (a, b) in enumerate(zip(src, dst)):
        a, b = a.astype(np.float64), b.astype(np.float64)
        if a.shape != b.shape or not np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True):
            return Counterexample(dict(inst.shapes), dict(inst.attrs), values, i, a, b)
    return None
