"""Both searches on the suite under one cost model: the α-search and equality saturation side by side.

Usage: ``python -m benchmarks.search_compare [--size small|full] [--cost analytical|measured]
[--models a,b (suite models or substitution blocks)] [--library PATH] [--runs N] [--out DIR]``

Each model goes through `optimizer.optimize` twice, as `taso optimize --search backtrack` and
`--search eqsat` run it (the same normal forms first, the same directed rules, the defaults of
each search), with one cost model instance, so the costs compare. Per model: the cost before and
after each search, its seconds (saturation and extraction for eqsat), why it stopped, and the
e-graph's size, and what the graph it found measures in ONNX Runtime against the original (the
search's raw result, before `taso optimize`'s acceptance keeps the regions that pay; timed in
turn, all cores, `--runs` medians; 0 skips). `--library` searches with another rule library than the shipped one (the
`--max-ops 4` library, say). Prints the CPU model and writes DIR/search_compare.json and .md
(default DIR: benchmarks/results).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks.machine_info import header, identify
from benchmarks.models import MODELS, build
from benchmarks.models.blocks import BLOCKS
from taso_py.atomic import write_json, write_text
from taso_py.graph.regions import diff
from taso_py.library.store import load as load_library
from taso_py.onnx_io import load_model
from taso_py.onnx_io.exporter import to_onnx
from taso_py.optimizer import cost_model, optimize
from taso_py.runtime import latency, random_feeds
from taso_py.search.backtracking import Settings
from taso_py.search.settings import EqsatSettings


def compare(name: str, size: str, cost: str, library_path: Path | None = None, runs: int = 10) -> dict[str, Any]:
    source = BLOCKS[name]() if name in BLOCKS else build(name, size)
    imported = load_model(source)
    library = load_library(library_path)
    model = cost_model(cost, 0, imported.opset)
    feeds = random_feeds(imported.graph) if runs else {}
    row: dict[str, Any] = {"model": name}
    for label, settings in (("backtrack", Settings()), ("eqsat", EqsatSettings())):
        result = optimize(imported, library, model, settings)
        o = result.outcome
        row["original"], row["directed_rules"] = o.original_cost, len(result.rules)
        # a search that rewrote nothing gives the user's graph back: nothing to time (regions, not rules
        # applied, say so: common subexpressions, which eqsat's e-graph holds once, change it with no rule)
        changed = bool(diff(result.start, result.model.graph))
        ort = latency(source, to_onnx(result.model), feeds, 0, runs).to_json() if runs and changed else None
        row[label] = {"cost": o.cost, "gain": o.original_cost / o.cost if o.cost else 1.0,
                      "seconds": round(o.seconds, 2), "stopped": o.stopped, "rewrites": len(o.applied),
                      "changed": changed,
                      "ort": ort, "ort_speedup": ort["speedup"] if ort else 1.0,
                      **({"enodes": o.generated, "iterations": o.expanded} if label == "eqsat" else
                         {"expanded": o.expanded})}
    return row


def markdown(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    lines = [f"{header(info)}; size {info['size']}; cost model {info['cost']}; library {info['library']}", "",
             "| model | backtrack gain | in ORT | s | stopped | eqsat gain | in ORT | s | stopped | e-nodes | "
             "eqsat cost / backtrack |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r in rows:
        b, e = r["backtrack"], r["eqsat"]
        lines.append(f"| {r['model']} | {b['gain']:.3f}× | {_measured(b)} | {b['seconds']} | {b['stopped']} | "
                     f"{e['gain']:.3f}× | {_measured(e)} | {e['seconds']} | {e['stopped']} | {e['enodes']:,} | "
                     f"{e['cost'] / b['cost']:.3f} |")
    return "\n".join(lines) + "\n"


def _measured(search: dict[str, Any]) -> str:
    return f"{search['ort_speedup']:.3f}×" if search["ort"] else "no rewrite" if not search["changed"] else "untimed"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=("full", "small"), default="full")
    ap.add_argument("--cost", choices=("analytical", "measured"), default="analytical")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--library", type=Path, default=None, help="rule library (default: the shipped one)")
    ap.add_argument("--runs", type=int, default=10, help="ORT timings of each found graph (median; 0: none)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS and m not in BLOCKS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join([*MODELS, *BLOCKS])}")
    info = {**identify(), "size": args.size, "cost": args.cost, "library": str(args.library or "shipped")}
    print(header(info), flush=True)
    rows = []
    for name in names:
        rows.append(compare(name, args.size, args.cost, args.library, args.runs))
        b, e = rows[-1]["backtrack"], rows[-1]["eqsat"]
        print(f"{name}: backtrack {b['gain']:.3f}x ({_measured(b)} in ORT) in {b['seconds']} s ({b['stopped']}); "
              f"eqsat {e['gain']:.3f}x ({_measured(e)} in ORT) in {e['seconds']} s ({e['stopped']}, "
              f"{e['enodes']:,} e-nodes)", flush=True)
    table = markdown(rows, info)
    print(table)
    write_json(args.out / "search_compare.json", {"machine": info, "rows": rows})
    write_text(args.out / "search_compare.md", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
