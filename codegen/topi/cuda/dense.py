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

Conv2d: each thread computes `tile_oc` output channels of one output pixel, so every input
value it loads serves `tile_oc` multiply-adds; bias and activation follow in a second kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

from taso_py.codegen import te
from taso_py.codegen.schedule.schedule import Schedule, Stage
from taso_py.codegen.target import CUDA
from taso_py.codegen.te.tensor import Tensor, TensorRead
from taso_py.codegen.topi.cuda.generic import bind_elements, elementwise_consumer, schedule_stages, threads_knob
from taso_py.codegen.topi.injective import fuse_all
from taso_py.codegen.topi.registry import register_schedule
from taso_py.codegen.tune.space import Config


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
    """Knobs: block_m, block_n, thread_m, thread_n, tile_k (and threads for matrix-vector products)."""
    attrs = anchor.op.attrs
    if not (attrs["has_m"] and attrs["has_n"]):
        schedule_stages(s, anchor, outputs, cfg)  # a matrix-vector product: one thread per output element
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


@register_schedule("conv2d", target=CUDA)
def schedule_conv2d(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Knobs: tile_oc (output channels per thread), threads (per block).

    The accumulator's channel axis is axis 1 of an NCHW accumulator, the last of a
    channels-last one. Each thread accumulates its channels in place (its own elements of
    the accumulator, `__restrict__`, so nvcc keeps them in registers across the reduction);
    no per-thread stage is attached inside the fused pixel loop, whose `//` and `%` bound
    inference cannot see through. The epilogue (bias, activation, the NCHW output of a
    channels-last accumulator) is a second kernel, one thread per element."""
    threads = threads_knob(cfg)
    chan = 1 if anchor.op.attrs.get("layout", "NCHW") == "NCHW" else anchor.ndim - 1
    channels = anchor.shape[chan]
    tile_oc = min(channels, cfg.knob("tile_oc", (1, 2, 4, 8), default=4 if channels % 4 == 0 else 1))
    acc = s[anchor]
    for out in outputs:
        if s[out] is not acc:
            bind_elements(s[out], threads)
    (r,) = acc.reduce_axes
    _, oi = acc.split(acc.leaf[chan], tile_oc)
    pixels = [ax for ax in acc.leaf if ax not in (oi, r)]
    acc.reorder(*pixels, r, oi)
    bind_elements(acc, threads, pixels)
    acc.unroll(oi)
