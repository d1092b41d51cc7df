"""The `taso` command: info, convert, and the bad-input contract — one line on stderr,
exit 2, no traceback, nothing written, the input never modified."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from benchmarks import models
from taso_py import __version__
from taso_py.cli import main
from taso_py.cli.common import search_settings
from taso_py.cli.info import summarize
from taso_py.errors import InputError
from taso_py.onnx_io import exporter, load_model

EXAMPLE = Path(__file__).parent.parent / "examples" / "inception_v3_small.onnx"


def taso(*args: str | Path):
    return CliRunner().invoke(main, [str(a) for a in args])


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tiny(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "tiny", inputs, outputs, inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name: str, shape: list | None, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def assert_bad_input(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("taso: error: "), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]


def test_timeout_bounds_either_search_and_each_has_its_own_default() -> None:
    """`--timeout` was capped at eqsat's 5 s, so a slower CPU could not give saturation more time
    (NasRNN on a Zen 1 core: 2 iterations in 5 s, 6 in 10 s)."""
    from taso_py.search.backtracking import Settings
    from taso_py.search.settings import EqsatSettings

    assert search_settings("eqsat").timeout == EqsatSettings.timeout == 5.0
    assert search_settings("eqsat", timeout=12.0).timeout == 12.0
    assert search_settings("backtrack").timeout == Settings.timeout == 30.0
    assert search_settings("backtrack", timeout=2.0).timeout == 2.0


def test_rounds_reach_equality_saturation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--rounds` is eqsat's number of saturations, one unless asked (a second gained on none of 56
    suite and corpus models)."""
    from taso_py.search import eqsat
    from taso_py.search.backtracking import Outcome

    path = tmp_path / "m.onnx"
    onnx.save(models.build("squeezenet", "small"), path)
    asked: list[int] = []

    def search(graph, rules, model, settings, *args):
        asked.append(settings.rounds)
        return Outcome(graph, 1.0, 1.0, [])

    monkeypatch.setattr(eqsat, "search", search)
    for flags in ([], ["--rounds", "3"]):
        done = taso("optimize", path, "-o", tmp_path / "out.onnx", "--cost", "analytical", "--json", *flags)
        assert done.exit_code == 0, done.output
    assert asked == [1, 3]
    assert taso("optimize", path, "--rounds", "0").exit_code == 2


def test_version_and_help() -> None:
    assert taso("--version").output.strip() == f"taso, version {__version__}"
    result = taso("--help")
    assert result.exit_code == 0 and "info" in result.output and "convert" in result.output


def test_console_script_runs_as_a_module() -> None:
    proc = subprocess.run([sys.executable, "-m", "taso_py", "info", str(EXAMPLE), "--json"], capture_output=True,
                          text=True, check=True)
    assert json.loads(proc.stdout)["opaque_nodes"] == 0


def test_info_json_on_the_example() -> None:
    result = taso("info", EXAMPLE, "--json")
    assert result.exit_code == 0
    info = json.loads(result.stdout)
    assert info["opaque_nodes"] == 0 and info["algebra_nodes"] == info["nodes"] > 100
    assert info["ops"]["conv2d"] == 41 and info["opset"] == 17
    assert info["inputs"] == [{"name": "input", "shape": [1, 3, 75, 75], "dtype": "float32"}]
    assert info["parameters"] == 171_054


def test_info_text_table() -> None:
    result = taso("info", EXAMPLE)
    assert result.exit_code == 0
    assert "0 opaque" in result.stdout and "conv2d" in result.stdout and "1x3x75x75" in result.stdout


@pytest.mark.parametrize("name", models.names())
def test_info_reports_no_opaque_nodes_on_the_suite(name: str) -> None:
    assert summarize(load_model(models.build(name, "small")))["opaque_nodes"] == 0


def test_info_reports_opaque_nodes(tmp_path: Path) -> None:
    k = numpy_helper.from_array(np.array([2], np.int64), "k")
    model = tiny([helper.make_node("TopK", ["x", "k"], ["v", "i"]), helper.make_node("Relu", ["v"], ["y"])],
                 [vi("x", [3, 5])], [vi("y", [3, 2]), vi("i", [3, 2], TensorProto.INT64)], [k])
    info = json.loads(taso("info", save(model, tmp_path / "m.onnx"), "--json").stdout)
    assert info["opaque_ops"] == {"TopK": 1} and info["ops"] == {"relu": 1}


