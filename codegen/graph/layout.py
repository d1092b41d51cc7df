"""Data layouts: which tensors the compiled model keeps in blocked NCHW[x]c form, and the transforms.

A convolution on this CPU prefers its activations blocked as [N][C/c][H][W][c] (c = the
SIMD width in floats) and its weights pre-packed: the inner loop then reads `c` contiguous
channels. A channel count that is not a whole number of blocks is padded, and the padding
lanes always hold zeros: packing writes zeros there, weights and per-channel operands are
padded with zeros, and an operator is only computed blocked when it maps zeros to zeros
there (relu, add, pooling; not sigmoid or exp), so a convolution reading padded lanes
multiplies zeros by zero weights. A group chooses the blocked layout when it holds a
convolution that can use it, or when its data already arrives blocked and every operator in
it works on blocked tensors (element-wise ops, pooling, spatial pads, concat/split along
channels). Tensors keep the layout their producer chose; a transform kernel is inserted only
where a consumer wants the other one (graph inputs and outputs are plain NCHW).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from taso_py.codegen.graph.partition import ELEMENTWISE, Group
from taso_py.codegen.topi import conv
from taso_py.graph.ir import Graph, Node, Ref
from taso_py.ops.elementwise import ACTIVATIONS

PLAIN = 0
POOLS = frozenset({"maxpool2d", "avgpool2d", "global_avgpool"})
# fused activations that keep padding lanes at zero (act(0) == 0), from the op table's activations
ZERO_ACTS = frozenset({"none"} | {name for name, op in ACTIVATIONS.items()
                                  if op.evaluate([np.zeros(1, np.float32)], None)[0][0] == 0})


Segments = tuple[int, ...]  # the real channels of each run of blocks of a blocked tensor


def blocks(channels: int | Segments, block: int) -> int:
    """Blocks of a channel count, or of segments (each starts on a block: concat just appends them)."""
    segs = (channels,) if isinstance(channels, int) else channels
    return sum(-(-c // block) for c in segs)


def positions(segments: Segments, block: int) -> np.ndarray:
    """Where each real channel sits on the padded channel axis (block * blocks long)."""
    out, at = [], 0
    for c in segments:
        out.append(np.arange(c) + at)
        at += blocks(c, block) * block
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def blocked_shape(shape: Sequence[int], block: int, broadcast: bool = False,
                  segments: Segments | None = None) -> tuple[int, ...]:
    """(N, C, H, W) -> (N, blocks, H, W, c) (C in `segments`, default one); a `broadcast` operand of
    lower rank is first padded to rank 4, and one with a single channel stays (N, 1, H, W, 1)."""
    s = (1,) * (4 - len(shape)) + tuple(shape)
    if broadcast and s[1] == 1:
        return (s[0], 1, s[2], s[3], 1)
    return (s[0], blocks(segments or s[1], block), s[2], s[3], block)


def spread(a: np.ndarray, axis: int, segments: Segments, block: int) -> np.ndarray:
    """`a` with its channel `axis` moved onto the padded channel axis of `segments` (zeros between)."""
    shape = list(a.shape)
    shape[axis] = blocks(segments, block) * block
    out = np.zeros(shape, a.dtype)
    index = [slice(None)] * a.ndim
    index[axis] = positions(segments, block)
    out[tuple(index)] = a
    return out


def block_array(a: np.ndarray, block: int, segments: Segments | None = None) -> np.ndarray:
    """A weight in the blocked layout (a broadcast operand: see `blocked_shape`), zero-padded."""
    s = (1,) * (4 - a.ndim) + a.shape
    a = a.reshape(s)
    if s[1] == 1:
        return a.reshape(blocked_shape(s, block, broadcast=True))
    padded = spread(a, 1, segments or (s[1],), block)
    return np.ascontiguousarray(padded.reshape(s[0], -1, block, s[2], s[3]).transpose(0, 1, 3, 4, 2))


def _zeros_stay_zero(g: Graph, node: Node) -> bool:
    """Whether the element-wise `node` maps padding lanes to zero: zero data and zero per-channel
    operands (their padding), with every other operand as it is."""
    channels = node.types[0].shape[1]
    args = []
    for r in node.inputs:
        w = g.weight(r)
        if w is None:
            args.append(np.zeros((1, 1, 1, 1), g.type(r).dtype.numpy))
        else:
            shape = (1,) * (4 - w.ndim) + w.shape
            args.append(np.zeros_like(w) if shape[1] == channels else w)
    with np.errstate(all="ignore"):
        out = node.op.ref(args, node.attrs)
    return all(np.all(np.asarray(o) == 0) for o in out)


def _node_can_block(g: Graph, node: Node, block: int) -> bool:
    """Whether `node` can compute on blocked tensors at all (see `_segments` for what the padding
    lanes then ask of it)."""
    if not all(len(t.shape) == 4 for t in node.types):
        return False
    name = node.op.name
    if name == "conv2d":  # any channels in and out (padded), groups of whole blocks or depthwise;
        # the weights are packed (or Winograd-transformed) at compile time, so they must be constants
        return g.weight(node.inputs[1]) is not None and conv.nchwc_supports(
            node.attrs, g.type(node.inputs[1]).shape, block)
    if name in ELEMENTWISE:
        channels = node.types[0].shape[1]
        for r in node.inputs:
            t = g.type(r)
            if g.weight(r) is None:  # data arrives blocked like the output
                if len(t.shape) != 4 or t.shape[1] != channels:
                    return False
            elif len(t.shape) > 4 or ((1,) * (4 - len(t.shape)) + tuple(t.shape))[1] not in (1, channels):
                return False
        return True
    if name in POOLS:  # the window runs over H and W; a block's channels ride along in the lanes
        return True
    if name == "pad":  # spatial pads with zeros
        p, rank = node.attrs.pads, 4
        return node.attrs.value == 0 and p[0] == p[1] == p[rank] == p[rank + 1] == 0
    if name in ("concat", "split"):
        return node.attrs.axis == 1 and all(len(g.type(r).shape) == 4 for r in node.inputs)
    return False


def split_aligned(segments: Segments, sizes: Sequence[int]) -> list[Segments] | None:
    """The segments of each part when every split point falls between segments, else None."""
    parts, at = [], 0
    for size in sizes:
        got, total = [], 0
        while total < size and at < len(segments):
            got.append(segments[at])
            total += segments[at]
            at += 1
        if total != size:
            return None
        parts.append(tuple(got))
    return parts


def _segments(g: Graph, node: Node, seg: Callable[[Ref], Segments], block: int) -> list[Segments] | None:
    """The segments of `node`'s outputs computed blocked from inputs of segments `seg`, or None when
    it cannot keep the padding lanes at zero (an activation that maps 0 elsewhere, operands whose
    segments differ, a grouped convolution over several segments)."""
    name = node.op.name
    def padded(segs: Segments) -> bool:
        return len(segs) > 1 or segs[0] % block != 0
    if name == "conv2d":
        x, w = seg(node.inputs[0]), g.type(node.inputs[1]).shape
        depthwise = node.attrs.groups == w[0] and w[1] == 1
        if node.attrs.groups > 1 and not depthwise and padded(x):
            return None
        out = x if depthwise else (w[0],)
        return [out] if not padded(out) or node.attrs.act in ZERO_ACTS else None
    if name == "concat":
        return [tuple(c for r in node.inputs for c in seg(r))]
    if name == "split":
        return split_aligned(seg(node.inputs[0]), node.attrs.sizes) or [(c,) for c in node.attrs.sizes]
    data = [seg(r) for r in node.inputs if g.weight(r) is None]
    if any(d != data[0] for d in data):
        return None
    if name in ELEMENTWISE and padded(data[0]) and not _zeros_stay_zero(g, node):
        return None
    return [data[0]] * len(node.outputs)


@dataclass
class Plan:
    """Each group's layout (the block, or PLAIN) and the segments of every blocked tensor."""

    layouts: list[int]
    segments: dict[Ref, Segments]


