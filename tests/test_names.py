"""Name hygiene: every name the importer, the optimizer and the exporter make up is fresh for the
whole model (graph inputs, outputs, initializers, node outputs, names inside subgraphs), whatever
names the model itself uses, including the tool's own (`split_1`, `conv2d_0`, `const_3`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from taso_py import ops
from taso_py.cli import main
from taso_py.cost.analytical import Roofline
from taso_py.graph import Graph
from taso_py.library.store import load as load_library
from taso_py.onnx_io import check, load_model, to_onnx
from taso_py.onnx_io.names import NameSource, fresh_floor, model_names
from taso_py.optimizer import optimize
from taso_py.runtime import compare_models, random_feeds
from taso_py.search.backtracking import Settings
from taso_py.types import DType, TensorType

F = TensorProto.FLOAT
LIBRARY = load_library(None)

# names taso-py itself makes up: IR nodes are named after their operator, weights `w_N`, exported
# helpers after their ONNX op type (lower case) or `const`/`split`
HINTS = sorted({*ops.OPS, "w", "const", "split", "identity", "transpose", "reshape", "concat", "mul", "add"})
TOOL_NAMES = [f"{h}_{i}" for h in HINTS for i in range(4)]
ODD_NAMES = ["x", "y", "a b", " lead", "trail ", "ü∂", "名前", "Ω_0", "_0", "0", "1_", "split", "split_01",
             "x/1:0", "onnx::Conv_12", "w_99999999999999999999999", "#", "a.b"]
name = st.one_of(st.sampled_from(TOOL_NAMES), st.sampled_from(ODD_NAMES),
                 st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=1, max_size=6))


def _model(nodes: list, inputs: list, outputs: list, inits: list, opset: int = 13) -> onnx.ModelProto:
    model = helper.make_model(helper.make_graph(nodes, "names", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _init(rng: np.random.Generator, name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def split_concat(n: list[str], rng: np.random.Generator) -> onnx.ModelProto:
    """Split with a sizes initializer, Concat, Add; a split part is also an output; and a Split whose
    optional sizes input is the empty name."""
    x, sizes, s0, s1, c, y, h0, h1 = n[:8]
    nodes = [helper.make_node("Split", [x, sizes], [s0, s1], axis=1),
             helper.make_node("Concat", [s1, s0], [c], axis=1), helper.make_node("Add", [c, x], [y]),
             helper.make_node("Split", [y, ""], [h0, h1], axis=1)]
    return _model(nodes, [helper.make_tensor_value_info(x, F, [2, 6])],
                  [helper.make_tensor_value_info(v, F, s) for v, s in ((h1, [2, 3]), (s0, [2, 2]), (h0, [2, 3]))],
                  [numpy_helper.from_array(np.array([2, 4], np.int64), sizes)])


def sibling_matmuls(n: list[str], rng: np.random.Generator) -> onnx.ModelProto:
    """Two matmuls of one input (the library merges them: concat, matmul, split), Add, Relu."""
    x, w1, w2, m1, m2, y, z = n[:7]
    nodes = [helper.make_node("MatMul", [x, w1], [m1]), helper.make_node("MatMul", [x, w2], [m2]),
             helper.make_node("Add", [m1, m2], [y]), helper.make_node("Relu", [m1], [z])]
    return _model(nodes, [helper.make_tensor_value_info(x, F, [3, 8])],
                  [helper.make_tensor_value_info(v, F, [3, 5]) for v in (y, z)],
                  [_init(rng, w1, 8, 5), _init(rng, w2, 8, 5)])


def sibling_convs(n: list[str], rng: np.random.Generator) -> onnx.ModelProto:
    """Two convolutions of one input, one without its optional bias (the empty name), a Relu that
    fuses into it, Concat; the second convolution is an output and read inside."""
    x, k1, k2, b2, c1, c2, r1, y = n[:8]
    nodes = [helper.make_node("Conv", [x, k1, ""], [c1], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", [x, k2, b2], [c2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", [c1], [r1]), helper.make_node("Concat", [r1, c2], [y], axis=1)]
    return _model(nodes, [helper.make_tensor_value_info(x, F, [1, 3, 6, 6])],
                  [helper.make_tensor_value_info(y, F, [1, 8, 6, 6]),
                   helper.make_tensor_value_info(c2, F, [1, 4, 6, 6])],
                  [_init(rng, k1, 4, 3, 3, 3), _init(rng, k2, 4, 3, 3, 3), _init(rng, b2, 4)])


def _branch(graph_name: str, outer: str, inner: str, out: str) -> onnx.GraphProto:
    nodes = [helper.make_node("Relu", [outer], [inner]), helper.make_node("Neg", [inner], [out])]
    return helper.make_graph(nodes, graph_name, [], [helper.make_tensor_value_info(out, F, [1, 4, 6, 6])])


def subgraphs_read_outer(n: list[str], rng: np.random.Generator) -> onnx.ModelProto:
    """Conv → Relu (fused into the conv, so the tensor the subgraphs read is made anew), read from
    the enclosing scope by two If nodes whose branches use names of their own."""
    x, k, c, r, cond, y1, y2, *inner = n[:15]
    ifs = [helper.make_node("If", [cond], [y], then_branch=_branch("t", r, inner[4 * i], inner[4 * i + 1]),
                            else_branch=_branch("e", r, inner[4 * i + 2], inner[4 * i + 3]))
           for i, y in enumerate((y1, y2))]
    nodes = [helper.make_node("Conv", [x, k], [c], pads=[1, 1, 1, 1]), helper.make_node("Relu", [c], [r]), *ifs]
    return _model(nodes, [helper.make_tensor_value_info(x, F, [1, 3, 6, 6]),
                          helper.make_tensor_value_info(cond, TensorProto.BOOL, [])],
                  [helper.make_tensor_value_info(v, F, [1, 4, 6, 6]) for v in (y1, y2)], [_init(rng, k, 4, 3, 3, 3)])


def pad_transpose(n: list[str], rng: np.random.Generator) -> onnx.ModelProto:
    """Pad with its optional constant left empty, Transpose, Mul, a Gemm that becomes several IR nodes."""
    x, pads, p, t, y, w, b, g = n[:8]
    nodes = [helper.make_node("Pad", [x, pads, ""], [p]), helper.make_node("Transpose", [p], [t], perm=[1, 0]),
             helper.make_node("Mul", [t, t], [y]), helper.make_node("Gemm", [y, w, b], [g], transB=1)]
    return _model(nodes, [helper.make_tensor_value_info(x, F, [3, 4])],
                  [helper.make_tensor_value_info(y, F, [4, 6]), helper.make_tensor_value_info(g, F, [4, 2])],
                  [numpy_helper.from_array(np.array([1, 0, 2, 0], np.int64), pads), _init(rng, w, 2, 6),
                   _init(rng, b, 2)])


TEMPLATES: list[Callable[[list[str], np.random.Generator], onnx.ModelProto]] = [
    split_concat, sibling_matmuls, sibling_convs, subgraphs_read_outer, pad_transpose]


def _roundtrip(model: onnx.ModelProto) -> onnx.ModelProto:
    """Import → optimize (the Python API) → export; the result passes the full check, keeps the
    graph's input and output names and gives the original's outputs in ONNX Runtime."""
    imported = load_model(model)
    result = optimize(imported, LIBRARY, Roofline(), Settings(budget=30, timeout=10))
    written = to_onnx(result.model)
    check(written)
    assert [i.name for i in written.graph.input] == [i.name for i in model.graph.input]
    assert [o.name for o in written.graph.output] == [o.name for o in model.graph.output]
    feeds = [random_feeds(imported.graph, seed) for seed in (0, 1)]
    comparison = compare_models(model, written, feeds)
    assert comparison.ok, comparison.describe()
    return written


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=st.sampled_from(TEMPLATES), names=st.lists(name, min_size=15, max_size=15, unique=True),
       seed=st.integers(0, 3))
def test_adversarial_names_survive_import_optimize_export(template, names: list[str], seed: int) -> None:
    _roundtrip(template(names, np.random.default_rng(seed)))


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.__name__)
def test_the_tools_own_names_everywhere(template) -> None:
    """Every tensor named the way taso-py names what it creates, in the order it would create them."""
    for offset in range(3):
        _roundtrip(template(TOOL_NAMES[offset::3][:15], np.random.default_rng(offset)))
    names = [f"{h}_{i}" for i in range(3) for h in ("split", "conv2d", "w", "relu", "concat")]
    _roundtrip(template(names, np.random.default_rng(0)))


def test_split_named_like_the_importers_own_tensors(tmp_path: Path) -> None:
    """Refused before at import: "tensor name 'split_2' is already in use" (taso info too)."""
    x = helper.make_tensor_value_info("x", F, [2, 6])
    outs = [helper.make_tensor_value_info(v, F, [2, 3]) for v in ("split_2", "split_3")]
    sizes = numpy_helper.from_array(np.array([3, 3], np.int64), "split_1")
    model = _model([helper.make_node("Split", ["x", "split_1"], ["split_2", "split_3"], axis=1)], [x], outs, [sizes])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    info = CliRunner().invoke(main, ["info", str(path), "--json"])
    assert info.exit_code == 0, info.output
    assert [o["name"] for o in json.loads(info.stdout)["outputs"]] == ["split_2", "split_3"]
    done = CliRunner().invoke(main, ["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--cost", "analytical",
                                     "--speed-runs", "0"])
    assert done.exit_code == 0, done.output
    assert [o.name for o in onnx.load(str(tmp_path / "o.onnx")).graph.output] == ["split_2", "split_3"]


def test_subgraph_names_are_never_made_up() -> None:
    """The fused convolution used to be named `conv2d_2`, a name an If branch defines (not SSA)."""
    names = ["x", "k", "c", "r", "cond", "y1", "y2", "conv2d_0", "o1", "conv2d_2", "o2",
             "conv2d_1", "o3", "conv2d_3", "o4"]
    written = _roundtrip(subgraphs_read_outer(names, np.random.default_rng(0)))
    assert {"conv2d_0", "conv2d_1", "conv2d_2", "conv2d_3"} <= model_names(written.graph)


def test_an_outer_name_two_subgraphs_read_is_restored_once() -> None:
    """Both If nodes read `r`, now a fused convolution's output: one Identity restores `r`, not two."""
    names = ["x", "k", "c", "r", "cond", "y1", "y2", *(f"i{k}" for k in range(8))]
    written = _roundtrip(subgraphs_read_outer(names, np.random.default_rng(0)))
    assert [n.output[0] for n in written.graph.node if n.op_type == "Identity"] == ["r"]


