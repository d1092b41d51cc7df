"""Time the verifier on the hand-written rules (tests/verifier_cases.py): true ones, true ones
beyond the current axioms ("hard") and wrong ones.

Usage: ``python -m benchmarks.proof_times [--out DIR] [--timeout S]``

Prints a table per set (count, PROVED/REFUTED/UNKNOWN counts, median, p95 and max seconds) and
writes every result to DIR/proof_times.json (default benchmarks/results), atomically.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from taso_py.atomic import write_json
from taso_py.library import parse_rule
from taso_py.verifier.prover import DEFAULT_TIMEOUT, prove
from tests.verifier_cases import HARD_TRUE_RULES, TRUE_RULES, WRONG_RULES, Case

STATUSES = ("PROVED", "REFUTED", "UNKNOWN")
# Summary table columns: (title, alignment and width).
COLUMNS = (("set", "<6"), ("count", ">5"), ("PROVED", ">6"), ("REFUTED", ">7"), ("UNKNOWN", ">7"),
           ("median s", ">8"), ("p95 s", ">7"), ("max s", ">7"))


def run_set(cases: Sequence[Case], timeout: float) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        start = time.perf_counter()
        result = prove(parse_rule(case.text), timeout=timeout)
        wall = time.perf_counter() - start
        record = result.to_json()
        record.pop("counterexample", None)  # inputs and outputs: bulky, and reproducible from the rule
        rows.append({"rule": case.text, "why": case.why, **record, "wall_seconds": round(wall, 4)})
    return rows


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    seconds = np.array([r["wall_seconds"] for r in rows], dtype=float)
    return {"count": len(rows), **{s: sum(r["status"] == s for r in rows) for s in STATUSES},
            "median_seconds": float(np.median(seconds)) if len(rows) else 0.0,
            "p95_seconds": float(np.percentile(seconds, 95)) if len(rows) else 0.0,
            "max_seconds": float(seconds.max()) if len(rows) else 0.0}


def _table_row(cells: Sequence[str]) -> str:
    return "  ".join(f"{cell:{spec}}" for cell, (_, spec) in zip(cells, COLUMNS, strict=True)).rstrip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.proof_times", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="output directory")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per proof")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    args.out.mkdir(parents=True, exist_ok=True)
    sets = {"true": TRUE_RULES, "hard": HARD_TRUE_RULES, "wrong": WRONG_RULES}
    results: dict[str, Any] = {"timeout": args.timeout, "python": platform.python_version(), "sets": {}}
    print(_table_row([title for title, _ in COLUMNS]))
    for name, cases in sets.items():
        rows = run_set(cases, args.timeout)
        summary = summarize(rows)
        results["sets"][name] = {"summary": summary, "results": rows}
        print(_table_row([name, str(summary["count"]), *(str(summary[s]) for s in STATUSES),
                          *(f"{summary[k]:.3f}" for k in ("median_seconds", "p95_seconds", "max_seconds"))]),
              flush=True)
    not_proved = [r for r in results["sets"]["true"]["results"] if r["status"] != "PROVED"]
    wrongly_proved = [r for r in results["sets"]["wrong"]["results"] if r["status"] == "PROVED"]
    for title, rows in (("true rules not proved", not_proved), ("WRONG RULES PROVED", wrongly_proved)):
        if rows:
            print(f"\n{title}:")
            for r in rows:
                print(f"  {r['status']}: {r['rule']}" + (f"\n    {r['reason']}" if "reason" in r else ""))
    path = args.out / "proof_times.json"
    write_json(path, results)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
