"""Constant folding: weight-only subgraphs become weights (they cost nothing at run time)."""

from __future__ import annotations

from taso_py.graph.ir import Graph


def fold_constants(graph: Graph) -> int:
    """Replace every algebra node whose inputs are all weights by its value; returns how many.

    Folded tensors keep their names; weights that only fed folded nodes are dropped. Opaque
    nodes are left alone: they may be random or stateful.
    """
    folded = 0
    fed_folds: set[int] = set()
    for node_id in [n.id for n in graph.topo_order()]:
        node = graph.nodes[node_id]  # re-read: folding an input rewired this node
        if not node.op.algebra or not all(graph.weight(r) is not None for r in node.inputs):
            continue
        values = node.op.evaluate([graph.weight(r) for r in node.inputs], node.attrs)
        graph.remove(node.id)
        for old, value, name in zip(node.outputs, values, node.names):
            graph.replace_uses(old, graph.add_weight(value, name))
        fed_folds.update(r.node for r in node.inputs)
        folded += 1
    read = {r.node for n in graph.nodes.values() for r in n.inputs} | {r.node for r in graph.outputs}
    for node_id in fed_folds - read:
        graph.remove(node_id)
    return folded
