"""One GPU thread per output element: the injective pattern, and every reduction-like pattern
(plain reductions, pooling, softmax, layer norm, the blocked convolution).

Each stage left at the kernel's root is a kernel of its own: its data axes fused and split
by `threads` into blockIdx.x x threadIdx.x, its reduce loops serial in the thread (TVM's
fallback reduction schedule; enough parallelism whenever there are many rows, as in a
transformer's softmax or a global average over channels). Stages between them (softmax's
maxima and sums, layer norm's moments) are device buffers written by one kernel and read
by the next. When the group's output is an element-wise consumer of the anchor (`relu`
after a pool), the anchor is computed inside the consumer's thread: a per-thread scalar,
no intermediate buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

from taso_py.codegen.schedule.schedule import Schedule, Stage
from taso_py.codegen.target import CUDA
from taso_py.codegen.te.tensor import IterVar, Tensor
from taso_py.codegen.topi.injective import fuse_all
from taso_py.codegen.topi.linalg import live_readers, reads_identity
from taso_py.codegen.topi.registry import register_schedule
from taso_py.codegen.tune.space import Config

THREADS = (64, 128, 256, 512, 1024)


def threads_knob(cfg: Config, default: int = 256) -> int:
    return cfg.knob("threads", THREADS, default=default)


def bind_elements(st: Stage, threads: int, lead: Sequence[IterVar] = ()) -> IterVar | None:
    """`lead` (default: all data axes, which come first) fused into one loop and split into
    blockIdx.x x threadIdx.x; the thread loop, or None for a 0-d stage (a single-thread kernel)."""
    data = list(lead) or [ax for ax in st.leaf if not ax.reduce]
    if not data:
        return None
    bx, tx = st.split(fuse_all(st, data), threads)
    st.bind(bx, "blockIdx.x")
    st.bind(tx, "threadIdx.x")
    return tx


def elementwise_consumer(s: Schedule, anchor: Tensor) -> Stage | None:
    """The group's output that reads the anchor element by element, when it is the anchor's only reader."""
    if s[anchor].is_output:
        return None
    readers = live_readers(s, anchor)
    if len(readers) == 1 and readers[0].is_output and reads_identity(s, readers[0], anchor):
        return readers[0]
    return None


def schedule_stages(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Every root stage one kernel, one thread per element; an anchor read element by element
    by the group's output (`relu` after a pool) is computed in that output's thread instead."""
    threads = threads_knob(cfg)
    consumer = elementwise_consumer(s, anchor)
    if consumer is not None:
        tx = bind_elements(consumer, threads)
        if tx is not None:
            s[anchor].compute_at(consumer, tx)
    for st in s.stages:
        if st.attach == "root" and st is not consumer:
            bind_elements(st, threads)


register_schedule("injective", "reduction", "pool", "layernorm", "conv2d_nchwc", "conv2d_winograd",
                  target=CUDA)(schedule_stages)