def test_convert_round_trips_and_checks(tmp_path: Path) -> None:
    before = digest(EXAMPLE)
    out = tmp_path / "out.onnx"
    result = taso("convert", EXAMPLE, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["check"]["ok"] and report["check"]["max_rel_error"] <= 1e-5
    onnx.checker.check_model(str(out), full_check=True)
    assert digest(EXAMPLE) == before


def test_convert_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    model = save(models.build("nasrnn", "small"), tmp_path / "m.onnx")
    before = digest(model)
    assert_bad_input(taso("convert", model, "-o", model), "refusing to overwrite")
    assert digest(model) == before


def test_convert_check_failure_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exporter that changes a weight: the ORT check says no (exit 1) and nothing is written."""
    real = exporter._export

    def corrupt(*args: object) -> tuple[onnx.ModelProto, list]:
        proto, external = real(*args)
        w = next(t for t in proto.graph.initializer if t.data_type == TensorProto.FLOAT and len(t.dims) == 2)
        w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) + 1, w.name))
        return proto, external

    monkeypatch.setattr(exporter, "_export", corrupt)
    model = save(models.build("nasrnn", "small"), tmp_path / "m.onnx")
    result = taso("convert", model, "-o", tmp_path / "out.onnx")
    assert result.exit_code == 1
    assert "differs from the original" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_dynamic_dims_need_an_input_shape(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((3, 2), np.float32), "w")
    model = save(tiny([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", ["batch", 3])], [vi("y", ["batch", 2])],
                      [w]), tmp_path / "m.onnx")
    assert_bad_input(taso("info", model), "dynamic dimensions", "axis 0 ('batch')", "--input-shape x=")
    result = taso("info", model, "--input-shape", "x=5,3", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["outputs"][0]["shape"] == [5, 2]
    assert_bad_input(taso("info", model, "--input-shape", "x=5"), "has 1 dims")
    assert_bad_input(taso("info", model, "--input-shape", "nope=5,3"), "inputs are: x")
    assert_bad_input(taso("info", model, "--input-shape", "x:5,3"), "bad --input-shape")


def _cyclic() -> onnx.ModelProto:
    return tiny([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])],
                [vi("x", [2])], [vi("b", [2])])


def _unknown_dtype() -> onnx.ModelProto:
    return tiny([helper.make_node("Identity", ["x"], ["y"])], [vi("x", [2], TensorProto.COMPLEX64)],
                [vi("y", [2], TensorProto.COMPLEX64)])


def _shape_mismatch() -> onnx.ModelProto:
    return tiny([helper.make_node("Add", ["x", "z"], ["y"])], [vi("x", [3]), vi("z", [4])], [vi("y", [3])])


def _conv_channels() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((8, 5, 3, 3), np.float32), "w")
    return tiny([helper.make_node("Conv", ["x", "w"], ["y"])], [vi("x", [1, 3, 8, 8])], [vi("y", [1, 8, 6, 6])], [w])


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _reshape_copies_a_missing_dim() -> onnx.ModelProto:
    """Fuzz case 177333, damaged: a 0 in a Reshape's target where the input has no such dim (an
    internal IndexError in `taso info` before)."""
    return tiny([helper.make_node("Reshape", ["x", "shape"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3, 1])],
                [_ints("shape", [2, 3, 0])])


def _dangling() -> onnx.ModelProto:
    return tiny([helper.make_node("Relu", ["ghost"], ["y"])], [vi("x", [2])], [vi("y", [2])])


@pytest.mark.parametrize("build, fragments", [
    (_cyclic, ("cycle",)),
    (_unknown_dtype, ("COMPLEX64", "not support")),
    (_shape_mismatch, ("add:", "do not broadcast")),
    (_conv_channels, ("conv2d:", "groups=1 do not fit")),
    (_dangling, ("'ghost'",)),
    (_reshape_copies_a_missing_dim, ("copies dim 2 of a rank-2 input",)),
], ids=["cycle", "dtype", "broadcast", "conv-channels", "dangling", "reshape-zero"])
def test_bad_models(tmp_path: Path, build, fragments: tuple[str, ...]) -> None:
    path = save(build(), tmp_path / "bad.onnx")
    before = digest(path)
    assert_bad_input(taso("info", path), *fragments)
    assert_bad_input(taso("convert", path, "-o", tmp_path / "out.onnx"), *fragments)
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx"]


@pytest.mark.parametrize("node, inits", [
    (helper.make_node("Split", ["x"], ["y", "z"], axis=0), []),
    (helper.make_node("Concat", ["x", "x"], ["y"], axis=0), []),
    (helper.make_node("Gather", ["x", "i"], ["y"], axis=0), [_ints("i", [0])]),
    (helper.make_node("Squeeze", ["x", "a"], ["y"]), [_ints("a", [0])]),
    (helper.make_node("Slice", ["x", "s", "e"], ["y"]), [_ints("s", [0]), _ints("e", [1])]),
], ids=["split", "concat", "gather", "squeeze", "slice"])
def test_an_axis_of_a_scalar_is_a_clear_error(tmp_path: Path, node: onnx.NodeProto, inits: list) -> None:
    """Fuzz case 185187, damaged: a Split whose input was made rank 0 ended `taso info` in an
    internal IndexError; so did these other operators given an axis of a scalar."""
    model = tiny([node], [vi("x", [])], [vi(o, [1]) for o in node.output], inits)
    assert_bad_input(taso("info", save(model, tmp_path / "bad.onnx")), node.op_type, "out of range for rank 0")


@pytest.mark.parametrize("content, fragment", [
    (None, "no such file"),
    (b"", "empty file"),
    (b"this is not a model\n" * 10, "not an ONNX model"),
    (b"\x08\x07\x12\x04\xff\xff", "not an ONNX model"),
    ("truncated", "not an ONNX model"),
    ("tensor", "not an ONNX model"),
], ids=["missing", "empty", "text", "garbage", "truncated", "tensor-proto"])
def test_bad_files(tmp_path: Path, content: bytes | str | None, fragment: str) -> None:
    path = tmp_path / "m.onnx"
    if content == "truncated":
        data = models.build("squeezenet", "small").SerializeToString()
        path.write_bytes(data[: len(data) // 2])
    elif content == "tensor":
        path.write_bytes(numpy_helper.from_array(np.ones(3, np.float32), "t").SerializeToString())
    elif content is not None:
        path.write_bytes(content)
    assert_bad_input(taso("info", path), fragment)
    assert_bad_input(taso("convert", path, "-o", tmp_path / "out.onnx"), fragment)
    assert not (tmp_path / "out.onnx").exists()


def test_directory_and_missing_output_dir(tmp_path: Path) -> None:
    assert_bad_input(taso("info", tmp_path), "not a file")
    assert_bad_input(taso("convert", EXAMPLE, "-o", tmp_path / "nope" / "o.onnx"), "no such directory")


def test_bundled_example_is_the_seeded_suite_model() -> None:
    """`make example` regenerates it byte for byte."""
    assert onnx.load(str(EXAMPLE)).SerializeToString() == models.build("inception_v3", "small").SerializeToString()


def test_future_opset_is_refused_by_every_command(tmp_path: Path) -> None:
    """A default-domain opset newer than onnx knows: `taso info` used to exit 0 without a word;
    now info, convert and optimize all refuse it with the same line (exit 2)."""
    newest = onnx.defs.onnx_opset_version()
    path = save(tiny([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])],
                     opset=newest + 71), tmp_path / "future.onnx")
    before = digest(path)
    for args in (("info",), ("info", "--json"), ("convert", "-o", tmp_path / "c.onnx"),
                 ("optimize", "--cost", "analytical", "-o", tmp_path / "o.onnx")):
        assert_bad_input(taso(args[0], path, *args[1:]), f"opset {newest + 71}", f"(opset {newest},")
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["future.onnx"]
    at_newest = save(tiny([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])],
                          opset=newest), tmp_path / "newest.onnx")
    assert taso("info", at_newest).exit_code == 0


def _add_model(init: TensorProto, x_shape: list[int]) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Add", ["x", init.name], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)], [init])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _bad_initializers() -> list[onnx.ModelProto]:
    """Found by the fuzzer's byte mutations: each was an internal error (KeyError: 99, a reshape error)."""
    unknown_type = numpy_helper.from_array(np.ones(4, np.float32), "w")
    unknown_type.data_type = 99
    short = numpy_helper.from_array(np.ones(4, np.float32), "w")
    short.data_type = TensorProto.DOUBLE  # 16 bytes of raw data for 4 doubles
    big = numpy_helper.from_array(np.ones(2048, np.float32), "w")  # past the skeleton's small constants
    big.data_type = TensorProto.INT8
    return [_add_model(unknown_type, [4]), _add_model(short, [4]), _add_model(big, [2048])]


