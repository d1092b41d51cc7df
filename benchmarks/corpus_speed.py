"""Real exports through taso-py's compiler against ONNX Runtime: the speed half of `corpus_coverage`.

Usage: ``python -m benchmarks.corpus_speed [--models a,b] [--threads 1,2] [--runs 30] [--out DIR]``

The suite's models are large and hand-written; a user's models are often small exports with
ops the suite lacks (tanh GELU, 17-wide attention, squeeze-excite), where a kernel's fixed
costs weigh most. For each torch export of the test corpus (random weights, built here):
`taso compile` with the default settings, as a user runs it (it checks the module against ORT
itself), then, in one process per thread count, our module and ORT on the original model run
interleaved for at least two seconds and `--runs` rounds (ORT: all graph optimizations, spinning
off; ours: TASO_NUM_THREADS). The ratio is the median over rounds of ORT's time over ours.
Prints the CPU (lscpu) and a markdown table; writes DIR/corpus_speed.json and .md (default DIR:
benchmarks/results).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.compile_suite import geomean, paired_ratio, samples_in_turn, taso_compile
from benchmarks.corpus_coverage import torch_entries
from benchmarks.machine_info import identify
from taso_py.atomic import write_json, write_text
from tests.corpus import CorpusModel, save


def time_entry(entry: CorpusModel, work: Path, threads: list[int], runs: int) -> dict[str, Any]:
    """Compile one corpus export and time it against ORT at each thread count."""
    from taso_py.codegen.runtime import CompiledModel, random_inputs
    from taso_py.ort import session

    name = entry.name
    path = save(entry.build(), work / f"{name}.onnx", external_data=entry.external_data)
    shapes = [a for k, dims in entry.input_shapes.items() for a in ("--input-shape", f"{k}={','.join(map(str, dims))}")]
    report = taso_compile(path, work / f"{name}.cpu", True, 0, shapes)
    row: dict[str, Any] = {"model": name}
    if "error" in report:
        return {**row, "error": report["error"]}
    row.update(kernels=report["kernels"], fallback_nodes=report["fallback_nodes"], rewrites=report["rewrites"],
               max_rel_error=report["check"]["max_rel_error"], ms={}, speedup={})
    for t in threads:
        # a module's pool reads TASO_NUM_THREADS when it starts, once per loaded library: a copy each
        os.environ["TASO_NUM_THREADS"] = str(t)
        ours = CompiledModel(shutil.copytree(work / f"{name}.cpu", work / f"{name}.{t}t.cpu"))
        feeds = random_inputs(ours)
        ort = session(path, t)
        samples = samples_in_turn({"ours": partial(ours.run, feeds), "ort": partial(ort.run, None, feeds)}, runs, 2.0)
        row["ms"][t] = {k: round(statistics.median(v), 4) for k, v in samples.items()}
        row["speedup"][t] = round(paired_ratio(samples["ort"], samples["ours"]), 3)
    return row


def markdown(doc: dict[str, Any]) -> str:
    threads = doc["threads"]
    head = "| model | kernels | fallback nodes | " + " | ".join(
        f"{t} thread{'s' * (t > 1)}: ours / ORT (ms) | ORT / ours" for t in threads) + " |"
    lines = [f"CPU: {doc['machine']['cpu']} ({doc['machine']['isa']}, {doc['machine']['cores']} cores); "
             f"load average {doc['machine']['load_average'][0]:.2f}", "", head,
             "|---|---|---|" + "---|---|" * len(threads)]
    for r in doc["rows"]:
        if "error" in r:
            lines.append(f"| {r['model']} | **compile failed**: {r['error']} |" + " |" * (1 + 2 * len(threads)))
            continue
        cells = [f"{r['ms'][t]['ours']:.3f} / {r['ms'][t]['ort']:.3f} | {r['speedup'][t]:.2f}x" for t in threads]
        lines.append(f"| {r['model']} | {r['kernels']} | {r['fallback_nodes']} | {' | '.join(cells)} |")
    means = " | ".join(f" | **{doc['geomean'][t]:.2f}x**" for t in threads)
    lines.append(f"| geometric mean | | | {means} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.corpus_speed", description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated corpus names (default: every torch export)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    entries = torch_entries(args.models)
    threads = [int(t) for t in args.threads.split(",")]
    doc: dict[str, Any] = {"machine": identify(), "threads": threads, "rows": []}
    print(f"CPU: {doc['machine']['cpu']} ({doc['machine']['cores']} cores)", flush=True)
    with tempfile.TemporaryDirectory(prefix="taso-corpus-speed-") as tmp:
        for entry in entries:
            row = time_entry(entry, Path(tmp), threads, args.runs)
            doc["rows"].append(row)
            print(f"{entry.name}: " + (f"compile failed: {row['error']}" if "error" in row else "  ".join(
                f"{t}t ours {row['ms'][t]['ours']:.3f} ms ORT {row['ms'][t]['ort']:.3f} ms {row['speedup'][t]:.2f}x"
                for t in threads)), flush=True)
    ok = [r for r in doc["rows"] if "error" not in r]
    doc["geomean"] = {t: round(geomean([r["speedup"][t] for r in ok]), 3) for t in threads}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "corpus_speed.json", doc)
    text = markdown(doc)
    write_text(args.out / "corpus_speed.md", text)
    print(text)
    return doc


if __name__ == "__main__":
    main()
