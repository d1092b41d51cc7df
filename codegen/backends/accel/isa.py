"""The accelerator's instruction set (VTA's, in frozen dataclasses).

Three modules run concurrently, each its own instructions in program order:
- load: LOAD into the input and weight buffers;
- compute: LOAD into the accumulator buffer (bias, multipliers), GEMM, ALU, FINISH;
- store: STORE from the accumulator buffer to DRAM.
They synchronize only through four FIFO dependency-token queues between neighbours
(load <-> compute <-> store). Every instruction carries four flags: `pop_prev`/`pop_next`
wait for (and take) a token from the queue coming from the previous/next module before it
starts; `push_prev`/`push_next` put one into the queue to that module when it ends. So
load->compute says "data ready", compute->load "input/weight buffer free again",
compute->store "results ready", store->compute "accumulators free again".

Buffers are arrays of tiles: an input tile is batch x block_in int8, a weight tile
block_out x block_in int8 (row o holds output channel o's weights), an accumulator tile
batch x block_out int32. DRAM tensors are arrays of the same tiles, named by the program.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MODULES = ("load", "compute", "store")
# (module, direction) -> queue name; a module without a neighbour on a side has no queue there
QUEUES = {("load", "next"): "l2c", ("compute", "prev"): "c2l", ("compute", "next"): "c2s", ("store", "prev"): "s2c"}
POPS = {("compute", "prev"): "l2c", ("load", "next"): "c2l", ("store", "prev"): "c2s", ("compute", "next"): "s2c"}

ALU_OPS = ("add", "min", "max", "shr", "mul", "requant", "clip")


@dataclass(frozen=True, kw_only=True)
class Insn:
    """Dependency-token flags every instruction carries."""

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    @property
    def module(self) -> str:
        raise NotImplementedError

    def flags(self) -> str:
        names = ("pop_prev", "pop_next", "push_prev", "push_next")
        return " ".join(n for n in names if getattr(self, n))


@dataclass(frozen=True, kw_only=True)
class Load(Insn):
    """2-D strided DMA DRAM -> `buffer`: `y_size` rows of `x_size` tiles, DRAM rows `x_stride`
    tiles apart, written densely from `sram_offset` with zero tiles padded around each side."""

    buffer: str  # inp | wgt | acc
    dram: str
    dram_offset: int
    y_size: int
    x_size: int
    x_stride: int
    sram_offset: int
    y_pad0: int = 0
    y_pad1: int = 0
    x_pad0: int = 0
    x_pad1: int = 0

    @property
    def module(self) -> str:
        return "compute" if self.buffer == "acc" else "load"

    @property
    def sram_tiles(self) -> int:
        return (self.y_pad0 + self.y_size + self.y_pad1) * (self.x_pad0 + self.x_size + self.x_pad1)


@dataclass(frozen=True, eq=False)
class UopKernel:
    """A GEMM micro-program: per micro-op, the accumulator, input and weight tile it uses
    (relative to the instruction's bases), and the accumulator tiles a reset zeroes."""

    acc: np.ndarray
    inp: np.ndarray
    wgt: np.ndarray
    reset_tiles: np.ndarray
    groups: list[tuple[int, np.ndarray]] = field(default_factory=list, repr=False)  # (weight tile, uop ids)

    def __post_init__(self) -> None:
        order = np.argsort(self.wgt, kind="stable")
        cuts = np.flatnonzero(np.diff(self.wgt[order])) + 1
        for ids in np.split(order, cuts) if len(order) else []:
            self.groups.append((int(self.wgt[ids[0]]), ids))

    def __len__(self) -> int:
        return len(self.acc)


@dataclass(frozen=True, kw_only=True)
class Gemm(Insn):
    """Run `kernel`: acc[acc_base + a] += inp[inp_base + i] @ wgt[wgt_base + w]^T per micro-op,
    one a cycle. With `reset` the kernel's reset tiles start from zero: the first micro-op
    writing such a tile overwrites it instead of adding (no extra cycles)."""

    kernel: UopKernel
    acc_base: int
    inp_base: int
    wgt_base: int
    reset: bool = False

    @property
    def module(self) -> str:
        return "compute"

    @property
    def uops(self) -> int:
        return len(self.kernel)


@dataclass(frozen=True, kw_only=True, eq=False)
class Alu(Insn):
    """Element-wise int32 op on accumulator tiles: acc[dst] = op(acc[dst], acc[src] or `imm`).

    add/min/max/mul: with a tile operand `src` or the immediate imm[0]; add and mul wrap
    modulo 2^32. shr: arithmetic shift right by imm[0] (left when negative, wrapping).
    requant: clip((x * acc[src] + 2^(s-1)) >> s, lo, hi) with imm = (s >= 1, lo, hi), in 64 bits
    (a fixed-point multiply, rounding half up, and the activation's clamp in one pass, as the
    output stage of integer NPUs). clip: min(max(x, imm[0]), imm[1]).
    """

    op: str
    dst: np.ndarray
    src: np.ndarray | None = None
    imm: tuple[int, ...] = ()

    @property
    def module(self) -> str:
        return "compute"


@dataclass(frozen=True, kw_only=True)
class Store(Insn):
    """2-D strided DMA accumulator buffer -> DRAM (the inverse of Load, no padding). `dtype`
    int8 keeps each element's low 8 bits (clip first), as VTA's store does; int32 stores as is."""

    dram: str
    dram_offset: int
    y_size: int
    x_size: int
    x_stride: int
    sram_offset: int
    dtype: str = "int8"

    @property
    def module(self) -> str:
        return "store"


@dataclass(frozen=True, kw_only=True)
class Finish(Insn):
    """End of the program (on the compute module)."""

    @property
    def module(self) -> str:
        return "compute"
