"""Kernel benchmarks of the code generator, each measured side by side in one process.

Usage: ``python -m benchmarks.codegen_kernels [--tune N] [--runs R] [--threads T] [--json OUT]``

1. fp32 matmul 1024x1024x1024, GFLOP/s: our default schedule, our best schedule, numpy (BLAS).
2. ResNet's first-stage 3x3 convolution (1x64x56x56, 64 -> 64, pad 1), ms: ours in NCHW and in
   the blocked NCHW16c layout (data and weights packed beforehand, as the graph compiler runs it),
   default and best schedules, next to ONNX Runtime (T threads, `session.intra_op.allow_spinning` = 0).
3. The element-wise chain relu(a*b + c) on 4M floats: ours (one fused kernel), numpy, torch eager,
   and a C STREAM triad (a = b + s*c, OpenMP) for the machine's bandwidth; GB/s counts 16 bytes per
   element for the chain (3 reads, 1 write) and 12 for the triad.

Threads: T for our kernels (OpenMP), ORT and torch; numpy keeps OpenBLAS's own count (all cores
unless OPENBLAS_NUM_THREADS says otherwise, which must be set before Python starts). Idle OpenMP
workers follow libgomp's default (spin briefly, then sleep) unless --wait-policy says passive
(sleep at once, as ORT's allow_spinning=0 has its threads do) or active (spin).

"Best" is a grid search over a small part of each template's knob space, measured here
(labelled "grid"), or with --tune N the tuner (codegen.tune) with N trials per kernel. Every
figure is the median of R timed runs; contenders alternate in rounds, so load on the machine
hits them alike. Writes the results to benchmarks/results/codegen_kernels.json by default.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from codegen import te
from codegen.backends.c import build, compile_shared
from codegen.lower import lower
from codegen.schedule.schedule import Schedule
from codegen.topi import conv as topi_conv
from codegen.topi import linalg as _linalg  # noqa: F401  (registers matmul)
from codegen.topi import registry
from codegen.tune.space import Config
from taso_py.atomic import write_json
from taso_py.ops import OPS
from taso_py.ops.conv import Conv2dAttrs
from taso_py.types import TensorType

Kernel = Callable[[], None]
Template = Callable[[Config], tuple[Schedule, list[te.Tensor]]]

MATMUL_GRID = {"tile_m": (6, 8, 12), "tile_n": (32, 64), "pack_b": (True, False), "k_block": (256, 1 << 30)}
CONV_GRID = {"tile_w": (7, 8, 14), "tile_oc": (16, 32, 64), "ic_block": (16, 1 << 30)}
NCHWC_GRID = {"tile_w": (4, 7, 8, 14, 28)}
CONV_BLOCK = 16  # channels per block of the NCHWc layout


def median_seconds(fn: Kernel, runs: int) -> float:
    fn()  # warm-up: page faults, thread pool start
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def side_by_side(contenders: dict[str, Kernel], runs: int, rounds: int = 3) -> dict[str, float]:
    """Median seconds of each contender over `rounds` alternating rounds of `runs` runs."""
    per = max(1, runs // rounds)
    samples: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            time.sleep(0.02)  # let the previous contender's worker threads go idle
            fn()
            for _ in range(per):
                t = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in samples.items()}


def compile_template(template: Template, cfg: Config, name: str) -> Callable[[Sequence[np.ndarray]], None]:
    s, args = template(cfg)
    kernel = build(lower(s, args, name))[name]
    return lambda arrays: kernel(*arrays)


def grid_search(template: Template, arrays: Sequence[np.ndarray], grid: dict[str, Sequence[Any]],
                name: str, runs: int = 7) -> tuple[dict[str, Any], float]:
    """The fastest point of `grid` (knob -> values), each compiled and timed here."""
    best: tuple[dict[str, Any], float] | None = None
    for values in itertools.product(*grid.values()):
        knobs = dict(zip(grid, values))
        run = compile_template(template, Config(knobs), name)
        sec = median_seconds(lambda run=run: run(arrays), runs)
        if best is None or sec < best[1]:
            best = (knobs, sec)
    assert best is not None
    return best


def best_config(template: Template, arrays: Sequence[np.ndarray], grid: dict[str, Sequence[Any]], name: str,
                tune_trials: int, records: Path) -> tuple[dict[str, Any], str]:
    """The best knobs and how they were found ("grid" or "tuner, N trials")."""
    if tune_trials > 0:
        from codegen.tune.tuner import tune
        result = tune(template, lambda _args: [a.copy() for a in arrays], tune_trials, records, name=name,
                      progress=False)
        return dict(result.best.values), f"tuner, {tune_trials} trials"
    knobs, _ = grid_search(template, arrays, grid, name)
    return knobs, f"grid of {int(np.prod([len(v) for v in grid.values()]))}"


# ---- 1. matmul --------------------------------------------------------------------------------

def matmul_template(n: int) -> Template:
    def template(cfg: Config) -> tuple[Schedule, list[te.Tensor]]:
        a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
        (c,) = registry.compute("matmul", [a, b], None, [TensorType((n, n))])
        return registry.schedule_group([c], cfg), [a, b, c]
    return template


def bench_matmul(n: int, runs: int, tune_trials: int, records: Path) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    c = np.zeros((n, n), np.float32)
    arrays = [a, b, c]
    template = matmul_template(n)
    knobs, how = best_config(template, arrays, MATMUL_GRID, "matmul", tune_trials, records)
    default = compile_template(template, Config(), "mm_default")
    best = compile_template(template, Config(knobs), "mm_best")
    best(arrays)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    secs = side_by_side({"ours default": lambda: default(arrays), "ours best": lambda: best(arrays),
                         "numpy": lambda: a @ b}, runs)
    flops = 2 * n ** 3
    return {"shape": [n, n, n], "best_knobs": knobs, "best_from": how,
            "gflops": {k: round(flops / v / 1e9, 1) for k, v in secs.items()},
            "ms": {k: round(v * 1e3, 3) for k, v in secs.items()}}


# ---- 2. the ResNet 3x3 convolution ------------------------------------------------------------

def conv_template(x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: Conv2dAttrs) -> Template:
    def template(cfg: Config) -> tuple[Schedule, list[te.Tensor]]:
        x, w = te.placeholder(x_shape, name="x"), te.placeholder(w_shape, name="w")
        types = OPS["conv2d"].shape([TensorType(x_shape), TensorType(w_shape)], attrs)
        (y,) = registry.compute("conv2d", [x, w], attrs, types)
        return registry.schedule_group([y], cfg), [x, w, y]
    return template


def nchwc_template(x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: Conv2dAttrs, cb: int) -> Template:
    n, c, h, w = x_shape
    o, _, kh, kw = w_shape

    def template(cfg: Config) -> tuple[Schedule, list[te.Tensor]]:
        x = te.placeholder((n, c // cb, h, w, cb), name="x")
        wt = te.placeholder((o // cb, c // cb, kh, kw, cb, cb), name="w")
        y = topi_conv.conv2d_nchwc(x, wt, None, attrs, o)
        return registry.schedule_group([y], cfg), [x, wt, y]
    return template


def ort_conv(x: np.ndarray, w: np.ndarray, attrs: Conv2dAttrs, threads: int) -> Kernel:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=list(attrs.pad), strides=list(attrs.stride),
                            dilations=list(attrs.dilation), group=attrs.groups, kernel_shape=list(w.shape[2:]))
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, 9)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = {"x": x}
    return lambda: sess.run(None, feeds)


def bench_conv(runs: int, tune_trials: int, records: Path, threads: int) -> dict[str, Any]:
    x_shape, w_shape, cb = (1, 64, 56, 56), (64, 64, 3, 3), CONV_BLOCK
    attrs = Conv2dAttrs(pad=(1, 1, 1, 1))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(x_shape, np.float32), rng.standard_normal(w_shape, np.float32) * 0.1
    y = np.zeros(x_shape, np.float32)
    (want,) = OPS["conv2d"].ref([x, w], attrs)
    n, c, h, wd = x_shape
    xp = np.ascontiguousarray(x.reshape(n, c // cb, cb, h, wd).transpose(0, 1, 3, 4, 2))
    wp = np.ascontiguousarray(w.reshape(64 // cb, cb, c // cb, cb, 3, 3).transpose(0, 2, 4, 5, 3, 1))
    yp = np.zeros((n, 64 // cb, h, wd, cb), np.float32)
    plain, blocked = conv_template(x_shape, w_shape, attrs), nchwc_template(x_shape, w_shape, attrs, cb)
    knobs, how = best_config(plain, [x, w, y], CONV_GRID, "conv2d", tune_trials, records)
    knobs_c, how_c = best_config(blocked, [xp, wp, yp], NCHWC_GRID, "conv2d_nchwc", tune_trials, records)
    kernels = {"ours NCHW default": (compile_template(plain, Config(), "cv_d"), [x, w, y]),
               "ours NCHW best": (compile_template(plain, Config(knobs), "cv_b"), [x, w, y]),
               f"ours NCHW{cb}c default": (compile_template(blocked, Config(), "cvc_d"), [xp, wp, yp]),
               f"ours NCHW{cb}c best": (compile_template(blocked, Config(knobs_c), "cvc_b"), [xp, wp, yp])}
    for name, (fn, arrays) in kernels.items():
        fn(arrays)
        got = arrays[2] if arrays[2].ndim == 4 else arrays[2].transpose(0, 1, 4, 2, 3).reshape(x_shape)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=name)
    contenders: dict[str, Kernel] = {k: (lambda fn=fn, arrays=arrays: fn(arrays)) for k, (fn, arrays) in
                                     kernels.items()}
    contenders["onnxruntime"] = ort_conv(x, w, attrs, threads)
    secs = side_by_side(contenders, runs)
    flops = 2 * 64 * 56 * 56 * 64 * 9
    ort_s = secs["onnxruntime"]
    return {"shape": {"x": list(x_shape), "w": list(w_shape), "pad": 1}, "layout_block": cb,
            "best_knobs": {"NCHW": knobs, f"NCHW{cb}c": knobs_c}, "best_from": {"NCHW": how, f"NCHW{cb}c": how_c},
            "ms": {k: round(v * 1e3, 3) for k, v in secs.items()},
            "gflops": {k: round(flops / v / 1e9, 1) for k, v in secs.items()},
            "speed_vs_ort": {k: round(ort_s / v, 3) for k, v in secs.items()}}


# ---- 3. the element-wise chain and STREAM ------------------------------------------------------

TRIAD = r"""
#include <stddef.h>
void triad(float* restrict a, const float* restrict b, const float* restrict c, float s, long n) {
  #pragma omp parallel for simd schedule(static)
  for (long i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}
"""


def bench_chain(n: int, runs: int, threads: int) -> dict[str, Any]:
    import ctypes

    import torch
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n, np.float32) for _ in range(3))
    out = np.zeros(n, np.float32)
    ta, tb, tc = (te.placeholder((n,), name=nm) for nm in "abc")
    t = TensorType((n,))
    (prod,) = registry.compute("mul", [ta, tb], None, [t])
    (acc,) = registry.compute("add", [prod, tc], None, [t])
    (y,) = registry.compute("relu", [acc], None, [t])
    kernel = build(lower(registry.schedule_group([y], Config()), [ta, tb, tc, y], "chain"))["chain"]
    kernel(a, b, c, out)
    np.testing.assert_allclose(out, np.maximum(a * b + c, 0), rtol=1e-5, atol=1e-6)
    lib = ctypes.CDLL(str(compile_shared(TRIAD)))
    lib.triad.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_float, ctypes.c_long]
    lib.triad.restype = None
    tri = np.zeros(n, np.float32)
    pa, pb, pc = tri.ctypes.data, b.ctypes.data, c.ctypes.data
    xa, xb, xc = (torch.from_numpy(v) for v in (a, b, c))
    secs = side_by_side({"ours": lambda: kernel(a, b, c, out), "numpy": lambda: np.maximum(a * b + c, 0),
                         "torch eager": lambda: torch.relu(xa * xb + xc),
                         "STREAM triad (C)": lambda: lib.triad(pa, pb, pc, 3.0, n)}, runs)
    gbs = {k: (12 if k.startswith("STREAM") else 16) * n / v / 1e9 for k, v in secs.items()}
    triad = gbs["STREAM triad (C)"]
    return {"elements": n, "ms": {k: round(v * 1e3, 3) for k, v in secs.items()},
            "gb_per_s": {k: round(v, 1) for k, v in gbs.items()},
            "percent_of_triad": {k: round(100 * v / triad, 1) for k, v in gbs.items()}}


# ---- report ---------------------------------------------------------------------------------------

def _table(title: str, unit: str, values: dict[str, float], extra: dict[str, str] | None = None) -> str:
    lines = [title]
    for k, v in values.items():
        lines.append(f"  {k:<24} {v:>10} {unit}" + (f"   {extra[k]}" if extra and k in extra else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.codegen_kernels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tune", type=int, default=0, metavar="N", help="tuner trials per kernel (0: grid)")
    parser.add_argument("--runs", type=int, default=15, metavar="R", help="timed runs per contender")
    parser.add_argument("--threads", type=int, default=2, metavar="T", help="threads for every contender")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/codegen_kernels.json"),
                        metavar="OUT", help="results file")
    parser.add_argument("--wait-policy", choices=("default", "passive", "active"), default="default",
                        help="OMP_WAIT_POLICY for our kernels' idle workers (default: libgomp's)")
    parser.add_argument("--only", choices=("matmul", "conv", "chain"), action="append", help="run only these")
    args = parser.parse_args(argv)
    # read when the first kernel loads libgomp
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if args.wait_policy != "default":
        os.environ["OMP_WAIT_POLICY"] = args.wait_policy
    only = set(args.only or ("matmul", "conv", "chain"))
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "processor": platform.processor(),
                                           "load_average": list(os.getloadavg())},
                               "threads": args.threads, "runs": args.runs,
                               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "libgomp default"),
                               "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")}
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "tuning.jsonl"
        if "matmul" in only:
            results["matmul"] = r = bench_matmul(1024, args.runs, args.tune, records)
            print(_table(f"matmul 1024^3, GFLOP/s (best: {r['best_from']}: {r['best_knobs']})", "GFLOP/s",
                         r["gflops"]))
        if "conv" in only:
            results["conv3x3"] = r = bench_conv(args.runs, args.tune, records, args.threads)
            print(_table(f"ResNet 3x3 conv 1x64x56x56, ms (best: {r['best_from']}: {r['best_knobs']})", "ms",
                         r["ms"], {k: f"{v:.2f}x ORT" for k, v in r["speed_vs_ort"].items()}))
        if "chain" in only:
            results["relu_mul_add"] = r = bench_chain(4 * 1024 * 1024, args.runs, args.threads)
            print(_table("relu(a*b + c) on 4M floats, GB/s", "GB/s", r["gb_per_s"],
                         {k: f"{v:.0f}% of triad" for k, v in r["percent_of_triad"].items()}))
    results["machine"]["load_average_after"] = list(os.getloadavg())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.json, results)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
