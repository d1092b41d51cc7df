"""reduce_sum, reduce_mean, reduce_max end to end: random axes and keepdims against ONNX Runtime, the
two ONNX forms of the axes (attribute, constant input) on import and export, the axioms, the C and
CUDA (emulated) kernels, and torch models through `taso optimize`, `taso compile` and `taso run --check`.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from pipeline_checks import check_c_kernels, check_cuda_kernels, optimize_compile_run
from test_codegen_ops import Case
from test_cuda import op_group
from test_ops import build, check_graph, random_feeds

from taso_py import ops
from taso_py.graph import evaluate
from taso_py.graph.hashing import canonical_hash
from taso_py.onnx_io import load_model, to_onnx
from taso_py.ops.schema import Axiom
from taso_py.runtime import run
from taso_py.verifier.validation import validate

REDUCERS = ("reduce_sum", "reduce_mean", "reduce_max")
ONNX_TYPES = {"reduce_sum": "ReduceSum", "reduce_mean": "ReduceMean", "reduce_max": "ReduceMax"}
AXES_INPUT_FROM = {"reduce_sum": 13, "reduce_mean": 18, "reduce_max": 18}


# ---- random axes and keepdims against ONNX Runtime --------------------------------------------

@st.composite
def reductions(draw: st.DrawFn) -> tuple[str, tuple[int, ...], dict, int]:
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    rank = len(shape)
    picked = draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank))
    axes = tuple(a - rank if draw(st.booleans()) else a for a in picked)  # some negative
    return (draw(st.sampled_from(REDUCERS)), shape, {"axes": axes, "keepdims": draw(st.booleans())},
            draw(st.sampled_from((11, 13, 17, 18))))


@settings(max_examples=60, deadline=None)
@given(reductions())
def test_reduction_matches_onnxruntime(case: tuple[str, tuple[int, ...], dict, int]) -> None:
    op, shape, attrs, opset = case
    check_graph(build(op, [shape], **attrs), opset)


@pytest.mark.parametrize("op", REDUCERS)
def test_axes_are_canonical(op: str) -> None:
    """Negative, unsorted and absent axes name the same reduction: equal attributes, one hash."""
    spellings = [build(op, [(2, 3, 4)], axes=a) for a in ((2, 0, 1), (-1, 0, -2), ())]
    assert {g.nodes[g.outputs[0].node].attrs.axes for g in spellings} == {(0, 1, 2)}
    assert len({canonical_hash(g) for g in spellings}) == 1


# ---- import (both forms of axes) and export at the model's opset -----------------------------

def _model(op_type: str, opset: int, axes: list[int] | None, *, as_input: bool, axes_input: str | None = None,
           **attrs: object) -> onnx.ModelProto:
    inits, inputs = [], ["x"]
    if axes is not None and as_input:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        inputs.append("axes")
    elif axes is not None:
        attrs["axes"] = axes
    if axes_input:
        inputs.append(axes_input)
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])]
    if axes_input:
        graph_inputs.append(helper.make_tensor_value_info(axes_input, TensorProto.INT64, [1]))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 1, 5] if axes_input else None)
    graph = helper.make_graph([helper.make_node(op_type, inputs, ["y"], **attrs)], "m", graph_inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("op", REDUCERS)
@pytest.mark.parametrize("opset", [11, 12, 13, 17, 18, 20])
def test_import_and_export_use_the_form_of_the_opset(op: str, opset: int) -> None:
    as_input = opset >= AXES_INPUT_FROM[op]
    proto = _model(ONNX_TYPES[op], opset, [-1, 1], as_input=as_input, keepdims=0)
    model = load_model(proto)
    (node,) = [n for n in model.graph.nodes.values() if n.op.algebra]
    assert (node.op.name, node.attrs.axes, node.attrs.keepdims) == (op, (1, 3), False)
    exported = to_onnx(model)
    (written,) = exported.graph.node
    assert written.op_type == ONNX_TYPES[op] and len(written.input) == (2 if as_input else 1)
    assert ("axes" in {a.name for a in written.attribute}) is not as_input
    feeds = random_feeds(model.graph)
    np.testing.assert_allclose(run(exported, feeds)["y"], run(proto, feeds)["y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(evaluate(model.graph, feeds)["y"], run(proto, feeds)["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", REDUCERS)
def test_axes_computed_at_run_time_stay_opaque(op: str) -> None:
    proto = _model(ONNX_TYPES[op], AXES_INPUT_FROM[op], None, as_input=True, axes_input="ax")
    model = load_model(proto)
    assert {n.op.name for n in model.graph.nodes.values()} == {"input", "opaque"}
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32),
             "ax": np.array([2], np.int64)}
    np.testing.assert_allclose(run(to_onnx(model), feeds)["y"], run(proto, feeds)["y"])


@pytest.mark.parametrize("op", REDUCERS)
@pytest.mark.parametrize("noop", [0, 1])
def test_empty_axes_reduce_everything_unless_noop(op: str, noop: int) -> None:
    proto = _model(ONNX_TYPES[op], AXES_INPUT_FROM[op], None, as_input=True, noop_with_empty_axes=noop)
    model = load_model(proto)
    algebra = [n for n in model.graph.nodes.values() if n.op.algebra]
    assert [n.attrs.axes for n in algebra] == ([] if noop else [(0, 1, 2, 3)])
    feeds = random_feeds(model.graph)
    np.testing.assert_allclose(run(to_onnx(model), feeds)["y"], run(proto, feeds)["y"], rtol=1e-5, atol=1e-6)


# ---- the axioms ---------------------------------------------------------------------------------

def test_axioms_are_valid() -> None:
    names = [n for n in ops.AXIOMS if n.startswith("reduce")]
    assert len(names) >= 6
    for name in names:
        report = validate(ops.AXIOMS[name], limit=20)
        assert report.ok and report.instances > 0, report.to_json()


@pytest.mark.parametrize("text", [
    "reduce_sum(concat(a, b, axis=?k), axes=[?j], keepdims=true) == "
    "concat(reduce_sum(a, axes=[?j], keepdims=true), reduce_sum(b, axes=[?j], keepdims=true), axis=?k)",
    "reduce_max(concat(a, b, axis=?k), axes=[?k], keepdims=true) == "
    "add(reduce_max(a, axes=[?k], keepdims=true), reduce_max(b, axes=[?k], keepdims=true))",
    "reduce_mean(x, axes=[1, 2], keepdims=true) == global_avgpool(x) where rank(x) == 4",
    "relu(reduce_sum(x, axes=[?j], keepdims=true)) == reduce_sum(relu(x), axes=[?j], keepdims=true)",
])
def test_a_wrong_axiom_is_caught(text: str) -> None:
    assert not validate(Axiom("wrong", text), limit=20).ok


# ---- kernels: C, and CUDA through the emulation -----------------------------------------------

KERNEL_CASES = [
    Case(op, [shape], attrs, dtype)
    for op in REDUCERS
    for shape, attrs in (((2, 3, 7, 6), {"axes": (2, 3)}), ((2, 3, 7, 6), {"axes": (1,), "keepdims": False}),
                         ((4, 37), {"axes": (-1,), "keepdims": False}), ((3, 5, 4), {}),
                         ((3, 5, 4), {"axes": (0, 2), "keepdims": False}), ((2, 2, 3, 2, 17), {"axes": (1, 3)}))
    for dtype in (("float32", "int32") if op != "reduce_mean" else ("float32",))
]


def test_c_kernels_match_the_reference() -> None:
    check_c_kernels([op_group(c) for c in KERNEL_CASES])


def test_cuda_kernels_match_the_reference_in_the_emulation() -> None:
    check_cuda_kernels([op_group(c) for c in KERNEL_CASES])


# ---- torch models through the CLI -------------------------------------------------------------

def _torch_model(path: Path, opset: int) -> Path:
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        """A squeeze-and-excitation block, then a sum over the last axis and a maximum over channels."""

        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc1, self.fc2 = torch.nn.Conv2d(8, 4, 1), torch.nn.Conv2d(4, 8, 1)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = torch.relu(self.conv(x))
            gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(y.mean(dim=(2, 3), keepdim=True)))))
            z = y * gate
            return z.sum(-1), z.amax(1)

    torch.manual_seed(0)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (torch.randn(1, 3, 10, 10),), f, opset_version=opset, dynamo=False)
    path.write_bytes(f.getvalue())
    return path


@pytest.mark.parametrize("opset", [17, 18])
def test_torch_model_imports_as_reductions(tmp_path: Path, opset: int) -> None:
    model = load_model(onnx.load(_torch_model(tmp_path / "m.onnx", opset)))
    kinds = sorted(n.op.name for n in model.graph.nodes.values() if n.op.name.startswith("reduce"))
    assert kinds == ["reduce_max", "reduce_mean", "reduce_sum"]
    assert "opaque" not in {n.op.name for n in model.graph.nodes.values()}


@pytest.mark.parametrize("opset", [17, 18])
def test_optimize_compile_and_run_check(tmp_path: Path, opset: int) -> None:
    model = _torch_model(tmp_path / "m.onnx", opset)
    optimize_compile_run(model, tmp_path)
    assert onnx.load(tmp_path / "o.onnx").opset_import[0].version == opset
