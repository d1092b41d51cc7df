"""`--target accel`: whole models with their convolutions and matmuls on the simulated accelerator
(int8), the other operators on the host, checked against ONNX Runtime within the scheme's tolerance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from benchmarks import models
from taso_py.cli import main
from taso_py.codegen.graph import compile_graph
from taso_py.codegen.graph.compiler import prepare
from taso_py.codegen.runtime import CompiledModel, random_inputs
from taso_py.codegen.target import ACCEL
from taso_py.graph import Graph
from taso_py.onnx_io import load_model
from taso_py.runtime import compare_outputs
from taso_py.runtime import run as ort_run
from taso_py.types import TensorType


@pytest.mark.parametrize("name", ["resnet50", "bert"])
def test_quantized_model_matches_float(tmp_path: Path, name: str) -> None:
    source = tmp_path / f"{name}.onnx"
    onnx.save(models.build(name, "small"), source)
    out = tmp_path / f"{name}.accel"
    done = CliRunner().invoke(main, ["compile", str(source), "--target", "accel", "--no-optimize", "-o", str(out),
                                     "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["accel_layers"] > 0
    done = CliRunner().invoke(main, ["run", str(out), "--check", "--json"])
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert result["check"]["ok"] and result["check"]["max_rel_error"] <= ACCEL.rtol
    assert result["accelerator"]["cycles"] > 0 and result["accelerator"]["macs"] > 0


def test_offloaded_layers_are_the_convolutions_and_projections() -> None:
    g = prepare(load_model(models.build("resnet50", "small")).graph)
    convs = [n for n in g.nodes.values() if n.op.name == "conv2d"]
    assert convs and all(ACCEL.offload(g, n) for n in convs)
    g = prepare(load_model(models.build("bert", "small")).graph)
    matmuls = [n for n in g.nodes.values() if n.op.name == "matmul"]
    by_weight = [n for n in matmuls if g.weight(n.inputs[1]) is not None]
    assert by_weight and all(ACCEL.offload(g, n) for n in by_weight)
    assert not any(ACCEL.offload(g, n) for n in matmuls if n not in by_weight)  # attention: both operands data


def test_a_model_without_layers_runs_on_the_host(tmp_path: Path) -> None:
    g = Graph()
    x = g.add_input("x", TensorType((2, 8)))
    (y,) = g.add("relu", [x])
    g.set_outputs([y], ["y"])
    report = compile_graph(g, tmp_path / "m", target=ACCEL)
    assert report.accel_layers == 0
    model = CompiledModel(tmp_path / "m")
    feeds = random_inputs(model)
    np.testing.assert_array_equal(model.run(feeds)["y"], np.maximum(feeds["x"], 0))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "bert"])
def test_full_size_quantized_model(tmp_path: Path, name: str) -> None:
    model = load_model(models.build(name, "full"))
    from taso_py.onnx_io import save_model
    compile_graph(model.graph, tmp_path / name, target=ACCEL, write_onnx=lambda p: save_model(model, p))
    compiled = CompiledModel(tmp_path / name)
    feeds = random_inputs(compiled)
    result = compare_outputs(ort_run(tmp_path / name / "model.onnx", feeds), compiled.run(feeds))
    assert result.max_rel <= ACCEL.rtol, result
