"""Operators without a kernel run through ONNX Runtime inside the compiled module (codegen.graph.fallback),
and `taso compile` checks the module it built against the original model."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from taso_py import ops
from taso_py.cli import main
from taso_py.codegen.backends.cuda import device_count
from taso_py.codegen.backends.cuda.emulate import compile_emulated
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.graph import compile_graph, fallback, partition
from taso_py.codegen.graph.kernels import Buffer, Kernel
from taso_py.codegen.graph.module import segments_of, transfers
from taso_py.codegen.graph.stages import prepare
from taso_py.codegen.runtime import CompiledModel, random_inputs
from taso_py.codegen.target import ACCEL, CPU, CUDA
from taso_py.onnx_io import load_model
from taso_py.onnx_io.exporter import region_writer
from taso_py.runtime import compare_outputs
from taso_py.runtime import run as ort_run
from tests.corpus import get, save

node = helper.make_node
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: list[onnx.TensorProto], opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", opset)]  # the IR version they need: an older ORT reads it (a GPU machine's)
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def _w(name: str, *shape: int, seed: int = 0) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return onnx.numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def _compile(path: Path, out: Path, **kw: object) -> tuple[CompiledModel, dict[str, np.ndarray], dict]:
    model = load_model(path)
    report = compile_graph(model.graph, out, write_region=region_writer(model.origin), **kw)
    compiled = CompiledModel(out)
    feeds = random_inputs(compiled)
    return compiled, feeds, {"report": report, "want": ort_run(path, feeds), "got": compiled.run(feeds)}


def _conv_lrn_conv(path: Path) -> Path:
    """A convolution, an LRN (outside the algebra) and another convolution: blocked layouts around a region."""
    nodes = [node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             node("Relu", ["c1"], ["r1"]),
             node("LRN", ["r1"], ["n"], size=3),
             node("Conv", ["n", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             node("Add", ["c2", "r1"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 10])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 20, 10, 10])]
    return save(_model(nodes, inputs, outputs, [_w("w1", 20, 3, 3, 3), _w("w2", 20, 20, 3, 3, seed=1)]), path)


def test_a_region_between_blocked_convolutions_matches_ort(tmp_path: Path) -> None:
    compiled, _, r = _compile(_conv_lrn_conv(tmp_path / "m.onnx"), tmp_path / "out")
    assert r["report"].fallback_nodes == 1 and r["report"].regions == 1
    assert compare_outputs(r["want"], r["got"]).max_rel <= 1e-4
    groups = [k["group"] for k in compiled.manifest["kernels"]]
    # the LRN reads NCHW and the next convolution packs its output again
    region = groups.index("onnxruntime:LRN")
    assert groups[region - 1] == "layout_nchw" and groups[region + 1].startswith("layout_nchw16c")
    assert (tmp_path / "out" / "ort0.onnx").is_file()
    onnx.checker.check_model(str(tmp_path / "out" / "ort0.onnx"), full_check=True)


def test_integer_outputs_of_a_region_are_exact(tmp_path: Path) -> None:
    """TopK between matmuls: its int64 indices are a graph output, its values feed a kernel."""
    path = save(get("topk_op11").build(), tmp_path / "m.onnx")
    _, _, r = _compile(path, tmp_path / "out")
    assert r["got"]["indices"].dtype == np.int64
    np.testing.assert_array_equal(r["got"]["indices"], r["want"]["indices"])
    assert compare_outputs(r["want"], r["got"]).max_rel <= 1e-4


def _nonzero(path: Path) -> Path:
    """NonZero's output shape depends on the data."""
    nodes = [node("Relu", ["x"], ["r"]), node("NonZero", ["r"], ["nz"]), node("Mul", ["r", "r"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])]
    outputs = [helper.make_tensor_value_info("nz", TensorProto.INT64, [2, "n"]),
               helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])]
    return save(_model(nodes, inputs, outputs, []), path)


def _region_output_read_by_a_kernel(path: Path) -> Path:
    """A region's output is a graph output and a later kernel's input; a kernel's output is read by the
    region and by a kernel after it; the input is read before and after the region."""
    nodes = [node("Sigmoid", ["x"], ["s"]), node("LRN", ["s"], ["n"], size=3),
             node("Mul", ["n", "s"], ["m"]), node("Add", ["m", "x"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])]
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4, 5, 5]) for name in ("n", "y")]
    return save(_model(nodes, inputs, outputs, []), path)


