"""What the host CPU offers the code generator: SIMD width, registers, FMA, caches, its name.

Kernels tuned on one CPU can run at half speed on another (an AVX-512 Intel core has two
512-bit FMA units that 256-bit code leaves half idle; an AMD Zen 4 core splits 512-bit
operations in two; an AVX2 core has 16 vector registers, not 32), so register blockings are
chosen from these facts rather than fixed, gcc is told to use the full vector width, and
tuning records are filed under `Isa.key`. Detected once from /proc/cpuinfo and sysfs;
`TASO_ISA=avx512|avx2|sse` pretends the CPU has less than it has (tests use it to build and
run the narrower kernels on a wider machine).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from taso_py import host as host_machine

LEVELS = ("sse", "avx2", "avx512")


@dataclass(frozen=True)
class Isa:
    """One CPU's facts as the code generator uses them."""

    level: str  # sse | avx2 | avx512
    model: str  # the CPU's model name with its family and model numbers (`taso_py.host.Cpu.identity`)
    l1d: int  # bytes per core
    l2: int  # bytes per core
    l3: int  # bytes, shared

    @property
    def vector_bits(self) -> int:
        return {"avx512": 512, "avx2": 256}.get(self.level, 128)

    @property
    def lanes(self) -> int:
        """float32 lanes of one vector register."""
        return self.vector_bits // 32

    @property
    def registers(self) -> int:
        """Vector registers a micro-kernel may fill (zmm0-31 with AVX-512; ymm0-15 / xmm0-15 otherwise)."""
        return 32 if self.level == "avx512" else 16

    @property
    def fma(self) -> bool:
        return self.level in ("avx2", "avx512")

    @property
    def fma_units(self) -> int:
        """Full-width FMAs issued per cycle: Intel's AVX-512 cores have two 512-bit units, AMD's Zen 4
        splits a 512-bit FMA over its two 256-bit units (one a cycle); AVX2 cores have two."""
        return 1 if self.level == "avx512" and "AMD" in self.model.upper() else 2

    @property
    def cflags(self) -> tuple[str, ...]:
        """gcc flags for this ISA: the host's full instruction set, or a narrower one when TASO_ISA asks.
        GCC's tuning for Intel AVX-512 cores prefers 256-bit vectors, which halves their FMA peak, so
        the full width is asked for explicitly."""
        if self.level == "avx512":
            return ("-march=native", "-mprefer-vector-width=512")
        if self.level == "avx2":
            return ("-march=haswell", "-mtune=native") if _detected_level() != "avx2" else ("-march=native",)
        return ("-march=x86-64-v2",) if _detected_level() != "sse" else ("-march=native",)

    @property
    def key(self) -> str:
        """What tuning records are filed under: timings hold on one CPU model and ISA level."""
        return f"{self.model} [{self.level}]"


def _detected_level() -> str:
    flags = host_machine.cpu().flags
    if {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "sse"


@functools.cache
def host() -> Isa:
    """The host CPU (see the module doc for TASO_ISA)."""
    model = host_machine.cpu().identity
    level = _detected_level()
    asked = os.environ.get("TASO_ISA", "").strip().lower()
    if asked:
        if asked not in LEVELS:
            from taso_py.codegen.errors import CodegenError
            raise CodegenError(f"TASO_ISA={asked!r}: expected one of {', '.join(LEVELS)}")
        if LEVELS.index(asked) > LEVELS.index(level):
            from taso_py.codegen.errors import CodegenError
            raise CodegenError(f"TASO_ISA={asked}: this CPU ({model}) only has {level}")
        level = asked
    cache = host_machine.cache_bytes
    return Isa(level, model, cache(1, "Data Unified") or 32 << 10, cache(2, "Unified") or 1 << 20,
               cache(3, "Unified") or 8 << 20)
