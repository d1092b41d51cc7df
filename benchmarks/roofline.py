"""How far compiled models and each of their kernels are from this machine's limits.

Usage: ``python -m benchmarks.roofline [--models resnet50,vgg19] [--size full|small] [--threads T] [--out DIR]``

The machine's fp32 FMA peak (a register-resident FMA loop in C, per thread count) and its
STREAM triad bandwidth are measured first (`codegen.machine`). Each model is compiled as a
user compiles it (`taso compile`), then every kernel is timed on its own (`taso run
--profile`): its roofline bound is max(FLOPs / peak, bytes / bandwidth), with FLOPs those of
the operators it computes (Winograd's saving shows as a kernel above the peak) and bytes what
it must read and write at least. A whole model's bound is the sum of its kernels' bounds; the
table gives our whole-model time and ONNX Runtime's (the original model, same threads) as
fractions of it. Writes DIR/roofline.json, .md and a roofline plot roofline.png.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.compile_suite import build_and_compile, time_in_turn
from benchmarks.machine_info import describe, header
from benchmarks.models import MODELS
from taso_py.atomic import write_json, write_text
from taso_py.codegen import machine


def model_roofline(name: str, size: str, threads: int, peak: float, bandwidth: float, work: Path) -> dict[str, Any]:
    from taso_py.codegen.runtime import CompiledModel, random_inputs
    from taso_py.ort import session
    source, out, error = build_and_compile(name, size, work)
    if error:
        return {"model": name, "error": error}
    ours = CompiledModel(out)
    feeds = random_inputs(ours)
    kernels = []
    for t in ours.profile(feeds, repeat=5):
        bound = max(t.flops / (peak * 1e6), t.bytes / (bandwidth * 1e6))
        kernels.append({"kernel": t.kernel, "group": t.group, "ms": round(t.ms, 4), "gflops": round(t.gflops, 1),
                        "intensity": round(t.flops / t.bytes, 2) if t.bytes else 0.0,
                        "fraction": round(bound / t.ms, 3) if t.ms > 0 else 0.0, "bound_ms": bound})
    ort = session(source, threads)
    ms = time_in_turn({"ours": lambda: ours.run(feeds), "ort": lambda: ort.run(None, feeds)}, 10)
    bound_ms = sum(k["bound_ms"] for k in kernels)
    row = {"model": name, "bound_ms": round(bound_ms, 3), "ours_ms": round(ms["ours"], 3),
           "ort_ms": round(ms["ort"], 3), "ours_fraction": round(bound_ms / ms["ours"], 3),
           "ort_fraction": round(bound_ms / ms["ort"], 3), "kernels": kernels}
    print(f"{name:13s} bound {bound_ms:8.3f} ms  ours {ms['ours']:8.3f} ms ({row['ours_fraction']:.0%})  "
          f"ORT {ms['ort']:8.3f} ms ({row['ort_fraction']:.0%})", flush=True)
    return row


def markdown(doc: dict[str, Any]) -> str:
    lim = doc["limits"]
    lines = [header(doc["machine"]), "",
             "FMA peak (GFLOP/s) by threads: " + ", ".join(f"{k}: {v:.0f}" for k, v in lim["peak_gflops"].items())
             + "; STREAM triad (GB/s): " + ", ".join(f"{k}: {v:.1f}" for k, v in lim["triad_gbs"].items()), "",
             "| model | roofline bound (ms) | ours (ms) | ours, % of bound | ORT (ms) | ORT, % of bound | "
             "kernels at >= 85% of their bound |", "|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {r['error']} | | | | | |")
            continue
        heavy = [k for k in r["kernels"] if k["ms"] >= 0.05]
        good = sum(1 for k in heavy if k["fraction"] >= 0.85)
        lines.append(f"| {r['model']} | {r['bound_ms']:.2f} | {r['ours_ms']:.2f} | {r['ours_fraction']:.0%} | "
                     f"{r['ort_ms']:.2f} | {r['ort_fraction']:.0%} | {good} of {len(heavy)} (those over 50 us) |")
    return "\n".join(lines) + "\n"


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    peak, bw = doc["machine"]["fma_peak_gflops"], doc["machine"]["triad_gbs"]
    fig, ax = plt.subplots(figsize=(7, 5))
    xs = [0.05 * 1.25 ** k for k in range(70)]
    ax.plot(xs, [min(peak, bw * x) for x in xs], color="black", linewidth=1.2, label="roofline (measured)")
    for r in doc["rows"]:
        if "error" in r:
            continue
        pts = [(k["intensity"], k["gflops"]) for k in r["kernels"] if k["intensity"] > 0 and k["gflops"] > 0]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, alpha=0.7, label=r["model"])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("GFLOP/s (operator FLOPs; Winograd kernels above the peak)")
    ax.legend(fontsize=7)
    ax.set_title(header(doc["machine"]).split(";")[0], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--size", choices=("full", "small"), default="full")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    if any(n not in MODELS for n in names):
        raise SystemExit(f"unknown model; valid: {', '.join(MODELS)}")
    os.environ["TASO_NUM_THREADS"] = str(args.threads)
    counts = tuple(sorted({1, args.threads, os.cpu_count() or 1}))
    limits = machine.measure(counts)
    info = describe(args.threads)
    info.update(fma_peak_gflops=limits.peak(args.threads), triad_gbs=limits.bandwidth(args.threads))
    print(header(info), flush=True)
    with tempfile.TemporaryDirectory(prefix="taso-roofline-") as tmp:
        rows = [model_roofline(n, args.size, args.threads, info["fma_peak_gflops"], info["triad_gbs"], Path(tmp))
                for n in names]
    doc = {"machine": info, "limits": {"peak_gflops": limits.peak_gflops, "triad_gbs": limits.triad_gbs},
           "size": args.size, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "roofline.json", doc)
    text = markdown(doc)
    write_text(args.out / "roofline.md", text)
    plot(doc, args.out / "roofline.png")
    print(text)


if __name__ == "__main__":
    main()