def test_an_output_whose_shape_only_ort_knows(tmp_path: Path) -> None:
    """The module returns the NonZero output ONNX Runtime made, whatever its shape."""
    compiled, feeds, r = _compile(_nonzero(tmp_path / "m.onnx"), tmp_path / "out")
    assert compiled.outputs[0].shape is None
    np.testing.assert_array_equal(r["got"]["nz"], r["want"]["nz"])
    np.testing.assert_allclose(r["got"]["y"], r["want"]["y"], rtol=1e-6)
    fewer = {"x": -np.abs(feeds["x"])}
    fewer["x"][0, :2] = 1.0
    assert compiled.run(fewer)["nz"].shape == (2, 2)  # a different shape on the next run


def test_regions_are_few_where_the_graph_allows(tmp_path: Path) -> None:
    """Independent opaque nodes run back to back, as one region, not one hand-over each."""
    nodes = [node("Relu", ["x"], ["a"]), node("LRN", ["a"], ["n1"], size=3), node("Sigmoid", ["x"], ["b"]),
             node("LRN", ["b"], ["n2"], size=5), node("Add", ["n1", "n2"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])]
    path = save(_model(nodes, inputs, outputs, []), tmp_path / "m.onnx")
    _, _, r = _compile(path, tmp_path / "out")
    assert r["report"].regions == 1 and r["report"].fallback_nodes == 2
    assert compare_outputs(r["want"], r["got"]).max_rel <= 1e-6


def test_the_whole_graph_as_one_region_when_regions_cannot_be_cut(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fallback, "plan", lambda g, groups, target, forced: None)
    compiled, _, r = _compile(_conv_lrn_conv(tmp_path / "m.onnx"), tmp_path / "out")
    assert r["report"].kernel_nodes == 0 and r["report"].regions == 1
    assert [k["group"] for k in compiled.manifest["kernels"]] == ["onnxruntime:conv2d+LRN+add"]
    assert compare_outputs(r["want"], r["got"]).max_rel <= 1e-4


def test_order_keeps_each_kind_together() -> None:
    g = load_model(get("mobilenetv2_torch_op11").build()).graph
    g = prepare(g)
    groups = partition(g)
    kinds = [any(fallback.unsupported(g, n, CPU) for n in grp.nodes) for grp in groups]
    order = fallback.order_groups(g, groups, kinds)
    assert sorted(order) == list(range(len(groups)))
    position = {k: i for i, k in enumerate(order)}
    producer = {r: k for k, grp in enumerate(groups) for r in grp.outputs}
    for k, grp in enumerate(groups):  # topological
        assert all(position[producer[r]] < position[k] for r in grp.inputs if r in producer)


def test_profile_lists_regions_with_the_kernels(tmp_path: Path) -> None:
    compiled, feeds, _ = _compile(_conv_lrn_conv(tmp_path / "m.onnx"), tmp_path / "out")
    names = [t.group for t in compiled.profile(feeds, 1)]
    assert "onnxruntime:LRN" in names and len(names) == len(compiled.manifest["kernels"])


def test_accel_target_runs_regions_too(tmp_path: Path) -> None:
    path = _conv_lrn_conv(tmp_path / "m.onnx")
    model = load_model(path)
    report = compile_graph(model.graph, tmp_path / "out", target=ACCEL, write_region=region_writer(model.origin))
    assert report.accel_layers == 2 and report.fallback_nodes == 1
    compiled = CompiledModel(tmp_path / "out")
    feeds = random_inputs(compiled)
    assert compare_outputs(ort_run(path, feeds), compiled.run(feeds)).max_rel <= 5e-2


def test_without_a_region_writer_the_error_names_the_operator(tmp_path: Path) -> None:
    from taso_py.codegen.errors import CodegenError
    model = load_model(_conv_lrn_conv(tmp_path / "m.onnx"))
    with pytest.raises(CodegenError, match="no kernel for LRN 'n'"):
        compile_graph(model.graph, tmp_path / "out")


def test_cli_compile_reports_fallback_and_its_check(tmp_path: Path) -> None:
    path = save(get("topk_op11").build(), tmp_path / "m.onnx")
    result = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["fallback_nodes"] == 1 and doc["kernel_nodes"] >= 2 and doc["onnxruntime_regions"] == 1
    assert doc["check"]["input_sets"] == 2 and doc["check"]["max_rel_error"] <= 1e-4
    run = CliRunner().invoke(main, ["run", str(tmp_path / "out"), "--check"])
    assert run.exit_code == 0, run.output


