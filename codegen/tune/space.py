"""Schedule knobs, as AutoTVM's templates: a schedule asks its `Config` for each choice.

A schedule template calls `cfg.knob("tile_x", (8, 16, 32), default=16)` wherever it would
hard-code a value. Run with an empty config it records the space and uses the defaults
(the untuned schedule); the tuner runs it again with concrete values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Config:
    """Knob values for one schedule; records every knob it is asked about (the search space)."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self.values: dict[str, Any] = dict(values or {})
        self.space: dict[str, tuple[Any, ...]] = {}
        self.picked: dict[str, Any] = {}  # what each knob returned (its default where no value was given)

    def knob(self, name: str, choices: Sequence[Any], default: Any = None) -> Any:
        options = tuple(dict.fromkeys(choices))
        if not options:
            raise ValueError(f"knob {name!r} has no choices")
        self.space[name] = options
        if name in self.values and self.values[name] in options:
            value = self.values[name]
        else:
            value = default if default is not None and default in options else options[0]
        self.picked[name] = value
        return value

    def __repr__(self) -> str:
        return f"Config({self.values!r})"

    def chosen(self) -> dict[str, Any]:
        """The value every knob took when the schedule was built with this config (defaults included)."""
        return dict(self.picked)
