"""The accelerator's hardware description: one frozen object, every size and latency in it.

The defaults follow VTA's default configuration (Moreau et al., "A Hardware-Software Blueprint
for Flexible Deep Learning Specialization", 2019): a 1 x 16 x 16 int8 GEMM core (256 MACs a
cycle), a 32 KiB input buffer, a 256 KiB weight buffer, a 128 KiB int32 accumulator buffer and
a 64-bit (8 bytes a cycle) DRAM port. Two choices differ from VTA and are stated here:
the ALU is 64 lanes wide (VTA: 16), so the bias + requantize epilogue of a 1x1 convolution
with 64 input channels (4 GEMM cycles per output tile) does not take as long as its GEMMs; and
the DMA latency is a flat 32 cycles per instruction (VTA's depends on the board's DRAM).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AccelConfig:
    """GEMM core shape, on-chip buffers (bytes), DMA and ALU throughput, fixed latencies (cycles)."""

    batch: int = 1  # rows of an input tile
    block_in: int = 16  # reduction width of one tile GEMM
    block_out: int = 16  # output channels of one tile GEMM
    inp_buffer_bytes: int = 32 * 1024  # int8 input tiles
    wgt_buffer_bytes: int = 256 * 1024  # int8 weight tiles
    acc_buffer_bytes: int = 128 * 1024  # int32 accumulator tiles (also bias / multiplier tiles)
    dma_bytes_per_cycle: int = 8  # one DRAM port per DMA module (load, store), each this wide
    dma_latency: int = 32  # cycles before the first byte of a LOAD/STORE moves
    alu_lanes: int = 64  # int32 ALU element operations per cycle
    gemm_overhead: int = 4  # pipeline fill per GEMM instruction; then one tile GEMM per cycle
    alu_overhead: int = 4  # pipeline fill per ALU instruction

    def __post_init__(self) -> None:
        for name in ("batch", "block_in", "block_out", "dma_bytes_per_cycle", "alu_lanes"):
            if getattr(self, name) < 1:
                raise ValueError(f"AccelConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.block_in * 128 * 128 >= 1 << 24:
            raise ValueError("AccelConfig.block_in too large: tile dot products must stay exact in float32")

    # ---- derived sizes ----------------------------------------------------------------------

    @property
    def inp_tile_elems(self) -> int:
        return self.batch * self.block_in

    @property
    def wgt_tile_elems(self) -> int:
        return self.block_out * self.block_in

    @property
    def acc_tile_elems(self) -> int:
        return self.batch * self.block_out

    def tile_bytes(self, buffer: str) -> int:
        """Bytes of one tile of `buffer` (inp/wgt int8, acc int32)."""
        return {"inp": self.inp_tile_elems, "wgt": self.wgt_tile_elems, "acc": 4 * self.acc_tile_elems}[buffer]

    def capacity(self, buffer: str) -> int:
        """How many tiles `buffer` holds."""
        size = {"inp": self.inp_buffer_bytes, "wgt": self.wgt_buffer_bytes, "acc": self.acc_buffer_bytes}[buffer]
        return size // self.tile_bytes(buffer)

    @property
    def peak_macs_per_cycle(self) -> int:
        return self.batch * self.block_in * self.block_out