def test_cli_compile_refuses_a_module_that_differs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong module is never published: exit 1, a one-line reason, no directory."""
    path = save(get("topk_op11").build(), tmp_path / "m.onnx")
    run = CompiledModel.run

    def off_by_one_percent(self: CompiledModel, feeds: dict) -> dict:
        outs = run(self, feeds)
        outs["y"].flat[0] += 0.01 * np.abs(outs["y"]).max()
        return outs

    monkeypatch.setattr(CompiledModel, "run", off_by_one_percent)
    result = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "out"), "--speed-runs", "0"])
    assert result.exit_code == 1
    assert "differs from m.onnx on output 'y'" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_optimize_writes_an_output_whose_shape_only_ort_knows(tmp_path: Path) -> None:
    """The exporter gives such an output the rank shape inference finds: the checker refuses none."""
    nodes = [node("Relu", ["x"], ["r"]), node("NonZero", ["r"], ["nz"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])]
    outputs = [helper.make_tensor_value_info("nz", TensorProto.INT64, [2, "n"])]
    path = save(_model(nodes, inputs, outputs, []), tmp_path / "m.onnx")
    result = CliRunner().invoke(main, ["optimize", str(path), "-o", str(tmp_path / "o.onnx")])
    assert result.exit_code == 0, result.output
    written = onnx.load(str(tmp_path / "o.onnx"))
    assert len(written.graph.output[0].type.tensor_type.shape.dim) == 2


def test_a_group_whose_kernel_fails_to_build_runs_in_ort(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel the code generator cannot build (here: a compute made to fail) costs that group
    its kernel, not the model its compile."""
    from taso_py.codegen import topi

    def refuse(*_args: object) -> None:
        raise ValueError("not this one")  # a bug in a kernel template, not only a CodegenError

    monkeypatch.setitem(topi.COMPUTE, ops.get("add"), refuse)
    compiled, _, r = _compile(_conv_lrn_conv(tmp_path / "m.onnx"), tmp_path / "out")
    # the add is fused into the second convolution's group: that group joins the LRN's region
    assert r["report"].fallback_nodes == 3 and r["report"].regions == 1
    assert compare_outputs(r["want"], r["got"]).max_rel <= 1e-4
    assert [k["group"] for k in compiled.manifest["kernels"] if k["group"].startswith("onnx")] == [
        "onnxruntime:LRN+conv2d+add"]
    assert r["report"].kernel_failures == ["conv2d_add: ValueError: not this one"]


def test_an_input_of_a_type_c_has_no_name_for(tmp_path: Path) -> None:
    """A float16 input read by ORT and also a graph output (fuzzer: KeyError 'float16' in the run function)."""
    nodes = [node("Cast", ["x"], ["c"], to=TensorProto.FLOAT), node("Relu", ["c"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
               helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3])]
    path = save(_model(nodes, inputs, outputs, []), tmp_path / "m.onnx")
    _, _, r = _compile(path, tmp_path / "out")
    assert compare_outputs(r["want"], r["got"]).ok


