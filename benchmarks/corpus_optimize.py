"""`taso optimize` on real torch exports, as a new user runs it: search time and what ONNX Runtime gains.

Usage: ``python -m benchmarks.corpus_optimize [--models a,b] [--threads N] [--out DIR]``

The suite's models are hand-written; held-out models are not. For each torch export of the test
corpus (both exporters, random weights, built here), `taso optimize --json` with the default
settings (eqsat, operators timed in ORT, rewrites judged where they sit, regions accepted one
group at a time, the written model timed against the input), each as its own process, all with one
operator-timing cache that starts empty (a new user's first models; set TASO_CACHE_DIR to keep
one). Per model: the wall time of the command, the search's seconds (operators timed for the first
time included: they are the cold cache's cost), what the search changed, and the speedup of the
written model over the input in ORT as the command measured it, or "as it came" where it wrote the
input's graph. Prints the CPU (lscpu) and a markdown table; writes DIR/corpus_optimize.json and .md
(default DIR: benchmarks/results).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.compile_suite import geomean
from benchmarks.corpus_coverage import taso_json, torch_entries
from benchmarks.machine_info import header, identify
from taso_py.atomic import write_json, write_text
from tests.corpus import CorpusModel, save

SLOWER = 0.99  # a written model below this speedup over its input counts as slower (issue 21's bar)


def run_entry(entry: CorpusModel, work: Path, threads: int, env: dict[str, str]) -> dict[str, Any]:
    path = save(entry.build(), work / f"{entry.name}.onnx", external_data=entry.external_data)
    shapes = [a for k, dims in entry.input_shapes.items() for a in ("--input-shape", f"{k}={','.join(map(str, dims))}")]
    report, error, seconds = taso_json("optimize", str(path), "-o", str(work / f"{entry.name}.taso.onnx"),
                                       "--threads", str(threads), *shapes, env=env)
    row: dict[str, Any] = {"model": entry.name, "wall_seconds": seconds}
    if report is None:
        return {**row, "error": error}
    search, speed = report["search"], report["speed"]
    row.update(search_seconds=search["seconds"], stopped=search["stopped"], enodes=search.get("generated"),
               rules_applied=sum(a["count"] for a in report["rules_applied"]), regions=search["regions"],
               check_ok=report["check"]["ok"],
               kept=speed["kept"] if speed else "as it came",
               speedup=speed["speedup"] if speed and speed["kept"] == "optimized" else None)
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if "error" not in r]
    gains = [r["speedup"] for r in done if r["speedup"] is not None]
    return {"models": len(rows), "failed": len(rows) - len(done),
            "changed": len(gains), "slower": sum(s < SLOWER for s in gains),
            "geomean_changed": round(geomean(gains), 4) if gains else None,
            "geomean_all": round(geomean(gains + [1.0] * (len(done) - len(gains))), 4) if done else None,
            "max_search_seconds": max((r["search_seconds"] for r in done), default=None),
            "max_wall_seconds": max((r["wall_seconds"] for r in done), default=None)}


def markdown(doc: dict[str, Any]) -> str:
    lines = [header(doc["machine"]) + f"; ORT threads {doc['threads']}; operator cache {doc['cache']}", "",
             "| model | wall s | search s | stopped | e-nodes | rules applied | regions | written | ORT speedup |",
             "|---|---:|---:|---|---:|---:|---:|---|---:|"]
    for r in doc["rows"]:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['wall_seconds']:.1f} | **failed**: {r['error']} | | | | | | |")
            continue
        speedup = f"{r['speedup']:.3f}x" if r["speedup"] is not None else "—"
        lines.append(f"| {r['model']} | {r['wall_seconds']:.1f} | {r['search_seconds']:.1f} | {r['stopped']} | "
                     f"{r['enodes'] if r['enodes'] is not None else '—'} | {r['rules_applied']} | {r['regions']} | "
                     f"{r['kept']} | {speedup} |")
    s = doc["summary"]
    lines.append(
        f"\n{s['models']} exports, {s['failed']} failed; {s['changed']} written rewritten, {s['slower']} of them "
        f"slower than {SLOWER}x; geometric mean {s['geomean_changed']}x over those, {s['geomean_all']}x over all "
        f"(the rest 1.0x: written as they came); search at most {s['max_search_seconds']} s, the command at most "
        f"{s['max_wall_seconds']} s.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.corpus_optimize", description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated corpus names (default: every torch entry)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="ORT threads (default: all cores)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    entries = torch_entries(args.models)
    kept = "TASO_CACHE_DIR" in os.environ
    with tempfile.TemporaryDirectory(prefix="taso-corpus-optimize-") as tmp:
        # the commands' own cache, shared by them and gone with them, unless the caller names one
        env = {} if kept else {"TASO_CACHE_DIR": str(Path(tmp) / "cache")}
        doc: dict[str, Any] = {"machine": identify(), "threads": args.threads,
                               "cache": "kept" if kept else "empty at the start", "rows": []}
        print(header(doc["machine"]), flush=True)
        for entry in entries:
            row = run_entry(entry, Path(tmp), args.threads, env)
            doc["rows"].append(row)
            print(f"{entry.name}: " + (f"failed: {row['error']}" if "error" in row else
                                 f"search {row['search_seconds']:.1f} s, wall {row['wall_seconds']:.1f} s, "
                                 f"{row['regions']} regions, written {row['kept']}"
                                 + (f" ({row['speedup']:.3f}x)" if row["speedup"] is not None else "")), flush=True)
    doc["summary"] = summary(doc["rows"])
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "corpus_optimize.json", doc)
    text = markdown(doc)
    write_text(args.out / "corpus_optimize.md", text)
    print(text)
    return doc


if __name__ == "__main__":
    main()
