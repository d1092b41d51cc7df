"""The unary and element-wise operators of issue 20 end to end: clip, hardsigmoid, leaky_relu, prelu,
softplus, exp, log, sqrt, reciprocal, neg, abs and pow by a constant. Semantics against ONNX Runtime
(property tests), the symbolic semantics and the axioms, every ONNX form that imports into them,
their C kernels and CUDA kernels (on the CPU emulation), and torch exports through the CLI.
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
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper, numpy_helper
from pipeline_checks import check_c_kernels, check_cuda_kernels, optimize_compile_run
from test_codegen_ops import Case
from test_cuda import Group, op_group

from taso_py import ops
from taso_py.codegen import te
from taso_py.codegen.backends.c import build
from taso_py.codegen.lower import lower
from taso_py.codegen.topi import compute, schedule_group
from taso_py.errors import ShapeError
from taso_py.graph import Graph, evaluate
from taso_py.onnx_io import load_model
from taso_py.ops.conv import Conv2dAttrs
from taso_py.ops.elementwise import FLOAT32_MAX, HARDSWISH_ALPHA
from taso_py.ops.schema import Axiom
from taso_py.ops.symbolic import FLOAT, as_objects
from taso_py.runtime import run
from taso_py.types import DType, TensorType
from taso_py.verifier.validation import validate
from tests.test_ops import build as build_graph
from tests.test_ops import check_graph

NEW = ("clip", "hardsigmoid", "leaky_relu", "prelu", "softplus", "exp", "log", "sqrt", "reciprocal", "neg", "abs",
       "pow")
PLAIN = ("softplus", "exp", "log", "sqrt", "reciprocal", "neg", "abs")  # no attributes, one input
RNG = np.random.default_rng(0)
PROPERTY = settings(max_examples=30, deadline=None)
ORT_FLOAT32_ONLY = ("hardsigmoid", "softplus")  # ONNX allows double; ONNX Runtime's CPU kernels do not


def rand(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 4).astype(np.float32)


def _ops_of(g: Graph) -> list[str]:
    return sorted(n.op.name for n in g.nodes.values() if n.op.algebra)


def _model(nodes: list, inputs: dict[str, tuple], outputs: dict[str, tuple], opset: int,
           inits: dict[str, np.ndarray] | None = None, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(n, dtype, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, dtype, list(s)) for n, s in outputs.items()],
        [numpy_helper.from_array(v, n) for n, v in (inits or {}).items()])
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def _same_as_ort(model: onnx.ModelProto, imported: Graph, feeds: dict[str, np.ndarray]) -> None:
    want, got = run(model, feeds), evaluate(imported, feeds)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)


# ---- semantics: property tests against ONNX Runtime ---------------------------------------

shapes = hnp.array_shapes(min_dims=1, max_dims=4, max_side=4)
reals = st.sampled_from([-2.0, -0.5, 0.0, 0.25, 1.0, 6.0])


@st.composite
def unary_cases(draw: st.DrawFn) -> tuple[str, list, dict, int, str]:
    op = draw(st.sampled_from(NEW[:3] + PLAIN + ("pow",)))
    attrs: dict = {}
    if op == "clip":
        attrs = {k: draw(reals) for k in ("min", "max") if draw(st.booleans())}
    elif op == "hardsigmoid":
        attrs = {"alpha": draw(st.sampled_from([0.2, 1 / 6, 0.5, -1.0])), "beta": draw(reals)}
    elif op == "leaky_relu":
        attrs = {"alpha": draw(st.sampled_from([0.01, 0.2, -0.5, 1.5]))}
    elif op == "pow":
        attrs = {"exponent": draw(st.sampled_from([0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, 1.5, -0.5]))}
    opset = draw(st.sampled_from([10, 13, 17]) if op == "clip" else st.just(17))
    # ONNX Runtime implements Clip-6 (before opset 11) for float32 only
    dtypes = ["float32"] if op in ORT_FLOAT32_ONLY or (op == "clip" and opset < 11) else ["float32", "float64"]
    return op, [draw(shapes)], attrs, opset, draw(st.sampled_from(dtypes))


@PROPERTY
@given(unary_cases())
def test_unary_operators_agree_with_onnxruntime(case: tuple[str, list, dict, int, str]) -> None:
    op, in_shapes, attrs, opset, dtype = case
    check_graph(build_graph(op, in_shapes, dtype, **attrs), opset)


@PROPERTY
@given(hnp.array_shapes(min_dims=1, max_dims=4, max_side=4), st.data())
def test_prelu_broadcasts_the_slope_as_onnx(x_shape: tuple[int, ...], data: st.DataObject) -> None:
    """Any suffix of x's shape with some dims set to 1 is a slope ONNX accepts (unidirectional)."""
    k = data.draw(st.integers(0, len(x_shape)))
    slope = tuple(d if data.draw(st.booleans()) else 1 for d in x_shape[len(x_shape) - k:])
    graph = build_graph("prelu", [x_shape, slope])
    assert graph.type(graph.outputs[0]).shape == x_shape
    check_graph(graph)


