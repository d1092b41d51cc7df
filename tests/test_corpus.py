"""Validates the ONNX model corpus itself, before any importer touches it.

Round-trip tests trust each entry to be a valid, runnable, deterministic
model whose ``opaque_ops`` say what really sits outside the algebra; these
tests keep that trust earned as exporters (torch, onnx) change under us.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.external_data_helper import uses_external_data

from tests.corpus import (
    CORPUS,
    CorpusModel,
    algebra_node_counts,
    get,
    opaque_op_types,
    params,
    random_feeds,
    run_ort,
    save,
)

SOURCES = {"torch-legacy", "torch-dynamo", "onnx.helper"}
MAX_PARAMS = 1_000_000
MAX_RUN_SECONDS = 0.05


def _usable(corpus_entry: CorpusModel) -> CorpusModel:
    """``corpus_entry``, or a skip when it is a torch export and torch is not installed."""
    if corpus_entry.needs_torch:
        pytest.importorskip("torch")
    return corpus_entry


@pytest.fixture(params=params(CORPUS))
def entry(request: pytest.FixtureRequest) -> CorpusModel:
    """Each corpus entry in turn."""
    return _usable(request.param)


def test_checker_accepts_model(entry: CorpusModel) -> None:
    model = entry.build()
    if not entry.checker_error:
        onnx.checker.check_model(model, full_check=True)
        return
    with pytest.raises(onnx.checker.ValidationError):  # still the documented quirk
        onnx.checker.check_model(model, full_check=True)


def test_ort_runs_with_finite_outputs(entry: CorpusModel) -> None:
    model = entry.build()
    outputs = run_ort(model, random_feeds(model, entry.input_shapes))
    assert len(outputs) == len(model.graph.output)
    for output in outputs:
        assert np.isfinite(output).all()


def test_build_is_deterministic(entry: CorpusModel) -> None:
    fresh = inspect.unwrap(entry.build)()
    assert fresh.SerializeToString(deterministic=True) == entry.build().SerializeToString(deterministic=True)


def test_build_returns_independent_protos(entry: CorpusModel) -> None:
    first = entry.build()
    first.graph.ClearField("node")
    assert entry.build().graph.node


def test_declared_opset_matches_model(entry: CorpusModel) -> None:
    versions = {o.domain: o.version for o in entry.build().opset_import}
    assert versions.get("", versions.get("ai.onnx")) == entry.opset


def test_declared_opaque_ops_match_graph(entry: CorpusModel) -> None:
    assert opaque_op_types(entry.build(), entry.input_shapes) == entry.opaque_ops


def test_model_is_small(entry: CorpusModel) -> None:
    model = entry.build()
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert params < MAX_PARAMS
    feeds = random_feeds(model, entry.input_shapes)
    assert min(_seconds(lambda: run_ort(model, feeds)) for _ in range(3)) < MAX_RUN_SECONDS


def _seconds(run: Callable[[], object]) -> float:
    """Wall time of one call of ``run`` (the check takes the best of a few)."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def test_metadata_is_well_formed(entry: CorpusModel) -> None:
    assert entry.source in SOURCES
    assert entry.note
    assert entry.needs_torch == (entry.source != "onnx.helper")


@pytest.mark.parametrize("entry", [e for e in CORPUS if e.input_shapes], ids=lambda e: e.name)
def test_dynamic_inputs_require_input_shapes(entry: CorpusModel) -> None:
    with pytest.raises(ValueError, match="input_shapes"):
        random_feeds(_usable(entry).build())


TORCH = [e for e in CORPUS if e.needs_torch]
MIN_ALGEBRA_FRACTION = 0.98


@pytest.mark.parametrize(
    "entries",
    [
        pytest.param([e for e in TORCH if not e.slow], id="default-entries"),
        pytest.param(TORCH, id="all-torch-entries", marks=pytest.mark.slow),
    ],
)
def test_torch_exports_fall_inside_the_algebra(entries: list[CorpusModel]) -> None:
    """Over the torch exports, at least 98% of the nodes left once import has folded constants and
    shape-only arithmetic become algebra operators (issue 20); the rest run in ONNX Runtime."""
    pytest.importorskip("torch")
    counts = [algebra_node_counts(e.build(), e.input_shapes) for e in entries]
    total, inside = sum(c[0] for c in counts), sum(c[1] for c in counts)
    assert inside / total >= MIN_ALGEBRA_FRACTION, {e.name: c for e, c in zip(entries, counts) if c[0] != c[1]}


def test_names_are_unique() -> None:
    names = [e.name for e in CORPUS]
    assert len(names) == len(set(names))


def test_get_returns_entry() -> None:
    assert get(CORPUS[0].name) is CORPUS[0]


def test_get_unknown_name_lists_valid_names() -> None:
    with pytest.raises(KeyError, match=r"valid names: .*gemm_trans_op7"):
        get("no_such_model")


def test_corpus_covers_exporters_and_opsets() -> None:
    covered = {(e.source, e.opset) for e in CORPUS}
    for opset in (9, 11, 13, 17):
        assert ("torch-legacy", opset) in covered
    assert ("torch-dynamo", 18) in covered
    assert len(CORPUS) >= 30


def test_random_feeds_follow_input_dtypes() -> None:
    ids = random_feeds(get("embedding_gather_op13").build())["ids"]
    assert ids.dtype == np.int64 and ids.min() >= 0
    flag = random_feeds(get("if_branches_op11").build())["flag"]
    assert flag.dtype == np.bool_ and flag.shape == ()


def test_random_feeds_are_seeded() -> None:
    model = get("gemm_trans_op7").build()
    np.testing.assert_array_equal(random_feeds(model, seed=3)["x"], random_feeds(model, seed=3)["x"])
    assert not np.array_equal(random_feeds(model, seed=3)["x"], random_feeds(model, seed=4)["x"])


def test_random_feeds_skip_initializers_listed_as_inputs() -> None:
    model = get("sum_variadic_op8").build()
    assert len(model.graph.input) > 1
    assert set(random_feeds(model)) == {"x"}


@pytest.mark.parametrize("entry", [e for e in CORPUS if e.external_data], ids=lambda e: e.name)
def test_external_data_model_runs_from_path(entry: CorpusModel, tmp_path: Path) -> None:
    model = entry.build()
    path = save(model, tmp_path / "model.onnx", external_data=True)
    assert (tmp_path / "model.onnx.data").stat().st_size > 0
    on_disk = onnx.load(path, load_external_data=False)
    assert all(uses_external_data(t) for t in on_disk.graph.initializer)
    feeds = random_feeds(model)
    for got, want in zip(run_ort(path, feeds), run_ort(model, feeds), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="external data"):
        run_ort(on_disk, feeds)
