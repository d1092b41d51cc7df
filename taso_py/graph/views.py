"""Ways to look at a graph: a readable text dump and a networkx graph."""

from __future__ import annotations

import dataclasses
from typing import Any

import networkx as nx

from taso_py.graph.ir import Graph, Node


def format_attrs(attrs: Any) -> str:
    """`name=value` pairs of the attributes that differ from their defaults."""
    if not dataclasses.is_dataclass(attrs):
        return ""
    parts = []
    for f in dataclasses.fields(attrs):
        value = getattr(attrs, f.name)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        if isinstance(value, tuple) and len(set(value)) == 1 and f.name in ("stride", "pad", "dilation", "kernel"):
            value = value[0]
        parts.append(f"{f.name}={value!r}")
    return ", ".join(parts)


def _label(node: Node) -> str:
    if node.op.name == "opaque":
        return f"opaque<{node.attrs.label}>"
    return node.op.name


def dump(graph: Graph) -> str:
    """One line per node, in topological order, e.g. `%3 = conv2d(%0, %1, pad=1) : f32[1,8,8,8]`."""
    ins = ", ".join(f"{n.attrs.name}: {n.attrs.type}" for n in graph.inputs)
    lines = [f"graph {graph.name}({ins}) {{"]
    for node in graph.topo_order():
        if node.op.name == "input":
            continue
        lhs = ", ".join(f"%{node.id}" if i == 0 else f"%{node.id}.{i}" for i in range(len(node.types)))
        if node.op.name == "weight":
            rhs = f"weight {node.names[0]!r}"
        else:
            args = [str(r) for r in node.inputs]
            attrs = format_attrs(node.attrs) if node.op.algebra else ""
            rhs = f"{_label(node)}({', '.join(args + ([attrs] if attrs else []))})"
        lines.append(f"  {lhs} = {rhs} : {', '.join(map(str, node.types))}")
    outs = ", ".join(f"{name}={ref}" for name, ref in zip(graph.output_names, graph.outputs))
    lines.append(f"  return {outs}")
    lines.append("}")
    return "\n".join(lines)


def to_networkx(graph: Graph) -> nx.MultiDiGraph:
    """Nodes keyed by id with op, attrs, types and names; one edge per tensor read,
    with the output index it reads (`src_index`) and the input slot it fills (`dst_index`)."""
    g = nx.MultiDiGraph(name=graph.name, outputs=list(zip(graph.output_names, graph.outputs)))
    for node in graph.nodes.values():
        g.add_node(node.id, op=_label(node), attrs=node.attrs, types=node.types, names=node.names)
    for node in graph.nodes.values():
        for slot, r in enumerate(node.inputs):
            g.add_edge(r.node, node.id, src_index=r.index, dst_index=slot)
    return g