def test_dtypes_accepted() -> None:
    """Floats only, but for neg and abs, which take signed integers too (and wrap as C does)."""
    for op in NEW:
        entry = ops.get(op)
        attrs = entry.make_attrs(**({"exponent": 2.0} if op == "pow" else {}))
        shapes_ = [(3,), (3,)] if op == "prelu" else [(3,)]
        accepted = set()
        for dtype in ("float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"):
            try:
                entry.infer([TensorType(s, DType(dtype)) for s in shapes_], attrs)
                accepted.add(dtype)
            except ShapeError:
                pass
        floats = {"float16", "float32", "float64"}
        assert accepted == (floats | {"int8", "int32", "int64"} if op in ("neg", "abs") else floats), op
    x = np.array([-128, 5, 127], np.int8)
    np.testing.assert_array_equal(ops.get("neg").ref([x], None)[0], np.array([-128, -5, -127], np.int8))


def test_clip_defaults_are_onnxs_float32_limits() -> None:
    """Without a bound, ONNX clamps to float32's lowest and largest: an infinity becomes finite."""
    (y,) = ops.get("clip").ref([np.array([-np.inf, 1.0, np.inf], np.float32)], ops.get("clip").make_attrs(min=0.0))
    np.testing.assert_array_equal(y, np.array([0.0, 1.0, FLOAT32_MAX], np.float32))
    (y,) = ops.get("clip").ref([np.array([-1.0, 3.0], np.float32)], ops.get("clip").make_attrs(min=2.0, max=1.0))
    np.testing.assert_array_equal(y, [1.0, 1.0])  # min > max: everything is max, as in ONNX Runtime


def test_float32_attributes_compare_equal() -> None:
    """hardsigmoid's and leaky_relu's attributes are float32 as in ONNX, so 1/6 written and imported agree."""
    assert ops.get("hardsigmoid").make_attrs(alpha=1 / 6) == ops.get("hardsigmoid").make_attrs(alpha=HARDSWISH_ALPHA)
    assert ops.get("leaky_relu").make_attrs().alpha == float(np.float32(0.01))


# ---- the verifier: symbolic semantics, axioms ---------------------------------------------

@pytest.mark.parametrize("op", NEW)
def test_sym_value_agrees_with_the_reference(op: str) -> None:
    entry = ops.get(op)
    attrs = {"clip": {"min": -1.0, "max": 2.5}, "hardsigmoid": {"alpha": 0.3, "beta": 0.4},
             "leaky_relu": {"alpha": 0.1}, "pow": {"exponent": -3.0}}.get(op, {})
    a = entry.make_attrs(**attrs)
    xs = [rand(4, 5)] + ([rand(5)] if op == "prelu" else [])
    want = entry.ref(xs, a)[0]
    (got,) = entry.sym_value([as_objects(x, FLOAT) for x in xs], a, FLOAT)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-6, atol=1e-6)


