"""Rule generation at 2, 3 and 4 operators: the count after every stage and the time it took,
next to the numbers of the TASO paper.

Usage: ``python -m benchmarks.rule_generation [--max-ops 2 3 4] [--library PATH ...] [--out DIR]``

Each `--max-ops N` runs `taso generate-rules --max-ops N` (a subprocess, so the wall time is what a
user waits) into DIR/rules-N.json; each `--library PATH` tabulates a library made earlier from the
counts and seconds it records. Prints a markdown table and writes DIR/rule_generation.json and
DIR/rule_generation.md (default DIR: benchmarks/results).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from taso_py.atomic import write_json, write_text
from taso_py.library.store import LibraryError, load

# TASO (SOSP'19, section 7.1): graphs of up to 4 operators, generated in about 5 minutes on 8 cores
# and verified in under 10; it reports these three counts only. Its 28,744 candidates are the pairs
# of graphs with equal fingerprints, before any pruning.
TASO = {"pairs": 28_744, "renaming": 17_346, "common-subgraph": 743}

ROWS = (("graphs", "graphs enumerated"), ("pairs", "pairs with equal fingerprints (candidates)"),
        ("renaming", "after renaming pruning"), ("common-subgraph", "after common-subgraph pruning"),
        ("context", "after context pruning (a smaller rule under one operator)"),
        ("products", "after product pruning"), ("candidates", "passed the second numeric test"),
        ("implied-before-proof", "implied by kept rules, not proved"), ("proved", "proved"),
        ("refuted", "refuted"), ("unknown", "unknown (dropped)"), ("parametric", "after generalization"),
        ("implied", "after implied-rule pruning"), ("restored", "restored by the final check"),
        ("final", "rules in the library"))

# seconds per stage, as the library records them (keyed by the stage that ends the step)
TIMES = (("graphs", "enumerate and fingerprint"), ("renaming", "pair and rename"),
         ("candidates", "prune and second test"), ("parametric", "prove and generalize"),
         ("implied", "implied-rule pruning"), ("final", "final check"))


def generate(max_ops: int, out: Path) -> Path:
    path = out / f"rules-{max_ops}.json"
    cmd = [sys.executable, "-m", "taso_py", "generate-rules", "--max-ops", str(max_ops), "-o", str(path)]
    print(f"$ taso generate-rules --max-ops {max_ops} -o {path}", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)
    return path


def summarize(path: Path) -> dict[str, Any]:
    gen = load(path).generator
    return {"library": str(path), "max_ops": gen["max_ops"], "counts": gen["counts"], "seconds": gen["seconds"],
            "wall_seconds": gen.get("wall_seconds", gen["total_seconds"])}


def table(runs: list[dict[str, Any]]) -> str:
    heads = [f"{r['max_ops']} ops" for r in runs]
    lines = ["| stage | " + " | ".join(heads) + " | TASO (4 ops) |", "|---" * (len(runs) + 2) + "|"]
    for key, title in ROWS:
        if not any(key in r["counts"] for r in runs):
            continue
        cells = [f"{r['counts'][key]:,}" if key in r["counts"] else "" for r in runs]
        taso = f"{TASO[key]:,}" if key in TASO else ""
        lines.append(f"| {title} | {' | '.join(cells)} | {taso} |")
    for key, title in TIMES:
        if any(key in r["seconds"] for r in runs):
            cells = [_time(r["seconds"][key]) if key in r["seconds"] else "" for r in runs]
            lines.append(f"| time: {title} | {' | '.join(cells)} | |")
    walls = [f"{r['wall_seconds'] / 60:.1f} min" for r in runs]
    lines.append("| wall time | " + " | ".join(walls) + " | ~5 min generation (8 cores) + <10 min proofs |")
    return "\n".join(lines)


def _time(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rule_generation", description=__doc__)
    parser.add_argument("--max-ops", type=int, nargs="*", default=[], help="generate at these sizes")
    parser.add_argument("--library", type=Path, nargs="*", default=[], help="tabulate these libraries")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="output directory")
    args = parser.parse_args(argv)
    if not args.max_ops and not args.library:
        parser.error("give --max-ops N ... or --library PATH ...")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        paths = [*args.library, *(generate(n, args.out) for n in args.max_ops)]
        runs = sorted((summarize(p) for p in paths), key=lambda r: r["max_ops"])
    except (LibraryError, subprocess.CalledProcessError) as e:
        sys.exit(f"rule_generation: {e}")
    text = table(runs)
    print(text)
    write_text(args.out / "rule_generation.md", text + "\n")
    write_json(args.out / "rule_generation.json", {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "taso": TASO, "runs": runs, "seconds": round(time.perf_counter() - started, 1)})


if __name__ == "__main__":
    main()
