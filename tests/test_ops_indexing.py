"""slice, gather, expand, where and cast: ONNX semantics (hypothesis against ONNX Runtime), the import
forms at several opsets and what stays opaque, the axioms, C and CUDA kernels, and torch attention
exports, whose fused Q/K/V projection (Gather x3 of constant indices) no longer leaves opaque nodes.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from pipeline_checks import (
    check_c_kernels,
    check_cuda_kernels,
    imports_and_agrees,
    node_kinds,
    optimize_compile_run,
)
from test_codegen_ops import Case
from test_cuda import Group, op_group

from taso_py import ops
from taso_py.cli import main
from taso_py.codegen import te
from taso_py.codegen.topi import compute
from taso_py.graph import Graph, evaluate
from taso_py.onnx_io import load_model, to_onnx
from taso_py.ops.schema import Axiom
from taso_py.runtime import run
from taso_py.types import DType, TensorType
from taso_py.verifier.validation import validate

RNG = np.random.default_rng(0)
INT64_MAX = np.iinfo(np.int64).max


def _model(node: onnx.NodeProto, x_shape: tuple, inits: dict[str, np.ndarray], opset: int,
           out_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    graph = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", out_type, None)],
                              [numpy_helper.from_array(v, n) for n, v in inits.items()])
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)  # the checker wants the output's shape






# ---- semantics against ONNX Runtime --------------------------------------------------------------

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)
bound = st.one_of(st.integers(-7, 7), st.sampled_from([INT64_MAX, -INT64_MAX]))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, data=st.data())
def test_slice_matches_onnxruntime(shape: tuple, data: st.DataObject) -> None:
    """Steps of either sign, bounds past either end (clamped), negative axes, each listed once."""
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank,
                              unique_by=lambda a: a % rank))
    n = len(axes)
    starts, ends = (data.draw(st.lists(bound, min_size=n, max_size=n)) for _ in range(2))
    steps = data.draw(st.lists(st.sampled_from([-3, -2, -1, 1, 2, 3]), min_size=n, max_size=n))
    node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])
    inits = {k: np.array(v, np.int64) for k, v in zip("seat", (starts, ends, axes, steps))}
    out = imports_and_agrees(_model(node, shape, inits, 13), ["slice"])
    assert out.type(out.outputs[0]).known_shape == tuple(run(_model(node, shape, inits, 13),
                                                             {"x": np.zeros(shape, np.float32)})["y"].shape)


@settings(max_examples=60, deadline=None)
@given(shape=shapes, data=st.data())
def test_gather_matches_onnxruntime(shape: tuple, data: st.DataObject) -> None:
    """Any axis, indices of rank 0 to 2 with negative ones."""
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    dim = shape[axis]
    index_shape = data.draw(st.lists(st.integers(1, 3), max_size=2).map(tuple))
    count = int(np.prod(index_shape, dtype=np.int64))
    indices = data.draw(st.lists(st.integers(-dim, dim - 1), min_size=count, max_size=count))
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)
    imports_and_agrees(_model(node, shape, {"i": np.array(indices, np.int64).reshape(index_shape)}, 13), ["gather"])


@settings(max_examples=60, deadline=None)
@given(shape=shapes, data=st.data())
def test_expand_matches_onnxruntime(shape: tuple, data: st.DataObject) -> None:
    """A target of any rank whose dims are 1 (keep the input's), the input's, or anything where it is 1."""
    lead = data.draw(st.lists(st.integers(1, 3), max_size=2))
    own = [data.draw(st.sampled_from([1, d]) if d != 1 else st.integers(1, 3)) for d in shape]
    node = helper.make_node("Expand", ["x", "s"], ["y"])
    imports_and_agrees(_model(node, shape, {"s": np.array(lead + own, np.int64)}, 13), ["expand"])


# ---- import forms, and what stays opaque -------------------------------------------------------

@pytest.mark.parametrize("opset", [9, 10, 11, 13, 17])
def test_slice_import_forms(opset: int) -> None:
    if opset < 10:
        node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -2], ends=[-1, 1000], axes=[0, 1])
        inits = {}
    else:
        node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])
        inits = {"s": np.array([-1, 1], np.int64), "e": np.array([-INT64_MAX, 9], np.int64),
                 "a": np.array([1, -1], np.int64), "t": np.array([-2, 2], np.int64)}
    g = imports_and_agrees(_model(node, (4, 6, 5), inits, opset), ["slice"])
    (n,) = (n for n in g.nodes.values() if n.kind == "slice")
    assert n.attrs.axes == tuple(sorted(n.attrs.axes)) and all(a >= 0 for a in n.attrs.axes)


@pytest.mark.parametrize("opset", [9, 11, 13])
def test_gather_scalar_and_negative_indices(opset: int) -> None:
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=-2)
    g = imports_and_agrees(_model(node, (3, 4, 5), {"i": np.array(-1, np.int64)}, opset), ["gather"])
    (n,) = (n for n in g.nodes.values() if n.kind == "gather")
    assert (n.attrs.indices, n.attrs.shape, n.attrs.axis) == ((3,), (), 1)


def test_data_dependent_indices_and_bounds_stay_opaque() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [2])
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"]), helper.make_node("Slice", ["x", "i", "e"], ["s"]),
             helper.make_node("Expand", ["x", "sh"], ["ex"])]
    graph = helper.make_graph(nodes, "m", [x, i, helper.make_tensor_value_info("sh", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("g", "s", "ex")],
                              [numpy_helper.from_array(np.array([3, 5], np.int64), "e")])
    model = load_model(onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 13)])))
    assert sorted(n.attrs.op_type for n in model.graph.nodes.values() if n.kind == "opaque") == \
        ["Expand", "Gather", "Slice"]


@pytest.mark.parametrize(("to", "kinds"), [(TensorProto.FLOAT, []), (TensorProto.DOUBLE, ["cast"]),
                                            (TensorProto.FLOAT16, ["cast"]), (TensorProto.INT32, ["opaque"])])
def test_cast_same_type_is_dropped_float_is_cast_others_opaque(to: int, kinds: list[str]) -> None:
    model = _model(helper.make_node("Cast", ["x"], ["y"], to=to), (2, 3), {}, 17, out_type=to)
    imported = load_model(model)
    assert node_kinds(imported.graph) == kinds
    feeds = {"x": RNG.standard_normal((2, 3)).astype(np.float32) * 10}
    want = run(model, feeds)["y"]
    np.testing.assert_array_equal(run(to_onnx(imported), feeds)["y"], want)


@pytest.mark.parametrize("opset", [9, 16])
def test_where_with_a_constant_mask(opset: int) -> None:
    mask = np.array([[True, False, True, False]])
    model = _model(helper.make_node("Where", ["m", "x", "z"], ["y"]), (3, 4),
                   {"m": mask, "z": np.array([-1.0], np.float32)}, opset)
    imports_and_agrees(model, ["select"])


def test_where_on_a_float_condition_exports_a_cast_to_bool() -> None:
    g = Graph("w")
    c, x, y = (g.add_input(n, TensorType((2, 3))) for n in "cxy")
    g.set_outputs(g.add("select", [c, x, y]), ["out"])
    exported = to_onnx(g)
    assert [n.op_type for n in exported.graph.node] == ["Cast", "Where"]
    feeds = {n: RNG.standard_normal((2, 3)).astype(np.float32) for n in "cxy"}
    feeds["c"][0] = 0.0
    np.testing.assert_array_equal(run(exported, feeds)["out"], evaluate(g, feeds)["out"])


# ---- axioms ------------------------------------------------------------------------------------

NEW_AXIOMS = [n for n in ops.AXIOMS if any(w in n for w in ("slice", "gather", "expand"))]


@pytest.mark.parametrize("name", NEW_AXIOMS)
def test_axiom_is_valid(name: str) -> None:
    report = validate(ops.AXIOMS[name], limit=12)
    assert report.ok, report.to_json()


@pytest.mark.parametrize("text", [
    "slice(concat(a, b, axis=?k), starts=[0], ends=[dim(b, ?k)], axes=[?k], steps=[1]) == b",
    "gather(concat(a, b, axis=?k), indices=[?i], shape=[], axis=?k) == gather(b, indices=[?i], shape=[], axis=?k) "
    "where dim(a, ?k) <= ?i",
    "slice(x, starts=[-1], ends=[-100], axes=[?k], steps=[-1]) == x",
])
def test_a_wrong_indexing_axiom_is_caught(text: str) -> None:
    assert validate(Axiom("wrong", text), limit=40).failures


def test_where_and_cast_are_not_verifiable() -> None:
    assert not ops.get("select").verifiable and not ops.get("cast").verifiable
    assert all(ops.get(n).verifiable for n in ("slice", "gather", "expand"))


# ---- kernels: C and CUDA (emulated) ------------------------------------------------------------

KERNEL_CASES = [
    Case("slice", [(5, 6, 4)], {"starts": (-1, 10), "ends": (-100, 1), "axes": (1, 0), "steps": (-2, -3)}),
    Case("slice", [(7, 33)], {"starts": (1, 2), "ends": (6, INT64_MAX), "axes": (0, -1), "steps": (2, 1)}),
    Case("gather", [(4, 5, 3)], {"indices": (2, 0, -3, 1), "shape": (2, 2), "axis": -1}),
    Case("gather", [(3, 2, 8, 16)], {"indices": (1,), "shape": (), "axis": 0}),
    Case("gather", [(6, 40)], {"indices": (0, 2, 4), "shape": (3,), "axis": 0}),
    Case("expand", [(3, 1)], {"shape": (2, 3, 20)}),
    Case("cast", [(4, 9)], {"to": "float64"}),
    Case("select", [(4, 17), (4, 17), (17,)], {}),
]


def _mask_group() -> Group:
    """where with a bool mask broadcast against float operands, as the import makes it."""
    mask = RNG.random((1, 19)) > 0.5
    x, y = RNG.standard_normal((3, 19)).astype(np.float32), RNG.standard_normal((3, 1)).astype(np.float32)
    ins = [te.placeholder(mask.shape, "bool", "m"), te.placeholder(x.shape, "float32", "x"),
           te.placeholder(y.shape, "float32", "y")]
    (out,) = ops.get("select").infer([TensorType(mask.shape, DType.BOOL), TensorType(x.shape), TensorType(y.shape)],
                                    None)
    return Group("where-mask", ins, list(compute("select", ins, None, [out])), [mask, x, y], [np.where(mask, x, y)])


def _groups() -> list[Group]:
    return [*(op_group(c) for c in KERNEL_CASES), _mask_group()]


def test_c_kernels_match_the_reference() -> None:
    check_c_kernels(_groups())


def test_cuda_kernels_match_the_reference_emulated() -> None:
    check_cuda_kernels(_groups())


# ---- torch attention exports -------------------------------------------------------------------

def _export(kind: str, path: Path) -> Path:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = torch.nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.m(x, x, x, need_weights=False)[0]

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.m(x, is_causal=False)  # a literal: the legacy exporter traces the default as a tensor

    module = (Attention if kind == "mha" else Encoder)().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(2, 5, 32),), str(path), opset_version=17, dynamo=False)
    return path


# opaque nodes per node of the import: Gather x3 were opaque before the indexing family
BEFORE = {"mha": (3, 31), "enc": (3, 40)}


@pytest.mark.parametrize("kind", ["mha", "enc"])
def test_attention_export_has_no_opaque_node_and_compiles(kind: str, tmp_path: Path) -> None:
    model = _export(kind, tmp_path / f"{kind}.onnx")
    info = CliRunner().invoke(main, ["info", str(model), "--json"])
    assert info.exit_code == 0, info.output
    summary = json.loads(info.output[info.output.index("{"):])
    assert summary["opaque_nodes"] == 0 and summary["ops"]["gather"] == 3, summary
    before = BEFORE[kind][0] / BEFORE[kind][1]
    assert summary["opaque_nodes"] / summary["nodes"] < before
    optimize_compile_run(model, tmp_path)