def test_their_axioms_are_valid() -> None:
    names = [n for n, a in ops.AXIOMS.items() if any(f"{op}(" in a.text for op in NEW)]
    assert {"clip-idem", "clip-after-relu", "hardsigmoid-in-unit", "leaky-relu-scale", "prelu-as-relu",
            "neg-neg", "abs-as-relu", "pow-sqrt", "pow-reciprocal", "exp-concat", "conv-softplus",
            "hardswish-def"} <= set(names)
    failed = {n: r.to_json() for n in names if not (r := validate(ops.AXIOMS[n], limit=12)).ok}
    assert not failed


@pytest.mark.parametrize("text", [
    "clip(x, min=0.0) == relu(x)",  # an infinite x clamps to float32's largest
    "relu(clip(x, min=?a, max=?b)) == clip(x, min=?a, max=?b) where ?a >= 0",  # max below 0 wins
    "leaky_relu(scalar_mul(x, scale=?s), alpha=?a) == scalar_mul(leaky_relu(x, alpha=?a), scale=?s)",
    "abs(x) == relu(x)",
    "pow(x, exponent=-1.0) == x",
])
def test_a_wrong_axiom_is_caught(text: str) -> None:
    report = validate(Axiom("wrong", text), limit=30)
    assert not report.ok and report.failures, text


def test_softplus_is_a_fusable_activation() -> None:
    """Of the new operators only softplus: an activation without attributes (conv2d's act takes none)."""
    from taso_py.ops.elementwise import ACTIVATIONS
    assert set(NEW) & set(ACTIVATIONS) == {"softplus"}
    x, w = rand(1, 3, 6, 6), rand(4, 3, 3, 3)
    (fused,) = ops.get("conv2d").ref([x, w], Conv2dAttrs(pad=1, act="softplus"))
    (plain,) = ops.get("conv2d").ref([x, w], Conv2dAttrs(pad=1))
    np.testing.assert_allclose(fused, ops.get("softplus").ref([plain], None)[0], rtol=1e-6)


# ---- ONNX import: every form ------------------------------------------------------------

def _clip_model(opset: int, low: float | None, high: float | None) -> onnx.ModelProto:
    """Clip as each opset writes it: attributes before 11, optional constant inputs from it."""
    if opset < 11:
        attrs = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
        return _model([helper.make_node("Clip", ["x"], ["y"], **attrs)], {"x": (3, 8)}, {"y": (3, 8)}, opset)
    inits = {k: np.array(v, np.float32) for k, v in (("lo", low), ("hi", high)) if v is not None}
    names = ["x", "lo" if low is not None else "", "hi" if high is not None else ""]
    while not names[-1]:
        names.pop()
    return _model([helper.make_node("Clip", names, ["y"])], {"x": (3, 8)}, {"y": (3, 8)}, opset, inits)


@pytest.mark.parametrize("opset", [6, 11, 13])
@pytest.mark.parametrize("low, high", [(0.0, 6.0), (-1.0, None), (None, 0.5), (None, None)])
def test_clip_imports_at_every_opset(opset: int, low: float | None, high: float | None) -> None:
    model = _clip_model(opset, low, high)
    g = load_model(model).graph
    assert _ops_of(g) == ["clip"]
    (node,) = [n for n in g.nodes.values() if n.op.name == "clip"]
    assert (node.attrs.min, node.attrs.max) == (-FLOAT32_MAX if low is None else low,
                                                 FLOAT32_MAX if high is None else high)
    _same_as_ort(model, g, {"x": rand(3, 8)})