def test_intermediates_larger_than_memory_are_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A damaged file whose dims ask for 48 GiB of intermediates killed a fuzzing worker; now it is refused."""
    from taso_py.codegen.errors import CodegenError
    from taso_py.codegen.graph import stages

    monkeypatch.setattr(stages, "available_memory", lambda: 16 * 1024)
    model = load_model(_conv_lrn_conv(tmp_path / "m.onnx"))
    with pytest.raises(CodegenError, match=r"intermediates need .* GiB at once, more than the 0.0 GiB of memory"):
        compile_graph(model.graph, tmp_path / "out", write_region=region_writer(model.origin))
    assert not (tmp_path / "out").exists()


def test_an_operator_a_target_declares_unsupported_runs_in_ort(tmp_path: Path) -> None:
    """A target without a kernel for an operator of the algebra says so (`Target.unsupported`): the
    operator runs in an ONNX Runtime region where the target allows regions, else the compile is refused."""
    without_add = dataclasses.replace(CPU, unsupported=frozenset({"add"}))
    compiled, _, r = _compile(_conv_lrn_conv(tmp_path / "m.onnx"), tmp_path / "out", target=without_add)
    assert r["report"].regions == 1 and r["report"].fallback_nodes == 3  # LRN, and the conv the add fused into
    assert "onnxruntime:LRN+conv2d+add" in [k["group"] for k in compiled.manifest["kernels"]]
    assert compare_outputs(r["want"], r["got"]).max_rel <= 1e-4
    no_regions = dataclasses.replace(without_add, regions=False)
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("x", "y")]
    model = load_model(save(_model([node("Add", ["x", "x"], ["y"])], io[:1], io[1:], []), tmp_path / "add.onnx"))
    with pytest.raises(CodegenError, match=r"no kernel for add 'y'.* on --target cpu"):
        compile_graph(model.graph, tmp_path / "out2", target=no_regions, write_region=region_writer(model.origin))
    assert not (tmp_path / "out2").exists()


def test_a_cuda_segment_moves_only_what_crosses_to_or_from_the_host() -> None:
    """Between regions (run by ORT on the host) each run of CUDA kernels uploads what the host wrote
    since the device last had it and downloads what the host reads later; the rest stays on the device."""
    def buf(key: str, kind: str = "arena", index: int = 0) -> Buffer:
        return Buffer(key, (4,), "float32", kind, index=index)

    buffers = {b.key: b for b in (buf("x", "input"), buf("a"), buf("b"), buf("c"), buf("y", "output"))}
    order = [Kernel("k0", "", ["x"], ["a"], ""), Kernel("k1", "", ["a"], ["c"], ""),
             Kernel("ort0", "", ["a"], ["b"], ""), Kernel("k2", "", ["b", "c", "x"], ["y"], "")]
    segments = segments_of(order, {"ort0": None})
    assert segments == [{"entry": "taso_seg0", "kernels": [0, 1]}, {"step": 2}, {"entry": "taso_seg2", "kernels": [3]}]
    # x goes up once; c (read only by a kernel) never comes down; y, a graph output, does
    assert transfers(order, segments, buffers, {}) == [(["x"], ["a"]), (["b"], ["y"])]
    # an output copied from c (it is the same tensor as an intermediate) is copied on the host
    assert transfers(order, segments, buffers, {1: "c"}) == [(["x"], ["a", "c"]), (["b"], ["y"])]


@needs_nvcc
@pytest.mark.parametrize("build", [_conv_lrn_conv, _nonzero, _region_output_read_by_a_kernel,
                                   lambda path: save(get("topk_op11").build(), path)],
                         ids=["blocked-convs", "data-dependent-shape", "region-output-read-after", "topk"])
def test_cuda_modules_run_regions_between_their_kernels(tmp_path: Path, build: Callable[[Path], Path]) -> None:
    """`--target cuda` compiles models with nodes outside the algebra too: they run in ORT on the host
    between CUDA segments (on the CPU emulation of the CUDA runtime where there is no GPU)."""
    path = build(tmp_path / "m.onnx")
    model = load_model(path)
    out = tmp_path / "out"
    report = compile_graph(model.graph, out, target=CUDA, write_region=region_writer(model.origin))
    assert report.regions >= 1 and report.kernel_nodes >= 1
    if not device_count():
        shutil.copyfile(compile_emulated((out / "model.cu").read_text()), out / "model.so")
    compiled = CompiledModel(out)
    for seed in (0, 1):  # twice: the device keeps its buffers between runs
        feeds = random_inputs(compiled, seed)
        result = compare_outputs(ort_run(path, feeds), compiled.run(feeds))
        assert result.ok and result.max_rel <= 1e-5, result


def test_a_region_binds_the_arena_once(tmp_path: Path) -> None:
    """The arena never moves, so a region between kernels binds nothing on each run (building ORT's
    IOBinding each run made an LSTM region 33 us instead of 8); a region that writes a graph output
    binds that output, the caller's array, on each run."""
    compiled, _, r = _compile(_conv_lrn_conv(tmp_path / "m.onnx"), tmp_path / "out")
    (run,) = compiled.regions.values()
    assert (run.inputs, run.outputs) == ([], [])
    for seed in (1, 2):
        feeds = random_inputs(compiled, seed)
        assert compare_outputs(ort_run(tmp_path / "m.onnx", feeds), compiled.run(feeds)).max_rel <= 1e-4
    compiled, _, r = _compile(_region_output_read_by_a_kernel(tmp_path / "o.onnx"), tmp_path / "out2")
    (run,) = compiled.regions.values()
    assert run.outputs == ["n"] and compare_outputs(r["want"], r["got"]).max_rel <= 1e-6
