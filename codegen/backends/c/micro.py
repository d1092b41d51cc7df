"""C bodies of the tensor intrinsics (`tensorize` on the CPU target).

Each call site gets a function specialised to its tile sizes and strides, so gcc sees
compile-time loop bounds and unit strides and vectorizes and unrolls the tile fully.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from codegen.errors import CodegenError
from codegen.lower.ir import Intrinsic

_SOURCES: dict[str, str] = {}


def _gemm_source(fname: str, m: int, n: int, k: int, c: tuple[int, ...], a: tuple[int, ...],
                 b: tuple[int, ...]) -> str:
    # loop order (m, n, k): strides of C over (m, n), A over (m, k), B over (k, n)
    return f"""
static inline void {fname}(float* restrict C, const float* restrict A, const float* restrict B, int reset) {{
  float acc[{m}][{n}] __attribute__((aligned(64)));
  for (int i = 0; i < {m}; ++i)
    for (int j = 0; j < {n}; ++j) acc[i][j] = reset ? 0.0f : C[i * {c[0]} + j * {c[1]}];
  for (int p = 0; p < {k}; ++p) {{
    #pragma GCC unroll {m}
    for (int i = 0; i < {m}; ++i) {{
      const float av = A[i * {a[0]} + p * {a[2]}];
      #pragma omp simd
      for (int j = 0; j < {n}; ++j) acc[i][j] += av * B[p * {b[2]} + j * {b[1]}];
    }}
  }}
  for (int i = 0; i < {m}; ++i)
    for (int j = 0; j < {n}; ++j) C[i * {c[0]} + j * {c[1]}] = acc[i][j];
}}
"""


def intrinsic_call(s: Intrinsic, names: Callable | None = None, expr: Callable | None = None) -> tuple[str, str]:
    """(specialised function name, the C statement calling it); registers the function's source."""
    if not s.name.startswith("gemm"):
        raise CodegenError(f"the C backend has no intrinsic {s.name!r}")
    out, a, b = s.regions
    m, n, k = s.params["m"], s.params["n"], s.params["k"]
    key = f"{s.name}:{m}:{n}:{k}:{out.loop_strides}:{a.loop_strides}:{b.loop_strides}"
    fname = f"{s.name}_{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    _SOURCES.setdefault(fname, _gemm_source(fname, m, n, k, out.loop_strides, a.loop_strides, b.loop_strides))
    if names is None or expr is None:
        return fname, ""
    args = ", ".join(f"&{names(r.buffer)}[{expr(r.offset)}]" for r in s.regions)
    return fname, f"{fname}({args}, {int(bool(s.params.get('reset')))});"


def intrinsic_source(fname: str) -> str:
    return _SOURCES[fname]
