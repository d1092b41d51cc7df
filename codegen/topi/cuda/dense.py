"""GPU templates for the dense operators: a shared-memory tiled matmul and a register-blocked direct conv2d.

Matmul (the classic CUDA SGEMM as a schedule): a block computes a `block_m x block_n` tile
of C with `(block_m / thread_m) x (block_n / thread_n)` threads, each accumulating a
`thread_m x thread_n` sub-tile (rows and columns strided by the thread counts) in registers.
The reduction runs in steps of `tile_k`; per step the block's threads cooperatively copy the
A and B tiles it needs into shared memory (`cache_read(.., "shared")` computed at the step
loop, its copy loops bound to the same threads), then each thread multiplies out of shared
memory. The accumulator is the anchor
computed at the block's tile (a `cache_write` to "local" when the matmul is itself the output,
else the anchor read by its element-wise consumer, e.g. `relu(a @ b + bias)`); the CUDA
emitter keeps each thread's part of it in registers.

Few rows (a batch-1 fully connected layer, M x batch <= MATVEC_ROWS): a matrix-vector
product, memory bound on B. A block takes `block_cols` columns and splits K over `split_k`
threads each (`splitk.reduce_in_block`): B read along its rows by neighbouring threads, every
row of A in each thread's registers, the element-wise consumer (bias, relu) applied to the
combined sums.

Conv2d: each thread computes `tile_oc` output channels of one output pixel, so every input
value it loads serves `tile_oc` multiply-adds; bias and activation follow in a second kernel.
Where that gives too few threads to fill the GPU (the small images of a network's last
stages) and the reduction is long, a block takes `block_cols` output channels of one pixel
instead, the reduction split over `split_k` threads each, as the matrix-vector product.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from taso_py.codegen import te
from taso_py.codegen.schedule.schedule import Schedule, Stage
from taso_py.codegen.target import CUDA
from taso_py.codegen.te.tensor import Tensor, TensorRead
from taso_py.codegen.topi.cuda.generic import bind_elements, elementwise_consumer, schedule_stages, threads_knob
from taso_py.codegen.topi.cuda.splitk import BLOCK, MIN_STEPS, blocks_wanted, reduce_in_block, split_knobs
from taso_py.codegen.topi.injective import fuse_all
from taso_py.codegen.topi.registry import register_schedule
from taso_py.codegen.tune.space import Config

MATVEC_ROWS = 16  # rows (M x batch) up to which a matmul is a matrix-vector product: one B load serves them all


def _operands(st: Stage) -> list[Tensor]:
    """A and B of `sum(A[..] * B[..])` where they are read directly (a cast or an expression is not tiled)."""
    src = st.body.source if isinstance(st.body, te.Reduce) else None
    if not (isinstance(src, te.Binary) and src.op == "*"):
        return []
    return [side.tensor for side in (src.a, src.b) if isinstance(side, TensorRead)]


def cooperative_fetch(st: Stage, ty: int, tx: int) -> None:
    """A shared-memory copy stage's loops fused and spread over the block's ty x tx threads."""
    fused = fuse_all(st, list(st.leaf))
    _, inner = st.split(fused, ty * tx)
    y, x = st.split(inner, tx)
    st.bind(y, "threadIdx.y")
    st.bind(x, "threadIdx.x")


@register_schedule("matmul", target=CUDA)
def schedule_matmul(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Knobs: kernel (tile | splitk); block_m, block_n, thread_m, thread_n, tile_k (tile); block_cols,
    split_k (splitk); threads (a matrix times a vector: one thread per output element)."""
    attrs = anchor.op.attrs
    if not attrs["has_n"]:
        schedule_stages(s, anchor, outputs, cfg)  # a matrix times a vector: one thread per output element
        return
    rows = math.prod(anchor.shape[:-1])
    kernels = ("tile", "splitk") if attrs["has_m"] else ("splitk",)
    if cfg.knob("kernel", kernels, default="splitk" if rows <= MATVEC_ROWS else "tile") == "splitk":
        _schedule_matvec(s, anchor, outputs, cfg)
        return
    big = anchor.shape[-2] >= 512 and anchor.shape[-1] >= 512  # 128x128 tiles, 8x8 per thread (64 registers)
    bm = cfg.knob("block_m", (16, 32, 64, 128), default=128 if big else 64)
    bn = cfg.knob("block_n", (16, 32, 64, 128), default=128 if big else 64)
    tm = cfg.knob("thread_m", (1, 2, 4, 8), default=8 if big else 4)
    tn = cfg.knob("thread_n", (1, 2, 4, 8), default=8 if big else 4)
    tk = cfg.knob("tile_k", (4, 8, 16, 32), default=16)
    consumer = elementwise_consumer(s, anchor)
    if consumer is not None:
        main, acc = consumer, s[anchor]
    else:
        main = s[anchor]
        acc = s[s.cache_write(anchor, "local")]
    for out in outputs:
        if s[out] is not main:
            bind_elements(s[out], threads_knob(cfg))

    *batch, i, j = main.leaf
    # a thread's rows and columns are strided by the thread counts, so neighbouring threads read
    # neighbouring words of the shared tiles (no bank conflicts) and write neighbouring outputs
    bi, ii = main.split(i, bm)
    yi, ty = main.split(ii, nparts=tm)
    bj, jj = main.split(j, bn)
    xi, tx = main.split(jj, nparts=tn)
    main.reorder(*batch, bi, bj, ty, tx, yi, xi)
    if batch and batch[-1].extent <= 65535:
        # the last batch axis only: a fused one's `//` and `%` would hide the accumulator's
        # region from bound inference; the others stay serial loops around the blocks
        main.bind(batch[-1], "blockIdx.z")
    main.bind(bi, "blockIdx.y")
    main.bind(bj, "blockIdx.x")
    main.bind(ty, "threadIdx.y")
    main.bind(tx, "threadIdx.x")
    main.unroll(yi)
    main.unroll(xi)

    # the accumulator holds the block's tile; its loops give each thread the same sub-tile as `main`
    acc.compute_at(main, bj)
    operands = _operands(acc)
    *_, ai, aj, k = acc.leaf
    ayi, aty = acc.split(ai, ty.extent)  # acc's axes span the whole matrix here: split by main's factors
    axi, atx = acc.split(aj, tx.extent)
    ko, ki = acc.split(k, tk)
    acc.reorder(ko, aty, atx, ki, ayi, axi)
    acc.bind(aty, "threadIdx.y")
    acc.bind(atx, "threadIdx.x")
    for ax in (ki, ayi, axi):
        acc.unroll(ax)
    for t in operands:
        cache = s[s.cache_read(t, "shared", [acc.tensor])]
        cache.compute_at(acc, ko)
        cooperative_fetch(cache, ty.extent, tx.extent)


