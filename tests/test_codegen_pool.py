"""What compiled modules run on: the thread pool (many small jobs, concurrent callers, one thread,
fork), the emitter's guarded vector loops and fused index arithmetic, the machine's measured
limits and the compiler's cost model built on them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from taso_py.codegen import machine, te
from taso_py.codegen.backends.c import build
from taso_py.codegen.backends.c.emit import register_lanes
from taso_py.codegen.cost import KernelCost
from taso_py.codegen.lower import lower
from taso_py.codegen.lower.simplify import simplify
from taso_py.codegen.schedule import create_schedule
from taso_py.codegen.te.expr import Var
from taso_py.codegen.topi import registry
from taso_py.codegen.tune.space import Config
from taso_py.cost.model import OpCall
from taso_py.ops import OPS
from taso_py.ops.conv import Conv2dAttrs
from taso_py.types import TensorType


def _scale_kernel(n: int) -> object:
    """out[i, j] = 2 * x[i, j] + 1 over n rows in parallel."""
    x = te.placeholder((n, 24), name="x")
    y = te.compute((n, 24), lambda i, j: x[i, j] * 2.0 + 1.0, name="y")
    s = create_schedule([y])
    s[y].parallel(s[y].leaf[0])
    return build(lower(s, [x, y], "scale"))


def test_many_small_parallel_jobs_are_each_complete() -> None:
    mod = _scale_kernel(37)
    rng = np.random.default_rng(0)
    for _ in range(500):
        x = rng.standard_normal((37, 24)).astype(np.float32)
        out = np.zeros_like(x)
        mod["scale"](x, out)
        np.testing.assert_array_equal(out, x * 2 + 1)


def test_concurrent_callers_each_get_their_result() -> None:
    """A second caller while the pool is busy runs its loop itself."""
    mod = _scale_kernel(301)
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(200):
            x = rng.standard_normal((301, 24)).astype(np.float32)
            out = np.zeros_like(x)
            mod["scale"](x, out)
            if not np.array_equal(out, x * 2 + 1):
                errors.append(f"thread {seed}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def _run_script(script: str, env: dict[str, str]) -> str:
    """`script` (formatted with the repository root) in a Python process of its own, with `env`
    added to the environment: its stdout, once it exited 0."""
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", script.format(root=root)], env={**os.environ, **env}, timeout=120,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


SCRIPT = """
import os, sys, numpy as np
sys.path.insert(0, {root!r})
from tests.test_codegen_pool import _scale_kernel
mod = _scale_kernel(64)
x = np.arange(64 * 24, dtype=np.float32).reshape(64, 24)
out = np.zeros_like(x)
mod["scale"](x, out)
assert np.array_equal(out, x * 2 + 1)
pid = os.fork()
if pid == 0:  # the child's pool has no workers until it makes its own
    out[:] = 0
    mod["scale"](x, out)
    os._exit(0 if np.array_equal(out, x * 2 + 1) else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


SHARED_CORE = """
import ctypes, os, sys, numpy as np
sys.path.insert(0, {root!r})
os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})  # both pool threads on one core
from tests.test_codegen_pool import _scale_kernel
mod = _scale_kernel(1 << 18)  # jobs of milliseconds: longer than a time slice of the shared core
x = np.random.default_rng(0).standard_normal((1 << 18, 24)).astype(np.float32)
for _ in range(40):
    out = np.zeros_like(x)
    mod["scale"](x, out)
    assert np.array_equal(out, x * 2 + 1)
spells = mod.lib.taso_pool_solo_spells
spells.restype = ctypes.c_long
print(spells())
"""


def test_a_worker_kept_off_its_core_sends_the_loops_to_the_caller_alone() -> None:
    """Two pool threads made to share one core: the worker waits for the core while it holds
    chunks, so the pool runs loops on the caller alone for a while (and results stay right)."""
    out = _run_script(SHARED_CORE, {"TASO_NUM_THREADS": "2", "TASO_SOLO_MS": "1"})
    assert int(out) > 0


def _matmul_kernel(n: int) -> object:
    """c = a @ b (n x n), rows in parallel and not vectorized: chunks of milliseconds."""
    a = te.placeholder((n, n), name="a")
    b = te.placeholder((n, n), name="b")
    r = te.reduce_axis(n, "r")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
    s = create_schedule([c])
    s[c].parallel(s[c].leaf[0])
    return build(lower(s, [a, b, c], "matmul"))


PULL = """
import ctypes, os, subprocess, sys, numpy as np
sys.path.insert(0, {root!r})
from tests.test_codegen_pool import _matmul_kernel
mod = _matmul_kernel(256)
a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
c = np.zeros_like(a)
mod["matmul"](a, a, c)  # starts the pool: its one worker is the new thread
while not (worker := mod.lib.taso_pool_worker_tid(0)):  # set as the worker starts
    pass
mine, other = sorted(os.sched_getaffinity(0))[:2]
os.sched_setscheduler(worker, os.SCHED_IDLE, os.sched_param(0))  # and yields it to that process
os.sched_setaffinity(0, {{mine}})
busy = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                        preexec_fn=lambda: os.sched_setaffinity(0, {{other}}))
try:
    for _ in range(20):
        os.sched_setaffinity(worker, {{other}})  # the worker shares its core with a busy process
        c[:] = 0
        mod["matmul"](a, a, c)
        np.testing.assert_allclose(c, a @ a, rtol=1e-4, atol=1e-3)
finally:
    busy.kill()
pulls = mod.lib.taso_pool_pulls
pulls.restype = ctypes.c_long
print(pulls())
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_caller_about_to_sleep_pulls_the_worker_that_holds_a_chunk() -> None:
    """The worker's core is shared with a busy process: the caller, done with its chunks while the
    worker waits for its core holding one, hands the worker its own core before it sleeps."""
    out = _run_script(PULL, {"TASO_NUM_THREADS": "2", "TASO_SOLO_MS": "0"})
    assert int(out) > 0


MOVE_OFF = """
import ctypes, os, sys, time, numpy as np
sys.path.insert(0, {root!r})
from tests.test_codegen_pool import _scale_kernel
mod = _scale_kernel(1 << 12)
x = np.ones((1 << 12, 24), np.float32)
out = np.zeros_like(x)
mod["scale"](x, out)  # starts the pool: its one worker is the new thread
while not (worker := mod.lib.taso_pool_worker_tid(0)):  # set as the worker starts
    pass
cpus = os.sched_getaffinity(0)
caller_cpu = min(cpus)
os.sched_setaffinity(0, {{caller_cpu}})
os.sched_setaffinity(worker, {{caller_cpu}})  # the two pool threads on one CPU, as the balancer may leave them
moves = mod.lib.taso_pool_moves
moves.restype = ctypes.c_long
for _ in range(20):
    out[:] = 0
    mod["scale"](x, out)
    assert np.array_equal(out, x * 2 + 1)
    time.sleep(0.01)  # the CPU they share idles: a worker woken for a job the caller ran alone gets it
print(moves(), sorted(os.sched_getaffinity(worker)) == sorted(cpus))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_worker_on_the_callers_cpu_moves_off_it_and_keeps_its_cpus() -> None:
    """A worker that starts a job on the caller's CPU migrates to another of its CPUs, and then
    may run on every CPU it could before (the narrowing lasts one system call)."""
    out = _run_script(MOVE_OFF, {"TASO_NUM_THREADS": "2", "TASO_SPIN_US": "0", "TASO_SOLO_MS": "0"})  # no solo spells
    moves, kept = out.split()
    assert int(moves) >= 1 and kept == "True"


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_a_forked_child_and_any_thread_count_run_the_pool(threads: str, tmp_path: Path) -> None:
    _run_script(SCRIPT, {"TASO_NUM_THREADS": threads})  # it exits non-zero if a result is wrong


def test_a_split_tail_is_vector_code_with_a_guarded_fallback() -> None:
    x = te.placeholder((5, 40), name="x")
    y = te.compute((5, 40), lambda i, j: te.max_(x[i, j], te.const(0.0)), name="y")
    s = create_schedule([y])
    _, j = s[y].leaf
    _, ji = s[y].split(j, 16)  # 40 = 2 x 16 + 8: the last chunk is guarded
    s[y].vectorize(ji)
    mod = build(lower(s, [x, y], "relu_tail"))
    assert f"v{register_lanes(16)}_float32" in mod.source and "#pragma omp simd" in mod.source
    a = np.random.default_rng(1).standard_normal((5, 40)).astype(np.float32)
    out = np.full_like(a, np.nan)
    mod["relu_tail"](a, out)
    np.testing.assert_array_equal(out, np.maximum(a, 0))


def test_a_fused_index_rebuilt_from_its_parts_is_linear_again() -> None:
    f = Var("f")
    rebuilt = ((f // 7) // 5) * 35 + ((f // 7) % 5) * 7 + f % 7
    assert str(simplify(rebuilt * 3 + 2, {f: (0, 139)})) == "f * 3 + 2"


def test_element_wise_planes_fuse_into_whole_vectors() -> None:
    """relu on 1 x 8 x 7 x 7: 392 floats, 24 whole vectors once the planes are fused."""
    x = te.placeholder((1, 8, 7, 7), name="x")
    (y,) = registry.compute("relu", [x], None, [TensorType((1, 8, 7, 7))])
    f = lower(registry.schedule_group([y], Config()), [x, y], "relu_planes")
    src = build(f).source
    assert f"v{register_lanes(16)}_float32" in src


def test_machine_limits_are_measured_once_per_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    found = machine.limits()
    assert found.peak() > 1.0 and found.bandwidth() > 0.5
    assert found.peak(1) <= found.peak() * 1.05  # more threads, no less
    cached = json.loads((tmp_path / "machine.json").read_text())
    assert len(cached) == 1
    monkeypatch.setattr(machine, "measure", lambda *_: pytest.fail("measured twice"))
    assert machine.limits() == found


def _call(op: str, shapes: list[tuple[int, ...]], attrs: object, constant: tuple[bool, ...]) -> OpCall:
    ins = tuple(TensorType(s) for s in shapes)
    a = OPS[op].normalize(attrs, list(ins)) if OPS[op].normalize else attrs
    return OpCall(OPS[op], a, ins, tuple(OPS[op].shape(list(ins), a)), constant)


def test_the_kernel_cost_model_knows_winograd_memory_bound_layers_and_dispatches() -> None:
    model = KernelCost(machine.Limits("test", {"2": 200.0}, {"2": 20.0}), threads=2)
    three = _call("conv2d", [(1, 64, 56, 56), (64, 64, 3, 3)], Conv2dAttrs(pad=(1, 1, 1, 1)), (False, True))
    strided = _call("conv2d", [(1, 64, 112, 112), (64, 64, 3, 3)], Conv2dAttrs(pad=(1, 1, 1, 1), stride=(2, 2)),
                    (False, True))
    assert model.cost(three) < 0.6 * model.cost(strided)  # same FLOPs; Winograd takes the stride-1 one
    fc = _call("matmul", [(1, 4096), (4096, 4096)], None, (False, True))
    assert model.cost(fc) == pytest.approx(4 * (4096 * 4096 + 8192) / 20e6 + 0.003, rel=1e-3)  # bandwidth
    relu = _call("relu", [(1, 64, 56, 56)], None, (False,))
    assert model.cost(relu) < 0.05  # fuses into the kernel before it


def test_an_index_split_into_digits_and_put_back_together_is_the_loop_variable() -> None:
    """(f // 128 % 8) * 128 + f % 128 + f // 1024 * 1024 is f (a reshape inside a fused loop)."""
    f, i, j = Var("f"), Var("i"), Var("j")
    digits = ((f // 128) % 8) * 128 + f % 128 + (f // 1024) * 1024
    assert str(simplify(digits, {f: (0, 2047)})) == "f"
    split = i * 16 + j
    rebuilt = ((split // 128) % 8) * 128 + split % 128 + (split // 1024) * 1024
    assert str(simplify(rebuilt, {i: (0, 127), j: (0, 15)})) == "i * 16 + j"
    assert str(simplify(((f // 4) % 3) * 4 + f % 4, {f: (0, 99)})) == "f % 12"  # no outer digit: a wider remainder


def _compile_onnx(tmp_path: Path, name: str, nodes: list, x: list[int], y: list[int], inits: tuple = (),
                  opset: int = 17) -> tuple[Path, Path]:
    """A model of one float input `x` and output `y`, saved as `name`.onnx and compiled for the CPU into
    the directory `name`: (model, directory)."""
    from onnx import TensorProto, helper

    from taso_py.codegen.graph import compile_graph
    from taso_py.onnx_io import load_model

    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], list(inits))
    opsets = [helper.make_opsetid("", opset)]
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=opsets,
                                       ir_version=helper.find_min_ir_version_for(opsets)).SerializeToString())
    compile_graph(load_model(path).graph, tmp_path / name)
    return path, tmp_path / name


def _error_against_ort(path: Path, directory: Path) -> float:
    """max|a-b| / max|a| of the compiled module against ORT on the model, seeded random inputs."""
    from taso_py.codegen.runtime import CompiledModel, random_inputs
    from taso_py.runtime import compare_outputs
    from taso_py.runtime import run as ort_run

    compiled = CompiledModel(directory)
    feeds = random_inputs(compiled)
    return compare_outputs(ort_run(path, feeds), compiled.run(feeds)).max_rel


def test_a_reshaped_gelu_loads_by_the_loop_variable_and_cubes_without_powf(tmp_path: Path) -> None:
    """GPT-2's tanh GELU after a reshape took 17 ns an element: every load divided its index into
    digits and put them back together, and powf(x, 3) is a libm call no loop vectorizes."""
    from onnx import TensorProto, helper

    def scalar(name: str, value: float) -> object:
        return helper.make_tensor(name, TensorProto.FLOAT, [], [value])

    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Pow", ["r", "three"], ["p"]),
             helper.make_node("Mul", ["p", "c"], ["m"]), helper.make_node("Add", ["r", "m"], ["a"]),
             helper.make_node("Tanh", ["a"], ["y"])]
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [2, 8, 128])
    path, out = _compile_onnx(tmp_path, "gelu", nodes, [16, 128], [2, 8, 128],
                              (shape, scalar("three", 3.0), scalar("c", 0.044715)))
    source = (out / "model.c").read_text()
    kernels = source[source.index("void k0("):]
    assert "powf" not in kernels and " / " not in kernels and " % " not in kernels, kernels[:2000]
    assert _error_against_ort(path, out) <= 1e-6


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: every loop runs on it")
def test_kernels_too_short_to_share_run_on_one_thread(tmp_path: Path) -> None:
    """Waking the pool costs microseconds: a softmax over 4 x 17 runs on the caller alone (its loops'
    thread limit 1), a 256^3 matrix product on every thread (limit 0: the pool's)."""
    from onnx import helper, numpy_helper

    def limits(op: str, inputs: list[str], shape: list[int], inits: tuple = ()) -> set[str]:
        _, out = _compile_onnx(tmp_path, op, [helper.make_node(op, inputs, ["y"])], shape, shape, inits)
        return set(re.findall(r"taso_parallel_for\(\d+, \w+, \(void\*\)&ctx_, (\d+)\)", (out / "model.c").read_text()))

    assert limits("Softmax", ["x"], [4, 17]) == {"1"}
    w = numpy_helper.from_array(np.ones((256, 256), np.float32), "w")
    assert "0" in limits("MatMul", ["x", "w"], [256, 256], (w,))


def test_a_math_call_in_a_split_tail_loop_runs_unguarded_where_every_lane_is_in_range(tmp_path: Path) -> None:
    """Rows of 17 split into vectors of 16: under the tail's `if`, gcc calls expf lane by lane (libmvec's
    vector variants are `notinbranch`); where the whole vector is in range the loop has no `if`."""
    from onnx import helper

    path, out = _compile_onnx(tmp_path, "softmax", [helper.make_node("Softmax", ["x"], ["y"])], [68, 17], [68, 17])
    source = (out / "model.c").read_text()
    assert re.search(r"#pragma omp simd\n\s*for \([^\n]*\n\s*\w+\[[^\n]*\] = expf\(", source), source
    assert _error_against_ort(path, out) <= 1e-6


def test_min_and_max_evaluate_each_operand_once_in_its_own_type() -> None:
    """MIN and MAX of the C prelude are functions chosen by the operands' common type: as macros they
    repeated their operands, and a bilinear resize's nested clamps grew into conditionals gcc did
    not vectorize."""
    import ctypes

    from taso_py.codegen.backends.c.build import compile_shared
    from taso_py.codegen.backends.c.emit import PRELUDE_TAIL

    source = "#include <stdint.h>\n" + PRELUDE_TAIL + """
static int calls = 0;
static float one(void) { ++calls; return 1.0f; }
int min_calls(void) { calls = 0; volatile float r = MIN(MAX(one(), 0.0f), 2.0f); (void)r; return calls; }
int64_t min_i64(int64_t a, int64_t b) { return MIN(a, b); }
double max_f64(double a, double b) { return MAX(a, b); }
int32_t max_u8(uint8_t a, uint8_t b) { return MAX(a, b); }
float min_mixed(int32_t a, float b) { return MIN(a, b); }
"""
    lib = ctypes.CDLL(str(compile_shared(source)))
    lib.min_i64.restype, lib.min_i64.argtypes = ctypes.c_int64, [ctypes.c_int64] * 2
    lib.max_f64.restype, lib.max_f64.argtypes = ctypes.c_double, [ctypes.c_double] * 2
    lib.max_u8.argtypes = [ctypes.c_uint8] * 2
    lib.min_mixed.restype, lib.min_mixed.argtypes = ctypes.c_float, [ctypes.c_int32, ctypes.c_float]
    assert lib.min_calls() == 1
    assert lib.min_i64(2**41, 2**40 + 1) == 2**40 + 1  # not truncated to int
    assert lib.max_f64(0.1, 0.2) == 0.2 and lib.max_u8(200, 100) == 200
    assert lib.min_mixed(3, 2.5) == 2.5


def test_a_resize_loops_over_its_output_rows(tmp_path: Path) -> None:
    """A gather whose rows (12 wide) are not a whole number of vectors runs row by row, the row's
    coordinates computed once, instead of one loop over every element split into vectors (each
    element dividing its index back into coordinates)."""
    from onnx import TensorProto, helper

    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1.0, 1.0, 2.0, 2.0])
    resize = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    path, out = _compile_onnx(tmp_path, "resize", [resize], [1, 4, 6, 6], [1, 4, 12, 12], (scales,), opset=13)
    source = (out / "model.c").read_text()
    assert re.search(r"#pragma omp simd\n\s*for \(int32_t (\w+) = 0; \1 < 12; \+\+\1\)", source), source[-3000:]
    assert _error_against_ort(path, out) <= 1e-6