@pytest.mark.parametrize("command", ["info", "optimize"])
def test_unreadable_initializers_and_huge_inputs_are_one_line_errors(tmp_path: Path, command: str) -> None:
    huge = _add_model(numpy_helper.from_array(np.ones(1, np.float32), "w"), [1 << 40, 7])
    for k, model in enumerate([*_bad_initializers(), huge]):
        path = tmp_path / f"m{k}.onnx"
        onnx.save(model, str(path))
        args = [command, str(path)] + (["-o", str(tmp_path / f"o{k}.onnx")] if command == "optimize" else [])
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (k, result.output)
        assert "internal error" not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("error", "code", "says"), [
    (MemoryError(), 2, "out of memory"),
    (ValueError("array is too big; `arr.size * arr.dtype.itemsize` is larger than the maximum possible size."), 2,
     "out of memory"),  # numpy's form of it, past the address space
    (ValueError("something else"), 3, "internal error: ValueError: something else"),
])
def test_an_allocation_past_the_machine_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    error: Exception, code: int, says: str) -> None:
    def explode(_model: object) -> dict:
        raise error
    monkeypatch.setattr(sys.modules["taso_py.cli.info"], "summarize", explode)
    monkeypatch.delenv("TASO_DEBUG", raising=False)
    path = tmp_path / "m.onnx"
    onnx.save(_add_model(numpy_helper.from_array(np.ones(4, np.float32), "w"), [4]), str(path))
    result = CliRunner().invoke(main, ["info", str(path)])
    assert result.exit_code == code and says in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("command", ["optimize", "compile"])