def test_an_output_named_like_another_tensor_of_a_hand_built_graph() -> None:
    """A graph built with the IR API whose output name is another tensor's name: that tensor is
    renamed on export instead of an Identity writing the name twice."""
    g = Graph("g")
    x = g.add_input("x", TensorType((2, 3), DType.FLOAT32))
    (r,) = g.add("relu", [x], names=["y"])
    (s,) = g.add("sigmoid", [r])
    g.set_outputs([s], ["y"])
    written = to_onnx(g)
    check(written)
    assert [o.name for o in written.graph.output] == ["y"]


def test_fresh_names_stay_above_every_numbered_name() -> None:
    assert fresh_floor(["a", "split_1", "x_41", "y_007", "z_" + "9" * 30, "conv2d_3"]) == 42
    assert fresh_floor(["a", "b"]) == 0
    source = NameSource({"split_5", "x"})
    assert [source.fresh("split"), source.fresh("split"), source.fresh("x")] == ["split_6", "split_7", "x_8"]
    model = split_concat(["in", "split_1", "split_2", "split_3", "c", "out", "h_0", "h_1"], np.random.default_rng(0))
    assert {"in", "split_1", "split_2", "split_3", "c", "out", "h_0", "h_1"} == model_names(model.graph)


def test_the_name_floor_skips_names_that_are_not_text() -> None:
    """A bit-flipped file can hold a name protobuf hands back as bytes (fuzzer seed 20266: TypeError in info)."""
    from taso_py.onnx_io.names import fresh_floor
    assert fresh_floor(["conv_3", b"\xff_9", "x"]) == 4  # type: ignore[list-item]
