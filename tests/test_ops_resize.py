"""resize: ONNX Resize/Upsample semantics (hypothesis against ONNX Runtime, nearest exactly), the import
forms from Upsample-7 to Resize-19 and what stays opaque, canonical attributes, export at each opset,
C and CUDA kernels, and torch's F.interpolate exports through optimize, compile and run with no
node left to ONNX Runtime.
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
from pipeline_checks import check_c_kernels, check_cuda_kernels, imports_and_agrees, node_kinds
from test_codegen_ops import Case
from test_cuda import op_group

from taso_py import ops
from taso_py.cli import main
from taso_py.errors import Unsupported
from taso_py.graph import Graph, evaluate
from taso_py.onnx_io import OnnxModel, OnnxOrigin, load_model, to_onnx
from taso_py.ops.resize import COORDINATE_MODES, NEAREST_MODES, ResizeAttrs, scale_fractions
from taso_py.runtime import run
from taso_py.types import TensorType

RNG = np.random.default_rng(0)
LINEAR = {"rtol": 1e-5, "atol": 1e-6}  # interpolation: float rounding differs; nearest agrees exactly
F32 = np.float32


def _model(
    op_type: str, x_shape: tuple, opset: int, inputs: list[np.ndarray | None], **attrs: object
) -> onnx.ModelProto:
    """One node reading x and constant inputs (None: left out, an empty name)."""
    names = ["x", *(f"c{i}" if v is not None else "" for i, v in enumerate(inputs))]
    while names[-1] == "":
        names.pop()
    inits = [numpy_helper.from_array(v, f"c{i}") for i, v in enumerate(inputs) if v is not None]
    graph = helper.make_graph(
        [helper.make_node(op_type, names, ["y"], **attrs)],
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    return onnx.shape_inference.infer_shapes(model)






def _resize_node(g: Graph) -> ResizeAttrs:
    (node,) = (n for n in g.nodes.values() if n.kind == "resize")
    return node.attrs


# ---- semantics against ONNX Runtime --------------------------------------------------------------

SCALES = st.sampled_from([0.5, 0.6, 1.0, 1.5, 2.0, 3.0, 0.25, 1.7, 2.5, 1 / 3])


@settings(max_examples=80, deadline=None)
@given(
    shape=st.lists(st.integers(1, 7), min_size=1, max_size=4).map(tuple),
    coord=st.sampled_from(COORDINATE_MODES),
    rounding=st.sampled_from(NEAREST_MODES),
    data=st.data(),
)
def test_nearest_matches_onnxruntime_exactly(shape: tuple, coord: str, rounding: str, data: st.DataObject) -> None:
    """Any rank, scales up and down (non-integer too) or sizes, every coordinate and rounding mode."""
    if data.draw(st.booleans(), "by sizes"):
        sizes = data.draw(st.lists(st.integers(1, 12), min_size=len(shape), max_size=len(shape)), "sizes")
        inputs = [None, None, np.array(sizes, np.int64)]
    else:
        scales = data.draw(st.lists(SCALES, min_size=len(shape), max_size=len(shape)), "scales")
        if any(int(F32(s) * F32(n)) < 1 for s, n in zip(scales, shape)):
            scales = [max(s, 1.0) for s in scales]
        inputs = [None, np.array(scales, F32)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _model("Resize", shape, 13, inputs, coordinate_transformation_mode=coord, nearest_mode=rounding)
    imports_and_agrees(model, ["resize"])


@settings(max_examples=50, deadline=None)
@given(
    hw=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    lead=st.sampled_from([(), (1, 2), (2, 1)]),
    coord=st.sampled_from(COORDINATE_MODES[:4]),
    data=st.data(),
)
def test_bilinear_matches_onnxruntime(hw: tuple, lead: tuple, coord: str, data: st.DataObject) -> None:
    """2-D inputs and 4-D ones resized on their last two axes (what ORT's linear mode runs), scales or sizes."""
    shape = (*lead, *hw)
    if data.draw(st.booleans(), "by sizes"):
        sizes = data.draw(st.tuples(st.integers(1, 12), st.integers(1, 12)), "sizes")
        inputs = [None, None, np.array([*lead, *sizes], np.int64)]
    else:
        scales = data.draw(st.tuples(SCALES, SCALES), "scales")
        scales = tuple(s if int(F32(s) * F32(n)) >= 1 else 1.0 for s, n in zip(scales, hw))
        inputs = [None, np.array([1.0] * len(lead) + list(scales), F32)]
    model = _model("Resize", shape, 13, inputs, mode="linear", coordinate_transformation_mode=coord)
    imports_and_agrees(model, ["resize"], LINEAR)


def test_trilinear_matches_onnxruntime() -> None:
    """Linear is separable over any number of axes: ORT's trilinear on 5-D inputs agrees."""
    inputs = [None, np.array([1, 1, 2.0, 0.5, 1.5], F32)]
    imports_and_agrees(_model("Resize", (1, 2, 3, 4, 5), 13, inputs, mode="linear"), ["resize"], LINEAR)


# ---- import forms, and what stays opaque -------------------------------------------------------

IMPORTS = [
    ("Upsample", 7, [], {"scales": [1.0, 1.0, 2.0, 3.0]}, ("asymmetric", "floor"), (1, 2, 6, 12)),
    ("Upsample", 9, [np.array([1, 1, 2, 2], F32)], {"mode": "linear"}, ("asymmetric", None), (1, 2, 6, 8)),
    ("Resize", 10, [np.array([1, 1, 0.5, 0.6], F32)], {}, ("asymmetric", "round_prefer_floor"), (1, 2, 1, 2)),
    ("Resize", 10, [np.array([1, 1, 1.5, 2], F32)], {}, ("asymmetric", "floor"), (1, 2, 4, 8)),
    (
        "Resize",
        11,
        [np.array([0, 0, 0, 0, 1, 1, 1, 1], F32), np.zeros(0, F32), np.array([1, 2, 5, 7], np.int64)],
        {"coordinate_transformation_mode": "align_corners", "mode": "linear"},
        ("align_corners", None),
        (1, 2, 5, 7),
    ),
    (
        "Resize",
        11,
        [np.zeros(0, F32), np.array([1, 1, 1.5, 0.5], F32)],
        {"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
        ("tf_half_pixel_for_nn", "round_prefer_floor"),
        (1, 2, 4, 2),
    ),
    (
        "Resize",
        13,
        [None, np.array([1, 1, 1.7, 2.5], F32)],
        {"nearest_mode": "ceil"},
        ("half_pixel", "ceil"),
        (1, 2, 5, 10),
    ),
    (
        "Resize",
        13,
        [None, None, np.array([1, 2, 7, 3], np.int64)],
        {"coordinate_transformation_mode": "asymmetric"},
        ("asymmetric", "round_prefer_floor"),
        (1, 2, 7, 3),
    ),
    (
        "Resize",
        18,
        [None, None, np.array([6, 2], np.int64)],
        {"axes": [2, -1], "mode": "linear"},
        ("half_pixel", None),
        (1, 2, 6, 2),
    ),
    (
        "Resize",
        19,
        [None, np.array([2, 3], F32)],
        {"axes": [-2, 3], "antialias": 0},
        ("half_pixel", "round_prefer_floor"),
        (1, 2, 6, 12),
    ),
]


@pytest.mark.parametrize(
    ("op_type", "opset", "inputs", "attrs", "modes", "out"),
    IMPORTS,
    ids=[f"{t}-{o}-{i}" for i, (t, o, *_) in enumerate(IMPORTS)],
)
def test_import_forms(op_type: str, opset: int, inputs: list, attrs: dict, modes: tuple, out: tuple) -> None:
    """Each opset's form imports as one resize with the old opsets' implicit modes spelled out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _model(op_type, (1, 2, 3, 4), opset, inputs, **attrs)
    tol = None if attrs.get("mode", "nearest") == "nearest" else LINEAR
    a = _resize_node(imports_and_agrees(model, ["resize"], tol))
    coord, rounding = modes
    assert a.sizes == out and a.coordinate_transformation_mode == coord
    assert rounding is None or a.nearest_mode == rounding


@pytest.mark.parametrize(
    ("opset", "inputs", "attrs"),
    [
        (18, [None, np.array([1, 1, 0.5, 0.5], F32)], {"mode": "linear", "antialias": 1}),
        (13, [None, np.array([1, 1, 2, 2], F32)], {"mode": "cubic"}),
        (
            13,
            [np.array([0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9], F32), np.array([1, 1, 2, 2], F32)],
            {"coordinate_transformation_mode": "tf_crop_and_resize"},
        ),
        (19, [None, np.array([1, 1, 2, 2], F32)], {"coordinate_transformation_mode": "half_pixel_symmetric"}),
        (18, [None, None, np.array([1, 2, 6, 6], np.int64)], {"keep_aspect_ratio_policy": "not_larger"}),
        (10, [np.array([1, 1, 0.6, 1.5], F32)], {}),  # one axis rounds down, another up: no nearest_mode says that
    ],
)
def test_outside_forms_stay_opaque(opset: int, inputs: list, attrs: dict) -> None:
    model = _model("Resize", (1, 2, 4, 4), opset, inputs, **attrs)
    assert node_kinds(load_model(model).graph) == ["opaque"]


def test_scales_computed_at_run_time_stay_opaque() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [4])
    graph = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "s"], ["y"])],
        "m",
        [x, s],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = load_model(
        onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    )
    assert [n.attrs.op_type for n in model.graph.nodes.values() if n.kind == "opaque"] == ["Resize"]


def test_scales_and_sizes_that_mean_the_same_hash_equal() -> None:
    """Scales equal to sizes / dims are dropped; a scale that `floor` rounded is kept, and means something else."""
    by_sizes = _model("Resize", (1, 2, 4, 5), 13, [None, None, np.array([1, 2, 8, 10], np.int64)])
    by_scales = _model("Resize", (1, 2, 4, 5), 13, [None, np.array([1, 1, 2, 2], F32)])
    a, b = (_resize_node(load_model(m).graph) for m in (by_sizes, by_scales))
    assert a == b and not a.scale_num
    rounded = _resize_node(
        load_model(_model("Resize", (1, 2, 4, 5), 13, [None, np.array([1, 1, 1.3, 1.3], F32)])).graph
    )
    assert rounded.sizes == (1, 2, 5, 6) and rounded.scales == tuple(float(F32(v)) for v in (1, 1, 1.3, 1.3))


# ---- export at each opset ----------------------------------------------------------------------


def _graph(shape: tuple, **attrs: object) -> Graph:
    g = Graph("r")
    x = g.add_input("x", TensorType(shape))
    g.set_outputs(g.add("resize", [x], **attrs), ["y"])
    return g


EXPORTS = [
    (
        (1, 2, 3, 4),
        {"sizes": (1, 2, 6, 8), "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
        (7, 9, 10, 11, 13, 18, 19),
    ),
    (
        (1, 2, 4, 6),
        {"sizes": (1, 2, 2, 3), "coordinate_transformation_mode": "asymmetric", "nearest_mode": "ceil"},
        (10, 11, 13, 19),
    ),
    (
        (2, 3, 4),
        {"sizes": (2, 6, 6), "mode": "linear", "coordinate_transformation_mode": "asymmetric"},
        (9, 10, 11, 13, 18),
    ),
    (
        (1, 2, 3, 5),
        {
            "sizes": (1, 2, 4, 7),
            **scale_fractions([1, 1, 1.5, 1.5]),
            "nearest_mode": "round_prefer_ceil",
            "coordinate_transformation_mode": "pytorch_half_pixel",
        },
        (11, 13, 19),
    ),
    (
        (1, 2, 5, 7),
        {"sizes": (1, 2, 3, 11), "mode": "linear", "coordinate_transformation_mode": "align_corners"},
        (11, 13, 18, 19),
    ),
]


@pytest.mark.parametrize(("shape", "attrs", "opsets"), EXPORTS)
def test_export_round_trip_at_each_opset(shape: tuple, attrs: dict, opsets: tuple) -> None:
    """ORT runs each opset's form with the reference's results, and it imports back to the same node."""
    g = _graph(shape, **attrs)
    feeds = {"x": RNG.standard_normal(shape).astype(F32)}
    want = evaluate(g, feeds)["y"]
    for opset in opsets:
        model = to_onnx(OnnxModel(g, OnnxOrigin(opsets={"": opset})))
        assert {n.op_type for n in model.graph.node} == {"Upsample" if opset < 10 else "Resize"}
        np.testing.assert_allclose(run(model, feeds)["y"], want, rtol=1e-6, atol=1e-6, err_msg=f"opset {opset}")
        assert _resize_node(load_model(model).graph) == _resize_node(g), opset


@pytest.mark.parametrize(
    ("attrs", "opset"),
    [
        ({"sizes": (1, 2, 6, 8), "nearest_mode": "ceil"}, 10),  # half_pixel picks other indices than asymmetric
        ({"sizes": (1, 2, 2, 3), "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, 10),
        ({"sizes": (1, 2, 2, 8), "coordinate_transformation_mode": "asymmetric", "nearest_mode": "ceil"}, 9),
    ],
)
def test_forms_the_old_opsets_lack_are_refused(attrs: dict, opset: int) -> None:
    with pytest.raises(Unsupported, match=r"no (Upsample|Resize) form"):
        to_onnx(OnnxModel(_graph((1, 2, 4, 4), **attrs), OnnxOrigin(opsets={"": opset})))


# ---- kernels: C and CUDA (emulated) ------------------------------------------------------------

KERNEL_CASES = [  # every coordinate mode, each rounding, scales up, down, non-integer, given or derived
    *(
        Case("resize", [(2, 3, 5, 7)], {"sizes": (2, 3, 8, 3), "coordinate_transformation_mode": c, "nearest_mode": r})
        for c, r in zip(COORDINATE_MODES, (*NEAREST_MODES, "round_prefer_ceil"))
    ),
    *(
        Case(
            "resize",
            [(1, 2, 6, 9)],
            {
                "sizes": (1, 2, 9, 13),
                **scale_fractions([1, 1, 1.5, 1.5]),
                "mode": m,
                "coordinate_transformation_mode": c,
            },
        )
        for m, c in (("nearest", "pytorch_half_pixel"), ("linear", "half_pixel"), ("linear", "asymmetric"))
    ),
    *(
        Case("resize", [(1, 3, 7, 5)], {"sizes": (1, 3, 3, 10), "mode": "linear", "coordinate_transformation_mode": c})
        for c in ("pytorch_half_pixel", "align_corners")
    ),
    Case("resize", [(3, 4, 5)], {"sizes": (6, 4, 2), "mode": "linear"}),
    Case(
        "resize",
        [(1, 16, 8, 40)],
        {"sizes": (1, 16, 16, 80), "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    ),
    Case("resize", [(4, 6)], {"sizes": (8, 12)}, dtype="int32"),
    Case("resize", [(4, 6)], {"sizes": (7, 5), "mode": "linear"}, dtype="float64"),
]


def test_c_kernels_match_the_reference() -> None:
    check_c_kernels([op_group(c) for c in KERNEL_CASES])


def test_cuda_kernels_match_the_reference_emulated() -> None:
    check_cuda_kernels([op_group(c) for c in KERNEL_CASES])


def test_resize_is_verifiable_and_injective() -> None:
    entry = ops.get("resize")
    assert entry.verifiable and entry.fusion is ops.Fusion.INJECTIVE


# ---- torch's F.interpolate through optimize, compile and run -------------------------------------


def _export(mode: str, opset: int, path: Path) -> Path:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv_in, self.conv_out = torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.Conv2d(8, 4, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.conv_in(x))
            y = torch.nn.functional.interpolate(
                y, scale_factor=2.0, mode=mode, align_corners=False if mode == "bilinear" else None
            )
            return self.conv_out(y)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Decoder().eval(), (torch.randn(1, 4, 6, 6),), str(path), opset_version=opset, dynamo=False)
    return path


def _taso(*args: str) -> dict:
    done = CliRunner().invoke(main, [*args, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.output[done.output.index("{") :])


@pytest.mark.parametrize(
    ("mode", "opset"),
    [
        pytest.param("nearest", 11, marks=pytest.mark.slow),
        pytest.param("nearest", 9, marks=pytest.mark.slow),
        pytest.param("nearest", 13, marks=pytest.mark.slow),
        pytest.param("bilinear", 9, marks=pytest.mark.slow),
        pytest.param("bilinear", 11, marks=pytest.mark.slow),
        pytest.param("bilinear", 13, marks=pytest.mark.slow),
    ],
)
def test_interpolate_exports_compile_with_no_fallback(mode: str, opset: int, tmp_path: Path) -> None:
    model = _export(mode, opset, tmp_path / "m.onnx")
    info = _taso("info", str(model))
    assert info["opaque_nodes"] == 0 and info["ops"]["resize"] == 1, info
    assert _taso("optimize", str(model), "--cost", "analytical", "-o", str(tmp_path / "o.onnx"))["check"]["ok"]
    compiled = _taso("compile", str(model), "--target", "cpu", "-o", str(tmp_path / "m.cpu"))
    assert compiled["fallback_nodes"] == 0 and compiled["check"]["max_rel_error"] < 1e-4, compiled
    ran = _taso("run", str(tmp_path / "m.cpu"), "--check")
    assert ran["check"]["ok"] and ran["check"]["max_rel_error"] < 1e-4
