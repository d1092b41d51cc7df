"""2-D convolution: NCHW (the algebra's `conv2d`) and the blocked NCHW[x]c layout, with CPU templates.

`conv2d` (NCHW data, OIHW weights, optional bias, stride, pads, dilation, groups, fused
activation) is one reduction over a single fused axis r = (kh, kw, ic), input channels
innermost: split by the channel count, its inner part is linear in memory, so the tile
kernel can be the gemm micro-kernel (`GemmIntrin`: rows = output channels, columns = output
pixels of a row, k = input channels) or vector loops (register-blocked, output width
vectorized; the one used for groups > 1, depthwise included). The zero padding is a stage of
its own computed once at the kernel's root; bias and activation are an element-wise
epilogue (tag "injective") that the template applies to each tile as it leaves the
accumulator, so the group's anchor stays the reduction tagged "conv2d".

The blocked layout, for the graph compiler, which inserts layout transforms between
operators and pre-packs weights once at compile time:

- `pack_data(x, cb)`: NCHW [N, C, H, W] -> [N, C/cb, H, W, cb] (C padded with zeros to a multiple of cb)
- `unpack_data(y, channels)`: [N, C/cb, H, W, cb] -> NCHW [N, channels, H, W]
- `pack_weight(w, icb, ocb)`: OIHW [O, I, KH, KW] -> [O/ocb, I/icb, KH, KW, icb, ocb] (zero-padded)
- `conv2d_nchwc(data, weight, bias, attrs, out_channels)`: packed data and weights (groups = 1),
  optional bias [O], `Conv2dAttrs` -> packed output [N, O/ocb, OH, OW, ocb], tag "conv2d_nchwc".
  Its template tiles the output width by `tile_w` pixels x one channel block: each tile is the
  gemm micro-kernel with rows = pixels, columns = the ocb output channels (contiguous in the
  weights and the output), k = the icb input channels of one block.

The packing computes are tagged "injective": a pack of constant weights folds at compile time,
a data pack is a group of its own (or inlined into its consumer as index arithmetic).
"""

from __future__ import annotations

from collections.abc import Sequence

from codegen import te
from codegen.lower.intrin import GemmIntrin
from codegen.schedule.schedule import Schedule, Stage
from codegen.te.expr import Expr
from codegen.te.tensor import Tensor
from codegen.topi.linalg import live_readers, materialize_inputs, reads_identity, schedule_flat, vectorize
from codegen.topi.registry import register_compute, register_schedule
from codegen.tune.space import Config
from taso_py.ops.conv import Conv2dAttrs
from taso_py.types import TensorType

PAD_NAME = "conv_pad"


def activation(x: Expr, act: str) -> Expr:
    if act == "relu":
        return te.max_(x, te.const(0, x.dtype))
    if act == "sigmoid":
        return te.sigmoid(x)
    if act == "tanh":
        return te.tanh(x)
    return x


def pad_spatial(x: Tensor, pad: Sequence[int], h_axis: int = 2) -> Tensor:
    """x zero-padded on the two spatial axes starting at `h_axis` (pads: top, left, bottom, right)."""
    top, left, bottom, right = pad
    if not any(pad):
        return x
    shape = list(x.shape)
    h, w = shape[h_axis], shape[h_axis + 1]
    shape[h_axis] += top + bottom
    shape[h_axis + 1] += left + right

    def body(*idx: Expr) -> Expr:
        y, z = idx[h_axis] - top, idx[h_axis + 1] - left
        inside = te.all_of(y >= 0, y < h, z >= 0, z < w)
        src = list(idx)
        src[h_axis] = te.min_(te.max_(y, 0), h - 1)
        src[h_axis + 1] = te.min_(te.max_(z, 0), w - 1)
        return te.if_then_else(inside, x[tuple(src)], te.const(0, x.dtype))

    return te.compute(shape, body, name=PAD_NAME, tag="injective")


def _epilogue(acc: Tensor, bias: Tensor | None, act: str, channel_axis: int,
              block: int | None = None) -> Tensor:
    """act(acc + bias), element-wise; `acc` itself when there is neither."""
    if bias is None and act == "none":
        return acc

    def body(*idx: Expr) -> Expr:
        v = acc[idx]
        if bias is not None:
            ch = idx[channel_axis] if block is None else te.min_(idx[channel_axis] * block + idx[-1], bias.shape[0] - 1)
            v = v + bias[(ch,)]
        return activation(v, act)

    return te.compute(acc.shape, body, name="conv_out", tag="injective")


