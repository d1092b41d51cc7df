"""Dependency tokens for a stream of steps run by virtual threads (VTA's latency hiding).

A step is one unit of work of one virtual thread: its loads into the thread's input/weight
buffer half, its compute (GEMMs, then the ALU epilogue when it finishes an output tile) and,
then, the stores of that tile from the thread's accumulator half. `link` interleaves nothing
itself -- the caller orders the steps -- it only adds the tokens that make that order safe:
- load->compute: a step's last load pushes, its first compute instruction pops;
- compute->load: a step's last GEMM pushes when a later step of the thread loads over its
  buffers, and that step's first load pops (so buffers are never overwritten while read);
- compute->store: a tile's last compute instruction pushes, its first store pops;
- store->compute: a tile's last store pushes when the thread's next tile will reset the
  accumulators, and that tile's first compute instruction pops.
Each queue is FIFO, so a pop must meet the push it means: with the threads' steps in
program order, the k-th pop of a queue always meets the k-th push (`test_accel` runs it with
random module timing to show it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from taso_py.codegen.backends.accel.isa import Gemm, Insn, Load, Store


@dataclass
class Step:
    thread: int
    loads: list[Load]
    compute: list[Insn]
    stores: list[Store] = field(default_factory=list)  # non-empty: the step finishes an output tile
    first: bool = True  # the step starts an output tile (its GEMM resets the accumulators)


def link(steps: list[Step]) -> list[Insn]:
    """The steps' instructions in order, with their dependency-token flags set."""
    last_step: dict[int, int] = {}
    last_tile: dict[int, int] = {}
    push_free: set[int] = set()
    acc_reused: set[int] = set()
    for j, st in enumerate(steps):
        prev = last_step.get(st.thread)
        if st.loads and prev is not None:
            push_free.add(prev)
        if st.first and st.thread in last_tile:
            acc_reused.add(last_tile[st.thread])
        if st.stores:
            last_tile[st.thread] = j
        last_step[st.thread] = j
    loaded: set[int] = set()  # threads with an earlier step
    tiled: set[int] = set()  # threads with an earlier output tile
    out: list[Insn] = []
    for j, st in enumerate(steps):
        loads: list[Insn] = list(st.loads)
        compute = list(st.compute)
        stores: list[Insn] = list(st.stores)
        if loads:
            loads[0] = replace(loads[0], pop_next=st.thread in loaded)
            loads[-1] = replace(loads[-1], push_next=True)
            compute[0] = replace(compute[0], pop_prev=True)
        if st.first and st.thread in tiled:
            compute[0] = replace(compute[0], pop_next=True)
        if j in push_free:
            g = max(k for k, insn in enumerate(compute) if isinstance(insn, Gemm))
            compute[g] = replace(compute[g], push_prev=True)
        if stores:
            compute[-1] = replace(compute[-1], push_next=True)
            stores[0] = replace(stores[0], pop_prev=True)
            stores[-1] = replace(stores[-1], push_prev=j in acc_reused)
            tiled.add(st.thread)
        loaded.add(st.thread)
        out += loads + compute + stores
    return out
