"""`--target cuda` for whole models: nvcc builds the module; without a GPU the same CUDA source runs
under the CPU emulation of codegen.backends.cuda.emulate and must match ONNX Runtime."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from benchmarks import models
from taso_py.cli import main
from taso_py.codegen.backends.cuda import device_count, nvcc
from taso_py.codegen.backends.cuda.build import NVCC_FLAGS
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


def nc_loads_of_written_buffers(ptx: str) -> list[str]:
    """`ld.global.nc` instructions (loads through the read-only cache, stale for memory the kernel
    writes) whose address may derive from a parameter that some `st.global` of the kernel writes
    through: registers carry the parameters they are computed from, flow-insensitively."""
    found = []
    for entry in re.split(r"\.entry ", ptx)[1:]:
        name = entry.split("(", 1)[0]
        instructions = [line.strip().rstrip(";") for line in entry.splitlines()]
        origin: dict[str, set[str]] = {}
        changed = True
        while changed:  # a fixpoint: loop bodies assign registers used before them
            changed = False
            for ins in instructions:
                m = re.match(r"(?:@!?%\w+\s+)?([\w.]+)\s+(%\w+),\s*(.*)", ins)
                if not m or m.group(1).startswith(("st.", "setp", "bra")):
                    continue
                op, dest, rest = m.groups()
                params = set(re.findall(r"\[(\w+_param_\d+)\]", rest)) if op.startswith("ld.param") else set()
                if not op.startswith("ld."):  # a loaded value is data, not an address of its source
                    for reg in re.findall(r"%\w+", rest):
                        params |= origin.get(reg, set())
                if not params <= origin.setdefault(dest, set()):
                    origin[dest] |= params
                    changed = True
        written = set().union(*(origin.get(reg, set()) for ins in instructions if ins.startswith("st.global")
                                for reg in re.findall(r"\[(%\w+)", ins)))
        found += [f"{name}: {ins}" for ins in instructions if ins.startswith("ld.global.nc")
                  for reg in re.findall(r"\[(%\w+)", ins) if origin.get(reg, set()) & written]
    return found


def test_the_read_only_cache_check_sees_a_select_of_an_output_and_an_input() -> None:
    """The PTX nvcc made of a max-reduction when MAX was a macro (an H200 returned wrong maxima)."""
    ptx = """.visible .entry _Z5k1_k0PfS_S_(
.param .u64 _Z5k1_k0PfS_S__param_0,
.param .u64 _Z5k1_k0PfS_S__param_1
)
{
ld.param.u64 %rd22, [_Z5k1_k0PfS_S__param_0];
ld.param.u64 %rd24, [_Z5k1_k0PfS_S__param_1];
cvta.to.global.u64 %rd1, %rd22;
cvta.to.global.u64 %rd25, %rd24;
add.s64 %rd3, %rd25, %rd26;
st.global.u32 [%rd3], %r23;
$L__BB1_6:
ld.global.nc.f32 %f6, [%rd1];
setp.gt.f32 %p5, %f9, %f6;
mov.u64 %rd40, %rd3;
@%p5 bra $L__BB1_11;
mov.u64 %rd40, %rd37;
$L__BB1_11:
ld.global.nc.f32 %f3, [%rd40];
st.global.f32 [%rd3], %f3;
}"""
    assert nc_loads_of_written_buffers(ptx) == ["_Z5k1_k0PfS_S_: ld.global.nc.f32 %f3, [%rd40]"]


@needs_nvcc
def test_no_kernel_reads_a_buffer_it_writes_through_the_read_only_cache(tmp_path: Path) -> None:
    """Fuzz case 130383 on an H200: ReduceMax over a Concat accumulates in its output in global
    memory; with MIN/MAX as macros nvcc loaded the running maximum through a select of its address
    and an input's, via the read-only cache, and got a stale value (the emulation cannot see that)."""
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [5, 16])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1])
    a = onnx.helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [5, 16])  # abs in memory, not inlined
    nodes = [onnx.helper.make_node("Abs", ["x"], ["a"]),
             onnx.helper.make_node("Concat", ["a", "x", "x"], ["c"], axis=1),
             onnx.helper.make_node("ReduceMax", ["c"], ["y"], axes=[0, 1], keepdims=1)]
    path = tmp_path / "m.onnx"
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph(nodes, "g", [x], [y, a]),
                                     opset_imports=[onnx.helper.make_opsetid("", 17)]), path)
    compile_graph(load_model(path).graph, tmp_path / "out", target=CUDA)
    ptx = tmp_path / "m.ptx"
    subprocess.run([nvcc(), *NVCC_FLAGS[:1], "-std=c++17", "-w", "-arch=sm_90", "-ptx",
                    str(tmp_path / "out" / "model.cu"), "-o", str(ptx)], check=True, capture_output=True)
    assert "ld.global.nc" in ptx.read_text()  # the inputs are read through it
    assert nc_loads_of_written_buffers(ptx.read_text()) == []