def test_a_check_that_does_not_fit_in_memory_is_refused_before_allocating(
        tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the fuzzer: an input of 2^31 floats (within the reader's limit) was drawn as 16 GiB of
    float64 for the check; the kernel overcommits, so the process was killed instead of refusing. And
    on a 128 GiB machine (fuzz case 41864) the check held two input sets and both models' outputs of
    8 GiB each: killed again. Here the run itself (the input and the sum, 2 GiB) fits in 2.5 GiB, the
    check (each of 2 sets: 1 GiB in, 1 GiB out of each model) does not."""
    import taso_py.runtime

    monkeypatch.setattr(taso_py.runtime, "available_memory", lambda: 5 << 29)
    path = tmp_path / "m.onnx"
    onnx.save(_add_model(numpy_helper.from_array(np.ones(1, np.float32), "w"), [1 << 27, 2]), str(path))
    result = CliRunner().invoke(main, [command, str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "checking the model on 2 input sets needs 8.0 GiB at once (at tensor 'y' (f32[134217728,2])), " \
           "more than the 2.5 GiB of memory available" in result.output
    assert not (tmp_path / "out").exists()


def test_random_inputs_that_do_not_fit_are_refused_before_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    import taso_py.runtime

    monkeypatch.setattr(taso_py.runtime, "available_memory", lambda: 1 << 20)
    with pytest.raises(InputError, match=r"random inputs for the check need 4.00 MiB, more than the 1.00 MiB"):
        taso_py.runtime.random_arrays([("x", [1 << 20], np.float32)])


@pytest.mark.parametrize("command", ["optimize", "compile"])
def test_a_model_whose_tensors_do_not_fit_at_once_is_refused_before_running(
        tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuzz case 102850: a flipped bit in a Pad's sizes made outputs of 31 GiB in all, each smaller
    than the memory; ORT allocated them for the check and the kernel killed the process. Here four
    outputs of 256 KiB each, live at once, against 1 MiB."""
    import taso_py.runtime

    monkeypatch.setattr(taso_py.runtime, "available_memory", lambda: 1 << 20)
    ops_ = ["Relu", "Exp", "Neg", "Abs"]
    nodes = [helper.make_node(op, ["x"], [f"y{i}"]) for i, op in enumerate(ops_)]
    graph = helper.make_graph(nodes, "four", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
                              [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [256, 256])
                               for i in range(len(ops_))])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    result = CliRunner().invoke(main, [command, str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    # the run: x and four outputs at once (1.25 MiB); the check: 2 sets of x and both models' outputs
    assert "checking the model on 2 input sets needs 5.75 MiB at once (at tensor 'y3' (f32[256,256])), more " \
        "than the 1.00 MiB" in result.output
    with pytest.raises(InputError, match=r"running the model needs 1.25 MiB at once \(at tensor 'y3'"):
        taso_py.runtime.check_memory(load_model(path).graph)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("ir_version, attrs, reason", [
    (99, {}, "Unsupported model IR version: 99, max supported IR version: "),
    (8, {"kernel_shape": [2], "pads": [2, 2]}, "Pad should be smaller than kernel."),
], ids=["ir-version", "pads"])
def test_errors_of_onnx_runtime_keep_their_reason_in_one_line(ir_version: int, attrs: dict, reason: str) -> None:
    """ORT puts its source file and a C++ signature before the reason (an H200 machine's older ORT
    refused a model, and the 300-character line ended inside `onnxruntime::Model::Model(...)`)."""
    import onnxruntime

    from taso_py.errors import first_line

    op = "MaxPool" if attrs else "Relu"
    model = tiny([helper.make_node(op, ["x"], ["y"], **attrs)], [vi("x", [1, 2, 5])], [vi("y", None)])
    model.ir_version = ir_version
    with pytest.raises(Exception) as caught:
        onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    line = first_line(caught.value)
    assert reason in line and "onnxruntime_src" not in line and "::" not in line, line