def _schedule_matvec(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """A block per `block_cols` columns, all rows, K split over `split_k` threads per column; an
    element-wise consumer (bias, relu) writes the block's columns from the combined sums."""
    n_ext = anchor.shape[-1]
    (k,) = s[anchor].reduce_axes
    rows = math.prod(anchor.shape[:-1])
    cols, parts = split_knobs(cfg, n_ext, 1, k.extent, rows, anchor.dtype)
    consumer = elementwise_consumer(s, anchor)
    acc = s[anchor]
    *row_axes, col = acc.axes
    if consumer is None:
        acc.bind(reduce_in_block(s, acc, col, cols, parts, row_axes), "blockIdx.x")
        main = acc
    else:
        main = consumer
        *m_rows, m_col = main.leaf
        bj, jj = main.split(m_col, cols)
        ty, tx = main.split(jj, nparts=1)
        main.reorder(bj, ty, tx, *m_rows)
        main.bind(bj, "blockIdx.x")
        main.bind(ty, "threadIdx.y")  # one trip: the threads of slice 0 write the block's columns
        main.bind(tx, "threadIdx.x")
        acc.compute_at(main, bj)
        reduce_in_block(s, acc, col, cols, parts, row_axes)
    for out in outputs:
        if s[out] is not main:
            bind_elements(s[out], threads_knob(cfg))


def _pixel_defaults(outputs: int, channels: int) -> tuple[int, int]:
    """(tile_oc, threads): the most channels per thread (each input load serves them all) and then
    the largest block that still gives `blocks_wanted()` blocks; else one channel, 64 threads."""
    for tile_oc in (4, 2, 1):
        if channels % tile_oc == 0 and -(-outputs // tile_oc) >= blocks_wanted() * BLOCK:
            return tile_oc, BLOCK
    for threads in (128, 64):
        if outputs >= blocks_wanted() * threads:
            return 1, threads
    return 1, 64


@register_schedule("conv2d", target=CUDA)
def schedule_conv2d(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Knobs: kernel (pixel | splitk), tile_oc (output channels per thread) and threads (per
    block) of the pixel kernel, block_cols and split_k of the split one.

    The accumulator's channel axis is axis 1 of an NCHW accumulator, the last of a
    channels-last one. In the pixel kernel each thread accumulates its channels in place (its
    own elements of the accumulator, `__restrict__`, so nvcc keeps them in registers across the
    reduction); no per-thread stage is attached inside the fused pixel loop, whose `//` and `%`
    bound inference cannot see through. A channels-last accumulator with a long reduction and
    too few outputs to fill the GPU takes the split kernel (`_conv_splitk`). The epilogue (bias,
    activation, the NCHW output of a channels-last accumulator) is a second kernel, one thread
    per element."""
    chan = 1 if anchor.op.attrs.get("layout", "NCHW") == "NCHW" else anchor.ndim - 1
    channels = anchor.shape[chan]
    acc = s[anchor]
    (r,) = acc.reduce_axes
    size = math.prod(anchor.shape)
    tile_default, threads_default = _pixel_defaults(size, channels)
    kernels = ("pixel", "splitk") if chan == anchor.ndim - 1 else ("pixel",)
    # split where one thread per output would leave the GPU idle, into 4+ slices of MIN_STEPS
    split = len(kernels) > 1 and size < blocks_wanted() * BLOCK and r.extent >= 4 * MIN_STEPS
    kernel = cfg.knob("kernel", kernels, default="splitk" if split else "pixel")
    threads = threads_knob(cfg, default=BLOCK if kernel == "splitk" else threads_default)
    for out in outputs:
        if s[out] is not acc:
            bind_elements(s[out], threads)
    if chan == anchor.ndim - 1:
        _materialize_columns(s, acc, threads)
    if kernel == "splitk":
        _conv_splitk(s, acc, cfg)
        return
    tile_oc = min(channels, cfg.knob("tile_oc", (1, 2, 4, 8), default=tile_default))
    _, oi = acc.split(acc.leaf[chan], tile_oc)
    pixels = [ax for ax in acc.leaf if ax not in (oi, r)]
    acc.reorder(*pixels, r, oi)
    bind_elements(acc, threads, pixels)
    acc.unroll(oi)


def _materialize_columns(s: Schedule, acc: Stage, threads: int) -> None:
    """Compute at the kernel's root (a kernel before `acc`'s) the inlined stages `acc` reads at
    [..., its channel]: conv's weights transposed to [group, ic, kh, kw, o], which neighbouring
    threads (neighbouring channels) then read at neighbouring words, not OIHW's rows apart. A
    stage of weights only: the graph compiler computes it once, at compile time."""
    col = acc.axes[-1].var
    for e in te.walk(acc.body):
        if isinstance(e, TensorRead) and e.indices[-1] is col and e.tensor.op in s.stage_map:
            st = s[e.tensor]
            if st.attach == "inline":
                st.attach = "root"
                bind_elements(st, threads)


def _conv_splitk(s: Schedule, acc: Stage, cfg: Config) -> None:
    """A block per `block_cols` output channels of one pixel (of one group), the reduction over
    input channels and taps split over `split_k` threads per channel; neighbouring threads read
    neighbouring output channels of the weights."""
    *pixels, col = acc.axes
    (r,) = acc.reduce_axes
    cols, parts = split_knobs(cfg, col.extent, math.prod(ax.extent for ax in pixels), r.extent, 1, acc.op.dtype)
    acc.bind(reduce_in_block(s, acc, col, cols, parts, outer=pixels), "blockIdx.x")
