"""GPU kernel benchmarks of the cuda target, side by side with torch in one process.

Usage: ``python -m benchmarks.cuda_kernels [--runs R] [--grid] [--emulate]``

1. fp32 matmul 4096x4096x4096, GFLOP/s: our default schedule (and with --grid the best of a
   small grid of its knobs) next to torch.matmul (cuBLAS, TF32 off so both compute in fp32).
2. The element-wise chain relu(a*b + c) on 4M floats, one fused kernel, GB/s (16 bytes per
   element) next to torch eager (three kernels).

Tensors live on the GPU (torch allocates them); our kernels are launched through their
`name_launch` entry on device pointers, so no host copies are timed. Each figure is the
median of R runs, each run timed with CUDA events around one launch after a warm-up.
Without a CUDA device (or torch without CUDA) it says so and exits 0. `--emulate` runs the
same code path at small sizes on the CPU emulation of the CUDA runtime (numpy buffers, no
torch), which checks the plumbing and the results, not speed.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from taso_py.codegen import te
from taso_py.codegen.backends.cuda import CudaKernel, build, device_count
from taso_py.codegen.backends.cuda.emulate import build_emulated
from taso_py.codegen.lower import lower
from taso_py.codegen.target import CUDA
from taso_py.codegen.topi import compute, schedule_group
from taso_py.codegen.topi.cuda import dense as _dense  # noqa: F401  (registers the cuda schedules)
from taso_py.codegen.tune.space import Config
from taso_py.types import TensorType

MATMUL_GRID = {"block_m": (64, 128), "block_n": (64, 128), "thread_m": (4, 8), "thread_n": (4, 8), "tile_k": (8, 16)}


def matmul_kernels(n: int, cfgs: list[Config], emulate: bool) -> list[CudaKernel]:
    """One n^3 matmul kernel per schedule config, all in one module (one nvcc call for a whole grid)."""
    funcs = []
    for k, cfg in enumerate(cfgs):
        a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
        (c,) = compute("matmul", [a, b], None, [TensorType((n, n))])
        funcs.append(lower(schedule_group([c], cfg, target=CUDA), [a, b, c], f"mm{n}_{k}"))
    mod = build_emulated(funcs) if emulate else build(funcs)
    return [mod[f.name] for f in funcs]


def chain_kernel(n: int, emulate: bool) -> CudaKernel:
    """relu(a * b + c), as the graph compiler hands it over: three operators fused into one group."""
    a, b, c = (te.placeholder((n,), name=x) for x in "abc")
    t = [TensorType((n,))]
    (m,) = compute("mul", [a, b], None, t)
    (s,) = compute("add", [m, c], None, t)
    (r,) = compute("relu", [s], None, t)
    f = lower(schedule_group([r], None, target=CUDA), [a, b, c, r], f"chain{n}")
    return (build_emulated(f) if emulate else build(f))[f.name]


def gpu_median_ms(fn: Callable[[], None], runs: int) -> float:
    import torch
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def on_gpu(runs: int, grid: bool) -> None:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"device: {torch.cuda.get_device_name(0)}; medians of {runs} runs")
    n = 4096
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    c = torch.empty(n, n, device="cuda")
    flops = 2 * n ** 3
    want = a @ b
    configs = [Config()] + ([Config(dict(zip(MATMUL_GRID, v))) for v in itertools.product(*MATMUL_GRID.values())]
                            if grid else [])
    results = []
    for cfg, k in zip(configs, matmul_kernels(n, configs, emulate=False)):
        ms = gpu_median_ms(lambda k=k: k.launch(a.data_ptr(), b.data_ptr(), c.data_ptr()), runs)
        err = float((c - want).abs().max() / want.abs().max())
        results.append((ms, cfg.values or "default", err))
    ms_torch = gpu_median_ms(lambda: torch.matmul(a, b, out=c), runs)
    default = results[0]
    best = min(results, key=lambda r: r[0])
    print(f"matmul {n}^3 fp32: ours default {flops / default[0] / 1e6:8.0f} GFLOP/s ({default[0]:.2f} ms, "
          f"max rel err {default[2]:.1e})")
    if grid:
        print(f"                 ours best    {flops / best[0] / 1e6:8.0f} GFLOP/s ({best[0]:.2f} ms) {best[1]}")
    print(f"                 torch/cuBLAS {flops / ms_torch / 1e6:8.0f} GFLOP/s ({ms_torch:.2f} ms)")

    m = 4 * 1024 * 1024
    x, y, z = (torch.randn(m, device="cuda") for _ in range(3))
    out = torch.empty(m, device="cuda")
    chain = chain_kernel(m, emulate=False)
    ms_ours = gpu_median_ms(lambda: chain.launch(x.data_ptr(), y.data_ptr(), z.data_ptr(), out.data_ptr()), runs)
    # ours contracts a*b+c into one FMA, torch rounds the product first: equal to within an ulp of a*b
    assert torch.allclose(out, torch.relu(x * y + z), rtol=1e-5, atol=1e-5)
    ms_eager = gpu_median_ms(lambda: torch.relu(x * y + z), runs)
    for label, ms in (("ours (fused)", ms_ours), ("torch eager", ms_eager)):
        print(f"relu(a*b+c) 4M fp32: {label:13s} {ms * 1e3:8.1f} us  {16 * m / ms / 1e6:7.1f} GB/s")


def emulated(runs: int) -> None:
    """The same kernels at small sizes through the CPU emulation: plumbing and results only."""
    rng = np.random.default_rng(0)
    n = 128
    a, b = rng.standard_normal((2, n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    (k,) = matmul_kernels(n, [Config()], emulate=True)
    k.launch(a.ctypes.data, b.ctypes.data, c.ctypes.data)  # device pointers are host pointers here
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)
    m = 1 << 12
    x, y, z = rng.standard_normal((3, m), dtype=np.float32)
    out = np.empty(m, np.float32)
    chain = chain_kernel(m, emulate=True)
    t = time.perf_counter()
    for _ in range(runs):
        chain.launch(x.ctypes.data, y.ctypes.data, z.ctypes.data, out.ctypes.data)
    np.testing.assert_allclose(out, np.maximum(x * y + z, 0), rtol=1e-6)
    print(f"emulated: matmul {n}^3 and relu(a*b+c) on {m} floats match numpy "
          f"({(time.perf_counter() - t) / runs * 1e3:.0f} ms per emulated chain launch; not a GPU timing)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--grid", action="store_true", help="also search a small grid of the matmul knobs")
    ap.add_argument("--emulate", action="store_true", help="small sizes on the CPU emulation (no GPU needed)")
    args = ap.parse_args(argv)
    if args.emulate:
        emulated(min(args.runs, 3))
        return 0
    try:
        import torch
        has_torch_cuda = torch.cuda.is_available()
    except ImportError:
        has_torch_cuda = False
    if device_count() == 0 or not has_torch_cuda:
        why = "no CUDA device on this machine" if device_count() == 0 else "torch is built without CUDA"
        print(f"cuda_kernels: cannot run here ({why}); nothing measured")
        return 0
    on_gpu(args.runs, args.grid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
