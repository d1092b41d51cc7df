"""`--target cuda` for whole models: nvcc builds the module; without a GPU the same CUDA source runs
under the CPU emulation of codegen.backends.cuda.emulate and must match ONNX Runtime."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from benchmarks import models
from taso_py.cli import main
from taso_py.codegen.backends.cuda import device_count
from taso_py.codegen.backends.cuda.emulate import compile_emulated
from taso_py.codegen.graph import compile_graph
from taso_py.codegen.runtime import CompiledModel, random_inputs
from taso_py.codegen.target import CUDA
from taso_py.onnx_io import load_model, save_model
from taso_py.runtime import compare_outputs
from taso_py.runtime import run as ort_run

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@needs_nvcc
@pytest.mark.parametrize("name", ["resnet50", "bert"])
def test_whole_model_cuda_source_matches_onnx_runtime(tmp_path: Path, name: str) -> None:
    model = load_model(models.build(name, "small"))
    out = tmp_path / name
    report = compile_graph(model.graph, out, target=CUDA, write_onnx=lambda p: save_model(model, p))
    source = (out / "model.cu").read_text()
    assert report.kernels > 1 and source.count("_launch(") >= report.kernels
    assert "__global__" in source and "taso_model_run" in source
    if not device_count():  # run the same source on the CPU emulation of the CUDA runtime
        shutil.copyfile(compile_emulated(source), out / "model.so")
    compiled = CompiledModel(out)
    feeds = random_inputs(compiled)
    result = compare_outputs(ort_run(out / "model.onnx", feeds), compiled.run(feeds))
    assert result.ok and result.max_rel <= 1e-4, result


@needs_nvcc
def test_cli_cuda_without_a_gpu_is_a_clear_error(tmp_path: Path) -> None:
    if device_count():
        pytest.skip("a GPU is present: the model runs")
    source = tmp_path / "squeezenet.onnx"
    onnx.save(models.build("squeezenet", "small"), source)
    done = CliRunner().invoke(main, ["compile", str(source), "--target", "cuda", "--no-optimize",
                                     "-o", str(tmp_path / "sq.cuda")])
    assert done.exit_code == 0, done.output
    done = CliRunner().invoke(main, ["run", str(tmp_path / "sq.cuda")])
    assert done.exit_code == 2 and "no CUDA device is available" in done.output
    done = CliRunner().invoke(main, ["compile", str(source), "--target", "cuda", "--tune", "4",
                                     "-o", str(tmp_path / "t.cuda")])
    assert done.exit_code == 2 and "does not apply to --target cuda" in done.output
