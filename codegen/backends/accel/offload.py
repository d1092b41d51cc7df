"""Which graph nodes the accelerator runs: what `quant.run_layer` computes, as a predicate on the graph.

`--target accel` carries it (`codegen.target.ACCEL.offload`); the graph compiler
(`codegen.graph.accel`) sends the nodes it accepts to the accelerator and the rest to the host.
"""

from __future__ import annotations

from taso_py.graph.ir import Graph, Node


def offloadable(g: Graph, node: Node) -> bool:
    """conv2d with groups 1, no dilation, equal strides and equal pads on all sides, no activation
    or ReLU, batch 1, constant weights; matmul of an activation (any leading batch dims, flattened
    into rows) by a constant 2-D weight."""
    if node.op.name == "conv2d":
        a = node.attrs
        x = g.type(node.inputs[0])
        return (a.groups == 1 and a.dilation == (1, 1) and a.stride[0] == a.stride[1] and len(set(a.pad)) == 1
                and a.act in ("none", "relu") and x.shape[0] == 1
                and all(g.weight(r) is not None for r in node.inputs[1:]))
    if node.op.name == "matmul":
        w = node.inputs[1]
        return g.weight(w) is not None and len(g.type(w).shape) == 2 and len(g.type(node.inputs[0]).shape) >= 2
    return False
