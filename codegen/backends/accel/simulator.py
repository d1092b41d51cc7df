"""Functional and cycle simulation of an accelerator instruction stream.

Timing: each module (load, compute, store) runs its instructions in program order; an
instruction starts when its module is free and every token it pops has been pushed (a
push happens when the pushing instruction ends). Durations: LOAD/STORE `dma_latency +
ceil(bytes / dma_bytes_per_cycle)` (padding tiles are written on chip for free); GEMM
`gemm_overhead + micro-ops` (one tile GEMM a cycle); ALU `alu_overhead + ceil(elements /
alu_lanes)`; FINISH 1. `jitter` stretches each duration by a random factor in [1, 1 + jitter]
(seeded), to show that results depend only on the token protocol, never on timing.

Function: every instruction acts atomically at its simulated start time, in start-time
order, so an access pair the tokens do not order can come out differently under jitter.

Arithmetic (bit-exact, documented for the numpy references): products int8 x int8 summed
into int32 accumulators wrap modulo 2^32 (as the hardware's adders); ALU ops as in
`isa.Alu`; an int8 STORE keeps the low 8 bits of each int32.

Errors: an access outside a buffer or a DRAM tensor (`BufferOverflowError`), a pop that no
remaining instruction can satisfy (`DeadlockError`), tokens left in a queue at the end or
a flag towards a missing neighbour (`ProtocolError`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from taso_py.codegen.backends.accel.config import AccelConfig
from taso_py.codegen.backends.accel.isa import ALU_OPS, MODULES, POPS, QUEUES, Alu, Finish, Gemm, Insn, Load, Store
from taso_py.codegen.errors import CodegenError


class AccelError(CodegenError):
    """An instruction stream the accelerator cannot run."""


class BufferOverflowError(AccelError):
    pass


class DeadlockError(AccelError):
    pass


class ProtocolError(AccelError):
    pass


@dataclass
class Stats:
    """What a run measured; `utilization` = MACs / (cycles x peak MACs per cycle)."""

    cycles: int
    busy: dict[str, int]
    macs: int  # tile MACs the GEMM core executed (including zero padding of channels)
    peak_macs_per_cycle: int
    bytes_loaded: int
    bytes_stored: int
    instructions: int
    start: list[int] = field(default_factory=list, repr=False)
    end: list[int] = field(default_factory=list, repr=False)

    @property
    def utilization(self) -> float:
        return self.macs / (self.cycles * self.peak_macs_per_cycle) if self.cycles else 0.0


class Simulator:
    """Runs programs for one `AccelConfig`; buffers persist only within one `run`."""

    def __init__(self, config: AccelConfig | None = None) -> None:
        self.cfg = config or AccelConfig()

    def run(self, program: Sequence[Insn], dram: Mapping[str, np.ndarray], *, execute: bool = True,
            jitter: float = 0.0, seed: int | None = None) -> Stats:
        """Simulate `program`; `dram` maps names to tile arrays (n_tiles, tile elements) that
        LOADs read and STOREs write in place. `execute=False` counts cycles only."""
        self._validate(program, dram)
        durations = [self._duration(insn) for insn in program]
        if jitter:
            rng = np.random.default_rng(seed)
            durations = [d + int(rng.integers(0, int(d * jitter) + 1)) for d in durations]
        start, end = _schedule(program, durations)
        if execute:
            self._execute(program, dram, start)
        busy = dict.fromkeys(MODULES, 0)
        for insn, d in zip(program, durations):
            busy[insn.module] += d
        cfg = self.cfg
        return Stats(
            cycles=max(end, default=0), busy=busy,
            macs=sum(g.uops for g in program if isinstance(g, Gemm)) * cfg.peak_macs_per_cycle,
            peak_macs_per_cycle=cfg.peak_macs_per_cycle,
            bytes_loaded=sum(i.y_size * i.x_size * cfg.tile_bytes(i.buffer) for i in program if isinstance(i, Load)),
            bytes_stored=sum(_store_bytes(cfg, i) for i in program if isinstance(i, Store)),
            instructions=len(program), start=start, end=end)

    # ---- timing -------------------------------------------------------------------------------

    def _duration(self, insn: Insn) -> int:
        cfg = self.cfg
        if isinstance(insn, Load):
            nbytes = insn.y_size * insn.x_size * cfg.tile_bytes(insn.buffer)
            return cfg.dma_latency + -(-nbytes // cfg.dma_bytes_per_cycle)
        if isinstance(insn, Store):
            return cfg.dma_latency + -(-_store_bytes(cfg, insn) // cfg.dma_bytes_per_cycle)
        if isinstance(insn, Gemm):
            return cfg.gemm_overhead + insn.uops
        if isinstance(insn, Alu):
            return cfg.alu_overhead + -(-len(insn.dst) * cfg.acc_tile_elems // cfg.alu_lanes)
        return 1

    # ---- checks -------------------------------------------------------------------------------

    def _validate(self, program: Sequence[Insn], dram: Mapping[str, np.ndarray]) -> None:
        cfg = self.cfg
        for n, insn in enumerate(program):
            where = f"instruction #{n} ({type(insn).__name__.upper()})"
            for flag, direction in (("pop_prev", "prev"), ("push_prev", "prev"), ("pop_next", "next"),
                                    ("push_next", "next")):
                if getattr(insn, flag) and (insn.module, direction) not in QUEUES:
                    raise ProtocolError(f"{where}: the {insn.module} module has no {direction} module to {flag[:-5]}")
            if isinstance(insn, Load):
                if insn.buffer not in ("inp", "wgt", "acc"):
                    raise AccelError(f"{where}: unknown buffer {insn.buffer!r}")
                _check_range(where, insn.buffer, insn.sram_offset, insn.sram_tiles, cfg.capacity(insn.buffer))
                _check_dram(where, dram, insn.dram, insn.dram_offset, insn.y_size, insn.x_size, insn.x_stride,
                            cfg.tile_bytes(insn.buffer) // (4 if insn.buffer == "acc" else 1),
                            "int32" if insn.buffer == "acc" else "int8")
            elif isinstance(insn, Store):
                _check_range(where, "acc", insn.sram_offset, insn.y_size * insn.x_size, cfg.capacity("acc"))
                _check_dram(where, dram, insn.dram, insn.dram_offset, insn.y_size, insn.x_size, insn.x_stride,
                            cfg.acc_tile_elems, insn.dtype)
            elif isinstance(insn, Gemm):
                k = insn.kernel
                for buf, idx in (("acc", insn.acc_base + k.acc), ("acc", insn.acc_base + k.reset_tiles),
                                 ("inp", insn.inp_base + k.inp), ("wgt", insn.wgt_base + k.wgt)):
                    _check_idx(where, buf, idx, cfg.capacity(buf))
            elif isinstance(insn, Alu):
                if insn.op not in ALU_OPS:
                    raise AccelError(f"{where}: unknown ALU op {insn.op!r} (one of {', '.join(ALU_OPS)})")
                _check_idx(where, "acc", insn.dst, cfg.capacity("acc"))
                if len(np.unique(insn.dst)) != len(insn.dst):
                    raise AccelError(f"{where}: ALU destination tiles repeat")
                if insn.src is not None:
                    if len(insn.src) != len(insn.dst):
                        raise AccelError(f"{where}: ALU source and destination differ in length")
                    _check_idx(where, "acc", insn.src, cfg.capacity("acc"))
                _check_alu_operands(where, insn)
            elif not isinstance(insn, Finish):
                raise AccelError(f"{where}: not an accelerator instruction")

    # ---- function -----------------------------------------------------------------------------

    def _execute(self, program: Sequence[Insn], dram: Mapping[str, np.ndarray], start: list[int]) -> None:
        cfg = self.cfg
        bufs = {"inp": np.zeros((cfg.capacity("inp"), cfg.inp_tile_elems), np.int8),
                "wgt": np.zeros((cfg.capacity("wgt"), cfg.wgt_tile_elems), np.int8),
                "acc": np.zeros((cfg.capacity("acc"), cfg.acc_tile_elems), np.int32)}
        rank = {m: r for r, m in enumerate(MODULES)}
        for n in sorted(range(len(program)), key=lambda n: (start[n], rank[program[n].module], n)):
            insn = program[n]
            if isinstance(insn, Load):
                src, dst = _rect(insn.dram_offset, insn.y_size, insn.x_size, insn.x_stride), _load_dst(insn)
                buf = bufs[insn.buffer]
                buf[insn.sram_offset:insn.sram_offset + insn.sram_tiles] = 0
                buf[dst] = dram[insn.dram][src]
            elif isinstance(insn, Store):
                rows = bufs["acc"][insn.sram_offset + np.arange(insn.y_size * insn.x_size)]
                dram[insn.dram][_rect(insn.dram_offset, insn.y_size, insn.x_size, insn.x_stride)] = \
                    rows.astype(np.int8) if insn.dtype == "int8" else rows
            elif isinstance(insn, Gemm):
                self._gemm(bufs, insn)
            elif isinstance(insn, Alu):
                _alu(bufs["acc"], insn)

    def _gemm(self, bufs: dict[str, np.ndarray], g: Gemm) -> None:
        cfg, k, acc = self.cfg, g.kernel, bufs["acc"]
        if g.reset:
            acc[g.acc_base + k.reset_tiles] = 0
        # int8 dot products of block_in terms are exact in float32 (checked by AccelConfig)
        inp = bufs["inp"][g.inp_base + k.inp].reshape(len(k), cfg.batch, cfg.block_in).astype(np.float32)
        out = np.empty((len(k), cfg.batch, cfg.block_out), np.float32)
        wgt = bufs["wgt"]
        for w, ids in k.groups:
            out[ids] = inp[ids] @ wgt[g.wgt_base + w].reshape(cfg.block_out, cfg.block_in).T.astype(np.float32)
        with np.errstate(over="ignore"):
            np.add.at(acc, g.acc_base + k.acc, out.astype(np.int32).reshape(len(k), -1))


def _alu(acc: np.ndarray, a: Alu) -> None:
    x = acc[a.dst].astype(np.int64)
    y = acc[a.src].astype(np.int64) if a.src is not None else None
    operand = y if y is not None and a.op != "requant" else (a.imm[0] if a.imm else 0)
    if a.op == "add":
        r = x + operand
    elif a.op == "mul":
        r = x * operand
    elif a.op == "min":
        r = np.minimum(x, operand)
    elif a.op == "max":
        r = np.maximum(x, operand)
    elif a.op == "shr":
        s = a.imm[0]
        r = x >> s if s >= 0 else x << -s
    elif a.op == "requant":
        s, lo, hi = a.imm
        r = np.clip((x * y + (1 << (s - 1))) >> s, lo, hi)
    else:  # clip
        r = np.clip(x, a.imm[0], a.imm[1])
    acc[a.dst] = r.astype(np.int32)  # wraps modulo 2^32 (add, mul, shl)


def _schedule(program: Sequence[Insn], durations: list[int]) -> tuple[list[int], list[int]]:
    """Start and end cycle of every instruction under the token protocol."""
    per_module = {m: [n for n, i in enumerate(program) if i.module == m] for m in MODULES}
    ptr = dict.fromkeys(MODULES, 0)
    free = dict.fromkeys(MODULES, 0)
    queues: dict[str, deque[int]] = {q: deque() for q in QUEUES.values()}
    start, end = [0] * len(program), [0] * len(program)
    while True:
        progressed = False
        for m in MODULES:
            todo = per_module[m]
            while ptr[m] < len(todo):
                n = todo[ptr[m]]
                insn = program[n]
                pops = [POPS[m, d] for d in ("prev", "next") if getattr(insn, f"pop_{d}")]
                if any(not queues[q] for q in pops):
                    break
                t = max([free[m]] + [queues[q].popleft() for q in pops])
                start[n], end[n] = t, t + durations[n]
                free[m] = end[n]
                for d in ("prev", "next"):
                    if getattr(insn, f"push_{d}"):
                        queues[QUEUES[m, d]].append(end[n])
                ptr[m] += 1
                progressed = True
        if all(ptr[m] == len(per_module[m]) for m in MODULES):
            break
        if not progressed:
            waits = []
            for m in MODULES:
                if ptr[m] < len(per_module[m]):
                    n = per_module[m][ptr[m]]
                    insn = program[n]
                    empty = [POPS[m, d] for d in ("prev", "next")
                             if getattr(insn, f"pop_{d}") and not queues[POPS[m, d]]]
                    waits.append(f"{m} at instruction #{n} ({type(insn).__name__.upper()}) pops empty queue "
                                 f"{'/'.join(empty)}")
            raise DeadlockError("deadlock: " + "; ".join(waits) + " (no remaining instruction pushes it)")
    left = {q: len(v) for q, v in queues.items() if v}
    if left:
        raise ProtocolError(f"tokens left in queues at the end: {left} (every push needs a matching pop)")
    return start, end


def _rect(offset: int, y: int, x: int, stride: int) -> np.ndarray:
    return (offset + np.arange(y)[:, None] * stride + np.arange(x)[None, :]).ravel()


def _load_dst(insn: Load) -> np.ndarray:
    width = insn.x_pad0 + insn.x_size + insn.x_pad1
    rows = insn.sram_offset + (insn.y_pad0 + np.arange(insn.y_size))[:, None] * width
    return (rows + insn.x_pad0 + np.arange(insn.x_size)[None, :]).ravel()


def _store_bytes(cfg: AccelConfig, s: Store) -> int:
    return s.y_size * s.x_size * cfg.acc_tile_elems * (1 if s.dtype == "int8" else 4)


def _check_alu_operands(where: str, a: Alu) -> None:
    tile_operand = a.op in ("add", "min", "max", "mul", "requant") and a.src is not None
    imms = {"clip": 2, "shr": 1, "requant": 3}.get(a.op, 0 if tile_operand else 1)
    ok = len(a.imm) == imms and (a.src is None or tile_operand)
    if a.op == "requant":
        ok = ok and tile_operand and a.imm[0] >= 1 and -(1 << 31) <= a.imm[1] <= a.imm[2] < 1 << 31
    if not ok:
        raise AccelError(f"{where}: ALU {a.op} cannot take src={'tiles' if a.src is not None else 'none'} "
                         f"imm={a.imm} (see isa.Alu)")


def _check_range(where: str, buf: str, offset: int, tiles: int, capacity: int) -> None:
    if offset < 0 or offset + tiles > capacity:
        raise BufferOverflowError(f"{where}: {buf} buffer tiles [{offset}, {offset + tiles}) exceed its "
                                  f"{capacity} tiles")


def _check_idx(where: str, buf: str, idx: np.ndarray, capacity: int) -> None:
    if len(idx) and (idx.min() < 0 or idx.max() >= capacity):
        raise BufferOverflowError(f"{where}: {buf} buffer tile {int(idx.max())} is past its {capacity} tiles")


def _check_dram(where: str, dram: Mapping[str, np.ndarray], name: str, offset: int, y: int, x: int, stride: int,
                elems: int, dtype: str) -> None:
    if name not in dram:
        raise AccelError(f"{where}: no DRAM tensor {name!r}")
    arr = dram[name]
    if arr.ndim != 2 or arr.shape[1] != elems:
        raise AccelError(f"{where}: DRAM tensor {name!r} must be (tiles, {elems}), got {arr.shape}")
    last = offset + (y - 1) * stride + x if y and x else offset
    if arr.dtype != dtype:
        raise AccelError(f"{where}: DRAM tensor {name!r} is {arr.dtype}, this transfer needs {dtype}")
    if offset < 0 or last > arr.shape[0]:
        raise BufferOverflowError(f"{where}: DRAM tensor {name!r} tiles up to {last} exceed its {arr.shape[0]}")
