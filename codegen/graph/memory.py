"""Static memory planning: intermediate tensors share one arena, reused by liveness.

A tensor lives from the kernel that writes it to the last kernel that reads it. Tensors
are placed largest first at the lowest offset that overlaps no placed tensor whose
lifetime overlaps its own (first fit over the offsets in use), so the arena is far below
the sum of all intermediates on a chain, where only two tensors are alive at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ALIGN = 64


@dataclass(frozen=True)
class Lifetime:
    key: str
    nbytes: int
    first: int  # index of the kernel that writes it
    last: int  # index of the last kernel that reads it


@dataclass(frozen=True)
class Plan:
    offsets: dict[str, int]
    arena_bytes: int
    unshared_bytes: int  # what one buffer per tensor would take


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_memory(tensors: Sequence[Lifetime]) -> Plan:
    placed: list[tuple[int, int, Lifetime]] = []  # (offset, end, tensor)
    offsets: dict[str, int] = {}
    for t in sorted(tensors, key=lambda t: (-t.nbytes, t.first, t.key)):
        size = _aligned(t.nbytes)
        busy = sorted((o, e) for o, e, u in placed if not (u.last < t.first or t.last < u.first))
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        placed.append((offset, offset + size, t))
        offsets[t.key] = offset
    arena = max((e for _, e, _ in placed), default=0)
    return Plan(offsets, arena, sum(_aligned(t.nbytes) for t in tensors))
