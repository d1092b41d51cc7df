"""ONNX subgraph scoping: which enclosing-scope tensors a node's subgraphs read."""

from __future__ import annotations

import onnx


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    subs = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            subs.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            subs.extend(a.graphs)
    return subs


def outer_names(node: onnx.NodeProto) -> list[str]:
    """Names a node's subgraphs read from the enclosing scope, in order of first use."""
    found: dict[str, None] = {}

    def visit(graph: onnx.GraphProto, bound: set[str]) -> None:
        bound = bound | {i.name for i in graph.input} | {t.name for t in graph.initializer}
        for n in graph.node:
            for name in n.input:
                if name and name not in bound:
                    found.setdefault(name)
            for sub in subgraphs(n):
                visit(sub, bound | set(n.output))
            bound = bound | set(n.output)

    for sub in subgraphs(node):
        visit(sub, set())
    return list(found)


def node_label(node: onnx.NodeProto) -> str:
    """How errors name a node: by its name, else by its op type and first output."""
    if node.name:
        return f"node {node.name!r} ({node.op_type})"
    return f"{node.op_type} node -> {node.output[0]!r}" if node.output else f"{node.op_type} node without outputs"
