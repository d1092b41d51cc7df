"""silu and hardswish, end to end, and the table-driven parts that made adding them local:
computes registered against table entries, the scalar intrinsic table, fused activations that
name a table operator, the generator's operators derived from the table, and the import hook
that turns an operator's definition written out (x * Sigmoid(x)) back into the operator.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from pipeline_checks import check_c_kernels, check_cuda_kernels, optimize_compile_run
from test_codegen_ops import Case
from test_cuda import Group, op_group

from taso_py import ops
from taso_py.codegen import te
from taso_py.codegen.backends.c import build
from taso_py.codegen.backends.cuda.emulate import build_emulated
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.lower import lower
from taso_py.codegen.te import intrinsics
from taso_py.codegen.topi import COMPUTE, compute, register_compute, schedule_group
from taso_py.graph import Graph, evaluate
from taso_py.graph.normalize import fuse_activations
from taso_py.onnx_io import OnnxModel, OnnxOrigin, load_model, to_onnx
from taso_py.ops.conv import Conv2dAttrs
from taso_py.runtime import run
from taso_py.types import TensorType
from taso_py.verifier.validation import validate

RNG = np.random.default_rng(0)
NEW = ("silu", "hardswish")


def rand(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 4).astype(np.float32)  # past hardswish's corners at -3 and 3


def _model(nodes: list, inputs: dict[str, tuple], outputs: dict[str, tuple], opset: int,
           inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs.items()],
        [numpy_helper.from_array(v, n) for n, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ops_of(g: Graph) -> list[str]:
    return sorted(n.op.name for n in g.nodes.values() if n.op.algebra)


def _same_as_ort(model: onnx.ModelProto, imported: Graph, feeds: dict[str, np.ndarray]) -> None:
    want = run(model, feeds)
    got = evaluate(imported, feeds)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)


# ---- the table: semantics, ONNX forms, axioms -----------------------------------------------

@pytest.mark.parametrize("op, opset, op_types, back", [
    ("silu", 17, ["Mul", "Sigmoid"], "silu"), ("silu", 24, ["Swish"], "silu"),
    ("hardswish", 13, ["HardSigmoid", "Mul"], "hardswish"),  # its definition, collapsed at import
    ("hardswish", 14, ["HardSwish"], "hardswish"), ("hardswish", 22, ["HardSwish"], "hardswish"),
])
def test_export_writes_the_form_of_the_opset_and_ort_agrees(op: str, opset: int, op_types: list[str],
                                                            back: str) -> None:
    g = Graph(op)
    x = g.add_input("x", TensorType((2, 3, 40)))
    g.set_outputs(g.add(op, [x]), ["y"])
    model = to_onnx(OnnxModel(g, OnnxOrigin(opsets={"": opset})))
    assert sorted(n.op_type for n in model.graph.node) == op_types
    xs = {"x": rand(2, 3, 40)}
    (want,) = ops.get(op).ref([xs["x"]], None)
    np.testing.assert_allclose(run(model, xs)["y"], want, rtol=1e-5, atol=1e-6)
    assert _ops_of(load_model(model).graph) == [back]  # the form imports as the operator again


def test_sym_value_agrees_with_the_reference() -> None:
    from taso_py.ops.symbolic import FLOAT, as_objects
    x = rand(50)
    for op in NEW:
        (got,) = ops.get(op).sym_value([as_objects(x, FLOAT)], None, FLOAT)
        np.testing.assert_allclose(got.astype(np.float64), ops.get(op).ref([x], None)[0], rtol=1e-6, atol=1e-6)


def test_their_axioms_are_valid() -> None:
    names = [n for n in ops.AXIOMS if any(op in ops.AXIOMS[n].text for op in NEW)]
    assert {"silu-def", "conv-silu", "conv-hardswish", "silu-split-0", "hardswish-reshape-2"} <= set(names)
    failed = {n: r.to_json() for n in names if not (r := validate(ops.AXIOMS[n], limit=12)).ok}
    assert not failed
    assert ops.AXIOMS["silu-def"].text == "silu(x) == mul(x, sigmoid(x))"


def test_they_are_fusable_activations() -> None:
    assert Conv2dAttrs(act="silu").act == "silu" and Conv2dAttrs(act="hardswish").act == "hardswish"
    x, w = rand(1, 3, 6, 6), rand(4, 3, 3, 3)
    for op in NEW:
        (fused,) = ops.get("conv2d").ref([x, w], Conv2dAttrs(pad=1, act=op))
        (plain,) = ops.get("conv2d").ref([x, w], Conv2dAttrs(pad=1))
        np.testing.assert_allclose(fused, ops.get(op).ref([plain], None)[0], rtol=1e-6)


# ---- import: the Sigmoid * Mul pattern, Swish, HardSwish, torch exports ----------------------

@pytest.mark.parametrize("swapped", [False, True])
@pytest.mark.parametrize("shared", [False, True])
def test_x_times_sigmoid_x_imports_as_silu(swapped: bool, shared: bool) -> None:
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", ["s", "x"] if swapped else ["x", "s"], ["y"])]
    outputs = {"y": (2, 3)}
    if shared:  # the sigmoid is read elsewhere too: it stays for that reader
        nodes.append(helper.make_node("Tanh", ["s"], ["z"]))
        outputs["z"] = (2, 3)
    model = _model(nodes, {"x": (2, 3)}, outputs, 17)
    g = load_model(model).graph
    assert _ops_of(g) == (["sigmoid", "silu", "tanh"] if shared else ["silu"])
    assert g.name_of(g.outputs[0]) == "y"  # the Mul's name is kept
    _same_as_ort(model, g, {"x": rand(2, 3)})


def test_only_x_times_its_own_sigmoid_is_silu() -> None:
    model = _model([helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Mul", ["b", "s"], ["y"])],
                   {"a": (4,), "b": (4,)}, {"y": (4,)}, 17)
    assert _ops_of(load_model(model).graph) == ["mul", "sigmoid"]


def test_chained_silus_import_as_two() -> None:
    nodes = [helper.make_node("Sigmoid", ["x"], ["s1"]), helper.make_node("Mul", ["x", "s1"], ["m1"]),
             helper.make_node("Sigmoid", ["m1"], ["s2"]), helper.make_node("Mul", ["s2", "m1"], ["y"])]
    model = _model(nodes, {"x": (3, 5)}, {"y": (3, 5)}, 17)
    g = load_model(model).graph
    assert _ops_of(g) == ["silu", "silu"]
    _same_as_ort(model, g, {"x": rand(3, 5)})


def test_swish_with_another_alpha_keeps_its_meaning() -> None:
    model = _model([helper.make_node("Swish", ["x"], ["y"], alpha=0.5)], {"x": (2, 7)}, {"y": (2, 7)}, 24)
    g = load_model(model).graph
    assert _ops_of(g) == ["mul", "scalar_mul", "sigmoid"]
    _same_as_ort(model, g, {"x": rand(2, 7)})


def _torch_export(module: object, opset: int) -> onnx.ModelProto:
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), module, torch.nn.Conv2d(8, 4, 1))
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), (torch.randn(1, 3, 10, 10),), f, opset_version=opset, dynamo=False)
    return onnx.load_from_string(f.getvalue())


@pytest.mark.parametrize("name, opset, op", [("SiLU", 17, "silu"), ("Hardswish", 17, "hardswish")])
def test_torch_exports_import_as_the_operator(name: str, opset: int, op: str) -> None:
    torch = pytest.importorskip("torch")
    model = _torch_export(getattr(torch.nn, name)(), opset)
    g = load_model(model).graph
    assert _ops_of(g) == ["conv2d", "conv2d", op]
    _same_as_ort(model, g, {model.graph.input[0].name: rand(1, 3, 10, 10)})
    assert fuse_activations(g) == 1 and _ops_of(g) == ["conv2d", "conv2d"]  # the conv takes it as its act
    _same_as_ort(model, g, {model.graph.input[0].name: rand(1, 3, 10, 10)})


# ---- codegen: C kernels, fused into convolutions, CUDA on the CPU emulation -------------------

CASES = [Case(op, [s], {}) for op in NEW for s in ((2, 3, 4), (3, 37), (1000,))]
CONVS = [(op, bias) for op in NEW for bias in (False, True)]


def _conv_group(act: str, bias: bool) -> Group:
    x, w = rand(1, 4, 7, 7), rand(8, 4, 3, 3)
    arrays = [x, w] + ([rand(8)] if bias else [])
    a = Conv2dAttrs(pad=1, act=act)
    ins = [te.placeholder(v.shape, name=f"in{k}") for k, v in enumerate(arrays)]
    types = list(ops.get("conv2d").infer([TensorType.of(v) for v in arrays], a))
    return Group(f"conv2d-{act}-{bias}", ins, list(compute(ops.get("conv2d"), ins, a, types)), arrays,
                 list(ops.get("conv2d").ref(arrays, a)))


def _groups() -> list[Group]:
    return [op_group(c) for c in CASES] + [_conv_group(act, bias) for act, bias in CONVS]


def test_c_kernels_match_the_reference() -> None:
    check_c_kernels(_groups())


def test_cuda_kernels_match_the_reference_in_the_emulation() -> None:
    check_cuda_kernels(_groups())


def test_the_fused_activation_is_the_operators_compute() -> None:
    """conv2d(act=silu) applies silu's own compute: its C reads the sigmoid of the sum it multiplies."""
    from taso_py.codegen.backends.c.emit import CEmitter
    g = _conv_group("silu", True)
    text = CEmitter().module([lower(schedule_group(g.outs), [*g.ins, *g.outs], g.name)])
    assert "sigmoidf(" in text