def test_clip_with_computed_bounds_or_ints_stays_opaque() -> None:
    model = _model([helper.make_node("Clip", ["x", "lo"], ["y"])], {"x": (3,), "lo": ()}, {"y": (3,)}, 13)
    assert _ops_of(load_model(model).graph) == []
    ints = _model([helper.make_node("Clip", ["x", "lo"], ["y"])], {"x": (3,)}, {"y": (3,)}, 13,
                  {"lo": np.array(1, np.int32)}, TensorProto.INT32)
    assert _ops_of(load_model(ints).graph) == []


@pytest.mark.parametrize("exponent, op", [
    (np.array(2.0, np.float32), "pow"), (np.array([0.5], np.float32), "pow"), (np.array([[3]], np.int64), "pow"),
    (np.array([[[2.0]]], np.float32), None),  # a one-element exponent of higher rank changes the shape
    (np.array([1.0, 2.0, 3.0], np.float32), None),  # a tensor exponent
])
def test_pow_by_a_one_element_constant(exponent: np.ndarray, op: str | None) -> None:
    model = _model([helper.make_node("Pow", ["x", "e"], ["y"])], {"x": (2, 3)},
                   {"y": (1, 2, 3) if exponent.ndim == 3 else (2, 3)}, 15, {"e": exponent})
    g = load_model(model).graph
    assert _ops_of(g) == ([op] if op else [])
    if op:
        (node,) = [n for n in g.nodes.values() if n.op.name == "pow"]
        assert node.attrs.exponent == float(exponent.reshape(()))
    _same_as_ort(model, g, {"x": np.abs(rand(2, 3)) + 0.1})


def test_pow_by_a_computed_exponent_stays_opaque() -> None:
    model = _model([helper.make_node("Pow", ["x", "e"], ["y"])], {"x": (2, 3), "e": (1,)}, {"y": (2, 3)}, 15)
    g = load_model(model).graph
    assert _ops_of(g) == []
    _same_as_ort(model, g, {"x": np.abs(rand(2, 3)), "e": np.array([1.5], np.float32)})


@pytest.mark.parametrize("slope", [(1,), (3, 1, 1), (5,), (1, 3, 4, 5), ()])
def test_prelu_import_broadcasts_the_slope(slope: tuple[int, ...]) -> None:
    model = _model([helper.make_node("PRelu", ["x", "s"], ["y"])], {"x": (2, 3, 4, 5)}, {"y": (2, 3, 4, 5)}, 17,
                   {"s": rand(*slope) / 4})
    g = load_model(model).graph
    assert _ops_of(g) == ["prelu"]
    _same_as_ort(model, g, {"x": rand(2, 3, 4, 5)})


def test_x_times_hardsigmoid_sixth_imports_as_hardswish() -> None:
    """What torch writes for Hardswish up to opset 13 (HardSwish is opset 14) collapses into hardswish;
    a HardSigmoid with another alpha stays itself."""
    for alpha, want in ((1 / 6, ["hardswish"]), (0.2, ["hardsigmoid", "mul"])):
        nodes = [helper.make_node("HardSigmoid", ["x"], ["h"], alpha=alpha), helper.make_node("Mul", ["x", "h"], ["y"])]
        model = _model(nodes, {"x": (2, 9)}, {"y": (2, 9)}, 13)
        g = load_model(model).graph
        assert _ops_of(g) == want
        _same_as_ort(model, g, {"x": rand(2, 9)})


# ---- codegen: C kernels, CUDA on the CPU emulation --------------------------------------

CASES = [
    *(Case(op, [s], {}) for op in PLAIN for s in ((2, 3, 4), (1000,))),
    Case("neg", [(37,)], {}, "int32"), Case("abs", [(37,)], {}, "int64"), Case("exp", [(3, 37)], {}, "float64"),
    Case("clip", [(3, 37)], {"min": 0.0, "max": 6.0}), Case("clip", [(1000,)], {"max": 0.5}),
    Case("clip", [(40,)], {"min": -1.0}, "float64"),
    Case("hardsigmoid", [(3, 37)], {}), Case("hardsigmoid", [(40,)], {"alpha": 0.5, "beta": 0.1}, "float64"),
    Case("leaky_relu", [(3, 37)], {"alpha": 0.1}), Case("leaky_relu", [(1000,)], {}),
    *(Case("pow", [(3, 37)], {"exponent": e}) for e in (2.0, 0.5, 3.0, -1.0, 1.5)),
    Case("pow", [(40,)], {"exponent": 2.5}, "float64"),
    Case("prelu", [(2, 3, 4, 5), (3, 1, 1)], {}), Case("prelu", [(3, 37), (1,)], {}),
    Case("prelu", [(3, 37), (37,)], {}, "float64"),
]


