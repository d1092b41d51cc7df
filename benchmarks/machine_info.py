"""What every results table states about the machine it was measured on: the CPU model (lscpu),
the ISA level the code generator targets, the core count, the load, and the measured limits."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from typing import Any

from taso_py.codegen import isa, machine


def lscpu_model() -> str:
    """lscpu's "Model name" (the CPU the numbers belong to), or the platform's name without lscpu."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    found = re.search(r"^Model name:\s*(.+)$", out, re.M)
    return found.group(1).strip() if found else (platform.processor() or platform.machine())


def identify() -> dict[str, Any]:
    """The CPU and how busy the machine is, without measuring anything (tables of ORT timings)."""
    return {"cpu": lscpu_model(), "isa": isa.host().level, "cores": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def describe(threads: int) -> dict[str, Any]:
    limits = machine.limits()
    return {**identify(), "threads": threads, "fma_peak_gflops": limits.peak(threads),
            "triad_gbs": limits.bandwidth(threads)}


def header(info: dict[str, Any]) -> str:
    """One line above a table: the CPU, and its limits when `info` came from `describe`."""
    limits = (f", {info['threads']} threads; FMA peak {info['fma_peak_gflops']:.0f} GFLOP/s, STREAM triad "
              f"{info['triad_gbs']:.1f} GB/s" if "threads" in info else "")
    return (f"CPU: {info['cpu']} ({info['isa']}, {info['cores']} cores){limits}; "
            f"load average {info['load_average'][0]:.2f}")
