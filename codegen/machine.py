"""This machine's limits: the fp32 FMA peak and the STREAM triad bandwidth, per thread count.

A kernel's speed means something only next to what the machine can do. `measure` compiles two
small C loops with the code generator's own flags and thread pool: a register-resident FMA
loop (independent vector accumulators, as many as hide the FMA latency on two units) and the
triad a[i] = b[i] + s * c[i] over arrays far larger than the caches (24 bytes of traffic per
element, the write's read-for-ownership not counted, as STREAM does). `limits()` caches the
result per CPU model and ISA (cache directory: see `codegen.backends.c.build.cache_dir`), so
the roofline benchmark, `taso run --profile` and the compiler's cost model share one number.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass

from taso_py.atomic import write_json
from taso_py.cache import cache_root
from taso_py.codegen import isa
from taso_py.codegen.backends.c.pool import POOL_C

_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
""" + POOL_C + r"""
typedef float vf __attribute__((vector_size(LANES * 4)));
struct fma_ctx { long iters; float* sink; };
static void fma_part(void* c_, int32_t begin, int32_t end) {
  const struct fma_ctx* c = c_;
  for (int32_t t = begin; t < end; ++t) {
    vf a[12]; const vf m = (vf){} + 1.0000001f, d = (vf){} + 1e-9f;
    for (int k = 0; k < 12; ++k) a[k] = (vf){} + (float)(k + t);
    for (long i = 0; i < c->iters; ++i) {
      #pragma GCC unroll 12
      for (int k = 0; k < 12; ++k) a[k] = a[k] * m + d;
    }
    float s = 0; for (int k = 0; k < 12; ++k) for (int l = 0; l < LANES; ++l) s += a[k][l];
    c->sink[t] = s;
  }
}
/* FLOPs done: threads x iters x 12 accumulators x LANES lanes x 2 */
void fma_peak(int32_t threads, long iters, float* sink) {
  struct fma_ctx c = {iters, sink};
  taso_parallel_for(threads, fma_part, &c, threads);
}
struct triad_ctx { float* a; const float* b; const float* c; long n; int32_t parts; };
static void triad_part(void* c_, int32_t begin, int32_t end) {
  const struct triad_ctx* c = c_;
  for (int32_t p = begin; p < end; ++p) {
    long lo = c->n * p / c->parts, hi = c->n * (p + 1) / c->parts;
    float* restrict a = c->a; const float* restrict b = c->b; const float* restrict x = c->c;
    for (long i = lo; i < hi; ++i) a[i] = b[i] + 1.5f * x[i];
  }
}
void triad(float* a, const float* b, const float* c, long n, int32_t threads) {
  struct triad_ctx t = {a, b, c, n, threads * 8};
  taso_parallel_for(threads * 8, triad_part, &t, threads);
}
"""


@dataclass(frozen=True)
class Limits:
    """GFLOP/s and GB/s by thread count (string keys, as in the JSON cache), for one CPU."""

    cpu: str
    peak_gflops: dict[str, float]
    triad_gbs: dict[str, float]

    def peak(self, threads: int | None = None) -> float:
        return self.peak_gflops[str(_threads(threads, self.peak_gflops))]

    def bandwidth(self, threads: int | None = None) -> float:
        return self.triad_gbs[str(_threads(threads, self.triad_gbs))]


def _threads(asked: int | None, table: dict[str, float]) -> int:
    n = asked or os.cpu_count() or 1
    known = sorted(int(k) for k in table)
    return max((k for k in known if k <= n), default=known[0])


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    from taso_py.codegen.backends.c.build import compile_shared
    lib = ctypes.CDLL(str(compile_shared(_SOURCE.replace("LANES", str(isa.host().lanes)))))
    lib.fma_peak.argtypes = [ctypes.c_int32, ctypes.c_long, ctypes.c_void_p]
    lib.triad.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_int32]
    return lib


def measure_peak(threads: int, seconds: float = 0.3) -> float:
    """GFLOP/s of the FMA loop on `threads` threads, best of five."""
    import numpy as np
    lib = _library()
    sink = np.zeros(max(threads, 1), np.float32)
    lanes = isa.host().lanes
    iters = 1 << 16
    while True:  # grow the loop until one run takes a good fraction of `seconds`
        t = time.perf_counter()
        lib.fma_peak(threads, iters, sink.ctypes.data)
        if time.perf_counter() - t > seconds / 5:
            break
        iters *= 2
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        lib.fma_peak(threads, iters, sink.ctypes.data)
        best = max(best, threads * iters * 12 * lanes * 2 / (time.perf_counter() - t) / 1e9)
    return best


def measure_triad(threads: int, elements: int = 1 << 25) -> float:
    """GB/s of the triad on `threads` threads (24 bytes per element), best of ten."""
    import numpy as np
    lib = _library()
    a, b, c = (np.full(elements, v, np.float32) for v in (1.0, 2.0, 3.0))
    best = 0.0
    for _ in range(10):
        t = time.perf_counter()
        lib.triad(a.ctypes.data, b.ctypes.data, c.ctypes.data, elements, threads)
        best = max(best, 12 * elements / (time.perf_counter() - t) / 1e9)
    return best


def measure(threads: tuple[int, ...] | None = None, attempts: int = 3) -> Limits:
    """The median of `attempts` measurements a moment apart (each already the best of several
    runs): on a shared host a core is sometimes taken away for a while, and one attempt can land
    in such a spell."""
    counts = threads or tuple(sorted({1, os.cpu_count() or 1}))
    peaks: dict[str, list[float]] = {str(n): [] for n in counts}
    triads: dict[str, list[float]] = {str(n): [] for n in counts}
    for k in range(attempts):
        if k:
            time.sleep(0.5)
        for n in counts:
            peaks[str(n)].append(measure_peak(n))
            triads[str(n)].append(measure_triad(n))
    return Limits(isa.host().key, {k: round(statistics.median(v), 1) for k, v in peaks.items()},
                  {k: round(statistics.median(v), 1) for k, v in triads.items()})


def limits() -> Limits:
    """This machine's limits, measured on first use and cached per CPU model and ISA."""
    path = cache_root() / "machine.json"
    key = f"{isa.host().key}|{os.cpu_count()}"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), dict):
        try:
            return Limits(**known[key])
        except TypeError:
            pass
    found = measure()
    known = known if isinstance(known, dict) else {}
    known[key] = asdict(found)
    write_json(path, known)
    return found