@register_compute("conv2d")
def conv2d(inputs: Sequence[Tensor], attrs: Conv2dAttrs, out_types: Sequence[TensorType]) -> tuple[Tensor, ...]:
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    n, o, oh, ow = out_types[0].known_shape
    _, cg, kh, kw = w.shape
    opg = o // attrs.groups
    sh, sw = attrs.stride
    dh, dw = attrs.dilation
    p = pad_spatial(x, attrs.pad)
    r = te.reduce_axis(kh * kw * cg, "r")

    # the innermost part of r is what the micro-kernel's k runs over, linear in memory: the input
    # channels, or the kernel row where it is longer (few channels, as in a stem conv; dilation 1)
    row_inner = kw > cg and dw == 1

    def body(b: Expr, oc: Expr, y: Expr, z: Expr) -> Expr:
        if row_inner:
            ic, ky, kx = r.var // kw // kh, r.var // kw % kh, r.var % kw
        else:
            ic, pos = r.var % cg, r.var // cg
            ky, kx = pos // kw, pos % kw
        ch = ic if attrs.groups == 1 else (oc // opg) * cg + ic
        # weights first: the micro-kernel's rows (A) are output channels, its columns (B) pixels
        return te.sum(w[oc, ic, ky, kx] * p[b, ch, y * sh + ky * dh, z * sw + kx * dw], axis=r)

    acc = te.compute((n, o, oh, ow), body, name="conv2d", tag="conv2d",
                     attrs={"inner": kw if row_inner else cg, "groups": attrs.groups, "layout": "NCHW"})
    return (_epilogue(acc, bias, attrs.act, 1),)


# ---- the blocked layout -----------------------------------------------------------------------

def pack_data(x: Tensor, cb: int) -> Tensor:
    n, c, h, w = x.shape
    blocks = -(-c // cb)

    def body(b: Expr, blk: Expr, y: Expr, z: Expr, ci: Expr) -> Expr:
        ch = blk * cb + ci
        if c % cb == 0:
            return x[b, ch, y, z]
        return te.if_then_else(ch < c, x[b, te.min_(ch, c - 1), y, z], te.const(0, x.dtype))

    return te.compute((n, blocks, h, w, cb), body, name="data_nchwc", tag="injective")


def unpack_data(y: Tensor, channels: int) -> Tensor:
    n, _, h, w, cb = y.shape
    return te.compute((n, channels, h, w), lambda b, c, i, j: y[b, c // cb, i, j, c % cb],
                      name="data_nchw", tag="injective")


def pack_weight(w: Tensor, icb: int, ocb: int) -> Tensor:
    o, i, kh, kw = w.shape
    ob, ib = -(-o // ocb), -(-i // icb)

    def body(a: Expr, b: Expr, y: Expr, z: Expr, ii: Expr, oi: Expr) -> Expr:
        oc, ic = a * ocb + oi, b * icb + ii
        if o % ocb == 0 and i % icb == 0:
            return w[oc, ic, y, z]
        ok = te.all_of(oc < o, ic < i)
        return te.if_then_else(ok, w[te.min_(oc, o - 1), te.min_(ic, i - 1), y, z], te.const(0, w.dtype))

    return te.compute((ob, ib, kh, kw, icb, ocb), body, name="weight_nchwc", tag="injective")


def conv2d_nchwc(data: Tensor, weight: Tensor, bias: Tensor | None, attrs: Conv2dAttrs,
                 out_channels: int) -> Tensor:
    """A convolution (groups = 1) on packed data and weights; the packed output (see the module doc)."""
    if attrs.groups != 1:
        raise ValueError("conv2d_nchwc computes groups = 1 only (grouped convolutions stay NCHW)")
    n, cblocks, h, w, icb = data.shape
    oblocks, _, kh, kw, _, ocb = weight.shape
    t, left, b, right = attrs.pad
    sh, sw = attrs.stride
    dh, dw = attrs.dilation
    oh = (h + t + b - (kh - 1) * dh - 1) // sh + 1
    ow = (w + left + right - (kw - 1) * dw - 1) // sw + 1
    p = pad_spatial(data, attrs.pad)
    r = te.reduce_axis(cblocks * kh * kw * icb, "r")

    def body(bt: Expr, ob: Expr, y: Expr, z: Expr, oi: Expr) -> Expr:
        ii, pos = r.var % icb, r.var // icb
        kx, pos2 = pos % kw, pos // kw
        ky, cb = pos2 % kh, pos2 // kh
        return te.sum(p[bt, cb, y * sh + ky * dh, z * sw + kx * dw, ii] * weight[ob, cb, ky, kx, ii, oi], axis=r)

    acc = te.compute((n, oblocks, oh, ow, ocb), body, name="conv2d_nchwc", tag="conv2d_nchwc",
                     attrs={"icb": icb, "layout": "NCHWc"})
    return _epilogue(acc, bias, attrs.act, 1, block=ocb)


# ---- schedules ----------------------------------------------------------------------------------

def _pad_stage(s: Schedule, acc_st: Stage) -> Stage | None:
    """The padding stage read by the convolution, computed once at the kernel's root (not inlined:
    a guarded read in the inner loop would keep it from vector code and the micro-kernel)."""
    for t in acc_st.reads():
        if t.op in s.stage_map and t.name == PAD_NAME:
            st = s[t]
            st.attach = "root"
            return st
    return None


def _split_reduce(st: Stage, channels: int, inner: int) -> tuple[list, object]:
    """The fused reduce axis r = (..., c) split at the channel count, and the channels again by
    `inner`: (the outer loops, the inner one), whose index is linear in memory."""
    (r,) = [ax for ax in st.leaf if ax.reduce]
    ro, rc = st.split(r, channels)
    if inner >= channels:
        return [ro], rc
    rco, rci = st.split(rc, inner)
    return [ro, rco], rci


def _parallel_rows(main: Stage, b: object, ob: object, y: object) -> None:
    """Loops (batch, output row, channel block, ...), the batch or else the rows in parallel: the
    tiles are computed at an inner loop, so the outer ones cannot be fused into one parallel loop
    (see linalg._first_real), and rows are the most numerous."""
    main.reorder(y, ob)
    main.parallel(b if b.extent > 1 else y)  # type: ignore[attr-defined]


def _find_main(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor]) -> tuple[Stage, list[Stage]]:
    consumers = [s[t] for t in outputs if t.op is not anchor.op]
    main = next((st for st in consumers if reads_identity(s, st, anchor)), None)
    if main is None or anchor in outputs or len(live_readers(s, anchor)) != 1:
        main = s[anchor]
    return main, consumers


@register_schedule("conv2d")
def schedule_conv2d(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Tiles of tile_oc output channels x tile_w pixels of one output row; knobs: kernel (gemm |
    vector), tile_oc, tile_w, ic_block (k of the micro-kernel), unroll of the vector kernel."""
    acc_st = s[anchor]
    oc, ow = anchor.shape[1], anchor.shape[3]
    inner, groups = anchor.op.attrs["inner"], anchor.op.attrs["groups"]
    pad = _pad_stage(s, acc_st)
    if pad is not None:
        schedule_flat(s, pad)
    materialize_inputs(s, acc_st)
    oc_opts = tuple(sorted({1, 2, 4, 8, 16} | ({oc} if oc < 16 else set())))
    # the largest divisor of the row up to 32: a tile with no tail to guard (guards keep a loop from vector code)
    divisor = max(d for d in range(1, min(ow, 32) + 1) if ow % d == 0)
    w_opts = tuple(sorted({4, 7, 8, 14, 16, 28, 32, divisor} | ({ow} if ow <= 64 else set())))
    kernel = cfg.knob("kernel", ("gemm", "vector"), default="gemm") if groups == 1 else "vector"
    # gemm defaults measured on the ResNet 3x3 conv: long rows (B's vector loads), 16 channels per tile;
    # the vector kernel wants a power-of-two row (a vector type) and few enough accumulators for registers
    prefer_w = (ow, 32, 28, 16, 14, 8, 7, 4) if kernel == "gemm" else (16, 32, 8, divisor)
    tile_oc = cfg.knob("tile_oc", oc_opts, default=next(c for c in ((16, 8, 4, 2, 1) if kernel == "gemm" else
                                                                    (4, 8, 2, 1)) if c in oc_opts and oc % c == 0))
    tile_w = cfg.knob("tile_w", w_opts, default=next((c for c in prefer_w if c in w_opts and ow % c == 0),
                                                     8 if ow >= 8 else ow))
    ic_block = cfg.knob("ic_block", (8, 16, 32, 64, 1 << 30), default=1 << 30)
    tile_oc, tile_w = min(tile_oc, oc), min(tile_w, ow)
    if groups != 1 or oc % tile_oc or ow % tile_w:
        kernel = "vector"  # the micro-kernel needs whole tiles and one input-channel range per tile
    k_in = min(ic_block, inner) if inner % min(ic_block, inner) == 0 else inner

    main, consumers = _find_main(s, anchor, outputs)
    if main is acc_st and kernel == "vector":
        acc_st = s[s.cache_write(anchor, "local")]
    b, o, y, x = main.leaf[:4]
    ob, oi = main.split(o, tile_oc)
    xo, xi = main.split(x, tile_w)
    main.reorder(b, ob, y, xo, oi, xi)
    if main is acc_st:  # gemm straight into the output
        outer, ri = _split_reduce(main, inner, k_in)
        main.reorder(xo, *outer, oi, xi, ri)
        main.parallel(main.fuse(main.fuse(b, ob), y))
        main.tensorize(oi, GemmIntrin("gemm", tile_oc, tile_w, k_in))
    else:
        _parallel_rows(main, b, ob, y)
        if kernel == "vector":
            vectorize(main, xi)
        acc_st.compute_at(main, xo)
        _, ao, _, ax = acc_st.leaf[:4]
        if kernel == "gemm":
            outer, ri = _split_reduce(acc_st, inner, k_in)
            acc_st.reorder(*outer, ao, ax, ri)
            acc_st.tensorize(ao, GemmIntrin("gemm", tile_oc, tile_w, k_in))
        else:
            (r,) = [a for a in acc_st.leaf if a.reduce]
            acc_st.reorder(r, ao, ax)
            acc_st.unroll(ao)
            vectorize(acc_st, ax, tile_w)
    for st in consumers:
        if st is not main:
            schedule_flat(s, st)


@register_schedule("conv2d_nchwc")
def schedule_conv2d_nchwc(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Tiles of tile_w pixels x one output-channel block; the micro-kernel's k is one input-channel
    block, looped over (input block, kh, kw) outside it. Knob: tile_w; parallel over (n, oc block, row)."""
    acc_st = s[anchor]
    ow, ocb = anchor.shape[3], anchor.shape[4]
    icb = anchor.op.attrs["icb"]
    pad = _pad_stage(s, acc_st)
    if pad is not None:
        schedule_flat(s, pad)
    materialize_inputs(s, acc_st)
    w_opts = tuple(sorted({4, 6, 7, 8, 12, 14, 16, 28} | ({ow} if ow <= 32 else set())))
    tile_w = cfg.knob("tile_w", w_opts, default=next((c for c in (14, 12, 8, 16, 7, 6, 4, ow) if ow % c == 0), ow))
    tile_w = min(tile_w, ow)
    main, consumers = _find_main(s, anchor, outputs)
    b, ob, y, x, oi = main.leaf[:5]
    xo, xi = main.split(x, tile_w)
    main.reorder(b, ob, y, xo, xi, oi)
    whole = ow % tile_w == 0
    if main is acc_st:
        (ro,), ri = _split_reduce(main, icb, icb)
        main.parallel(main.fuse(main.fuse(b, ob), y))
        if whole:
            main.reorder(xo, ro, xi, oi, ri)
            main.tensorize(xi, GemmIntrin("gemm", tile_w, ocb, icb))
        else:
            main.reorder(xo, ro, ri, xi, oi)
            main.unroll(xi)
            vectorize(main, oi)
        return
    _parallel_rows(main, b, ob, y)
    acc_st.compute_at(main, xo)
    _, _, _, ax, ao = acc_st.leaf[:5]
    (ro,), ri = _split_reduce(acc_st, icb, icb)
    acc_st.reorder(ro, ax, ao, ri)
    if whole:
        acc_st.tensorize(ax, GemmIntrin("gemm", tile_w, ocb, icb))
    else:
        acc_st.reorder(ro, ri, ax, ao)  # a width tail: guarded loops, left to gcc's vectorizer
        acc_st.unroll(ax)
    for st in consumers:
        if st is not main:
            schedule_flat(s, st)
