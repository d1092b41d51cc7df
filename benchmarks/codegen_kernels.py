"""Kernel benchmarks of the code generator against this machine's limits and ONNX Runtime.

Usage: ``python -m benchmarks.codegen_kernels [--runs R] [--threads T] [--json OUT]
[--only matmul|conv|fc|dispatch|chain]``

Every kernel is built as `taso compile` builds it (a one-operator ONNX model through the graph
compiler: blocked layout, packed weights, fused bias and relu) and timed alone (`CompiledModel.
profile`: the convolution's kernel, not the layout transforms around a one-layer model):

1. fp32 matmul 1024^3 (weights constant, as in a model): GFLOP/s and % of the FMA peak; numpy.
2. Every distinct convolution of ResNet-50 and VGG-19 (batch 1): direct (TASO_WINOGRAD=0) and as
   compiled (Winograd F(4x4) / F(2x2) on 3x3 stride-1 layers), effective GFLOP/s (the direct
   FLOPs over the time) and % of the FMA peak; ORT on the same convolution.
3. FC layers at batch 1 (VGG-19's fc6 and fc7, ResNet-50's fc): GB/s of weights read and % of the
   STREAM triad, the two timed in turn round after round (median of the rounds' ratios).
4. The fixed cost of a kernel: 200 tiny layers (a 16 x 64 @ 64 x 64 matmul, relu fused) against
   one, per layer, ours and ORT's (per MatMul + Relu pair).
5. The element-wise chain relu(a*b + c) on 4M floats: GB/s (16 bytes an element), % of the triad
   timed the same way.

The machine's FMA peak and STREAM triad are measured first (`codegen.machine`). Each figure is the
best of five medians of R runs taken a moment apart, ours and ORT's alike: this shared host
sometimes takes a core away for a second, and a kernel's speed is what it does with the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from benchmarks.machine_info import describe, header
from taso_py.atomic import write_json

RESNET50 = [  # (in channels, size, out channels, kernel, stride): every distinct conv of ResNet-50
    (3, 224, 64, 7, 2), (64, 56, 64, 1, 1), (64, 56, 64, 3, 1), (64, 56, 256, 1, 1), (256, 56, 64, 1, 1),
    (256, 56, 128, 1, 1), (128, 56, 128, 3, 2), (128, 28, 512, 1, 1), (256, 56, 512, 1, 2), (512, 28, 128, 1, 1),
    (128, 28, 128, 3, 1), (512, 28, 256, 1, 1), (256, 28, 256, 3, 2), (256, 14, 1024, 1, 1), (512, 28, 1024, 1, 2),
    (1024, 14, 256, 1, 1), (256, 14, 256, 3, 1), (1024, 14, 512, 1, 1), (512, 14, 512, 3, 2), (512, 7, 2048, 1, 1),
    (1024, 14, 2048, 1, 2), (2048, 7, 512, 1, 1), (512, 7, 512, 3, 1)]
VGG19 = [(3, 224, 64, 3, 1), (64, 224, 64, 3, 1), (64, 112, 128, 3, 1), (128, 112, 128, 3, 1), (128, 56, 256, 3, 1),
         (256, 56, 256, 3, 1), (256, 28, 512, 3, 1), (512, 28, 512, 3, 1), (512, 14, 512, 3, 1)]
FC = [("VGG-19 fc6", 25088, 4096), ("VGG-19 fc7", 4096, 4096), ("ResNet-50 fc", 2048, 1000)]


def _model(nodes: list, inputs: list, outputs: list, weights: dict[str, np.ndarray]) -> Any:
    graph = helper.make_graph(nodes, "kernel", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv_model(c: int, size: int, o: int, k: int, stride: int) -> Any:
    rng = np.random.default_rng(0)
    pad = k // 2
    out = (size + 2 * pad - k) // stride + 1
    return _model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[stride] * 2),
                   helper.make_node("Relu", ["c"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, out, out])],
                  {"w": (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32),
                   "b": rng.standard_normal(o).astype(np.float32)})


def _matmul_model(m: int, k: int, n: int) -> Any:
    rng = np.random.default_rng(0)
    return _model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                  {"w": (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32),
                   "b": rng.standard_normal(n).astype(np.float32)})


def _compiled(model: Any, work: Path, name: str, winograd: bool = True) -> tuple[Any, dict[str, np.ndarray]]:
    """The model compiled as taso compile does (no superoptimizer: one operator), and random feeds."""
    import onnx

    from taso_py.codegen.graph import compile_graph
    from taso_py.codegen.runtime import CompiledModel, random_inputs
    from taso_py.onnx_io import load_model
    path = work / f"{name}.onnx"
    onnx.save(model, path)
    before = os.environ.get("TASO_WINOGRAD")
    os.environ["TASO_WINOGRAD"] = "1" if winograd else "0"
    try:
        compile_graph(load_model(path).graph, work / name)
    finally:
        os.environ.pop("TASO_WINOGRAD") if before is None else os.environ.__setitem__("TASO_WINOGRAD", before)
    compiled = CompiledModel(work / name)
    return compiled, random_inputs(compiled)


def _kernel_ms(compiled: Any, feeds: dict[str, np.ndarray], runs: int, prefix: str, passes: int = 5) -> float:
    """The model's main kernel (group name starting with `prefix`) timed alone: the best of `passes`
    medians of `runs`, a moment apart (this shared host takes a core away for a second at times; a
    kernel's speed is what it does when it has the machine)."""
    best = float("inf")
    for k in range(passes):
        if k:
            time.sleep(0.3)
        times = [t.ms for t in compiled.profile(feeds, runs) if t.group.startswith(prefix)]
        best = min(best, statistics.median(times))
    return best


def _ort_ms(path: Path, feeds: dict[str, np.ndarray], threads: int, runs: int, passes: int = 5) -> float:
    """ORT on the same model, timed as `_kernel_ms` times ours (best of `passes` medians)."""
    from taso_py.ort import session
    sess = session(path, threads)
    for _ in range(3):
        sess.run(None, feeds)
    best = float("inf")
    for k in range(passes):
        if k:
            time.sleep(0.3)
        best = min(best, statistics.median(_timed(lambda: sess.run(None, feeds), runs)))
    return best


def bench_matmul(n: int, runs: int, peak: float, work: Path) -> dict[str, Any]:
    compiled, feeds = _compiled(_matmul_model(n, n, n), work, "matmul")
    ours = _kernel_ms(compiled, feeds, runs, "matmul")
    a, b = np.random.default_rng(1).standard_normal((2, n, n), dtype=np.float32)
    np_ms = statistics.median(_timed(lambda: a @ b, runs))
    flops = 2 * n ** 3
    return {"shape": [n, n, n], "ms": {"ours": round(ours, 3), "numpy": round(np_ms, 3)},
            "gflops": {"ours": round(flops / ours / 1e6, 1), "numpy": round(flops / np_ms / 1e6, 1)},
            "percent_of_peak": round(100 * flops / ours / 1e6 / peak, 1)}


def _timed(fn: Callable[[], Any], runs: int) -> list[float]:
    fn()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def bench_convs(runs: int, threads: int, peak: float, work: Path) -> list[dict[str, Any]]:
    from taso_py.codegen.topi import winograd
    rows = []
    for net, layers in (("ResNet-50", RESNET50), ("VGG-19", VGG19)):
        for c, size, o, k, stride in layers:
            model = _conv_model(c, size, o, k, stride)
            out = (size + 2 * (k // 2) - k) // stride + 1
            flops = 2 * o * out * out * c * k * k
            direct, feeds = _compiled(model, work, f"d{c}_{size}_{o}_{k}_{stride}", winograd=False)
            row = {"net": net, "layer": f"{c}->{o} {k}x{k}/{stride} at {size}", "gflop": round(flops / 1e9, 3)}
            ms = _kernel_ms(direct, feeds, runs, "conv2d")
            row["direct"] = {"ms": round(ms, 3), "gflops": round(flops / ms / 1e6, 1),
                             "percent_of_peak": round(100 * flops / ms / 1e6 / peak, 1)}
            m = winograd.tile_size((1, o, out, out), (c,), 16) if k == 3 and stride == 1 else 0
            if m:
                wino, feeds = _compiled(model, work, f"w{c}_{size}_{o}", winograd=True)
                ms = _kernel_ms(wino, feeds, runs, "conv2d")
                row[f"winograd F({m}x{m})"] = {"ms": round(ms, 3), "gflops": round(flops / ms / 1e6, 1),
                                               "percent_of_peak": round(100 * flops / ms / 1e6 / peak, 1)}
            row["ort_ms"] = round(_ort_ms(work / f"d{c}_{size}_{o}_{k}_{stride}.onnx", feeds, threads, runs), 3)
            best = min(v["ms"] for key, v in row.items() if isinstance(v, dict))
            row["speed_vs_ort"] = round(row["ort_ms"] / best, 2)
            print(f"{net:9s} {row['layer']:28s} " + "  ".join(
                f"{key}: {v['gflops']:6.1f} GF/s ({v['percent_of_peak']:.0f}%)" for key, v in row.items()
                if isinstance(v, dict)) + f"  ORT {row['ort_ms']:.3f} ms ({row['speed_vs_ort']:.2f}x)", flush=True)
            rows.append(row)
    return rows


class Triad:
    """The STREAM triad (`codegen.machine`), one run at a time, to time beside a kernel."""

    def __init__(self, threads: int, elements: int = 1 << 25) -> None:
        from taso_py.codegen import machine
        self.lib, self.threads, self.n = machine._library(), threads, elements
        self.a, self.b, self.c = (np.full(elements, v, np.float32) for v in (1.0, 2.0, 3.0))

    def __call__(self) -> None:
        self.lib.triad(self.a.ctypes.data, self.b.ctypes.data, self.c.ctypes.data, self.n, self.threads)

    def gbs(self, ms: float) -> float:
        return 12 * self.n / ms / 1e6


def paired_bandwidth(kernel: Callable[[], Any], moved: int, triad: Triad, rounds: int) -> tuple[float, float, float]:
    """(kernel GB/s, triad GB/s, kernel / triad): the two run in turn, round after round, and the
    fraction is the median of each round's (memory bandwidth on this shared host drifts by half
    within a minute; runs a few milliseconds apart see the same)."""
    pairs = []
    for _ in range(rounds):
        k = min(_timed(kernel, 2))
        t = min(_timed(triad, 2))
        pairs.append((moved / k / 1e6, triad.gbs(t)))
    ours = statistics.median(p[0] for p in pairs)
    return ours, statistics.median(p[1] for p in pairs), statistics.median(p[0] / p[1] for p in pairs)


def bench_fc(runs: int, threads: int, work: Path) -> list[dict[str, Any]]:
    triad = Triad(threads)
    rows = []
    for name, k, n in FC:
        model = _matmul_model(1, k, n)
        compiled, feeds = _compiled(model, work, f"fc{k}_{n}")
        moved = 4 * (k * n + k + 2 * n)
        gbs, triad_gbs, fraction = paired_bandwidth(lambda c=compiled, f=feeds: c.run(f), moved, triad, runs)
        ort = _ort_ms(work / f"fc{k}_{n}.onnx", feeds, threads, runs)
        rows.append({"layer": name, "shape": [1, k, n], "ms": round(moved / gbs / 1e6, 3), "gbs": round(gbs, 1),
                     "triad_gbs": round(triad_gbs, 1), "percent_of_triad": round(100 * fraction, 1),
                     "ort_ms": round(ort, 3)})
        print(f"{name:13s} {moved / 1e6:7.1f} MB  {gbs:5.1f} GB/s ({100 * fraction:.0f}% of the triad beside it, "
              f"{triad_gbs:.1f} GB/s)  ORT {ort:.3f} ms", flush=True)
    return rows


def _chain_model(layers: int, width: int) -> Any:
    """`layers` tiny matmul + relu layers in a row: a model that is all fixed cost."""
    rng = np.random.default_rng(0)
    nodes, weights, prev = [], {}, "x"
    for k in range(layers):
        weights[f"w{k}"] = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        nodes += [helper.make_node("MatMul", [prev, f"w{k}"], [f"m{k}"]),
                  helper.make_node("Relu", [f"m{k}"], [f"r{k}"])]
        prev = f"r{k}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, width])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, width])], weights)


def bench_dispatch(runs: int, threads: int, work: Path) -> dict[str, Any]:
    """The fixed cost of a kernel: 200 layers of a 16 x 64 @ 64 x 64 matmul with a fused relu, each
    a parallel kernel of almost no work, against one such layer; the same in ORT per node pair."""
    out: dict[str, Any] = {}
    for label, layers in (("one", 1), ("many", 200)):
        compiled, feeds = _compiled(_chain_model(layers, 64), work, f"chain{layers}")
        out[label] = (compiled, feeds, work / f"chain{layers}.onnx")
    ms = {}
    for label, (compiled, feeds, path) in out.items():
        ms[f"ours_{label}"] = min(statistics.median(_timed(lambda c=compiled, f=feeds: c.run(f), runs))
                                  for _ in range(3))
        ms[f"ort_{label}"] = _ort_ms(path, feeds, threads, runs, passes=3)
    per = {k: round((ms[f"{k}_many"] - ms[f"{k}_one"]) / 199 * 1e3, 2) for k in ("ours", "ort")}
    return {"layers": 200, "ms": {k: round(v, 3) for k, v in ms.items()}, "us_per_layer": per}


def bench_chain(n: int, runs: int, threads: int) -> dict[str, Any]:
    from taso_py.codegen import te
    from taso_py.codegen.backends.c import build
    from taso_py.codegen.lower import lower
    from taso_py.codegen.topi import registry
    from taso_py.codegen.tune.space import Config
    from taso_py.types import TensorType
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n, np.float32) for _ in range(3))
    out = np.zeros(n, np.float32)
    ta, tb, tc = (te.placeholder((n,), name=nm) for nm in "abc")
    t = TensorType((n,))
    (prod,) = registry.compute("mul", [ta, tb], None, [t])
    (acc,) = registry.compute("add", [prod, tc], None, [t])
    (y,) = registry.compute("relu", [acc], None, [t])
    kernel = build(lower(registry.schedule_group([y], Config()), [ta, tb, tc, y], "chain"))["chain"]
    kernel(a, b, c, out)
    np.testing.assert_allclose(out, np.maximum(a * b + c, 0), rtol=1e-5, atol=1e-6)
    gbs, triad_gbs, fraction = paired_bandwidth(lambda: kernel(a, b, c, out), 16 * n, Triad(threads), runs)
    np_ms = statistics.median(_timed(lambda: np.maximum(a * b + c, 0), runs))
    return {"elements": n, "ms": {"ours": round(16 * n / gbs / 1e6, 3), "numpy": round(np_ms, 3)},
            "gbs": {"ours": round(gbs, 1), "numpy": round(16 * n / np_ms / 1e6, 1)},
            "triad_gbs": round(triad_gbs, 1), "percent_of_triad": round(100 * fraction, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.codegen_kernels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, metavar="R", help="timed runs per kernel")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, metavar="T")
    parser.add_argument("--only", choices=("matmul", "conv", "fc", "dispatch", "chain"), action="append",
                        help="run only these")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/codegen_kernels.json"), metavar="OUT")
    args = parser.parse_args(argv)
    os.environ["TASO_NUM_THREADS"] = str(args.threads)
    info = describe(args.threads)
    print(header(info), flush=True)
    only = set(args.only or ("matmul", "conv", "fc", "dispatch", "chain"))
    results: dict[str, Any] = {"machine": info, "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="taso-kernels-") as tmp:
        work = Path(tmp)
        if "matmul" in only:
            results["matmul"] = r = bench_matmul(1024, args.runs, info["fma_peak_gflops"], work)
            print(f"matmul 1024^3: ours {r['gflops']['ours']} GFLOP/s ({r['percent_of_peak']}% of the FMA peak), "
                  f"numpy {r['gflops']['numpy']}", flush=True)
        if "conv" in only:
            results["convolutions"] = bench_convs(args.runs, args.threads, info["fma_peak_gflops"], work)
        if "fc" in only:
            results["fc"] = bench_fc(args.runs, args.threads, work)
        if "dispatch" in only:
            results["dispatch"] = r = bench_dispatch(args.runs, args.threads, work)
            print(f"fixed cost of a kernel (200 tiny matmul+relu layers): ours {r['us_per_layer']['ours']} us a layer, "
                  f"ORT {r['us_per_layer']['ort']} us", flush=True)
        if "chain" in only:
            results["relu_mul_add"] = r = bench_chain(4 * 1024 * 1024, args.runs, args.threads)
            print(f"relu(a*b + c), 4M floats: ours {r['gbs']['ours']} GB/s ({r['percent_of_triad']}% of the triad), "
                  f"numpy {r['gbs']['numpy']}", flush=True)
    results["machine"]["load_average_after"] = list(os.getloadavg())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.json, results)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
