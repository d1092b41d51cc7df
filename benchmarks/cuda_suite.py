"""The suite models through `--target cuda` on a real GPU: compile, check against ONNX Runtime, time.

Usage: ``python -m benchmarks.cuda_suite [--size full|small] [--models a,b] [--runs 20] [--jobs N] [--out DIR]``

Each model: `taso compile --target cuda` as a user runs it (the superoptimizer, nvcc, and the
compiler's own check of the module against ONNX Runtime on the original model); the models
compile side by side (`--jobs` processes: nvcc and the search run on the CPU). Then, one model at
a time, `taso run DIR --check --repeat R --json` (the one equivalence criterion, max|a-b| / max|a|
per output, on seeded inputs) and ONNX Runtime on the original model on this machine's CPU (all
cores, spinning off), the baseline a user without our compiler has. Our latency is end to end from
host arrays: inputs copied to the GPU, every kernel, outputs copied back (the weights stay on the
device after the first run). Without a CUDA device it says so and exits 0: nothing is timed on
the emulation. Writes DIR/cuda_suite.json and .md (default DIR: benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import onnx

from benchmarks.machine_info import lscpu_model
from benchmarks.models import MODELS, build
from taso_py.atomic import write_json, write_text
from taso_py.codegen.backends.cuda import device_count


def gpu_name() -> str:
    """nvidia-smi's name and driver of the first GPU (what the table's numbers belong to)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out.splitlines()[0] if out else "a CUDA device (nvidia-smi not found)"


def taso(*args: str, timeout: float) -> dict[str, Any]:
    """One `python -m taso_py ... --json` call: its report, or {"error": its last stderr line}."""
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "taso_py", *args, "--json"], capture_output=True, text=True,
                              check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {done.returncode}"}
    return {**json.loads(done.stdout), "wall_seconds": round(time.perf_counter() - started, 1)}


def ort_cpu_ms(model: Path, runs: int) -> float:
    """ONNX Runtime on the original model, this machine's CPU, all cores: median of `runs` after warm-up."""
    from taso_py.ort import session
    from taso_py.runtime import random_arrays
    sess = session(model)
    graph = onnx.load(str(model), load_external_data=False).graph
    weights = {t.name for t in graph.initializer}
    feeds = random_arrays([(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim],
                            onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
                           for i in graph.input if i.name not in weights])
    for _ in range(3):
        sess.run(None, feeds)
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


def compile_one(name: str, size: str, work: Path, timeout: float) -> dict[str, Any]:
    source = work / f"{name}.onnx"
    onnx.save(build(name, size), source)
    return taso("compile", str(source), "--target", "cuda", "-o", str(work / f"{name}.cuda"), timeout=timeout)


def measure(name: str, work: Path, compiled: dict[str, Any], runs: int) -> dict[str, Any]:
    row: dict[str, Any] = {"model": name, "compile_seconds": compiled.get("wall_seconds"),
                           "groups": compiled.get("groups"), "rewrites": compiled.get("rewrites"),
                           "fallback_nodes": compiled.get("fallback_nodes")}
    if "error" in compiled:
        return {**row, "error": f"compile: {compiled['error']}"}
    ran = taso("run", str(work / f"{name}.cuda"), "--check", "--repeat", str(runs), timeout=600)
    if "error" in ran:
        return {**row, "error": f"run --check: {ran['error']}"}
    check = ran["check"]
    row.update(ok=check.get("ok"), max_rel_error=check.get("max_rel_error"), gpu_ms=ran["latency_ms"],
               ort_cpu_ms=ort_cpu_ms(work / f"{name}.onnx", runs))
    row["speedup_vs_ort_cpu"] = row["ort_cpu_ms"] / row["gpu_ms"]
    return row


def markdown(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    lines = [f"GPU: {info['gpu']}; host CPU: {info['cpu']}; size {info['size']}; medians of {info['runs']} runs",
             "", "| model | compile s | groups | check (max rel err) | ours on GPU ms | ORT on CPU ms "
             "| ORT CPU / ours |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['compile_seconds'] or '—'} | | **{r['error']}** | | | |")
            continue
        verdict = "pass" if r["ok"] else "**FAIL**"
        lines.append(f"| {r['model']} | {r['compile_seconds']} | {r['groups']} | {verdict} ({r['max_rel_error']:.1e}) "
                     f"| {r['gpu_ms']:.2f} | {r['ort_cpu_ms']:.2f} | {r['speedup_vs_ort_cpu']:.1f}× |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=("full", "small"), default="full")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated suite models")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=8, help="models compiled at once")
    ap.add_argument("--compile-timeout", type=float, default=400.0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    if device_count() == 0:
        print("cuda_suite: no CUDA device on this machine; nothing measured")
        return 0
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; the suite has {', '.join(MODELS)}")
    info = {"gpu": gpu_name(), "cpu": lscpu_model(), "size": args.size, "runs": args.runs}
    print(f"GPU: {info['gpu']}; host CPU: {info['cpu']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="taso-cuda-suite-") as tmp:
        work = Path(tmp)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            compiled = dict(zip(names, pool.map(lambda n: compile_one(n, args.size, work, args.compile_timeout),
                                                names)))
        rows = []
        for name in names:
            rows.append(measure(name, work, compiled[name], args.runs))
            print(json.dumps(rows[-1]), flush=True)
    table = markdown(rows, info)
    print(table)
    write_json(args.out / "cuda_suite.json", {"machine": info, "rows": rows})
    write_text(args.out / "cuda_suite.md", table)
    return 1 if any("error" in r or not r.get("ok") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
