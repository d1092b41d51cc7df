"""conv_transpose2d (ONNX ConvTranspose): semantics against ONNX Runtime over strides, pads, output
padding, groups, dilations and bias (hypothesis); the import forms (output_shape, auto_pad, opsets 1
to 22) and what stays opaque; the axioms; C and CUDA kernels (emulated); a torch U-Net step through
`taso optimize`, `taso compile` and `taso run --check` with every node on taso-py's kernels.
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
from pipeline_checks import check_c_kernels, check_cuda_kernels, imports_and_agrees
from test_codegen_ops import Case
from test_cuda import Group, op_group

from taso_py import ops
from taso_py.cli import main
from taso_py.codegen import te
from taso_py.codegen.backends.c import build
from taso_py.codegen.lower import lower
from taso_py.codegen.topi import compute, schedule_group
from taso_py.codegen.tune.space import Config
from taso_py.graph import Graph, evaluate
from taso_py.onnx_io import OnnxModel, OnnxOrigin, load_model, to_onnx
from taso_py.ops.schema import Axiom
from taso_py.runtime import run
from taso_py.types import TensorType
from taso_py.verifier.validation import validate

RNG = np.random.default_rng(0)
TOL = {"rtol": 1e-4, "atol": 1e-5}


def _model(x_shape: tuple, w: np.ndarray, bias: np.ndarray | None, opset: int = 13, **attrs: object) -> onnx.ModelProto:
    """One ConvTranspose node: x fed, the weight and bias initializers (graph inputs too before IR 4)."""
    inits = {"w": w, **({"b": bias} if bias is not None else {})}
    node = helper.make_node("ConvTranspose", ["x", *inits], ["y"], **attrs)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    if opset < 9:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in inits.items()]
    graph = helper.make_graph(
        [node],
        "m",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)






def _weights(shape: tuple) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ---- semantics against ONNX Runtime --------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_conv_transpose_matches_onnxruntime(data: st.DataObject) -> None:
    """Any stride, dilation, output padding (below the stride), pads that leave an output, groups, bias."""
    groups, cpg, opg = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    n, h, w = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    kernel = [data.draw(st.integers(1, 4)) for _ in range(2)]
    stride, dilation = ([data.draw(st.integers(1, 3)) for _ in range(2)] for _ in range(2))
    extra = [data.draw(st.integers(0, s - 1)) for s in stride]
    full = [(size - 1) * s + d * (k - 1) + 1 + e for size, s, d, k, e in zip((h, w), stride, dilation, kernel, extra)]
    begin = [data.draw(st.integers(0, min(2, f - 1))) for f in full]
    end = [data.draw(st.integers(0, min(2, f - 1 - b))) for f, b in zip(full, begin)]
    bias = _weights((groups * opg,)) if data.draw(st.booleans()) else None
    model = _model(
        (n, groups * cpg, h, w),
        _weights((groups * cpg, opg, *kernel)),
        bias,
        strides=stride,
        dilations=dilation,
        output_padding=extra,
        pads=[*begin, *end],
        group=groups,
    )
    g = imports_and_agrees(model, ["conv_transpose2d"], TOL)
    (node,) = (n for n in g.nodes.values() if n.kind == "conv_transpose2d")
    assert node.attrs.pad == (*begin, *end) and node.attrs.output_padding == tuple(extra)


# ---- import forms, and what stays opaque -------------------------------------------------------


@pytest.mark.parametrize("opset", [1, 7, 11, 13, 17, 22])
def test_every_opset_form_imports(opset: int) -> None:
    """ConvTranspose-1 and -11 (and the versions that only widened its types) share the attributes."""
    model = _model(
        (1, 4, 3, 4),
        _weights((4, 3, 3, 2)),
        _weights((6,)),
        opset,
        strides=[2, 3],
        pads=[1, 0, 0, 1],
        output_padding=[1, 2],
        dilations=[1, 2],
        group=2,
        kernel_shape=[3, 2],
    )
    imports_and_agrees(model, ["conv_transpose2d"], TOL)


@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("output_shape", [[7, 9], [8, 10], [9, 11], [10, 12]])
def test_output_shape_becomes_pads_or_output_padding(auto_pad: str, output_shape: list[int]) -> None:
    """From x 4 x 5 at stride 2 the full output is 9 x 11: smaller crops it (the odd row at the start,
    or at the end for SAME_UPPER), larger pads its end; `pads` is ignored then, as ONNX Runtime does."""
    model = _model(
        (1, 2, 4, 5),
        _weights((2, 3, 3, 3)),
        None,
        strides=[2, 2],
        output_shape=output_shape,
        **({"auto_pad": auto_pad} if auto_pad != "NOTSET" else {"pads": [2, 2, 2, 2]}),
    )
    imports_and_agrees(model, ["conv_transpose2d"], TOL)


@pytest.mark.parametrize("kernel", [2, 3, 4])
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_auto_pad(auto_pad: str, kernel: int) -> None:
    """SAME_* asks for input x stride (a kernel shorter than the stride cannot reach it: the full output)."""
    model = _model(
        (1, 2, 4, 5), _weights((2, 3, kernel, kernel)), None, strides=[3, 2], dilations=[1, 2], auto_pad=auto_pad
    )
    imports_and_agrees(model, ["conv_transpose2d"], TOL)


def test_forms_outside_the_algebra_stay_opaque() -> None:
    """1-D and 3-D transposed convolutions, and SAME_* padding with output_padding (ONNX Runtime and
    onnx's shape inference disagree on its size)."""
    x2, x1, x3 = (
        helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
        for n, s in (("x2", [1, 2, 4, 4]), ("x1", [1, 2, 5]), ("x3", [1, 2, 3, 3, 3]))
    )
    inits = [
        numpy_helper.from_array(_weights(s), n)
        for n, s in (("w1", (2, 3, 3)), ("w2", (2, 3, 3, 3)), ("w3", (2, 3, 2, 2, 2)))
    ]
    nodes = [
        helper.make_node("ConvTranspose", ["x1", "w1"], ["y1"]),
        helper.make_node("ConvTranspose", ["x3", "w3"], ["y3"]),
        helper.make_node(
            "ConvTranspose", ["x2", "w2"], ["ys"], strides=[2, 2], auto_pad="SAME_UPPER", output_padding=[1, 1]
        ),
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y1", "y3", "ys")]
    graph = helper.make_graph(nodes, "m", [x1, x2, x3], outs, inits)
    model = load_model(
        onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    )
    opaque = [n for n in model.graph.nodes.values() if n.kind == "opaque"]
    assert len(opaque) == 3 and not any(n.kind == "conv_transpose2d" for n in model.graph.nodes.values())


@pytest.mark.parametrize("opset", [7, 11, 17])
def test_export_round_trip(opset: int) -> None:
    """A graph's node written at the model's opset, read back as the same node."""
    g = Graph("ct")
    x = g.add_input("x", TensorType((2, 4, 3, 5)))
    w, b = g.add_weight(_weights((4, 1, 2, 3)), "w"), g.add_weight(_weights((2,)), "b")
    attrs = {"stride": (2, 3), "pad": (1, 0, 0, 2), "output_padding": (1, 2), "dilation": (2, 1), "groups": 2}
    g.set_outputs(g.add("conv_transpose2d", [x, w, b], **attrs), ["y"])
    exported = to_onnx(OnnxModel(g, OnnxOrigin(opsets={"": opset})))
    (node,) = exported.graph.node
    assert node.op_type == "ConvTranspose"
    back = load_model(exported).graph
    (again,) = (n for n in back.nodes.values() if n.kind == "conv_transpose2d")
    assert again.attrs == ops.get("conv_transpose2d").make_attrs(**attrs)
    feeds = {"x": RNG.standard_normal((2, 4, 3, 5)).astype(np.float32)}
    np.testing.assert_allclose(run(exported, feeds)["y"], evaluate(g, feeds)["y"], **TOL)


# ---- axioms ------------------------------------------------------------------------------------

NEW_AXIOMS = [n for n in ops.AXIOMS if n.startswith("conv-transpose")]


@pytest.mark.parametrize("name", NEW_AXIOMS)
def test_axiom_is_valid(name: str) -> None:
    report = validate(ops.AXIOMS[name], limit=4)
    assert report.ok, report.to_json()


_CT = "stride=[?sh, ?sw], pad=[?pt, ?pl, ?pb, ?pr], output_padding=[?oh, ?ow], dilation=[?dh, ?dw], groups=?g"


@pytest.mark.parametrize(
    "text",
    [
        f"conv_transpose2d(x, add(a, b), {_CT}) == add(conv_transpose2d(x, a, {_CT}), conv_transpose2d(x, b, {_CT}))",
        f"conv_transpose2d(x, concat(a, b, axis=1), {_CT}) == "
        f"concat(conv_transpose2d(x, a, {_CT}), conv_transpose2d(x, b, {_CT}), axis=1)",
        f"conv_transpose2d(relu(x), w, {_CT}) == relu(conv_transpose2d(x, w, {_CT}))",
    ],
)
def test_a_wrong_conv_transpose_axiom_is_caught(text: str) -> None:
    """Broadcast kernels of another size, grouped output channels, and relu do not commute with it."""
    assert validate(Axiom("wrong", text), limit=40).failures


def test_conv_transpose_is_verifiable_and_out_of_the_generator() -> None:
    from taso_py.generator.world import gen_op

    assert ops.get("conv_transpose2d").verifiable and gen_op(ops.get("conv_transpose2d")) is None


# ---- kernels: C and CUDA (emulated) ------------------------------------------------------------

KERNEL_CASES = [
    Case("conv_transpose2d", [(1, 16, 4, 4), (16, 8, 2, 2), (8,)], {"stride": 2}),  # a U-Net's up step
    Case(
        "conv_transpose2d",
        [(2, 3, 5, 7), (3, 4, 3, 3)],
        {"stride": (2, 3), "pad": (1, 0, 2, 1), "output_padding": (1, 2)},
    ),
    Case("conv_transpose2d", [(1, 4, 4, 5), (4, 5, 2, 3)], {"stride": 3, "dilation": (1, 2), "groups": 2}),
    Case("conv_transpose2d", [(1, 2, 5, 4), (2, 3, 3, 2), (3,)], {"stride": 2, "dilation": 2, "pad": 1}),
    Case("conv_transpose2d", [(1, 6, 3, 3), (6, 1, 3, 3)], {"stride": (1, 2), "dilation": (3, 4), "groups": 6}),
]


def _two_consumers() -> Group:
    """relu and sigmoid of one transposed convolution: the accumulator is a buffer both read."""
    x, w = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32), _weights((3, 8, 3, 3))
    ins = [te.placeholder(x.shape, "float32", "x"), te.placeholder(w.shape, "float32", "w")]
    entry, attrs = ops.get("conv_transpose2d"), ops.get("conv_transpose2d").make_attrs(stride=2, pad=1)
    (t,) = entry.infer([TensorType(x.shape), TensorType(w.shape)], attrs)
    (y,) = compute(entry, ins, attrs, [t])
    outs = [compute(op, [y], None, [t])[0] for op in ("relu", "sigmoid")]
    (want,) = entry.ref([x, w], attrs)
    return Group("ct-relu-sigmoid", ins, outs, [x, w], [np.maximum(want, 0), 1 / (1 + np.exp(-want))])


def _groups() -> list[Group]:
    return [*(op_group(c) for c in KERNEL_CASES), _two_consumers()]


def test_c_kernels_match_the_reference() -> None:
    check_c_kernels(_groups())


def test_cuda_kernels_match_the_reference_emulated() -> None:
    check_cuda_kernels(_groups())


@pytest.mark.parametrize("knobs", [{"tile_w": 4, "tile_oc": 8}, {"tile_w": 6, "tile_oc": 32}])
def test_tiles_with_tails_match_the_reference(knobs: dict) -> None:
    """Tile sizes the tuner may pick that do not divide the row (7) or the channels of a group (5, 12)."""
    cases = [
        Case(
            "conv_transpose2d",
            [(2, 4, 3, 7), (4, 5, 3, 3), (10,)],
            {"stride": 2, "pad": 1, "output_padding": 1, "groups": 2},
        ),
        Case("conv_transpose2d", [(1, 3, 4, 4), (3, 12, 4, 4)], {"stride": 3, "dilation": 2, "pad": (1, 2, 0, 3)}),
    ]
    groups = [op_group(c) for c in cases]
    mod = build(
        [
            lower(schedule_group(g.outs, Config({"parallel_min_elements": 0, **knobs})), [*g.ins, *g.outs], g.name)
            for g in groups
        ]
    )
    for g in groups:
        g.check(mod)


# ---- a torch U-Net step, end to end ------------------------------------------------------------


def _cli(*args: str) -> dict:
    done = CliRunner().invoke(main, [*args, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.output[done.output.index("{") :])  # after any warning lines


def test_torch_conv_transpose_compiles_without_fallback(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1),
        torch.nn.Sigmoid(),
    ).eval()
    path = tmp_path / "up.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.randn(1, 3, 12, 10),), str(path), opset_version=13, dynamo=False)
    assert _cli("info", str(path))["ops"]["conv_transpose2d"] == 1
    assert _cli("optimize", str(path), "--cost", "analytical", "-o", str(tmp_path / "o.onnx"))["check"]["ok"]
    compiled = _cli("compile", str(path), "--target", "cpu", "-o", str(tmp_path / "m.cpu"))
    assert compiled["fallback_nodes"] == 0 and compiled["check"]["max_rel_error"] < 1e-4
    assert _cli("run", str(tmp_path / "m.cpu"), "--check")["check"]["ok"]
