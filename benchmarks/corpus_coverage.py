"""Real torch exports in the test corpus: how much of each falls inside the algebra, and whether the
three commands a user runs go through on it.

Usage: ``python -m benchmarks.corpus_coverage [--models a,b] [--out DIR]``

For each torch entry of ``tests/corpus`` (both exporters; random weights, built here): the nodes
left once import has folded constants and shape-only subgraphs on static shapes, how many of them
import into the algebra (``tests.corpus.analysis.algebra_node_counts``, the same rules the corpus
test checks each entry's opaque operators with), then `taso optimize`, `taso compile` and `taso run
--check` with the default settings, each as its own process: whether the optimized model passed the
check, the nodes compiled without a kernel (run by ONNX Runtime inside the module) and the largest
normwise error (max|a-b| / max|a|) of the compiled module against ONNX Runtime on the original.
Prints the CPU (lscpu) and a markdown table, writes DIR/corpus_coverage.json and .md (default DIR:
benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine_info import lscpu_model
from taso_py.atomic import write_json, write_text
from tests.corpus import CORPUS, CorpusModel, algebra_node_counts, save
from tests.corpus.analysis import imported_nodes

TORCH = [e for e in CORPUS if e.needs_torch]


def torch_entries(models: str) -> list[CorpusModel]:
    """The torch exports `models` names (comma-separated; every one when empty); SystemExit for a name
    that is none of them."""
    by_name = {e.name: e for e in TORCH}
    names = [n for n in models.split(",") if n] or list(by_name)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown torch corpus model {unknown[0]!r}; valid: {', '.join(by_name)}")
    return [by_name[n] for n in names]


def taso_json(*args: str, env: dict[str, str] | None = None) -> tuple[dict[str, Any] | None, str, float]:
    """One `taso` command with --json (`env`: variables set for it alone): (its report, or None and the
    error's last line; seconds)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "taso_py", *args, "--json"], capture_output=True, text=True, check=False,
        env={**os.environ, **(env or {})},
    )
    seconds = round(time.perf_counter() - started, 1)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return None, lines[-1] if lines else f"exit {done.returncode}", seconds
    return json.loads(done.stdout), "", seconds


def run_entry(entry: CorpusModel, work: Path) -> dict[str, Any]:
    model = entry.build()
    nodes, inside = algebra_node_counts(model, entry.input_shapes)
    row: dict[str, Any] = {
        "model": entry.name,
        "exporter": entry.source,
        "opset": entry.opset,
        "nodes": nodes,
        "in_algebra": inside,
        "fraction": inside / nodes if nodes else 1.0,
        "opaque": sorted({n.op_type for n, ok in imported_nodes(model, entry.input_shapes) if not ok}),
    }
    path = save(model, work / f"{entry.name}.onnx", external_data=entry.external_data)
    shapes = [
        a for name, dims in entry.input_shapes.items() for a in ("--input-shape", f"{name}={','.join(map(str, dims))}")
    ]
    optimized, error, row["optimize_seconds"] = taso_json(
        "optimize", str(path), "-o", str(work / f"{entry.name}.taso.onnx"), *shapes
    )
    row["optimize_ok"] = bool(optimized and optimized["check"]["ok"])
    row["rewrites"] = sum(a["count"] for a in optimized["rules_applied"]) if optimized else None
    row["optimize_error"] = error
    out = work / f"{entry.name}.cpu"
    compiled, error, row["compile_seconds"] = taso_json("compile", str(path), "-o", str(out), *shapes)
    row["compile_error"] = error
    row["fallback_nodes"] = compiled["fallback_nodes"] if compiled else None
    row["compile_max_rel_error"] = compiled["check"]["max_rel_error"] if compiled else None
    ran, error, _ = taso_json("run", str(out), "--check") if compiled else (None, "not compiled", 0.0)
    row["run_check_ok"] = bool(ran and ran["check"]["ok"])
    row["run_max_rel_error"] = ran["check"]["max_rel_error"] if ran else None
    row["run_error"] = error
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    nodes, inside = sum(r["nodes"] for r in rows), sum(r["in_algebra"] for r in rows)
    return {
        "models": len(rows),
        "nodes": nodes,
        "in_algebra": inside,
        "fraction": inside / nodes if nodes else 1.0,
        "optimized": sum(r["optimize_ok"] for r in rows),
        "compiled_and_checked": sum(r["run_check_ok"] for r in rows),
    }


def _error(value: float | None) -> str:
    return "—" if value is None else f"{value:.1e}"


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"CPU: {doc['cpu']} ({doc['cores']} cores)",
        "",
        "| model | exporter | nodes | in algebra | fraction | outside | `taso optimize` (rules applied, wall time) | "
        "`taso compile` fallback nodes | `taso run --check` max rel error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        optimized = (
            f"ok ({r['rewrites']} applied, {r['optimize_seconds']:.0f} s)"
            if r["optimize_ok"]
            else f"**failed**: {r['optimize_error']}"
        )
        compiled = str(r["fallback_nodes"]) if r["fallback_nodes"] is not None else f"**failed**: {r['compile_error']}"
        checked = _error(r["run_max_rel_error"]) if r["run_check_ok"] else f"**failed**: {r['run_error'] or 'mismatch'}"
        exporter = f"{r['exporter'].removeprefix('torch-')} op{r['opset']}"
        lines.append(
            f"| {r['model']} | {exporter} | {r['nodes']} | {r['in_algebra']} | {r['fraction']:.1%} | "
            f"{', '.join(r['opaque']) or '—'} | {optimized} | {compiled} | {checked} |"
        )
    s = doc["summary"]
    lines.append(
        f"\nOver {s['models']} exports: {s['in_algebra']} of {s['nodes']} nodes inside the algebra "
        f"(**{s['fraction']:.2%}**); {s['optimized']} optimized, {s['compiled_and_checked']} compiled "
        f"with matching outputs."
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.corpus_coverage", description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated corpus names (default: every torch entry)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    entries = torch_entries(args.models)
    doc: dict[str, Any] = {"cpu": lscpu_model(), "cores": os.cpu_count(), "rows": []}
    print(f"CPU: {doc['cpu']} ({doc['cores']} cores)", flush=True)
    with tempfile.TemporaryDirectory(prefix="taso-corpus-coverage-") as tmp:
        for entry in entries:
            row = run_entry(entry, Path(tmp))
            doc["rows"].append(row)
            print(
                f"{entry.name}: {row['in_algebra']}/{row['nodes']} in the algebra, optimize "
                f"{'ok' if row['optimize_ok'] else 'FAILED'}, compile fallback {row['fallback_nodes']}, run --check "
                f"{_error(row['run_max_rel_error']) if row['run_check_ok'] else 'FAILED'}",
                flush=True,
            )
    doc["summary"] = summary(doc["rows"])
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "corpus_coverage.json", doc)
    text = markdown(doc)
    write_text(args.out / "corpus_coverage.md", text)
    print(text)


if __name__ == "__main__":
    main()