def choose(g: Graph, groups: Sequence[Group], block: int) -> Plan:
    """The block size each group computes in (PLAIN for NCHW), in group order, and the segments."""
    produced: dict[Ref, int] = {}
    plan = Plan([], {})

    def seg(r: Ref) -> Segments:  # a tensor packed from NCHW is one segment
        return plan.segments.get(r) or (g.type(r).shape[1],)

    for group in groups:
        can = block > 1 and all(_node_can_block(g, n, block) for n in group.nodes)
        has_conv = any(n.op.name == "conv2d" for n in group.nodes)
        data = [r for r in group.inputs if g.weight(r) is None]
        arrives_blocked = bool(data) and all(produced.get(r, PLAIN) == block for r in data)
        local: dict[Ref, Segments] = {}

        def known(r: Ref, local: dict[Ref, Segments] = local) -> Segments:
            return local.get(r) or seg(r)

        if can and (has_conv or arrives_blocked):
            for node in group.nodes:
                outs = _segments(g, node, known, block)
                if outs is None:
                    can = False
                    break
                local.update(zip(node.outputs, outs))
        choice = block if can and (has_conv or arrives_blocked) else PLAIN
        plan.layouts.append(choice)
        for r in group.outputs:
            produced[r] = choice
        if choice != PLAIN:
            plan.segments.update(local)
    return plan


def blocked_attrs(node: Node, block: int) -> object:
    """Attributes of `node` on blocked tensors: spatial pads get a zero pad for the block axis."""
    if node.op.name == "pad":
        p = node.attrs.pads
        return replace(node.attrs, pads=(*p[:4], 0, *p[4:], 0))
    return node.attrs
