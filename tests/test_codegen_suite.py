"""Every model of the suite (small size) compiled for the CPU matches ONNX Runtime, as imported
and after the superoptimizer (the full-size models: `pytest -m slow`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import models
from taso_py.codegen.graph import compile_graph
from taso_py.codegen.runtime import CompiledModel, random_inputs
from taso_py.library.store import load as load_library
from taso_py.onnx_io import load_model, save_model
from taso_py.onnx_io.exporter import region_writer
from taso_py.onnx_io.model import OnnxModel
from taso_py.optimizer import cost_model, optimize
from taso_py.runtime import compare_outputs
from taso_py.runtime import run as ort_run
from taso_py.search.backtracking import Settings
from tests.corpus import CORPUS, CorpusModel, save

# NASNet-A small takes 20-30 s each way (its many small separable convolutions); the full-size run covers it
SUITE = [pytest.param(n, marks=pytest.mark.slow) if n == "nasnet_a" else n for n in models.names()]
# torch exports and models with opaque operators go through the CLI in tests/test_real_models.py
WRITTEN_ELSEWHERE = [e for e in CORPUS if not (e.source.startswith("torch") or e.opaque_ops)]


def _check(model: OnnxModel, out: Path) -> None:
    report = compile_graph(model.graph, out, write_onnx=lambda p: save_model(model, p))
    compiled = CompiledModel(out)
    feeds = random_inputs(compiled)
    result = compare_outputs(ort_run(out / "model.onnx", feeds), compiled.run(feeds))
    assert result.max_rel <= 1e-4, result  # taso run --check's criterion: max|a-b| / max|a|
    assert report.arena_bytes <= report.unshared_bytes


@pytest.mark.parametrize("name", SUITE)
def test_suite_model_as_imported(tmp_path: Path, name: str) -> None:
    _check(load_model(models.build(name, "small")), tmp_path / name)


@pytest.mark.parametrize("name", SUITE)
def test_suite_model_optimized(tmp_path: Path, name: str) -> None:
    imported = load_model(models.build(name, "small"))
    result = optimize(imported, load_library(None), cost_model("analytical", 0, imported.opset),
                      Settings(budget=100, timeout=10.0))
    _check(result.model, tmp_path / name)


@pytest.mark.slow
@pytest.mark.parametrize("name", models.names())
def test_full_size_model(tmp_path: Path, name: str) -> None:
    _check(load_model(models.build(name, "full")), tmp_path / name)


@pytest.mark.parametrize("entry", WRITTEN_ELSEWHERE, ids=[e.name for e in WRITTEN_ELSEWHERE])
def test_corpus_model_compiles_and_matches_ort(tmp_path: Path, entry: CorpusModel) -> None:
    """Models written by other tools (legacy opsets, graph outputs that are inputs or weights):
    the compiled module gives ORT's outputs on the original file."""
    path = save(entry.build(), tmp_path / "m.onnx", external_data=entry.external_data)
    model = load_model(path, dict(entry.input_shapes) or None)
    report = compile_graph(model.graph, tmp_path / "out", write_region=region_writer(model.origin))
    assert (report.fallback_nodes > 0) == bool(entry.opaque_ops)
    compiled = CompiledModel(tmp_path / "out")
    feeds = random_inputs(compiled)
    result = compare_outputs(ort_run(path, feeds), compiled.run(feeds))
    assert result.max_rel <= 1e-4, result
