"""2-D convolution: NCHW (the algebra's `conv2d`) and the blocked NCHW[x]c layout, with CPU templates.

`conv2d` (NCHW data, OIHW weights, optional bias, stride, pads, dilation, groups, fused
activation) is one reduction over a single fused axis r = (kh, kw, ic), input channels
innermost (or the kernel row, where it is longer than the channels: a stem conv), so the
inner part of r is linear in memory and can be the k of the gemm micro-kernel (`GemmIntrin`).

- 8 or more output channels per group (groups = 1 included): the accumulator is pixel-major,
  acc[n, y, x, group, o], reading weights transposed to [group, ic, kh, kw, o] (a weight-only
  stage: computed once per call, or hoisted by the graph compiler): a tile is the micro-kernel
  with rows = `tile_w` pixels of an output row (broadcast from the input) and columns =
  `tile_oc` output channels of one group (contiguous vectors), as in the blocked layout, and
  the NCHW output is written by an element-wise stage (bias, activation) taking each tile
  from registers.
- depthwise and narrower groups: an NCHW accumulator with vector loops over the output row
  (register-blocked over `tile_oc` channels), each channel reading its own input channels.

The zero padding is a stage of its own computed once at the kernel's root (a guarded read in
the inner loop would keep it from vector code and the micro-kernel).

The blocked layout, for the graph compiler, which inserts layout transforms between
operators and pre-packs weights once at compile time:

- `pack_data(x, cb)`: NCHW [N, C, H, W] -> [N, C/cb, H, W, cb] (C padded with zeros to a multiple of cb)
- `unpack_data(y, channels)`: [N, C/cb, H, W, cb] -> NCHW [N, channels, H, W]
- `pack_weight(w, icb, ocb, groups=1)`: OIHW [O, I, KH, KW] -> [O/ocb, I/icb, KH, KW, icb, ocb]
  (zero-padded); a depthwise kernel (groups = O, I = 1) -> [O/ocb, KH, KW, ocb]
- `conv2d_nchwc(data, weight, bias, attrs, out_channels)`: packed data and weights, optional
  bias [O], `Conv2dAttrs` -> packed output [N, O/ocb, OH, OW, ocb], tag "conv2d_nchwc"; with
  groups where `nchwc_supports(attrs, w.shape, block)`: each group whole blocks, or depthwise
  (channels in the vector lanes, tiles of `tile_w` pixels x one block), or narrower groups that
  tile a block (`small_groups`: run as whole-block groups with `densify`d weights). The
  accumulator sums over four axes (input block, kernel row, kernel column, channel in the
  block), and its template makes each tile of `tile_w` pixels x `tile_ob` channel blocks one
  register tile (`TileIntrin`) over the whole reduction, sized by `topi.tiling.tile_shape`.
  Data in NCHW with fewer channels than a block (an image) is read as blocks of one channel.

The packing computes are tagged "injective": a pack of constant weights folds at compile time,
a data pack is a group of its own (or inlined into its consumer as index arithmetic).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso_py.codegen import te
from taso_py.codegen.lower.intrin import GemmIntrin, TileIntrin
from taso_py.codegen.schedule.schedule import Schedule, Stage
from taso_py.codegen.te.expr import Expr
from taso_py.codegen.te.tensor import Tensor, TensorRead
from taso_py.codegen.topi.elementwise import activation
from taso_py.codegen.topi.injective import expanded_body
from taso_py.codegen.topi.layout import padded_position
from taso_py.codegen.topi.linalg import (
    divisor,
    live_readers,
    materialize_inputs,
    reads_identity,
    schedule_flat,
    vectorize,
)
from taso_py.codegen.topi.registry import register_compute, register_schedule
from taso_py.codegen.topi.tiling import tile_shape
from taso_py.codegen.tune.space import Config
from taso_py.ops import conv as conv_ops
from taso_py.ops.conv import Conv2dAttrs
from taso_py.types import TensorType

PAD_NAME = "conv_pad"
WT_NAME = "conv_weight_t"
PIXEL_MAJOR_MIN_CHANNELS = 8  # output channels per group: the micro-kernel's columns, at least a vector


def out_size(h: int, w: int, kh: int, kw: int, attrs: Conv2dAttrs) -> tuple[int, int]:
    """Output height and width of a (kh, kw) window over (h, w) with the attrs' pads, strides, dilations."""
    t, left, b, right = attrs.pad
    return ((h + t + b - (kh - 1) * attrs.dilation[0] - 1) // attrs.stride[0] + 1,
            (w + left + right - (kw - 1) * attrs.dilation[1] - 1) // attrs.stride[1] + 1)


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


def _finish(v: Expr, bias: Tensor | None, channel: Expr, act: str) -> Expr:
    return activation(v if bias is None else v + bias[(channel,)], act)


def _epilogue(acc: Tensor, bias: Tensor | None, act: str, channel_axis: int,
              block: int | None = None, shape: Sequence[int] | None = None) -> Tensor:
    """act(acc + bias), element-wise, over `shape` (a leading part of acc's, default all of it);
    `acc` itself when there is nothing to do."""
    shape = tuple(shape or acc.shape)
    if bias is None and act == "none" and shape == acc.shape:
        return acc

    def body(*idx: Expr) -> Expr:
        ch = idx[channel_axis]
        if block is not None and bias is not None:  # (block, lane); padded lanes read the last bias
            ch = te.min_(ch * block + idx[-1], bias.shape[0] - 1)
        return _finish(acc[idx], bias, ch, act)

    return te.compute(shape, body, name="conv_out", tag="injective")


@register_compute(conv_ops.conv2d)
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

    def taps() -> tuple[Expr, Expr, Expr]:
        if row_inner:
            return r.var // kw // kh, r.var // kw % kh, r.var % kw
        pos = r.var // cg
        return r.var % cg, pos // kw, pos % kw

    attrs_out = {"inner": kw if row_inner else cg, "groups": attrs.groups, "per_group": opg}
    if opg >= PIXEL_MAJOR_MIN_CHANNELS:
        # pixel-major: acc[n, y, x, group, o] with the weights transposed to [group, ic, kh, kw, o], so
        # a tile is the micro-kernel's rows = pixels (broadcast from the input row) x columns = output
        # channels of one group (contiguous in the transposed weights); the NCHW output is an
        # element-wise stage after it
        g = attrs.groups
        wt = te.compute((g, cg, kh, kw, opg), lambda gi, ic, a, c, oc: w[gi * opg + oc, ic, a, c], name=WT_NAME,
                        tag="injective")

        def body(b: Expr, y: Expr, z: Expr, gi: Expr, oc: Expr) -> Expr:
            ic, ky, kx = taps()
            return te.sum(p[b, gi * cg + ic, y * sh + ky * dh, z * sw + kx * dw] * wt[gi, ic, ky, kx, oc], axis=r)

        acc = te.compute((n, oh, ow, g, opg), body, name="conv2d", tag="conv2d",
                         attrs={**attrs_out, "layout": "NHWC"})
        return (te.compute((n, o, oh, ow), lambda b, oc, y, z: _finish(acc[b, y, z, oc // opg, oc % opg], bias, oc,
                                                                      attrs.act), name="conv_out", tag="injective"),)

    def grouped(b: Expr, oc: Expr, y: Expr, z: Expr) -> Expr:
        ic, ky, kx = taps()
        ch = (oc // opg) * cg + ic
        return te.sum(w[oc, ic, ky, kx] * p[b, ch, y * sh + ky * dh, z * sw + kx * dw], axis=r)

    acc = te.compute((n, o, oh, ow), grouped, name="conv2d", tag="conv2d", attrs={**attrs_out, "layout": "NCHW"})
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


def unpack_data(y: Tensor, channels: int, segments: Sequence[int] | None = None) -> Tensor:
    """Blocked -> NCHW; with `segments`, the real channels of each run of blocks (see graph.layout)."""
    n, _, h, w, cb = y.shape

    def element(b: Expr, c: Expr, i: Expr, j: Expr) -> Expr:
        p = c if segments is None or len(segments) == 1 else padded_position(c, segments, cb)
        return y[b, p // cb, i, j, p % cb]

    return te.compute((n, channels, h, w), element, name="data_nchw", tag="injective")


def pack_weight(w: Tensor, icb: int, ocb: int, groups: int = 1) -> Tensor:
    """OIHW weights in the blocked layout; a depthwise kernel (groups = O, one input channel each)
    becomes [O/ocb, KH, KW, ocb] (`icb` unused), its channels in the vector lanes."""
    o, i, kh, kw = w.shape
    ob, ib = -(-o // ocb), -(-i // icb)
    if groups > 1 and groups == o and i == 1:
        def dw_body(a: Expr, y: Expr, z: Expr, oi: Expr) -> Expr:
            oc = a * ocb + oi
            if o % ocb == 0:
                return w[oc, 0, y, z]
            return te.if_then_else(oc < o, w[te.min_(oc, o - 1), 0, y, z], te.const(0, w.dtype))

        return te.compute((ob, kh, kw, ocb), dw_body, name="weight_nchwc", tag="injective")

    def body(a: Expr, b: Expr, y: Expr, z: Expr, ii: Expr, oi: Expr) -> Expr:
        oc, ic = a * ocb + oi, b * icb + ii
        if o % ocb == 0 and i % icb == 0:
            return w[oc, ic, y, z]
        ok = te.all_of(oc < o, ic < i)
        return te.if_then_else(ok, w[te.min_(oc, o - 1), te.min_(ic, i - 1), y, z], te.const(0, w.dtype))

    return te.compute((ob, ib, kh, kw, icb, ocb), body, name="weight_nchwc", tag="injective")


def nchwc_supports(attrs: Conv2dAttrs, weight_shape: Sequence[int], block: int) -> bool:
    """Whether `conv2d_nchwc` computes this convolution with channel blocks of `block`: every
    group must hold whole blocks of input and of output channels, or there is one group, or it
    is depthwise (any channels: padded with zeros to whole blocks)."""
    o, cg = weight_shape[0], weight_shape[1]
    if attrs.groups == o and cg == 1:  # depthwise: channels in the lanes (the last block padded)
        return True
    return attrs.groups == 1 or (cg % block == 0 and (o // attrs.groups) % block == 0) or small_groups(
        attrs.groups, weight_shape, block)


def small_groups(groups: int, weight_shape: Sequence[int], block: int) -> bool:
    """Groups narrower than a block that tile blocks exactly (ResNeXt's 4 and 8 channels): computed as
    whole-block groups with block-diagonal weights (`densify`), block / group-width times the work."""
    o, cg = weight_shape[0], weight_shape[1]
    per = block // cg if cg and block % cg == 0 else 0  # groups per block of input channels
    return groups > 1 and cg > 1 and per > 1 and groups % per == 0 and (o // groups * per) % block == 0


def densify(w: np.ndarray, groups: int, block: int) -> np.ndarray:
    """The weights of `small_groups` as whole-block groups: [O, block, KH, KW], each output channel's
    own input channels at their place in its block, zeros elsewhere."""
    o, cg = w.shape[:2]
    per, opg = block // cg, o // groups
    out = np.zeros((o, block, *w.shape[2:]), w.dtype)
    for g in range(groups):
        at = (g % per) * cg
        out[g * opg:(g + 1) * opg, at:at + cg] = w[g * opg:(g + 1) * opg]
    return out


def conv2d_nchwc(data: Tensor, weight: Tensor, bias: Tensor | None, attrs: Conv2dAttrs,
                 out_channels: int) -> Tensor:
    """A convolution on packed data and weights; the packed output (see the module doc). With
    groups, each group is whole channel blocks (`nchwc_supports`) and the weight is packed from
    [O, C/groups, KH, KW] like any other.

    The accumulator sums over four axes (input block, kernel row, kernel column, channel in the
    block), each linear in memory, so the register tile (`TileIntrin`) holds the whole
    reduction. Its width is padded to whole tiles of the chosen `tile_shape` (the input gets
    zero columns to match); the epilogue reads the real width."""
    if weight.ndim == 4:
        return _depthwise_nchwc(data, weight, bias, attrs)
    n, _, h, w, icb = data.shape
    oblocks, cblocks, kh, kw, _, ocb = weight.shape  # cblocks: input blocks per group
    obpg = oblocks // attrs.groups  # output blocks per group
    oh, ow = out_size(h, w, kh, kw, attrs)
    sh, sw = attrs.stride
    dh, dw = attrs.dilation
    rows, nv = tile_shape(ow, obpg, ocb, lambda r, v: n * (oblocks // v) * oh, steps=cblocks * kh * kw * icb)
    owp = -(-ow // rows) * rows
    t, left, b, right = attrs.pad
    extra = max(0, (owp - 1) * sw + (kw - 1) * dw + 1 - (w + left + right))
    p = pad_spatial(data, (t, left, b, right + extra))
    rc, ry, rx, ri = (te.reduce_axis(e, name) for e, name in ((cblocks, "rc"), (kh, "ry"), (kw, "rx"), (icb, "ri")))

    def body(bt: Expr, ob: Expr, y: Expr, z: Expr, oi: Expr) -> Expr:
        blk = rc.var if attrs.groups == 1 else (ob // obpg) * cblocks + rc.var
        return te.sum(p[bt, blk, y * sh + ry.var * dh, z * sw + rx.var * dw, ri.var]
                      * weight[ob, rc.var, ry.var, rx.var, ri.var, oi], axis=[rc, ry, rx, ri])

    acc = te.compute((n, oblocks, oh, owp, ocb), body, name="conv2d_nchwc", tag="conv2d_nchwc",
                     attrs={"icb": icb, "layout": "NCHWc", "tile": (rows, nv), "groups": attrs.groups})
    return _epilogue(acc, bias, attrs.act, 1, block=ocb, shape=(n, oblocks, oh, ow, ocb))


def _depthwise_nchwc(data: Tensor, weight: Tensor, bias: Tensor | None, attrs: Conv2dAttrs) -> Tensor:
    """Depthwise on packed data and a [O/cb, KH, KW, cb] kernel: each lane its own channel."""
    n, blocks, h, w, cb = data.shape
    _, kh, kw, _ = weight.shape
    oh, ow = out_size(h, w, kh, kw, attrs)
    sh, sw = attrs.stride
    dh, dw = attrs.dilation
    p = pad_spatial(data, attrs.pad)
    r = te.reduce_axis(kh * kw, "r")

    def body(bt: Expr, ob: Expr, y: Expr, z: Expr, oi: Expr) -> Expr:
        ky, kx = r.var // kw, r.var % kw
        return te.sum(p[bt, ob, y * sh + ky * dh, z * sw + kx * dw, oi] * weight[ob, ky, kx, oi], axis=r)

    acc = te.compute((n, blocks, oh, ow, cb), body, name="conv2d_nchwc", tag="conv2d_nchwc",
                     attrs={"layout": "NCHWc-depthwise"})
    return _epilogue(acc, bias, attrs.act, 1, block=cb)


# ---- schedules ----------------------------------------------------------------------------------

def _pad_stage(s: Schedule, acc_st: Stage) -> Stage | None:
    """The padding stage read by the convolution, computed once at the kernel's root."""
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
    """Loops (batch x output row, channel block, ...), the first in parallel: rows are numerous,
    and a row's tiles share the input rows they read."""
    main.reorder(y, ob)
    main.parallel(main.fuse(b, y))


def _find_main(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor]) -> tuple[Stage, list[Stage]]:
    consumers = [s[t] for t in outputs if t.op is not anchor.op]
    main = next((st for st in consumers if reads_identity(s, st, anchor)), None)
    if main is None or anchor in outputs or len(live_readers(s, anchor)) != 1:
        main = s[anchor]
    return main, consumers


def _reads_by_pixel(s: Schedule, st: Stage, acc: Tensor) -> bool:
    """Whether the NCHW-shaped `st` reads the pixel-major `acc` (through inlined stages) only at
    acc[n, y, x, <group of o>, <o within it>] of its own (n, o, y, x): element by element."""
    if len(st.axes) != 4:
        return False
    b, o, y, x = (a.var for a in st.axes)
    reads = [e for e in te.walk(expanded_body(s, st)) if isinstance(e, TensorRead) and e.tensor.op is acc.op]
    return bool(reads) and all(
        len(r.indices) == 5 and all(i is v for i, v in zip(r.indices[:3], (b, y, x)))
        and all(te.free_vars(i) <= {o} for i in r.indices[3:]) for r in reads)


def _pick(cfg: Config, name: str, extent: int, options: set[int], prefer: Sequence[int]) -> int:
    """A tile-size knob whose default is the first preferred size dividing `extent`."""
    opts = tuple(sorted(options))
    default = next((c for c in prefer if c in opts and extent % c == 0), opts[0])
    return min(cfg.knob(name, opts, default=default), extent)


@register_schedule("conv2d")
def schedule_conv2d(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Pixel-major tiles (`_schedule_pixel_major`) where groups have 8+ output channels; else
    (depthwise and narrow groups) vector loops over the output row (`_schedule_grouped`)."""
    acc_st = s[anchor]
    pad = _pad_stage(s, acc_st)
    if pad is not None:
        schedule_flat(s, pad)
    materialize_inputs(s, acc_st)
    if anchor.op.attrs["layout"] == "NHWC":
        _schedule_pixel_major(s, anchor, outputs, cfg)
    else:
        _schedule_grouped(s, anchor, outputs, cfg)


def _schedule_pixel_major(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Tiles of tile_w pixels of an output row x tile_oc output channels of one group, accumulated in
    registers and written to the NCHW output through the epilogue. Knobs: kernel (gemm | vector),
    tile_w (the micro-kernel's rows), tile_oc (its columns), ic_block (its k)."""
    acc_st = s[anchor]
    _, _, ow, _, opg = anchor.shape
    inner = anchor.op.attrs["inner"]
    kernel = cfg.knob("kernel", ("gemm", "vector"), default="gemm")
    w_div, oc_div = divisor(ow, 16), divisor(opg, 64)
    tile_w = _pick(cfg, "tile_w", ow, {4, 6, 7, 8, 12, 14, 16, w_div}, (14, 12, 8, 16, 7, 6, w_div))
    tile_oc = _pick(cfg, "tile_oc", opg, {8, 16, 32, 64, oc_div}, (16, 32, 64, 8, oc_div))
    ic_block = cfg.knob("ic_block", (8, 16, 32, 64, 1 << 30), default=1 << 30)
    if ow % tile_w or opg % tile_oc:
        kernel = "vector"  # the micro-kernel computes whole tiles only; the vector loops guard the tails
    k_in = min(ic_block, inner) if inner % min(ic_block, inner) == 0 else inner
    consumers = [s[t] for t in outputs]
    main = next((st for st in consumers if _reads_by_pixel(s, st, anchor)), None)
    if main is None or len(live_readers(s, anchor)) != 1:  # the NCHW result is reshaped: a buffer of its own
        main = None
        b, y, x, g, o = acc_st.leaf[:5]
        xo, xi = acc_st.split(x, tile_w)
        ob, oi = acc_st.split(o, tile_oc)
        acc_st.reorder(b, y, xo, g, ob, xi, oi)
        acc_st.parallel(acc_st.fuse(b, y))
        ax, ao, tiles = xi, oi, [xo, g, ob]
    else:
        xo = tile_grouped_output(main, opg, tile_oc, tile_w)
        acc_st.compute_at(main, xo)
        _, _, ax, _, ao = acc_st.leaf[:5]
        tiles = []
    if kernel == "gemm":
        outer, ri = _split_reduce(acc_st, inner, k_in)
        acc_st.reorder(*tiles, *outer, ax, ao, ri)
        acc_st.tensorize(ax, GemmIntrin("gemm", tile_w, tile_oc, k_in))
    else:
        (r,) = [a for a in acc_st.leaf if a.reduce]
        acc_st.reorder(*tiles, r, ax, ao)
        acc_st.unroll(ax)
        vectorize(acc_st, ao, tile_oc)
    for st in consumers:
        if st is not main:
            schedule_flat(s, st)


def tile_grouped_output(main: Stage, opg: int, tile_oc: int, tile_w: int) -> object:
    """Tile an NCHW output by `tile_oc` channels within each group of `opg` (a tile never straddles groups)
    and `tile_w` pixels of a row, rows parallel; returns the row-tile axis the accumulator attaches at."""
    b, o, y, x = main.leaf[:4]
    og, orest = main.split(o, opg)
    ob, oi = main.split(orest, tile_oc)
    xo, xi = main.split(x, tile_w)
    main.reorder(b, y, og, ob, xo, oi, xi)
    main.parallel(b if b.extent > 1 else y)
    return xo


def _schedule_grouped(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Grouped and depthwise convolutions (NCHW accumulator): tiles of tile_oc channels x tile_w
    pixels, rows unrolled, pixels vectorized (each output channel reads its own input channels)."""
    acc_st = s[anchor]
    oc, ow = anchor.shape[1], anchor.shape[3]
    oc_opts = {1, 2, 4, 8, 16} | ({oc} if oc < 16 else set())
    w_div = divisor(ow, 32)
    # a power-of-two row makes a vector type; else a divisor of the row (no guarded tail), gcc vectorizes
    tile_oc = _pick(cfg, "tile_oc", oc, oc_opts, (4, 8, 2, 1))
    tile_w = _pick(cfg, "tile_w", ow, {4, 8, 16, 32, w_div}, (16, 32, 8, w_div))
    main, consumers = _find_main(s, anchor, outputs)
    if main is acc_st:
        acc_st = s[s.cache_write(anchor, "local")]
    b, o, y, x = main.leaf[:4]
    ob, oi = main.split(o, tile_oc)
    xo, xi = main.split(x, tile_w)
    main.reorder(b, ob, y, xo, oi, xi)
    _parallel_rows(main, b, ob, y)
    vectorize(main, xi)
    acc_st.compute_at(main, xo)
    _, ao, _, ax = acc_st.leaf[:4]
    (r,) = [a for a in acc_st.leaf if a.reduce]
    acc_st.reorder(r, ao, ax)
    acc_st.unroll(ao)
    vectorize(acc_st, ax, tile_w)
    for st in consumers:
        if st is not main:
            schedule_flat(s, st)


@register_schedule("conv2d_nchwc")
def schedule_conv2d_nchwc(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Register tiles of tile_w pixels x tile_ob output-channel blocks, each the `TileIntrin`
    micro-kernel over the whole reduction, written out through the epilogue (bias, activation,
    residual) from the tile; parallel over (n, channel-block group, row). Knobs: tile_w, tile_ob
    (defaults: `tile_shape`)."""
    acc_st = s[anchor]
    pad = _pad_stage(s, acc_st)
    if pad is not None:
        schedule_flat(s, pad)
    materialize_inputs(s, acc_st)
    if anchor.op.attrs["layout"] == "NCHWc-depthwise":
        _schedule_depthwise_nchwc(s, anchor, outputs, cfg)
        return
    _, oblocks, _, owp, ocb = anchor.shape
    obpg = oblocks // anchor.op.attrs["groups"]
    rows, nv = anchor.op.attrs["tile"]
    main, consumers = _find_main(s, anchor, outputs)
    ow = main.tensor.shape[3]  # the real width: the epilogue's (the accumulator's is padded to whole tiles)
    tile_w = cfg.knob("tile_w", tuple(d for d in range(1, min(ow, 32) + 1) if owp % d == 0), default=rows)
    tile_ob = cfg.knob("tile_ob", tuple(d for d in range(1, min(obpg, 8) + 1) if obpg % d == 0), default=nv)
    reduce = tuple(iv.extent for iv in acc_st.reduce_axes)
    intrin = TileIntrin("tile", tile_w, tile_ob, ocb, reduce)
    if main is acc_st:  # the convolution is the group's output: tiles go straight to it
        b, ob, y, x, oi, *red = acc_st.leaf
        obo, obi = acc_st.split(ob, tile_ob)
        xo, xi = acc_st.split(x, tile_w)
        acc_st.reorder(b, obo, y, xo, xi, obi, oi, *red)
        acc_st.parallel(acc_st.fuse(acc_st.fuse(b, obo), y))
        acc_st.tensorize(xi, intrin)
    else:
        b, ob, y, x, oi = main.leaf[:5]
        obo, obi = main.split(ob, tile_ob)
        xo, xi = main.split(x, tile_w)
        main.reorder(b, obo, y, xo, obi, xi, oi)
        main.parallel(main.fuse(main.fuse(b, obo), y))
        vectorize(main, oi)
        acc_st.compute_at(main, xo)
        b2, ob2, y2, x2, oi2, *red = acc_st.leaf
        acc_st.reorder(b2, y2, x2, ob2, oi2, *red)
        acc_st.tensorize(x2, intrin)
    for st in consumers:
        if st is not main:
            schedule_flat(s, st)


def _schedule_depthwise_nchwc(s: Schedule, anchor: Tensor, outputs: Sequence[Tensor], cfg: Config) -> None:
    """Tiles of tile_w pixels x one channel block: per kernel tap, tile_w vector multiply-adds of
    input pixels (a vector of channels each) by the tap's weights. Knob: tile_w."""
    acc_st = s[anchor]
    ow, cb = anchor.shape[3], anchor.shape[4]
    w_div = divisor(ow, 16)
    tile_w = _pick(cfg, "tile_w", ow, {4, 7, 8, 14, 16, w_div}, (8, 14, 7, 16, w_div))
    main, consumers = _find_main(s, anchor, outputs)
    if main is acc_st:
        acc_st = s[s.cache_write(anchor, "local")]
    b, ob, y, x, oi = main.leaf[:5]
    xo, xi = main.split(x, tile_w)
    main.reorder(b, ob, y, xo, xi, oi)
    _parallel_rows(main, b, ob, y)
    whole = ow % tile_w == 0
    if whole:  # a tail's guarded loops are left to gcc's vectorizer
        vectorize(main, oi)
    acc_st.compute_at(main, xo)
    _, _, _, ax, ao = acc_st.leaf[:5]
    (r,) = [a for a in acc_st.leaf if a.reduce]
    acc_st.reorder(r, ax, ao)
    acc_st.unroll(ax)
    if whole:
        vectorize(acc_st, ao, cb)
    for st in consumers:
        if st is not main:
            schedule_flat(s, st)
