"""Constant folding: weight-only subgraphs become weights (they cost nothing at run time)."""

from __future__ import annotations

from taso_py.graph.ir import Graph


def fold_constants(graph: Graph) -> int:
    """Replace every algebra node whose inputs are all weights by its value; returns how many.

    Folded tensors keep their names. Opaque nodes are left alone: they may be random or stateful.
    """
    folded = 0
    for node in graph.topo_order():
        if not node.op.algebra or not all(graph.weight(r) is not None for r in node.inputs):
            continue
        values = node.op.evaluate([graph.weight(r) for r in node.inputs], node.attrs)
        graph.remove(node.id)
        for old, value, name in zip(node.outputs, values, node.names):
            graph.replace_uses(old, graph.add_weight(value, name))
        folded += 1
    return folded
