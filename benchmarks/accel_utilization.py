"""Utilization of the simulated accelerator on every distinct ResNet-50 convolution.

Usage: ``python -m benchmarks.accel_utilization [--timing-only] [--out DIR]``

The convolutions are read from the ResNet-50 of `benchmarks.models` (224x224, batch 1; shapes
by ONNX shape inference), one row per distinct shape with its count in the network. Each runs
as the graph compiler would run it on `--target accel` (int8, bias, requantize, ReLU where the
network has one; the host's rewrites of `quant.device_shape`), with the default tiling
`choose_tiling` picks, once with latency hiding (two virtual threads) and once without (one
thread, same tiles). Utilization = the layer's MACs / (cycles x 256 peak MACs a cycle); the
MACs are the layer's own, so zero-padded channels count as waste. Unless --timing-only, the
latency-hiding run also computes on random int8 data and is checked bit for bit against numpy.

Roofline: arithmetic intensity = MACs per byte the program loads from DRAM (its own traffic,
re-loads included); the DMA roof is dma_bytes_per_cycle x intensity, the compute roof 256
MACs/cycle. A layer is compute-bound when the compute roof is the lower one. Writes
accel_utilization.{json,md,png} under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from benchmarks.models import build
from taso_py.atomic import write_json, write_text
from taso_py.codegen.backends.accel import (
    AccelConfig,
    ConvShape,
    Epilogue,
    LayerAttrs,
    conv2d_program,
    reference,
    run_layer,
)
from taso_py.codegen.backends.accel.codegen import simulate_timing
from taso_py.codegen.backends.accel.quant import _tiling, device_shape

RESULTS = Path(__file__).parent / "results"


def resnet50_convs() -> Counter[tuple[ConvShape, bool]]:
    """Distinct (convolution, followed by ReLU) of ResNet-50 with their counts."""
    model = onnx.shape_inference.infer_shapes(build("resnet50", "full"))
    g = model.graph
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(g.value_info) + list(g.input) + list(g.output)}
    inits = {t.name: list(t.dims) for t in g.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    out: Counter[tuple[ConvShape, bool]] = Counter()
    for n in g.node:
        if n.op_type != "Conv":
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        _, c, h, w = dims[n.input[0]]
        oc, _, kh, kw = inits[n.input[1]]
        pads, strides = a.get("pads", [0, 0, 0, 0]), a.get("strides", [1, 1])
        assert pads[0] == pads[1] == pads[2] == pads[3] and strides[0] == strides[1] and a.get("group", 1) == 1
        nxt = consumers.get(n.output[0], [])
        if nxt and nxt[0].op_type == "BatchNormalization":  # folded into the conv at compile time
            nxt = consumers.get(nxt[0].output[0], [])
        relu = bool(nxt) and nxt[0].op_type == "Relu"
        out[ConvShape(c, h, w, oc, kh, kw, strides[0], pads[0]), relu] += 1
    return out


def measure(shape: ConvShape, relu: bool, cfg: AccelConfig, execute: bool) -> dict[str, Any]:
    dev = device_shape(shape, cfg)
    epi = Epilogue(bias=True, shift=20, relu=relu)
    tiling = _tiling(dev, epi, cfg)
    row: dict[str, Any] = {"shape": _name(shape), "device": _name(dev), "macs": shape.macs, "tiling": vars(tiling)}
    for lh in (True, False):
        prog = conv2d_program(dev, epi, cfg, latency_hiding=lh, tiling=tiling)
        st = simulate_timing(prog, cfg)
        key = "hide" if lh else "serial"
        row[key] = {"cycles": st.cycles, "busy": st.busy, "bytes_loaded": st.bytes_loaded,
                    "bytes_stored": st.bytes_stored, "instructions": st.instructions,
                    "utilization": shape.macs / (st.cycles * cfg.peak_macs_per_cycle)}
    intensity = shape.macs / row["hide"]["bytes_loaded"]
    row["intensity"] = intensity
    row["dma_roof"] = cfg.dma_bytes_per_cycle * intensity
    row["compute_bound"] = row["dma_roof"] >= cfg.peak_macs_per_cycle
    if execute:
        rng = np.random.default_rng(0)
        x = rng.integers(-128, 128, (1, shape.ic, shape.ih, shape.iw), dtype=np.int8)
        w = rng.integers(-128, 128, (shape.oc, shape.ic, shape.kh, shape.kw), dtype=np.int8)
        b = rng.integers(-5000, 5000, shape.oc).astype(np.int32)
        attrs = LayerAttrs(shape.stride, shape.pad, relu, 20, tuple(int(m) for m in rng.integers(1, 4000, shape.oc)))
        t = time.perf_counter()
        y, st = run_layer("conv2d", x, w, b, attrs, cfg)
        row["simulate_s"] = time.perf_counter() - t
        row["bit_exact"] = bool(np.array_equal(y, reference("conv2d", x, w, b, attrs)))
        assert st.cycles == row["hide"]["cycles"]
    return row


def _name(s: ConvShape) -> str:
    return f"{s.ic}x{s.ih}x{s.iw} -> {s.oc}, {s.kh}x{s.kw}/{s.stride} p{s.pad}"


def table(rows: list[dict[str, Any]], cfg: AccelConfig) -> str:
    head = ("| # | conv (C x H x W -> OC, k/s pad) | count | MMACs | tiling (toc, tic, th, order) | MACs/B | bound "
            "| util. hidden | util. serial | cycles hidden | load busy | bit-exact |")
    lines = [head, "|" + "---|" * 12]
    for k, r in enumerate(rows, 1):
        t = r["tiling"]
        lines.append(
            f"| {k} | {r['shape']} | {r['count']} | {r['macs'] / 1e6:.1f} | {t['toc']}, {t['tic']}, {t['th']}, "
            f"{t['order']} | {r['intensity']:.0f} | {'compute' if r['compute_bound'] else 'DMA'} "
            f"| {100 * r['hide']['utilization']:.1f}% | {100 * r['serial']['utilization']:.1f}% "
            f"| {r['hide']['cycles']:,} | {100 * r['hide']['busy']['load'] / r['hide']['cycles']:.0f}% "
            f"| {r.get('bit_exact', 'not run')} |")
    tot = {lh: sum(r[lh]["cycles"] * r["count"] for r in rows) for lh in ("hide", "serial")}
    macs = sum(r["macs"] * r["count"] for r in rows)
    peak = cfg.peak_macs_per_cycle
    lines.append(f"\nAll ResNet-50 convolutions (counts weighted): {macs / 1e9:.2f} GMACs, "
                 f"{tot['hide']:,} cycles with latency hiding ({100 * macs / (tot['hide'] * peak):.1f}% utilization), "
                 f"{tot['serial']:,} without ({100 * macs / (tot['serial'] * peak):.1f}%).")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], cfg: AccelConfig, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 5))
    peak, bw = cfg.peak_macs_per_cycle, cfg.dma_bytes_per_cycle
    xs = np.logspace(0, 3, 200)
    ax.plot(xs, np.minimum(peak, bw * xs), "k-", lw=1.5,
            label=f"roof: min({peak} MACs/cycle, {bw} B/cycle x intensity)")
    for key, marker, label in (("hide", "o", "latency hiding"), ("serial", "x", "no latency hiding")):
        ax.scatter([r["intensity"] for r in rows], [r["macs"] / r[key]["cycles"] for r in rows], marker=marker,
                   label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (MACs per DRAM byte loaded)")
    ax.set_ylabel("achieved MACs / cycle")
    ax.set_xlim(4, 400)
    ax.set_ylim(20, 400)
    ax.set_title("ResNet-50 convolutions on the simulated accelerator")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timing-only", action="store_true", help="skip the functional run and its numpy check")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    cfg = AccelConfig()
    rows = []
    t0 = time.perf_counter()
    for (shape, relu), count in resnet50_convs().items():
        row = measure(shape, relu, cfg, not args.timing_only)
        row["count"] = count
        row["relu"] = relu
        rows.append(row)
    md = table(rows, cfg)
    print(md)
    print(f"({time.perf_counter() - t0:.0f} s)")
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "accel_utilization.json", {"config": vars(cfg), "layers": rows})
    write_text(args.out / "accel_utilization.md", f"Simulated accelerator, default `AccelConfig` {cfg}\n\n{md}\n")
    plot(rows, cfg, args.out / "accel_utilization.png")


if __name__ == "__main__":
    main()
