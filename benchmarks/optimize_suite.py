"""`taso optimize` over the model suite: search time, rules applied, and ONNX Runtime latency of the
original and the optimized model measured side by side.

Usage: ``python -m benchmarks.optimize_suite [--size full|small] [--models a,b | --blocks] [--runs 30]
[--library PATH] [--search backtrack|eqsat] [--out DIR]``

For each model: build it (seeded), run `taso optimize` on it with the default settings (measured
cost model; the command checks the result against the original in ORT and hands the input back as
it came when no rewrite pays), then time both models in one process with all of ORT's graph
optimizations on, at 1 and 2 threads, thread spinning off, runs interleaved (original, optimized,
original, ...), and quote medians. A file handed back byte for byte counts 1.0x ("same file"); its
timing against itself, the machine's noise, is kept in the JSON as `noise`. Writes DIR/optimize_suite.json,
DIR/optimize_suite.md and DIR/optimize_suite.png (default DIR: benchmarks/results). `--blocks` runs
the substitution blocks of `benchmarks/models/blocks.py` instead, and writes DIR/optimize_blocks.*.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import math
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from benchmarks.machine_info import header, identify
from benchmarks.models import MODELS, build
from benchmarks.models.blocks import BLOCKS
from taso_py.atomic import write_json, write_text
from taso_py.onnx_io import load_model
from taso_py.runtime import latency, random_feeds

THREADS = (1, 2)


def run_model(name: str, size: str, runs: int, work: Path, cost: str = "measured",
              library: Path | None = None, search: str | None = None) -> dict[str, Any]:
    """`taso optimize` as a user runs it (its own ORT speed check included), then both models timed."""
    original = work / f"{name}.onnx"
    onnx.save(BLOCKS[name]() if name in BLOCKS else build(name, size), original)
    optimized = work / f"{name}.taso.onnx"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "taso_py", "optimize", str(original), "-o", str(optimized),
                           "--cost", cost, "--json", *(["--library", str(library)] if library else []),
                           *(["--search", search] if search else [])],
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"taso optimize {name} failed: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    row: dict[str, Any] = {
        "model": name, "size": size, "search_seconds": report["search"]["seconds"], "optimize_seconds": round(wall, 2),
        "search_in_context": report["search"].get("in_context"),  # the judge's share of the search (eqsat, timed)
        "expanded": report["search"]["expanded"], "stopped": report["search"]["stopped"],
        "cost": report["cost"], "predicted_speedup": report["cost"]["speedup"],
        # what the rewrites that pay where they sit should give in the whole model (1.0: none found, or none paid)
        "predicted_in_context": (report["speed"] or {}).get("predicted_in_context", 1.0),
        "rules_applied": report["rules_applied"], "rejected": report["rejected"], "check": report["check"],
        "speed_check": report["speed"],
        # the places the search changed, not rules applied: common subexpressions change it with no rule
        "regions": report["search"]["regions"],
        "written": (report["speed"] or {}).get("kept", "optimized") if report["search"]["regions"] else "no rewrite",
    }
    groups = (report["speed"] or {}).get("groups", [])
    row["groups_kept"] = f"{sum(g['kept'] for g in groups)} of {len(groups)}" if groups else ""
    row["same_file"] = filecmp.cmp(original, optimized, shallow=False)
    feeds = random_feeds(load_model(original).graph)
    for threads in THREADS:
        timed = latency(original, optimized, feeds, threads, runs).to_json()
        # a file handed back as it came runs as fast as itself: its timed ratio is the machine's noise
        row[f"ort_{threads}t"] = {**timed, "speedup": 1.0, "noise": timed["speedup"]} if row["same_file"] else timed
    return row


def _timings(r: dict[str, Any], threads: int) -> str:
    t = r[f"ort_{threads}t"]
    return (f"{t['original_ms']:.2f} (same file)" if r.get("same_file")
            else f"{t['original_ms']:.2f} → {t['optimized_ms']:.2f}")


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | search s | regions found | predicted | in context | written | ORT 1 thread (ms) | speedup | "
             "ORT 2 threads (ms) | speedup |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        one, two = r["ort_1t"], r["ort_2t"]
        judged = r.get("search_in_context")
        seconds = f"{r['search_seconds']:.1f}" + (f" ({judged['seconds']:.1f} in context)" if judged else "")
        lines.append(f"| {r['model']} | {seconds} | {r['regions']} | {r['predicted_speedup']:.3f}x | "
                     f"{r['predicted_in_context']:.3f}x | "
                     f"{r['written']}{' (groups kept: ' + r['groups_kept'] + ')' if r['groups_kept'] else ''} | "
                     f"{_timings(r, 1)} | {one['speedup']:.3f}x | {_timings(r, 2)} | {two['speedup']:.3f}x |")
    for threads in THREADS:
        g = math.exp(statistics.fmean(math.log(r[f"ort_{threads}t"]["speedup"]) for r in rows))
        lines.append(f"| geometric mean, {threads} thread{'s' if threads > 1 else ''} | | | | | | | {g:.3f}x | | |")
    misses = [(r["predicted_in_context"] / r[f"ort_{max(THREADS)}t"]["speedup"] - 1, r["model"]) for r in rows]
    worst, model = max(misses, key=lambda m: abs(m[0]))
    lines.append(f"\nPredicted in context against measured at {max(THREADS)} threads (the threads `taso optimize` "
                 f"times at here): worst {worst:+.1%} ({model}).")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["model"] for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for k, threads in enumerate(THREADS):
        ax.bar(x + (k - 0.5) * 0.35, [r[f"ort_{threads}t"]["speedup"] for r in rows], 0.35,
               label=f"ORT, {threads} thread{'s' if threads > 1 else ''}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, names, rotation=20)
    ax.set_ylabel("speedup over the original")
    ax.set_title("taso optimize: ONNX Runtime latency, optimized vs original")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.optimize_suite", description=__doc__)
    parser.add_argument("--size", choices=("full", "small"), default="full")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated suite models")
    parser.add_argument("--blocks", action="store_true", help="the substitution blocks instead of the suite")
    parser.add_argument("--runs", type=int, default=30, help="timed runs of each model (>= 20 for the README)")
    parser.add_argument("--cost", choices=("measured", "analytical"), default="measured",
                        help="the search's cost model")
    parser.add_argument("--library", type=Path, default=None, help="rule library (default: the shipped one)")
    parser.add_argument("--search", choices=("backtrack", "eqsat"), default=None,
                        help="the search (default: `taso optimize`'s)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="output directory")
    args = parser.parse_args(argv)
    names = list(BLOCKS) if args.blocks else [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS and n not in BLOCKS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r} (known: {', '.join([*MODELS, *BLOCKS])})")
    args.out.mkdir(parents=True, exist_ok=True)
    machine = identify()  # before any timing: the load average is the machine's, not ours
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            print(f"{name} ...", file=sys.stderr, flush=True)
            rows.append(run_model(name, args.size, args.runs, Path(tmp), args.cost, args.library, args.search))
    text = (header(machine) + (f"; library {args.library}" if args.library else "")
            + (f"; search {args.search}" if args.search else "") + "\n\n" + table(rows))
    print(text)
    stem = "optimize_blocks" if args.blocks else "optimize_suite"
    write_text(args.out / f"{stem}.md", text + "\n")
    write_json(args.out / f"{stem}.json", {
        "machine": {**machine, "platform": platform.platform(), "python": platform.python_version()},
        "size": args.size, "runs": args.runs, "cost_model": args.cost, "library": str(args.library or "shipped"),
        "search": args.search or "default",
        "rows": rows})
    plot(rows, args.out / f"{stem}.png")


if __name__ == "__main__":
    main()