def _conv_softplus(bias: bool) -> Group:
    x, w = rand(1, 4, 7, 7), rand(8, 4, 3, 3)
    arrays = [x, w] + ([rand(8)] if bias else [])
    a = Conv2dAttrs(pad=1, act="softplus")
    ins = [te.placeholder(v.shape, name=f"in{k}") for k, v in enumerate(arrays)]
    types = list(ops.get("conv2d").infer([TensorType.of(v) for v in arrays], a))
    return Group(f"conv2d-softplus-{bias}", ins, list(compute(ops.get("conv2d"), ins, a, types)), arrays,
                 list(ops.get("conv2d").ref(arrays, a)))


def _groups() -> list[Group]:
    return [op_group(c) for c in CASES] + [_conv_softplus(b) for b in (False, True)]


def test_c_kernels_match_the_reference() -> None:
    check_c_kernels(_groups())


def test_cuda_kernels_match_the_reference_in_the_emulation() -> None:
    check_cuda_kernels(_groups())


def test_softplus_kernel_does_not_overflow() -> None:
    x = np.array([-100.0, -20.0, 0.0, 20.0, 100.0, 1e30], np.float32)
    tx = te.placeholder(x.shape, name="x")
    (y,) = compute(ops.get("softplus"), [tx], None, [TensorType.of(x)])
    group = Group("softplus-extremes", [tx], [y], [x], [ops.get("softplus").ref([x], None)[0]])
    group.check(build(lower(schedule_group([y]), [tx, y], group.name)))
    assert np.isfinite(group.want[0]).all()


# ---- torch exports through optimize, compile and run --check ------------------------------

def _torch_export(path: Path, module: object, opset: int) -> Path:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), module, torch.nn.Conv2d(8, 4, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = io.BytesIO()
        torch.onnx.export(net.eval(), (torch.randn(1, 3, 10, 10),), f, opset_version=opset, dynamo=False)
    path.write_bytes(f.getvalue())
    return path


@pytest.mark.parametrize("name, args, opset, op", [
    ("ReLU6", (), 17, "clip"), ("ReLU6", (), 10, "clip"), ("Hardsigmoid", (), 17, "hardsigmoid"),
    ("LeakyReLU", (0.1,), 17, "leaky_relu"), ("PReLU", (8,), 17, "prelu"), ("PReLU", (), 13, "prelu"),
    ("Softplus", (), 17, "softplus"), ("Hardswish", (), 13, "hardswish"),
])
def test_torch_export_optimizes_compiles_and_runs(tmp_path: Path, name: str, args: tuple, opset: int, op: str) -> None:
    torch = pytest.importorskip("torch")
    model = _torch_export(tmp_path / "m.onnx", getattr(torch.nn, name)(*args), opset)
    g = load_model(onnx.load(model)).graph
    assert _ops_of(g) == sorted(["conv2d", "conv2d", op])
    optimize_compile_run(model, tmp_path)


def test_clip_with_min_above_max_exports_at_every_opset() -> None:
    """Found by the property test: Clip-6 (before opset 11) refuses min > max, where the operator
    (as ONNX defines it from opset 11) gives max everywhere; the export says that as min == max."""
    for opset in (10, 13):
        out = check_graph(build_graph("clip", [(5,)], "float32", min=-0.5, max=-2.0), opset)
        assert all((v == -2.0).all() for v in out.values())
