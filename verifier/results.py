"""What the prover answers: PROVED with its proof record, REFUTED with a counterexample, or UNKNOWN."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Proved:
    """Z3 found the negation unsatisfiable; `axioms` and `preconditions` come from the unsat core."""

    axioms: tuple[str, ...]
    preconditions: tuple[str, ...]
    seconds: float
    status = "PROVED"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "method": "z3-axioms", "axioms": list(self.axioms),
                "preconditions": list(self.preconditions), "seconds": round(self.seconds, 4)}


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
    status = "REFUTED"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "counterexample": self.counterexample.to_json(),
                "seconds": round(self.seconds, 4)}


@dataclass(frozen=True)
class Unknown:
    """Neither proved nor refuted: a timeout, axioms too weak, or an operator outside the model."""

    reason: str
    seconds: float = 0.0
    status = "UNKNOWN"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "seconds": round(self.seconds, 4)}


Result = Proved | Refuted | Unknown
