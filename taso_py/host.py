"""The CPU this process runs on, as the caches of timings and kernels tell one CPU from another.

A VM may name its CPU only by brand: "AMD EPYC" was a Zen 1 core (AVX2, two 128-bit FMA pipes) on
one VM of this project and a Zen 4 core (AVX-512) on another, whose timings differ by 2x or more.
The family and model numbers tell them apart, and the feature flags say what `-march=native`
compiles for, so a cache that outlives its machine (a home directory moved with a VM image)
is not read as if it were this one's.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cpu:
    name: str  # /proc/cpuinfo's "model name", lscpu's "Model name"
    family: str  # "cpu family" and "model": empty where /proc/cpuinfo has none (not Linux, not x86)
    model: str
    flags: frozenset[str]

    @property
    def identity(self) -> str:
        """The name with family and model: what timings and tuning records are filed under."""
        return f"{self.name} (family {self.family} model {self.model})" if self.family else self.name

    @property
    def features(self) -> str:
        """A short digest of the feature flags: what a kernel built with `-march=native` may use."""
        return hashlib.blake2b(" ".join(sorted(self.flags)).encode(), digest_size=6).hexdigest()


@functools.cache
def cpu() -> Cpu:
    """This machine's CPU (/proc/cpuinfo), else what `platform` says."""
    try:
        return parse(Path("/proc/cpuinfo").read_text())
    except OSError:
        return Cpu(platform.processor() or platform.machine(), "", "", frozenset())


def parse(cpuinfo: str) -> Cpu:
    """The first processor of a /proc/cpuinfo text (a machine's cores are alike here)."""

    def field(name: str) -> str:
        m = re.search(rf"^{name}\s*:\s*(.*)$", cpuinfo, re.M)
        return m.group(1).strip() if m else ""

    return Cpu(field("model name") or platform.machine(), field("cpu family"), field("model"),
               frozenset(field("flags").split()))


@functools.cache
def cache_bytes(level: int, kind: str) -> int | None:
    """Bytes of the cache at `level` (Data or Unified) seen by CPU 0, from sysfs; read once, as the
    measured cost model asks for L2 at every operator it times."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(root.glob("index*")) if root.is_dir() else []:
        try:
            if int((d / "level").read_text()) != level or (d / "type").read_text().strip() not in kind:
                continue
            size = (d / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", size)
        if m:
            return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
    return None
