"""Corpus of small ONNX models that look like models written by other tools.

Each entry builds deterministically (seeded weights) and exercises one
exporter's or one era's quirks, so the importer is tested against files
"from many exporters and years" rather than only against what taso-py itself
writes. Round-trip tests reuse ``random_feeds`` and ``run_ort``.
"""

from __future__ import annotations

from typing import Any

from . import legacy, opaque, torch_models
from .analysis import ALGEBRA_OPS, algebra_node_counts, opaque_op_types
from .model import CorpusModel
from .runtime import random_feeds, run_ort, save

CORPUS: list[CorpusModel] = [*torch_models.MODELS, *legacy.MODELS, *opaque.MODELS]

_BY_NAME = {entry.name: entry for entry in CORPUS}


def params(entries: list[CorpusModel]) -> list[Any]:
    """``entries`` as pytest parameters named after them, those marked ``slow`` with pytest's slow mark."""
    import pytest

    return [pytest.param(e, id=e.name, marks=[pytest.mark.slow] if e.slow else []) for e in entries]


def get(name: str) -> CorpusModel:
    """The corpus entry called ``name``; a KeyError lists the valid names."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no corpus model {name!r}; valid names: {', '.join(sorted(_BY_NAME))}") from None


__all__ = [
    "ALGEBRA_OPS",
    "CORPUS",
    "CorpusModel",
    "algebra_node_counts",
    "get",
    "opaque_op_types",
    "params",
    "random_feeds",
    "run_ort",
    "save",
]
