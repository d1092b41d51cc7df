"""C bodies of the tensor intrinsics (`tensorize` on the CPU target).

Each call site gets a function specialised to its tile sizes and strides, so gcc sees
compile-time loop bounds and unit strides and vectorizes and unrolls the tile fully.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

from taso_py.codegen import isa
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.lower.ir import Intrinsic

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


def _tile_source(fname: str, rows: int, groups: int, lanes: int, reduce: tuple[int, ...], c: tuple[int, ...],
                 a: tuple[int, ...], b: tuple[int, ...], vlanes: int) -> str:
    """A register tile (`TileIntrin`): rows x (groups x lanes) accumulators as vectors of `vlanes`
    floats, named one by one so gcc keeps each in a register; the reduce loops nest around one
    step of rows broadcasts of A times the row of B vectors."""
    vl = math.gcd(lanes, vlanes)
    per = lanes // vl
    vecs = [(g * c[1] + q * vl, g * b[1] + q * vl) for g in range(groups) for q in range(per)]  # (C, B) offsets
    vt = f"tvec{vl}"
    lines = [f"#ifndef TASO_{vt.upper()}", f"#define TASO_{vt.upper()}",
             f"typedef float {vt} __attribute__((vector_size({vl * 4})));",
             f"typedef float {vt}_u __attribute__((vector_size({vl * 4}), aligned(4)));", "#endif",
             f"static inline void {fname}(float* restrict C, const float* restrict A, const float* restrict B, "
             f"int reset) {{"]
    acc = [[f"c{i}_{j}" for j in range(len(vecs))] for i in range(rows)]
    for i in range(rows):
        for j, (co, _) in enumerate(vecs):
            lines.append(f"  {vt} {acc[i][j]} = reset ? ({vt}){{}} : *(const {vt}_u*)(C + {i * c[0] + co});")
    loops = [(ext, a[3 + d], b[3 + d]) for d, ext in enumerate(reduce) if ext > 1] or [(1, 0, 0)]
    depth = len(loops)  # one-trip loops dropped, so the innermost real one is unrolled
    a_ptr, b_ptr = "A", "B"
    for d, (ext, sa, sb) in enumerate(loops):
        pad = "  " * (d + 1)
        if d == depth - 1:
            unroll = max(1, min(ext, 64 // max(1, rows * len(vecs))))
            lines.append(f"{pad}#pragma GCC unroll {unroll}")
        lines.append(f"{pad}for (int r{d} = 0; r{d} < {ext}; ++r{d}) {{")
        lines.append(f"{pad}  const float* restrict a{d} = {a_ptr} + r{d} * {sa};")
        lines.append(f"{pad}  const float* restrict b{d} = {b_ptr} + r{d} * {sb};")
        a_ptr, b_ptr = f"a{d}", f"b{d}"
    pad = "  " * (depth + 1)
    for j, (_, bo) in enumerate(vecs):
        lines.append(f"{pad}const {vt} v{j} = *(const {vt}_u*)({b_ptr} + {bo});")
    for i in range(rows):
        lines.append(f"{pad}{{ const float s = {a_ptr}[{i * a[0]}]; "
                     + " ".join(f"{acc[i][j]} += v{j} * s;" for j in range(len(vecs))) + " }")
    for d in reversed(range(depth)):
        lines.append("  " * (d + 1) + "}")
    for i in range(rows):
        for j, (co, _) in enumerate(vecs):
            lines.append(f"  *({vt}_u*)(C + {i * c[0] + co}) = {acc[i][j]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def intrinsic_call(s: Intrinsic, names: Callable | None = None, expr: Callable | None = None) -> tuple[str, str]:
    """(specialised function name, the C statement calling it); registers the function's source."""
    out, a, b = s.regions
    if s.name == "tile":
        p = s.params
        vlanes = isa.host().lanes
        key = f"tile:{p['rows']}:{p['groups']}:{p['lanes']}:{p['reduce']}:{out.loop_strides}:{a.loop_strides}:" \
              f"{b.loop_strides}:{vlanes}"
        fname = f"tile_{hashlib.sha1(key.encode()).hexdigest()[:10]}"
        _SOURCES.setdefault(fname, _tile_source(fname, p["rows"], p["groups"], p["lanes"], tuple(p["reduce"]),
                                                out.loop_strides, a.loop_strides, b.loop_strides, vlanes))
    elif s.name.startswith("gemm"):
        m, n, k = s.params["m"], s.params["n"], s.params["k"]
        key = f"{s.name}:{m}:{n}:{k}:{out.loop_strides}:{a.loop_strides}:{b.loop_strides}"
        fname = f"{s.name}_{hashlib.sha1(key.encode()).hexdigest()[:10]}"
        _SOURCES.setdefault(fname, _gemm_source(fname, m, n, k, out.loop_strides, a.loop_strides, b.loop_strides))
    else:
        raise CodegenError(f"the C backend has no intrinsic {s.name!r}")
    if names is None or expr is None:
        return fname, ""
    args = ", ".join(f"&{names(r.buffer)}[{expr(r.offset)}]" for r in s.regions)
    return fname, f"{fname}({args}, {int(bool(s.params.get('reset')))});"


def intrinsic_source(fname: str) -> str:
    return _SOURCES[fname]
