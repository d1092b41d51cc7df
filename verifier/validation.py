"""Axiom validation: each axiom checked against the operators' semantics on concrete shapes.

For an instance (shapes of the tensor variables, values of the attribute variables) on which
both sides are defined and the `where` clause holds, both sides are evaluated element by element
over tensors of Z3 real variables, with `sym_value` (itself tested against the numpy reference).
The axiom holds there if the output shapes agree and Z3 proves every pair of elements equal.
Instances are distinct models of the shape constraints found by Z3, every dim in 1..4 and random
preferences steering it around the space: a few per axiom by default, up to FULL_INSTANCES with
`full` (every instance where an axiom has fewer). The shape model is cross-checked against the
real shape rule along the way.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import z3

from taso_py.ops.schema import Axiom
from taso_py.verifier.axioms import parsed
from taso_py.verifier.concrete import Instance, ModelMismatch, Undefined, evaluate, symbolic
from taso_py.verifier.encoding import encode_rule
from taso_py.verifier.refuter import instances

MAX_DIM = 4
FAST_INSTANCES = 6
FULL_INSTANCES = 400


class Z3Reals:
    """ops.symbolic.ScalarDomain over Z3 reals: relu and max exact, transcendental functions uninterpreted."""

    def __init__(self) -> None:
        self.functions: dict[str, z3.FuncDeclRef] = {}

    def const(self, v: float | Fraction) -> z3.ArithRef:
        q = Fraction(v)
        return z3.RealVal(q.numerator) / q.denominator if q.denominator != 1 else z3.RealVal(q.numerator)

    def div(self, a: Any, b: Any) -> Any:
        return a / b

    def relu(self, x: Any) -> Any:
        return z3.If(x > 0, x, 0)

    def max(self, a: Any, b: Any) -> Any:
        return z3.If(a >= b, a, b)

    def apply(self, name: str, _impl: Callable[[float], float], x: Any) -> Any:
        if name not in self.functions:
            self.functions[name] = z3.Function(name, z3.RealSort(), z3.RealSort())
        return self.functions[name](x)


@dataclass
class Failure:
    instance: Instance
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"instance": self.instance.describe(), "message": self.message}


@dataclass
class Report:
    """The outcome of validating one axiom."""

    axiom: str
    instances: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures and self.instances > 0

    def to_json(self) -> dict[str, Any]:
        return {"axiom": self.axiom, "status": "valid" if self.ok else ("no instances" if not self.failures
                                                                        else "INVALID"),
                "instances": self.instances, "seconds": round(self.seconds, 3),
                "failures": [f.to_json() for f in self.failures]}


def validate(axiom: Axiom, *, full: bool = False, seed: int = 0, limit: int | None = None) -> Report:
    """Check `axiom` on `limit` instances (a few by default, up to FULL_INSTANCES with `full`)."""
    start = time.perf_counter()
    rule = parsed(axiom)
    count = limit if limit is not None else (FULL_INSTANCES if full else FAST_INSTANCES)
    report = Report(axiom.name)
    for inst in instances(rule, encode_rule(rule, equal_shapes=False), count, random.Random(seed), MAX_DIM):
        problem = check_instance(rule, inst)
        report.instances += 1
        if problem is not None:
            report.failures.append(Failure(inst, problem))
            break
    report.seconds = time.perf_counter() - start
    return report


def check_instance(rule: Any, inst: Instance) -> str | None:
    """None if the axiom holds on this instance, else what breaks it."""
    domain = Z3Reals()
    inputs = {v: _variables(v, s) for v, s in inst.shapes.items()}
    try:
        memo: dict = {}
        left = evaluate(rule.src[0], inst, inputs, symbolic(domain), memo)
        right = evaluate(rule.dst[0], inst, inputs, symbolic(domain), memo)
    except Undefined as e:
        return f"the shape model says both sides are defined, but: {e}"
    except ModelMismatch as e:
        return str(e)
    if left.shape != right.shape:
        return f"shapes differ: {list(left.shape)} vs {list(right.shape)}"
    pending = [(a, b) for a, b in zip(left.flat, right.flat) if not _equal_by_simplification(a, b)]
    if not pending:
        return None
    solver = z3.Solver()
    solver.set("timeout", 20000)
    solver.add(z3.Or(*(a != b for a, b in pending)))
    result = solver.check()
    if result == z3.unsat:
        return None
    if result == z3.unknown:
        return f"Z3 could not decide the element equality ({solver.reason_unknown()})"
    model = solver.model()
    a, b = next((a, b) for a, b in pending if z3.is_false(model.eval(a == b, model_completion=True)))
    shown = {str(d): str(model[d]) for d in model.decls()[:8]}
    return f"elements differ: {a} vs {b}, e.g. with {shown}"


def _equal_by_simplification(a: Any, b: Any) -> bool:
    """Cheap first test: the difference simplifies to 0 (polynomial identities mostly do)."""
    diff = z3.simplify(a - b) if z3.is_expr(a) or z3.is_expr(b) else a - b
    return z3.is_rational_value(diff) and diff.numerator_as_long() == 0 if z3.is_expr(diff) else diff == 0


def _variables(name: str, shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        out[idx] = z3.Real(f"{name}[{','.join(map(str, idx))}]")
    return out
