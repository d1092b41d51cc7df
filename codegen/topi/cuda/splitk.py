"""Reductions split across the threads of a block, and the launch sizes that fill the GPU.

A batch-1 layer has few outputs (a 7x7x512 convolution: 25088; a fully connected layer: its
N columns), so one thread per output and a serial reduction leave most of the GPU idle.
`rfactor` (TVM's primitive, as a schedule-time rewrite) splits a stage's one reduce axis k
into `parts` interleaved slices: a new stage P[..., t] combining body(k = ko * parts + t)
over ko, and the stage itself becomes the combination of P over t. `reduce_in_block` runs it
as a block per `cols` outputs of a column axis: P in shared memory, one thread per (output,
slice) accumulating its slice in a register (threadIdx.x the column, so neighbouring threads
read neighbouring columns of a row-major operand), a barrier, then one thread per output
combining the slices. Interleaved slices also make a warp's threads of one column read
neighbouring k.

The defaults size the grid for `sm_count()` multiprocessors: $TASO_CUDA_SMS, else 132 (an
H100 or H200), since a module may be compiled on a machine without its GPU.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from taso_py.codegen import te
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.schedule.schedule import Schedule, Stage
from taso_py.codegen.te.expr import substitute
from taso_py.codegen.te.tensor import IterVar, Reduce, TensorRead
from taso_py.codegen.topi.injective import fuse_all
from taso_py.codegen.tune.space import Config

SM_COUNT = 132  # H100 SXM and H200
BLOCK = 256  # threads per block of the defaults
MIN_STEPS = 64  # reduction steps per thread below which another slice is not worth its share of the combine
SHARED_BYTES = 48 * 1024  # static shared memory per block
COLS = (8, 16, 32, 64)  # outputs per block: 8 float32 columns fill a 32-byte memory sector


def sm_count() -> int:
    """The multiprocessors the default grids aim to fill."""
    text = os.environ.get("TASO_CUDA_SMS", str(SM_COUNT))
    if not text.isdigit() or int(text) < 1:
        raise CodegenError(f"TASO_CUDA_SMS must be a positive number of multiprocessors, got {text!r}")
    return int(text)


def blocks_wanted() -> int:
    """Two blocks per multiprocessor: one can run while the other waits on memory."""
    return 2 * sm_count()


def floor_pow2(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def split_knobs(cfg: Config, cols_extent: int, outer: int, steps: int, rows: int, dtype: str) -> tuple[int, int]:
    """(block_cols, split_k): the widest column block that still gives `blocks_wanted()` blocks
    (`outer` blocks per column block), and slices of at least MIN_STEPS steps filling BLOCK
    threads; clamped to 1024 threads and the shared memory of `rows` x cols x slices values."""
    fits = [c for c in (32, 16, 8) if outer * -(-cols_extent // c) >= blocks_wanted()]
    cols = min(cfg.knob("block_cols", COLS, default=fits[0] if fits else COLS[0]), cols_extent)
    choices = (1, 2, 4, 8, 16, 32, 64)
    parts = cfg.knob("split_k", choices, default=floor_pow2(min(BLOCK // cols, steps // MIN_STEPS, choices[-1])))
    room = SHARED_BYTES // (rows * cols * np.dtype(dtype).itemsize)
    return cols, max(1, min(parts, 1024 // cols, floor_pow2(room)))


def rfactor(s: Schedule, st: Stage, parts: int) -> Stage:
    """Split `st`'s one reduction over `parts` slices (see the module doc); the new stage P, read
    only by `st`, which now reduces over P's last axis. Call it before scheduling `st`."""
    body = st.body
    if not isinstance(body, Reduce) or len(body.axes) != 1 or st.relations:
        raise CodegenError(f"rfactor {st.name!r}: needs an unscheduled stage with one reduce axis")
    (k,) = body.axes
    ko = te.reduce_axis(-(-k.extent // parts), f"{k.name}o")

    def slice_(*idx: te.Expr) -> te.Expr:
        *data, t = idx
        step = ko.var * parts + t
        at = {a.var: v for a, v in zip(st.axes, data)}
        if k.extent % parts == 0:
            return Reduce(body.combiner, substitute(body.source, {**at, k.var: step}), (ko,))
        value = substitute(body.source, {**at, k.var: te.min_(step, k.extent - 1)})
        return Reduce(body.combiner, te.if_then_else(step < k.extent, value, body.identity()), (ko,))

    part = te.compute((*st.op.shape, parts), slice_, name=f"{st.name}_rf", tag=st.op.tag)
    t = te.reduce_axis(parts, "t")
    st.body = Reduce(body.combiner, TensorRead(part, (*(a.var for a in st.axes), t.var)), (t,))
    st.leaf = list(st.root_axes)
    stage = Stage(part.op, part.op.body)
    s.stages.insert(s.stages.index(st), stage)
    s.stage_map[part.op] = stage
    return stage


def reduce_in_block(s: Schedule, st: Stage, col: IterVar, cols: int, parts: int, rows: Sequence[IterVar] = (),
                    outer: Sequence[IterVar] = ()) -> IterVar:
    """`st` (one reduce axis, unscheduled) computed a block per `cols` elements of its data axis `col`
    and every element of `outer` (fused): `parts` slices of the reduction per element, each a thread
    (threadIdx.y; threadIdx.x the element), in shared memory; `rows` (small axes) looped inside each
    thread, sharing its loads of the other operand. Returns the block loop, for the caller to bind
    (or to leave a one-trip loop where `st` is computed at a block of its consumer)."""
    if st.tensor.ndim != 1 + len(rows) + len(outer) or col in rows or col in outer:
        raise CodegenError(f"reduce_in_block {st.name!r}: every data axis but `col` is a row or an outer axis")
    part = rfactor(s, st, parts)
    local = s[s.cache_write(part.tensor, "local")]
    part.scope = "shared"
    co, ci = st.split(col, cols)
    ty, tx = st.split(ci, nparts=1)  # one-trip: the combine runs in the threads of slice 0 only
    (t,) = st.reduce_axes
    st.reorder(*outer, co, ty, tx, *rows, t)
    block = fuse_all(st, [*outer, co])
    st.bind(ty, "threadIdx.y")
    st.bind(tx, "threadIdx.x")
    for ax in rows:
        st.unroll(ax)
    part.compute_at(st, block)
    _slice_threads(part, local, st.axes.index(col), [st.axes.index(r) for r in rows])
    return block


def _slice_threads(part: Stage, local: Stage, col: int, rows: Sequence[int]) -> None:
    """The shared slices: a thread per (slice, column) accumulating its rows in registers (`local`,
    computed in the thread), then storing them; the reduction over ko outside the rows, so each
    value of the row-shared operand is loaded once per step."""
    p_rows = [part.leaf[r] for r in rows]
    p_t, p_col = part.leaf[-1], part.leaf[col]
    part.reorder(p_t, p_col, *p_rows)
    part.bind(p_t, "threadIdx.y")
    part.bind(p_col, "threadIdx.x")
    local.compute_at(part, p_col)
    l_rows = [local.leaf[r] for r in rows]
    (ko,) = local.reduce_axes
    local.reorder(ko, *l_rows)
    for ax in p_rows:
        part.unroll(ax)
    for ax in l_rows:
        local.unroll(ax)
