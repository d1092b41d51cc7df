"""Caches tell two CPUs apart that a VM names alike ("AMD EPYC" for a Zen 1 and a Zen 4)."""

from __future__ import annotations

import pytest

from taso_py import host
from taso_py.codegen import isa
from taso_py.codegen.backends.c.build import compile_shared
from taso_py.cost.measured import machine_key

ZEN1 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 avx avx2 fma
"""


def _like_this_machine(family: int, model: int, extra_flag: str = "") -> str:
    """A cpuinfo text named "AMD EPYC" with this machine's flags (so its ISA level stays)."""
    flags = " ".join(sorted(host.cpu().flags | ({extra_flag} if extra_flag else set())))
    return f"cpu family\t: {family}\nmodel\t\t: {model}\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n"


def test_cpuinfo_is_read_by_field():
    cpu = host.parse(ZEN1)
    assert (cpu.name, cpu.family, cpu.model) == ("AMD EPYC", "23", "1")
    assert cpu.identity == "AMD EPYC (family 23 model 1)" and {"avx2", "fma"} <= cpu.flags
    bare = host.parse("model name\t: Some CPU\n")
    assert bare.identity == "Some CPU" and not bare.flags


@pytest.fixture
def as_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """Pretend to run on the CPU a cpuinfo text describes."""
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TASO_ISA", raising=False)

    def pretend(text: str) -> None:
        monkeypatch.setattr(host, "cpu", lambda: host.parse(text))
        isa.host.cache_clear()

    yield pretend
    isa.host.cache_clear()


def test_timings_tuning_records_and_kernels_are_filed_per_cpu_not_per_name(as_cpu):
    """Same name, another family and model: another timing cache and tuning key; another feature
    flag: another kernel file, since `-march=native` compiles for the flags."""
    # a flag no CPU has: a real one (avx512_bf16) is among this machine's flags on an Emerald Rapids Xeon
    zen1, zen4 = _like_this_machine(23, 1), _like_this_machine(25, 17, "taso_test_flag")
    keys = []
    for text in (zen1, zen4):
        as_cpu(text)
        keys.append((machine_key(2), isa.host().key, compile_shared("int f(void) { return 7; }\n")))
    (t1, k1, so1), (t4, k4, so4) = keys
    assert t1 != t4 and k1 != k4 and so1 != so4
    assert k1 == f"AMD EPYC (family 23 model 1) [{isa.host().level}]"
    as_cpu(zen1)
    assert (machine_key(2), compile_shared("int f(void) { return 7; }\n")) == (t1, so1)  # reused
