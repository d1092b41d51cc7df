"""A cost model for tests: every operator costs one, a split a tenth, so any merge pays.

Tests of what the library and the search *can* do use it; whether a rewrite pays on a machine
is the measured cost model's call, which tests leave to the benchmarks."""

from __future__ import annotations

from collections.abc import Iterable

from taso_py.cost.model import OpCall


class OpCount:
    name, unit, seconds = "ops", "ops", 0.0

    def cost(self, call: OpCall) -> float:
        return 0.1 if call.op.name == "split" else 1.0

    def prepare(self, calls: Iterable[OpCall]) -> None:
        pass
