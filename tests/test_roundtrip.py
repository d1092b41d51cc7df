"""ONNX -> IR -> ONNX: the model suite and a corpus of models written by other tools and opsets.

Each round trip must be checker-clean (full check), keep input/output names and the opset,
give ONNX Runtime outputs equal to the original's, and keep opaque nodes unchanged; the IR's
own reference evaluation must agree with ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from benchmarks import models
from taso_py.errors import InputError
from taso_py.graph import evaluate
from taso_py.onnx_io import OnnxModel, check, load_model, save_model, to_onnx
from taso_py.runtime import compare_outputs, random_feeds, run
from tests import corpus

EXPORT_RTOL = 1e-5  # exported vs original, both in ORT
REFERENCE_RTOL = 1e-4  # the IR's numpy reference vs ORT
OPAQUE_REFERENCE_RTOL = 1e-3  # opaque nodes run in onnx's reference evaluator (e.g. its LRN differs by 3e-4)


def roundtrip(source: onnx.ModelProto | Path, input_shapes: dict | None = None) -> tuple[OnnxModel, onnx.ModelProto]:
    imported = load_model(source, input_shapes)
    exported = to_onnx(imported)
    check(exported)
    return imported, exported


def max_rel(want: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> float:
    return compare_outputs(want, got).max_rel


def opaque_types(imported: OnnxModel) -> set[str]:
    return {n.attrs.op_type for n in imported.graph.nodes.values() if n.op.name == "opaque"}


def assert_interface_kept(original: onnx.ModelProto, exported: onnx.ModelProto) -> None:
    fed = {t.name for t in original.graph.initializer}
    assert [i.name for i in exported.graph.input] == [i.name for i in original.graph.input if i.name not in fed]
    assert [o.name for o in exported.graph.output] == [o.name for o in original.graph.output]
    assert {o.domain: o.version for o in exported.opset_import}[""] == \
        {o.domain: o.version for o in original.opset_import}[""]


def check_suite_model(name: str, size: str, *, reference: bool) -> None:
    original = models.build(name, size)
    imported, exported = roundtrip(original)
    assert not opaque_types(imported), f"{name} has opaque nodes"
    assert_interface_kept(original, exported)
    feeds = random_feeds(imported.graph)
    want = run(original, feeds)
    assert max_rel(want, run(exported, feeds)) <= EXPORT_RTOL
    if reference:
        assert max_rel(want, evaluate(imported.graph, feeds)) <= REFERENCE_RTOL


@pytest.mark.parametrize("name", models.names())
def test_suite_small_roundtrip_and_reference(name: str) -> None:
    check_suite_model(name, "small", reference=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", models.names())
def test_suite_full_roundtrip(name: str) -> None:
    check_suite_model(name, "full", reference=False)


@pytest.mark.parametrize("entry", corpus.params(corpus.CORPUS))
def test_corpus_roundtrip(entry: corpus.CorpusModel, tmp_path: Path) -> None:
    if entry.needs_torch:
        pytest.importorskip("torch")
    original = entry.build()
    source: onnx.ModelProto | Path = original
    if entry.external_data:
        source = tmp_path / "model.onnx"
        corpus.save(original, source, external_data=True)
    imported, exported = roundtrip(source, entry.input_shapes)
    assert opaque_types(imported) == set(entry.opaque_ops | entry.shapeless_ops)
    feeds = corpus.random_feeds(original, entry.input_shapes)
    want = dict(zip([o.name for o in original.graph.output], corpus.run_ort(source, feeds)))
    assert max_rel(want, run(exported, feeds)) <= EXPORT_RTOL
    tolerance = OPAQUE_REFERENCE_RTOL if entry.opaque_ops else REFERENCE_RTOL
    assert max_rel(want, evaluate(imported.graph, feeds)) <= tolerance


@pytest.mark.parametrize("name", ["topk_op11", "loop_outer_scope_op11", "if_branches_op11", "lstm_torch_op9"])
def test_opaque_nodes_are_exported_unchanged(name: str) -> None:
    entry = corpus.get(name)
    if entry.needs_torch:
        pytest.importorskip("torch")
    original = entry.build()
    _, exported = roundtrip(original, entry.input_shapes)
    for op_type in entry.opaque_ops:
        before = [n for n in original.graph.node if n.op_type == op_type]
        after = [n for n in exported.graph.node if n.op_type == op_type]
        assert [n.SerializeToString() for n in after] == [n.SerializeToString() for n in before]


def test_save_is_atomic_and_checked(tmp_path: Path) -> None:
    imported = load_model(models.build("squeezenet", "small"))
    target = save_model(imported, tmp_path / "m.onnx")
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temp files left behind
    onnx.checker.check_model(str(target), full_check=True)

    def refuse(_staged: Path) -> None:
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError):
        save_model(imported, tmp_path / "n.onnx", before_publish=refuse)
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


@pytest.mark.slow
def test_model_over_2gb_uses_external_data(tmp_path: Path) -> None:
    """A 2.1 GB weight cannot live in a protobuf: import and export go through external data."""
    from onnx import helper

    from taso_py.onnx_io.exporter import external_tensor

    rows, cols = 64, (2**31 // 4) // 64 + 1024
    w = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    w.tofile(tmp_path / "big.onnx.data")
    tensor = external_tensor("w", w, "big.onnx.data", 0)
    del w
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])], "big",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [1, cols])], [tensor])
    source = tmp_path / "big.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(source))
    imported = load_model(source)
    with pytest.raises(InputError, match="save_model"):
        to_onnx(imported)
    target = save_model(imported, tmp_path / "out.onnx")
    assert (tmp_path / "out.onnx.data").stat().st_size > 2**31
    feeds = random_feeds(imported.graph)
    assert max_rel(run(source, feeds), run(target, feeds)) == 0.0


def test_opset_6_model_is_upgraded_with_the_version_converter() -> None:
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "old", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)])
    imported, exported = roundtrip(original)
    assert imported.opset == 7
    assert sorted(n.kind for n in imported.graph.nodes.values()) == ["conv2d", "input", "relu", "weight"]
    feeds = random_feeds(imported.graph)
    assert max_rel(run(original, feeds), run(exported, feeds)) == 0.0
