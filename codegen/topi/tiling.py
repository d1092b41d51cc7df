"""Register tiles for the `TileIntrin` micro-kernel, chosen from the host's ISA.

A tile is `rows` x (`groups` x a block of lanes) accumulators. The accumulators and one row of
B's vectors must fit the vector registers (32 with AVX-512, 16 with AVX2). One step of the
reduction (a broadcast of A per row, a vector of B per column) is priced against two FMA
units, two load ports and the FMA latency, which needs enough independent accumulators to
hide: an AVX-512 Intel core runs two 512-bit FMAs a cycle, an AMD Zen 4 core one, so the
model takes the more demanding one and the tile suits both. Rows that do not divide the
extent are padded (wasted work), and the tiles should spread evenly over the cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from codegen import isa

FMA_PORTS, LOAD_PORTS, FMA_LATENCY = 2, 2, 4


def tile_shape(extent: int, blocks: int, block: int, items: Callable[[int, int], int],
               pad: bool = True) -> tuple[int, int]:
    """(rows, groups): the register tile for `extent` rows and `blocks` column blocks of `block`
    lanes (groups divides blocks); `items(rows, groups)` is how many tiles run in parallel.
    Without `pad`, rows divide the extent."""
    cpu = isa.host()
    per_block = max(1, block // cpu.lanes)  # vectors per column block
    cores = os.cpu_count() or 1
    best: tuple[tuple[float, float], tuple[int, int]] | None = None
    for groups in (d for d in range(1, min(blocks, 8) + 1) if blocks % d == 0):
        vecs = groups * per_block
        for rows in range(1, min(extent, 32) + 1):
            if rows * vecs + vecs + 1 > cpu.registers:
                break
            if not pad and extent % rows:
                continue
            fma = rows * vecs
            efficiency = (fma / FMA_PORTS) / max(fma / FMA_PORTS, (rows + vecs) / LOAD_PORTS, FMA_LATENCY)
            waste = -(-extent // rows) * rows / extent
            n = max(1, items(rows, groups))
            balance = n / (-(-n // cores) * cores)
            score = (round(efficiency * balance / waste, 3), -(rows + vecs) / fma)
            if best is None or score > best[0]:
                best = (score, (rows, groups))
    return best[1] if best else (1, 1)
