"""A rule's proof record as the library keeps it: a typed status and what the proof rests on.

The verifier's outcomes (`taso_py.verifier.results`) carry the same `Status`; the library stores
their JSON, so a record read back from a file is checked here once and then compared by
identity (`record.status is Status.PROVED`), never against a spelled-out string.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """What the prover answered. A str, so it serializes to JSON as its name."""

    PROVED = "PROVED"
    REFUTED = "REFUTED"
    VACUOUS = "VACUOUS"
    UNKNOWN = "UNKNOWN"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ProofRecord:
    """`status` plus the axioms and preconditions a proof used; `detail` keeps the rest of the JSON
    (method, seconds, a counterexample or reason) as written, so a library round-trips unchanged."""

    status: Status
    axioms: tuple[str, ...] = ()
    preconditions: tuple[str, ...] = ()
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def proved(self) -> bool:
        return self.status is Status.PROVED

    @classmethod
    def from_json(cls, raw: Any) -> ProofRecord:
        """ValueError naming the problem when `raw` is not a proof record."""
        if not isinstance(raw, Mapping) or "status" not in raw:
            raise ValueError("no proof record")
        try:
            status = Status(raw["status"])
        except ValueError:
            known = ", ".join(s.value for s in Status)
            raise ValueError(f"unknown proof status {raw['status']!r} (known: {known})") from None
        axioms, pre = raw.get("axioms", []), raw.get("preconditions", [])
        if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in (axioms, pre)):
            raise ValueError("proof axioms and preconditions must be lists of names")
        rest = {k: v for k, v in raw.items() if k not in ("status", "axioms", "preconditions")}
        return cls(status, tuple(axioms), tuple(pre), rest)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status.value}
        if self.axioms or self.status is Status.PROVED:
            out["axioms"] = list(self.axioms)
        if self.preconditions or self.status is Status.PROVED:
            out["preconditions"] = list(self.preconditions)
        return {**out, **self.detail}
