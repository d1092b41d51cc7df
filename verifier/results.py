"""What the prover answers: PROVED with its proof record, REFUTED with a counterexample, VACUOUS
with the shapes that cannot agree, or UNKNOWN."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from taso_py.library.proof import Status


@dataclass(frozen=True)
class Proved:
    """Z3 found the negation unsatisfiable; `axioms` and `preconditions` come from the unsat core."""

    axioms: tuple[str, ...]
    preconditions: tuple[str, ...]
    seconds: float
    same_term: bool = False  # both sides encode to one term (defaults filled in, joins nested)
    status = Status.PROVED

    def explanation(self) -> str:
        """What the proof rests on, naming nothing it did not use."""
        if self.axioms:
            return ", ".join(self.axioms)
        if self.same_term:
            return "none (both sides are the same term)"
        return "none (congruence: the same operators on equal arguments, wherever the rule applies)"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "method": "z3-axioms", "axioms": list(self.axioms),
                "preconditions": list(self.preconditions), "same_term": self.same_term,
                "seconds": round(self.seconds, 4)}


@dataclass(frozen=True)
class Counterexample:
    """Concrete shapes, attribute values and inputs on which the two sides differ."""

    shapes: dict[str, tuple[int, ...]]
    attrs: dict[str, Any]
    inputs: dict[str, np.ndarray]
    output: int  # which output pair differs
    src: np.ndarray
    dst: np.ndarray

    def to_json(self) -> dict[str, Any]:
        return {"shapes": {k: list(v) for k, v in self.shapes.items()}, "attrs": self.attrs,
                "inputs": {k: v.tolist() for k, v in self.inputs.items()}, "output": self.output,
                "src": self.src.tolist(), "dst": self.dst.tolist(),
                "max_abs_diff": float(np.max(np.abs(self.src - self.dst)))}

    def summary(self) -> str:
        shapes = ", ".join(f"{k}: {list(v)}" for k, v in self.shapes.items())
        attrs = "".join(f", ?{k} = {v!r}" for k, v in self.attrs.items())
        diff = float(np.max(np.abs(self.src - self.dst)))
        return f"{shapes}{attrs}: output {self.output} differs by up to {diff:g}"


@dataclass(frozen=True)
class Refuted:
    counterexample: Counterexample
    seconds: float
    status = Status.REFUTED

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "counterexample": self.counterexample.to_json(),
                "seconds": round(self.seconds, 4)}


@dataclass(frozen=True)
class Unknown:
    """Neither proved nor refuted: a timeout, axioms too weak, or an operator outside the model."""

    reason: str
    seconds: float = 0.0
    status = Status.UNKNOWN

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "reason": self.reason, "seconds": round(self.seconds, 4)}


@dataclass(frozen=True)
class RankCase:
    """One assignment of ranks under which both sides are defined, and why their shapes cannot agree.

    Shapes and conditions are written over the variables' dims (`dim(x, 1)`); `conflict` is a
    subset of the constraints (sides defined, equal shapes, the `where` clause) that cannot all
    hold, from Z3's unsat core, with every dim at least 1 taken for granted."""

    ranks: dict[str, int]
    left: tuple[str, ...]  # one shape per output
    right: tuple[str, ...]
    conflict: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "left": list(self.left), "right": list(self.right),
                "conflict": list(self.conflict)}


@dataclass(frozen=True)
class Vacuous:
    """No shapes make both sides defined with equal output shapes (and the `where` clause hold):
    the rule can never apply, so there is nothing to prove. A user who wrote it made a mistake."""

    reason: str
    cases: tuple[RankCase, ...] = ()
    seconds: float = 0.0
    status = Status.VACUOUS

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "reason": self.reason, "cases": [c.to_json() for c in self.cases],
                "seconds": round(self.seconds, 4)}


Result = Proved | Refuted | Vacuous | Unknown
