"""Whole models through taso-py's compiler against ONNX Runtime, as a user runs both.

Usage: ``python -m benchmarks.compile_suite [--size full|small] [--models a,b] [--runs 10] [--threads T]
[--tune N] [--out DIR]``

For each suite model: `taso compile` as a user runs it (the superoptimizer for this target, then
the faster of the optimized and the imported graph, see taso_py.cli.compile) and `taso compile
--no-optimize`. Every module is checked against ONNX Runtime on the original model (max|a-b| /
max|a| per output, seeded random inputs). Then, in one process, runs interleaved for at least
three seconds and `--runs` rounds: our default module, our module of the imported graph, ORT on
the original model (what users run today) and ORT on the graph we compiled (the compilers
compared on one graph). ORT: all graph optimizations, `--threads` intra-op threads, spinning off;
ours: the same thread count (TASO_NUM_THREADS). The headline ratio is ORT on the original model
over our default module: the median over rounds of the two runs' ratio (this shared host slows
everything for a second at times; runs milliseconds apart see it alike). Each model's FLOPs
(direct convolution's count) over the measured FMA peak is its roofline bound; the table gives
ours and ORT's fraction of it (above 100%: Winograd). Writes DIR/compile_suite.json, .md, .png
(default DIR: benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from benchmarks.machine_info import describe, header
from benchmarks.models import MODELS, build
from taso_py.atomic import write_json, write_text


def taso_compile(model: Path, out: Path, optimize: bool, tune: int, extra: Sequence[str] = ()) -> dict[str, Any]:
    """`taso compile` in a process of its own, as a user runs it: its --json report, or {"error": line}."""
    cmd = [sys.executable, "-m", "taso_py", "compile", str(model), "--target", "cpu", "-o", str(out), "--json", *extra]
    cmd += [] if optimize else ["--no-optimize"]
    cmd += ["--tune", str(tune)] if tune else []
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {done.returncode}"}
    return {**json.loads(done.stdout), "wall_seconds": round(time.perf_counter() - started, 1)}


def build_and_compile(name: str, size: str, work: Path) -> tuple[Path, Path, str | None]:
    """The suite model saved as ONNX and compiled as a user compiles it: (model, directory, error)."""
    source = work / f"{name}.onnx"
    onnx.save(build(name, size), source)
    report = taso_compile(source, work / f"{name}.cpu", True, 0)
    return source, work / f"{name}.cpu", report.get("error")


def _rel_error(want: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> float:
    return max(float(np.max(np.abs(got[k] - w)) / max(float(np.max(np.abs(w))), 1e-30)) for k, w in want.items())


def samples_in_turn(contenders: dict[str, Any], runs: int, min_seconds: float = 1.0) -> dict[str, list[float]]:
    """Milliseconds of each callable, called in turn round after round (three warm-up calls each)."""
    for fn in contenders.values():
        for _ in range(3):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in contenders}
    began = time.perf_counter()
    while min(len(v) for v in samples.values()) < runs or time.perf_counter() - began < min_seconds:
        for name, fn in contenders.items():
            t = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - t) * 1e3)
    return samples


def time_in_turn(contenders: dict[str, Any], runs: int, min_seconds: float = 1.0) -> dict[str, float]:
    """Median ms of each callable (see `samples_in_turn`)."""
    return {k: statistics.median(v) for k, v in samples_in_turn(contenders, runs, min_seconds).items()}


def paired_ratio(a: list[float], b: list[float]) -> float:
    """The median over rounds of a / b: a round's two runs are a few milliseconds apart, so a
    slow spell of the shared host (seconds long) slows both alike and cancels."""
    return statistics.median(x / y for x, y in zip(a, b))


def run_model(name: str, size: str, runs: int, tune: int, threads: int, peak: float, work: Path) -> dict[str, Any]:
    from taso_py.codegen.runtime import CompiledModel, random_inputs
    from taso_py.ort import session
    source = work / f"{name}.onnx"
    onnx.save(build(name, size), source)
    row: dict[str, Any] = {"model": name}
    default = taso_compile(source, work / f"{name}.cpu", True, tune)
    plain = taso_compile(source, work / f"{name}.plain.cpu", False, tune)
    for label, rep in (("default", default), ("imported", plain)):
        if "error" in rep:
            row["error"] = f"{label} compile: {rep['error']}"
            return row
    ours = CompiledModel(work / f"{name}.cpu")
    ours_plain = CompiledModel(work / f"{name}.plain.cpu")
    feeds = random_inputs(ours)
    ort = session(source, threads)
    ort_opt = session(work / f"{name}.cpu" / "model.onnx", threads)
    want = dict(zip([o.name for o in ort.get_outputs()], ort.run(None, feeds)))
    row["max_rel_error"] = max(_rel_error(want, ours.run(feeds)), _rel_error(want, ours_plain.run(feeds)))
    samples = samples_in_turn({"ours": lambda: ours.run(feeds), "ours_imported": lambda: ours_plain.run(feeds),
                               "ort": lambda: ort.run(None, feeds), "ort_same_graph": lambda: ort_opt.run(None, feeds)},
                              runs, min_seconds=3.0)
    ms = {k: statistics.median(v) for k, v in samples.items()}
    flops = sum(k["flops"] for k in ours_plain.manifest["kernels"])
    bound_ms = flops / (peak * 1e6)
    speed = default.get("speed") or {}
    row.update({
        "rewrites": default["rewrites"], "kernels": default["kernels"], "gflop": round(flops / 1e9, 3),
        "compile_seconds": default["wall_seconds"], "ms": {k: round(v, 3) for k, v in ms.items()},
        "speedup": round(paired_ratio(samples["ort"], samples["ours"]), 3),  # over ORT on the model users have
        "speedup_same_graph": round(paired_ratio(samples["ort_same_graph"], samples["ours"]), 3),
        "superoptimizer": {"predicted": speed.get("predicted_speedup"), "measured": speed.get("speedup"),
                           "kept": speed.get("kept", "optimized" if default["rewrites"] else "no rewrite")},
        "peak_fraction": {"ours": round(bound_ms / ms["ours"], 3), "ort": round(bound_ms / ms["ort"], 3)},
        "check_ok": row["max_rel_error"] <= 1e-4})
    print(f"{name:13s} {row['rewrites']:4d} rewrites  ours {ms['ours']:9.3f} ms ({ms['ours_imported']:.3f} imported)  "
          f"ORT {ms['ort']:9.3f} ms  {row['speedup']:.2f}x  (same graph {row['speedup_same_graph']:.2f}x)  "
          f"peak {row['peak_fraction']['ours']:.0%} vs ORT {row['peak_fraction']['ort']:.0%}  "
          f"rel err {row['max_rel_error']:.1e}", flush=True)
    return row


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of speed ratios (0 for none)."""
    return math.exp(sum(map(math.log, values)) / len(values)) if values else 0.0


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    ok = [r for r in rows if "error" not in r]
    ratios = [r["speedup"] for r in ok]
    return {"geomean_speedup": round(geomean(ratios), 3),
            "min_speedup": min(ratios, default=0.0), "models": len(rows), "failed": len(rows) - len(ok)}


