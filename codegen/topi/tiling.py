"""Register tiles for the `TileIntrin` micro-kernel, chosen from the host's ISA.

A tile is `rows` x (`groups` x a block of lanes) accumulators. They may fill three quarters
of the vector registers (24 of AVX-512's 32, 12 of AVX2's 16): the rest hold a row of B's
vectors and the broadcasts, and fuller tiles spilled in gcc's code. A tile of two rows or more
must also leave room for its whole row of B and a broadcast: AVX2's 2 x 6-vector and 3 x 4-vector
tiles fill 12 registers but gcc spilled them to the stack, and they ran 25-35% slower than a
2 x 4 or a 4 x 2 on a Zen 1 core (NASNet-A's 1x1 convolutions); a 1-row tile uses each B vector
once and reads it from memory in the FMA. One step of the
reduction (a broadcast of A per row, a vector of B per column) is priced against the FMA
units (two on Intel's AVX-512 and on AVX2 cores, one 512-bit FMA a cycle on AMD's Zen 4), two
load ports, and the FMA latency, which needs enough independent accumulators to hide. Ties go
to fewer loads per FMA. A tile whose B vectors (the reduction's length x its columns) do not
fit L1 loses them between tiles and streams them from L2 at every step, so it needs enough rows
to use each B vector more than once or twice. Rows that do not divide the extent are padded (wasted work),
and the tiles should spread evenly over the cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from taso_py.codegen import isa

LOAD_PORTS, FMA_LATENCY = 2, 4
L1_MISS = 0.8  # efficiency of a tile whose B does not stay in L1
# What L2 sustains into L1 when every step's B vectors come from there (half of Zen 3's and a
# quarter of Skylake-SP's peak): a tile of few rows over many B vectors waits on it (BERT's
# 2 x 48 matmul tile ran at 40% of an AVX2 core's peak).
L2_BYTES_PER_CYCLE = 16


def tile_shape(extent: int, blocks: int, block: int, items: Callable[[int, int], int], steps: int = 0,
               pad: bool = True, b_rows: int = 0) -> tuple[int, int]:
    """(rows, groups): the register tile for `extent` rows and `blocks` column blocks of `block`
    lanes (groups divides blocks); `items(rows, groups)` is how many tiles run in parallel;
    `steps`, the reduction's length, sizes the B vectors a tile reads (reused by the next tile
    when they stay in L1). Without `pad`, rows divide the extent. `b_rows`, where known, is how
    many rows in all read each B vector: when one tile holds them all (a matrix-vector product),
    B streams in once whatever its size, and the tile needs accumulators enough to hide the FMA
    latency while it does (NasRNN's 1-row tile of 2 vectors read its weights at half the speed
    L3 delivers them)."""
    cpu = isa.host()
    per_block = max(1, block // cpu.lanes)  # vectors per column block
    cores = os.cpu_count() or 1
    best: tuple[tuple[float, float], tuple[int, int]] | None = None
    for groups in (d for d in range(1, min(blocks, 8) + 1) if blocks % d == 0):
        vecs = groups * per_block
        for rows in range(1, min(extent, 32) + 1):
            if rows * vecs > cpu.registers * 3 // 4:  # accumulators; the rest: a row of B, broadcasts, spares
                break
            if rows > 1 and rows * vecs + vecs + 1 > cpu.registers:  # B's row and a broadcast spill
                break
            if not pad and extent % rows:
                continue
            fma = rows * vecs
            ports = cpu.fma_units
            from_l2 = 0.0
            streamed = 0 < b_rows <= rows  # one tile reads each B vector once: it streams in anyway
            if streamed or steps * groups * block * 4 > cpu.l1d:  # B misses L1 (measured: 40% slower on a stem)
                from_l2 = vecs * cpu.lanes * 4 / L2_BYTES_PER_CYCLE  # and streams from L2 every step
            efficiency = (fma / ports) / max(fma / ports, (rows + vecs) / LOAD_PORTS, FMA_LATENCY, from_l2)
            if from_l2:
                efficiency *= L1_MISS
            waste = -(-extent // rows) * rows / extent
            n = max(1, items(rows, groups))
            balance = n / (-(-n // cores) * cores)
            score = (round(efficiency * balance / waste, 3), -(rows + vecs) / fma)  # then fewer loads an FMA
            if best is None or score > best[0]:
                best = (score, (rows, groups))
    return best[1] if best else (1, 1)