def test_compute_is_keyed_by_the_table_entry() -> None:
    relu = ops.get("relu")
    assert relu in COMPUTE and ops.get("opaque") not in COMPUTE
    assert all(isinstance(k, type(relu)) for k in COMPUTE)
    with pytest.raises(RuntimeError, match="'relu' registered twice"):
        register_compute(relu)(COMPUTE[relu])
    with pytest.raises(CodegenError, match="no code generator for operator 'opaque'"):
        compute(ops.get("opaque"), [], None, [])


def test_an_intrinsic_is_one_entry_of_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A made-up intrinsic with a prelude helper compiles for C and for CUDA without touching a backend."""
    helper_fn = "float softplusf(float x) { return log1pf(expf(x)); }\n"
    entry = intrinsics.ScalarIntrinsic("softplus", "softplusf({})", "log1p(exp({}))",
                                       c_prelude=f"static inline {helper_fn}",
                                       cuda_prelude=f"__device__ __forceinline__ {helper_fn}")
    monkeypatch.setitem(intrinsics.SCALAR_INTRINSICS, "softplus", entry)
    x = rand(3, 20)
    tx = te.placeholder(x.shape, name="x")
    y = te.compute(x.shape, lambda i, j: te.call("softplus", tx[i, j]), name="softplus", tag="injective")
    group = Group("softplus", [tx], [y], [x], [np.log1p(np.exp(x.astype(np.float64))).astype(np.float32)])
    group.check(build(lower(schedule_group([y]), [tx, y], group.name)))
    group.check(build_emulated(group.lower()))
    with pytest.raises(ValueError, match="unknown intrinsic 'nope'"):
        te.call("nope", tx[0, 0])


# ---- the generator's operators come from the table ------------------------------------------

def test_the_generator_derives_its_operators_from_the_table() -> None:
    from taso_py.generator.world import GEN_OPS, TASO_OPS
    assert set(TASO_OPS) <= set(GEN_OPS)
    for name in NEW:
        g = GEN_OPS[name]
        assert (g.arity, g.optional, g.commutative, list(g.choices([], None))) == (1, 0, False, [{}])
    assert GEN_OPS["mul"].commutative and GEN_OPS["concat"].arity == 2
    assert GEN_OPS["conv2d"].arities == range(2, 4) and GEN_OPS["enlarge"].needs == ("weight",)
    assert "pow" not in GEN_OPS  # attributes without declared choices


# ---- the command line: optimize, compile, run --check --------------------------------------

def _conv_model(path: Path, pattern: str) -> Path:
    """Two convolutions, each followed by the activation written as ONNX writes it."""
    w1, w2 = rand(8, 3, 3, 3) / 4, rand(4, 8, 1, 1) / 4
    if pattern == "silu":
        act = [helper.make_node("Sigmoid", ["c1"], ["s"]), helper.make_node("Mul", ["c1", "s"], ["a"])]
    else:
        act = [helper.make_node("HardSwish", ["c1"], ["a"])]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), *act,
             helper.make_node("Conv", ["a", "w2"], ["y"])]
    onnx.save(_model(nodes, {"x": (1, 3, 12, 12)}, {"y": (1, 4, 12, 12)}, 17, {"w1": w1, "w2": w2}), path)
    return path


@pytest.mark.parametrize("pattern", NEW)
def test_optimize_compile_and_run_check(tmp_path: Path, pattern: str) -> None:
    model = _conv_model(tmp_path / "m.onnx", pattern)
    optimize_compile_run(model, tmp_path)
