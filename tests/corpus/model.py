"""The corpus entry type and the build cache shared by all builder modules."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import onnx

Builder = Callable[[], onnx.ModelProto]


@dataclass(frozen=True)
class CorpusModel:
    """One ONNX model the importer must round-trip.

    ``build`` returns a fresh proto on every call (callers may mutate it);
    ``inspect.unwrap(build)`` is the uncached builder, used to check that
    building is deterministic. ``checker_error`` is non-empty only for models
    that real tools produce but that ``onnx.checker`` rejects: it is the
    documented reason, and the corpus test asserts the checker still fails.
    ``external_data`` marks models meant to be saved with ``save(...,
    external_data=True)`` and imported from a path.
    """

    name: str
    build: Builder
    opset: int
    source: str
    opaque_ops: frozenset[str]
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict, hash=False)
    note: str = ""
    checker_error: str = ""
    external_data: bool = False
    # ops in the algebra that the importer must still keep opaque because ONNX cannot infer
    # their input shapes statically (e.g. a Loop's loop-carried output)
    shapeless_ops: frozenset[str] = frozenset()
    # too costly for the default suite (a dynamo export, a search and a compile of a whole network):
    # the tests parametrized over the corpus mark it slow (``tests.corpus.params``)
    slow: bool = False

    @property
    def needs_torch(self) -> bool:
        """Whether building this model requires torch (the exporters)."""
        return self.source.startswith("torch")


def cached(builder: Builder) -> Builder:
    """Memoize a builder as serialized bytes, returning a fresh proto per call.

    Torch exports cost 0.1-3 s, so every test (and every round-trip test)
    sharing one build keeps the suite fast; parsing bytes each time keeps
    callers from mutating a shared cached proto.
    """

    @functools.cache
    def serialized() -> bytes:
        return builder().SerializeToString(deterministic=True)

    @functools.wraps(builder)
    def build() -> onnx.ModelProto:
        return onnx.load_from_string(serialized())

    return build


class Registry(list[CorpusModel]):
    """Entries of one builder module; ``@MODELS.add(...)`` registers a builder."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def add(
        self, opset: int, *, note: str, opaque: tuple[str, ...] = (), **options: Any
    ) -> Callable[[Builder], Builder]:
        """Decorator registering ``builder`` (cached) with its expectations."""

        def register(builder: Builder) -> Builder:
            self.append(
                CorpusModel(
                    builder.__name__,
                    cached(builder),
                    opset,
                    self.source,
                    frozenset(opaque),
                    note=note,
                    **options,
                )
            )
            return builder

        return register
