"""Softmax on the GPU: one block per row, the row's statistics reduced by the block's threads.

The compute (topi.norm) is exponentials exp(x - max) materialized, then exps * (1 / sum),
each statistic a `row_reduce`: 16 partial results per row, then their combination. Each of
the two passes is one kernel whose block is a row: 16 of its threads compute the partials
into shared memory, a barrier, every thread combines them into its own register (16 reads
of shared memory, no second barrier needed to publish a result), then the threads sweep the
row. A 1-D softmax (a single row) keeps the one-thread-per-element kernels.
"""

from __future__ import annotations

from collections.abc import Sequence

from taso_py.codegen.schedule.schedule import Schedule, Stage
from taso_py.codegen.target import CUDA
from taso_py.codegen.te.tensor import IterVar, Tensor
from taso_py.codegen.topi.cuda.generic import bind_elements, schedule_stages, threads_knob
from taso_py.codegen.topi.injective import fuse_all
from taso_py.codegen.topi.registry import register_schedule
from taso_py.codegen.tune.space import Config


def _read(s: Schedule, reader: Stage, name: str) -> Stage:
    (stage,) = (s[t] for t in reader.reads() if t.op.name == name)
    return stage


def _block_per_row(st: Stage, axis: int, threads: int) -> IterVar:
    """The rows (all axes but `axis`) fused into blockIdx.x, the row swept by threadIdx.x."""
    axes = list(st.leaf)
    rows = axes[:axis] + axes[axis + 1:]
    st.reorder(*rows, axes[axis])
    row = fuse_all(st, rows)
    st.bind(row, "blockIdx.x")
    _, tx = st.split(axes[axis], threads)
    st.bind(tx, "threadIdx.x")
    return row


def _reduce_in_block(s: Schedule, total: Stage, parent: Stage, row: IterVar) -> None:
    """`total` (a row_reduce result) computed per thread at the block's row; its partials in shared memory."""
    total.compute_at(parent, row)
    parts = [s[t] for t in total.reads() if t.op.name == f"{total.name}_part"]
    if parts:
        (part,) = parts
        part.scope = "shared"
        part.compute_at(total, total.leaf[len(total.axes) - 1])
        part.bind(part.axes[-1], "threadIdx.x")


@register_schedule("softmax", target=CUDA)
def schedule_softmax(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    out = s[anchor]
    if len(out.axes) < 2:
        schedule_stages(s, anchor, outputs, cfg)
        return
    threads = threads_knob(cfg)
    axis = out.op.attrs["axis"]
    for t in outputs:
        if s[t] is not out:
            bind_elements(s[t], threads)
    exps = _read(s, out, "softmax_exp")
    for st, stat in ((out, "softmax_sum"), (exps, "softmax_max")):
        _reduce_in_block(s, _read(s, st, stat), st, _block_per_row(st, axis, threads))
