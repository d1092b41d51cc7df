"""Schedule knobs, as AutoTVM's templates: a schedule asks its `Config` for each choice.

A schedule template calls `cfg.knob("tile_x", (8, 16, 32), default=16)` wherever it would
hard-code a value. Run with an empty config it records the space and uses the defaults
(the untuned schedule); the tuner runs it again with concrete values.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

Point = tuple[int, ...]  # an option index per knob


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


class Space:
    """A template's knobs and their options; a point picks one option of each."""

    def __init__(self, knobs: dict[str, tuple[Any, ...]]) -> None:
        self.names = list(knobs)
        self.options = [knobs[n] for n in self.names]

    @property
    def knobs(self) -> dict[str, tuple[Any, ...]]:
        return dict(zip(self.names, self.options))

    @property
    def size(self) -> int:
        return math.prod(len(o) for o in self.options)

    def config(self, p: Point) -> Config:
        return Config({n: o[i] for n, o, i in zip(self.names, self.options, p)})

    def point(self, values: dict[str, Any]) -> Point | None:
        """The point of recorded values; None when one is no longer an option."""
        try:
            return tuple(o.index(values[n]) for n, o in zip(self.names, self.options))
        except (KeyError, ValueError):
            return None

    def random(self, rng: random.Random) -> Point:
        return tuple(rng.randrange(len(o)) for o in self.options)

    def neighbour(self, p: Point, rng: random.Random) -> Point:
        """`p` with one knob (that has a choice) moved to another option."""
        movable = [k for k, o in enumerate(self.options) if len(o) > 1]
        if not movable:
            return p
        k = rng.choice(movable)
        q = list(p)
        q[k] = rng.choice([i for i in range(len(self.options[k])) if i != p[k]])
        return tuple(q)
