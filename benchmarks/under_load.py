"""Compiled models and ONNX Runtime when the machine is not idle: quiet and loaded, side by side.

Usage: ``python -m benchmarks.under_load [--models a,b] [--size full|small] [--seconds S] [--out DIR]``

Each model is compiled as a user compiles it; then our module and an ORT session (spinning off,
all cores) are timed in turn, runs interleaved, medians, three times: on a quiet machine, beside
a single-threaded busy loop (another process), and beside another multi-threaded inference
process (ORT running the full-size ResNet-50 in a loop with its default settings, all cores,
spinning on). The slowdown of each is loaded time / quiet time; the bound this project holds
itself to is ours <= 1.25 x ORT's under the same load. Writes DIR/under_load.json and .md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import onnx

from benchmarks.compile_suite import build_and_compile, time_in_turn
from benchmarks.machine_info import describe, header
from benchmarks.models import MODELS, build
from taso_py.atomic import write_json, write_text

BUSY = "while True: pass"
INFERENCE = """
import sys, numpy as np, onnxruntime as ort
sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
x = {i.name: np.random.rand(*i.shape).astype(np.float32) for i in sess.get_inputs()}
while True:
    sess.run(None, x)
"""
BOUND = 1.25


def _load(kind: str, work: Path) -> subprocess.Popen | None:
    if kind == "quiet":
        return None
    if kind == "busy loop":
        return subprocess.Popen([sys.executable, "-c", BUSY])
    model = work / "load_resnet50.onnx"
    if not model.exists():
        onnx.save(build("resnet50", "full"), model)
    return subprocess.Popen([sys.executable, "-c", INFERENCE, str(model)])


def run_model(name: str, size: str, seconds: float, work: Path) -> dict[str, Any]:
    from taso_py.codegen.runtime import CompiledModel, random_inputs
    from taso_py.ort import session
    source, out, error = build_and_compile(name, size, work)
    if error:
        return {"model": name, "error": error}
    ours = CompiledModel(out)
    feeds = random_inputs(ours)
    ort = session(source, os.cpu_count() or 1)
    row: dict[str, Any] = {"model": name}
    for kind in ("quiet", "busy loop", "inference process"):
        load = _load(kind, work)
        try:
            time.sleep(1.0 if load else 0.0)  # let the load start (ORT loads its model)
            ms = time_in_turn({"ours": lambda: ours.run(feeds), "ort": lambda: ort.run(None, feeds)}, 20, seconds)
        finally:
            if load is not None:
                load.kill()
                load.wait()
        row[kind] = {k: round(v, 3) for k, v in ms.items()}
    for kind in ("busy loop", "inference process"):
        ours_x = row[kind]["ours"] / row["quiet"]["ours"]
        ort_x = row[kind]["ort"] / row["quiet"]["ort"]
        row[f"{kind} slowdown"] = {"ours": round(ours_x, 2), "ort": round(ort_x, 2), "ratio": round(ours_x / ort_x, 2)}
    print(f"{name:13s} quiet ours {row['quiet']['ours']:.2f} ORT {row['quiet']['ort']:.2f} ms | " + " | ".join(
        f"{k}: ours x{row[k + ' slowdown']['ours']:.2f} ORT x{row[k + ' slowdown']['ort']:.2f}"
        for k in ("busy loop", "inference process")), flush=True)
    return row


def markdown(doc: dict[str, Any]) -> str:
    lines = [header(doc["machine"]), "",
             "| model | quiet: ours / ORT (ms) | busy loop: ours / ORT (ms) | slowdown ours / ORT | "
             "inference beside: ours / ORT (ms) | slowdown ours / ORT | within 1.25x ORT's slowdown |",
             "|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {r['error']} | | | | | |")
            continue
        b, i = r["busy loop slowdown"], r["inference process slowdown"]
        ok = b["ratio"] <= BOUND and i["ratio"] <= BOUND
        lines.append(f"| {r['model']} | {r['quiet']['ours']:.2f} / {r['quiet']['ort']:.2f} | "
                     f"{r['busy loop']['ours']:.2f} / {r['busy loop']['ort']:.2f} | "
                     f"x{b['ours']:.2f} / x{b['ort']:.2f} | "
                     f"{r['inference process']['ours']:.2f} / {r['inference process']['ort']:.2f} | "
                     f"x{i['ours']:.2f} / x{i['ort']:.2f} | {'yes' if ok else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--size", choices=("full", "small"), default="full")
    ap.add_argument("--seconds", type=float, default=4.0, help="timing per condition and model")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    if any(n not in MODELS for n in names):
        raise SystemExit(f"unknown model; valid: {', '.join(MODELS)}")
    info = describe(os.cpu_count() or 1)
    print(header(info), flush=True)
    with tempfile.TemporaryDirectory(prefix="taso-under-load-") as tmp:
        rows = [run_model(n, args.size, args.seconds, Path(tmp)) for n in names]
    doc = {"machine": info, "size": args.size, "bound": BOUND, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "under_load.json", doc)
    text = markdown(doc)
    write_text(args.out / "under_load.md", text)
    print(text)


if __name__ == "__main__":
    main()
