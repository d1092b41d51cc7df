"""Whole models through taso-py's compiler: `taso compile` each suite model for the CPU, check it
against ONNX Runtime, and time both side by side.

Usage: ``python -m benchmarks.compile_suite [--size full|small] [--models a,b] [--runs 20] [--tune N] [--out DIR]``

For each model, two compiles as a user runs them: the graph as imported (`--no-optimize`) and the
superoptimized one (`taso compile` runs the search first). Each compiled model runs on seeded
random inputs; its outputs are compared with ONNX Runtime's on the compiled graph (the max
relative error is max|a - b| / max|a|). Then our module and an ORT session (all graph
optimizations, thread spinning off, the same thread count as OpenMP) are timed in turn, runs
interleaved, medians quoted. Writes DIR/compile_suite.json, .md and .png (default DIR:
benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import onnx

from benchmarks.models import MODELS, build
from codegen.runtime import CompiledModel, random_inputs
from taso_py.atomic import write_json, write_text
from taso_py.runtime import compare_outputs, session
from taso_py.runtime import run as ort_run


def _compile(model: Path, out: Path, optimize: bool, tune: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "taso_py", "compile", str(model), "--target", "cpu", "-o", str(out), "--json"]
    cmd += [] if optimize else ["--no-optimize"]
    cmd += ["--tune", str(tune)] if tune else []
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout)


def _time_side_by_side(compiled: CompiledModel, onnx_path: Path, feeds: dict, runs: int, threads: int,
                       min_seconds: float = 1.0) -> tuple[float, float, int]:
    sess = session(onnx_path, threads)
    for _ in range(3):
        compiled.run(feeds)
        sess.run(None, feeds)
    ours: list[float] = []
    ort: list[float] = []
    began = time.perf_counter()
    while len(ours) < runs or time.perf_counter() - began < min_seconds:
        t = time.perf_counter()
        compiled.run(feeds)
        ours.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        sess.run(None, feeds)
        ort.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ours), statistics.median(ort), len(ours)


def run_model(name: str, size: str, runs: int, tune: int, work: Path) -> list[dict[str, Any]]:
    source = work / f"{name}.onnx"
    onnx.save(build(name, size), source)
    rows = []
    for variant, optimize in (("original", False), ("optimized", True)):
        out = work / f"{name}.{variant}.cpu"
        started = time.perf_counter()
        report = _compile(source, out, optimize, tune)
        row: dict[str, Any] = {"model": name, "variant": variant, "compile_seconds": round(time.perf_counter()
                                                                                            - started, 1)}
        if "error" in report:
            row["error"] = report["error"]
            rows.append(row)
            print(f"{name:13s} {variant:9s} compile failed: {row['error']}", flush=True)
            continue
        compiled = CompiledModel(out)
        feeds = random_inputs(compiled)
        check = compare_outputs(ort_run(out / "model.onnx", feeds), compiled.run(feeds))
        ours, ort, n = _time_side_by_side(compiled, out / "model.onnx", feeds, runs, os.cpu_count() or 1)
        row.update({"kernels": report["kernels"], "unique_kernels": report["unique_kernels"],
                    "rewrites": report["rewrites"], "arena_mb": round(report["arena_bytes"] / 2**20, 1),
                    "unshared_mb": round(report["intermediate_bytes_unshared"] / 2**20, 1),
                    "max_rel_error": check.max_rel, "check_ok": check.ok, "ours_ms": round(ours, 3),
                    "ort_ms": round(ort, 3), "ort_over_ours": round(ort / ours, 3), "runs": n})
        print(f"{name:13s} {variant:9s} {row['kernels']:4d} kernels  rel err {check.max_rel:.1e}  "
              f"ours {ours:9.3f} ms  ORT {ort:9.3f} ms  ({ort / ours:.2f}x of ORT's speed)", flush=True)
        rows.append(row)
    return rows


def _markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | graph | kernels | max rel error vs ORT | ours (ms) | ORT (ms) | ORT time / ours |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['variant']} | compile failed: {r['error']} | | | | |")
        else:
            lines.append(f"| {r['model']} | {r['variant']} | {r['kernels']} | {r['max_rel_error']:.1e} | "
                         f"{r['ours_ms']:.2f} | {r['ort_ms']:.2f} | {r['ort_over_ours']:.2f}x |")
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in rows if "error" not in r]
    labels = [f"{r['model']}\n{r['variant']}" for r in ok]
    fig, ax = plt.subplots(figsize=(max(6, len(ok) * 0.9), 4))
    xs = range(len(ok))
    ax.bar([x - 0.2 for x in xs], [r["ours_ms"] for r in ok], 0.4, label="taso-py compiled")
    ax.bar([x + 0.2 for x in xs], [r["ort_ms"] for r in ok], 0.4, label="ONNX Runtime")
    ax.set_yscale("log")
    ax.set_ylabel("latency (ms, log scale)")
    ax.set_xticks(list(xs), labels, fontsize=7)
    ax.legend()
    ax.set_title(f"Whole-model latency, {os.cpu_count()} threads ({platform.machine()})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=("full", "small"), default="full")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--tune", type=int, default=0, help="--tune for taso compile (measured trials per kernel)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model {unknown[0]!r}; valid: {', '.join(MODELS)}")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="taso-compile-suite-") as tmp:
        for name in names:
            rows += run_model(name, args.size, args.runs, args.tune, Path(tmp))
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"size": args.size, "threads": os.cpu_count(), "machine": platform.processor() or platform.machine(),
           "rows": rows}
    write_json(args.out / "compile_suite.json", doc)
    write_text(args.out / "compile_suite.md", _markdown(rows))
    _plot(rows, args.out / "compile_suite.png")
    print(_markdown(rows))


if __name__ == "__main__":
    main()
