"""Data layouts: which tensors the compiled model keeps in blocked NCHW[x]c form, and the transforms.

A convolution on this CPU prefers its activations blocked as [N][C/c][H][W][c] (c = the
SIMD width in floats) and its weights pre-packed: the inner loop then reads `c` contiguous
channels. A group chooses the blocked layout when it holds a convolution that can use it,
or when its data already arrives blocked and every operator in it works on blocked tensors
unchanged (element-wise ops, and concat/split along channels in whole blocks). Tensors keep
the layout their producer chose; a transform kernel is inserted only where a consumer wants
the other one (graph inputs and outputs are plain NCHW).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from codegen.graph.partition import ELEMENTWISE, Group
from codegen.topi import conv
from taso_py.graph.ir import Graph, Node, Ref

PLAIN = 0


def blocked_shape(shape: Sequence[int], block: int) -> tuple[int, ...]:
    """(N, C, H, W) -> (N, C/c, H, W, c); a broadcast operand of lower rank is first padded to rank 4."""
    s = (1,) * (4 - len(shape)) + tuple(shape)
    if s[1] == 1:
        return (s[0], 1, s[2], s[3], 1)
    return (s[0], s[1] // block, s[2], s[3], block)


def block_array(a: np.ndarray, block: int) -> np.ndarray:
    s = (1,) * (4 - a.ndim) + a.shape
    a = a.reshape(s)
    if s[1] == 1:
        return a.reshape(blocked_shape(s, block))
    return np.ascontiguousarray(a.reshape(s[0], s[1] // block, block, s[2], s[3]).transpose(0, 1, 3, 4, 2))


def _node_can_block(g: Graph, node: Node, block: int) -> bool:
    """Whether `node` computes the same thing on blocked tensors (see module docstring)."""
    ranks_ok = all(len(t.shape) == 4 and t.shape[1] % block == 0 for t in node.types)
    if not ranks_ok:
        return False
    if node.op.name == "conv2d":  # whole blocks in and out (the tensors here are never padded)
        w = g.type(node.inputs[1]).shape
        return (conv.nchwc_supports(node.attrs, w, block) and w[0] % block == 0
                and g.type(node.inputs[0]).shape[1] % block == 0)
    if node.op.name in ELEMENTWISE:
        channels = node.types[0].shape[1]
        for r in node.inputs:
            t = g.type(r)
            if g.weight(r) is None:  # data arrives blocked like the output
                if len(t.shape) != 4 or t.shape[1] != channels:
                    return False
            elif len(t.shape) > 4 or ((1,) * (4 - len(t.shape)) + tuple(t.shape))[1] not in (1, channels):
                return False
        return True
    if node.op.name in ("concat", "split"):
        return node.attrs.axis == 1 and all(g.type(r).shape[1] % block == 0 for r in node.inputs)
    return False


def choose(g: Graph, groups: Sequence[Group], block: int) -> list[int]:
    """The block size each group computes in (PLAIN for NCHW), in group order."""
    produced: dict[Ref, int] = {}
    out = []
    for group in groups:
        can = block > 1 and all(_node_can_block(g, n, block) for n in group.nodes)
        has_conv = any(n.op.name == "conv2d" for n in group.nodes)
        data = [r for r in group.inputs if g.weight(r) is None]
        arrives_blocked = bool(data) and all(produced.get(r, PLAIN) == block for r in data)
        choice = block if can and (has_conv or arrives_blocked) else PLAIN
        out.append(choice)
        for r in group.outputs:
            produced[r] = choice
    return out


def blocked_attrs(node: Node, block: int) -> object:
    """Attributes of `node` on blocked tensors: a split along channels splits whole blocks."""
    if node.op.name == "split":
        return replace(node.attrs, sizes=tuple(s // block for s in node.attrs.sizes))
    return node.attrs
