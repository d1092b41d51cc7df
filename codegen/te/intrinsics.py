"""Scalar math intrinsics (exp, tanh, sigmoid, ...), declared once with every backend's spelling.

A te `Call` names an entry of `SCALAR_INTRINSICS`; the C and CUDA emitters render it from the
entry and put its helpers in their preludes, as tinygrad's C-style renderer keeps its op table.
Adding an intrinsic is one entry here: `te.call(name, x)` builds it, and no backend changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ScalarIntrinsic:
    """A pure scalar function. Spellings are formats of the argument list: "expf({})"."""

    name: str
    c_float: str  # C on float32
    c_double: str  # C on float64 (and any other type)
    cuda_float: str | None = None  # CUDA on float32 where it differs from C (None: as in C)
    c_prelude: str = ""  # what the C prelude needs: helper definitions, vector-math declarations
    cuda_prelude: str = ""  # the same for CUDA (whose math library needs no declarations)


def _libm(name: str, *, simd: bool = True) -> ScalarIntrinsic:
    """A C math library function (`expf`/`exp`); `simd`: declared for glibc's vector math (libmvec),
    so `omp simd` loops call e.g. _ZGVeN16v_expf, 16 lanes at a time."""
    declare = f"#pragma omp declare simd notinbranch\nfloat {name}f(float);\n" if simd else ""
    return ScalarIntrinsic(name, f"{name}f({{}})", f"{name}({{}})", c_prelude=declare)


_SIGMOID = "float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }\n"

SCALAR_INTRINSICS: dict[str, ScalarIntrinsic] = {f.name: f for f in (
    _libm("exp"),
    _libm("log"),
    _libm("sqrt", simd=False),
    _libm("tanh"),
    _libm("erf"),
    _libm("fabs", simd=False),
    _libm("log1p", simd=False),
    ScalarIntrinsic("pow", "powf({})", "pow({})"),  # two arguments: the base and the exponent
    ScalarIntrinsic("sigmoid", "sigmoidf({})", "(1.0 / (1.0 + exp(-({}))))", c_prelude=f"static inline {_SIGMOID}",
                    cuda_prelude=f"__device__ __forceinline__ {_SIGMOID}"),
)}


# the functions the spellings call: a kernel's buffer may not take these names in C or CUDA (a tensor `exp`)
CALLED_NAMES = frozenset(name for f in SCALAR_INTRINSICS.values() for spelling in (f.c_float, f.c_double, f.cuda_float)
                         for name in re.findall(r"([A-Za-z_]\w*)\(", spelling or ""))


def c_prelude() -> str:
    return "".join(f.c_prelude for f in SCALAR_INTRINSICS.values())


def cuda_prelude() -> str:
    return "".join(f.cuda_prelude for f in SCALAR_INTRINSICS.values())