def markdown(doc: dict[str, Any]) -> str:
    lines = [header(doc["machine"]), "",
             "| model | rewrites kept | kernels | ours (ms) | ours, imported graph (ms) | ORT (ms) | ORT / ours | "
             "ORT on our graph / ours | ours / ORT % of FMA peak | max rel error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {r['error']} | | | | | | | | |")
            continue
        m, p = r["ms"], r["peak_fraction"]
        lines.append(f"| {r['model']} | {r['rewrites']} | {r['kernels']} | {m['ours']:.2f} | {m['ours_imported']:.2f} "
                     f"| {m['ort']:.2f} | **{r['speedup']:.2f}x** | {r['speedup_same_graph']:.2f}x | "
                     f"{p['ours']:.0%} / {p['ort']:.0%} | {r['max_rel_error']:.1e} |")
    s = doc["summary"]
    lines.append(f"\nGeometric mean of ORT time / ours: **{s['geomean_speedup']:.2f}x**; "
                 f"lowest {s['min_speedup']:.2f}x.")
    return "\n".join(lines) + "\n"


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in doc["rows"] if "error" not in r]
    fig, ax = plt.subplots(figsize=(max(6, len(ok) * 1.0), 4))
    xs = np.arange(len(ok))
    ax.bar(xs - 0.2, [r["speedup"] for r in ok], 0.4, label="ORT on the original model / ours")
    ax.bar(xs + 0.2, [r["speedup_same_graph"] for r in ok], 0.4, label="ORT on the graph we compile / ours")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(xs, [r["model"] for r in ok], fontsize=8)
    ax.set_ylabel("speedup over ONNX Runtime")
    ax.legend(fontsize=7)
    ax.set_title(header(doc["machine"]).split(";")[0], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=("full", "small"), default="full")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--tune", type=int, default=0, help="--tune for taso compile (measured trials per kernel)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model {unknown[0]!r}; valid: {', '.join(MODELS)}")
    os.environ["TASO_NUM_THREADS"] = str(args.threads)  # our modules' pools (and the compile's own timing)
    info = describe(args.threads)
    print(header(info), flush=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="taso-compile-suite-") as tmp:
        for name in names:
            rows.append(run_model(name, args.size, args.runs, args.tune, args.threads, info["fma_peak_gflops"],
                                  Path(tmp)))
    info["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    doc = {"size": args.size, "machine": info, "rows": rows, "summary": summary(rows)}
    suffix = "" if args.threads == (os.cpu_count() or 1) else f"_{args.threads}t"
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / f"compile_suite{suffix}.json", doc)
    text = markdown(doc)
    write_text(args.out / f"compile_suite{suffix}.md", text)
    plot(doc, args.out / f"compile_suite{suffix}.png")
    print(text)


if __name__ == "__main__":
    main()
