"""Operators written as their definitions, made into those operators again (run at import).

An exporter may write an operator of the algebra as its definition by others (`OpDef.defined_as`:
torch writes SiLU as x * Sigmoid(x)). Found with the matcher like any rule's source, each occurrence
becomes the entry, so it prices, fuses and compiles as one operator. Each step is an instance of the
entry's `<name>-def` axiom.
"""

from __future__ import annotations

from taso_py.graph.ir import Graph
from taso_py.library import parse_rule
from taso_py.match.matcher import Matcher
from taso_py.ops import OPS


def collapse_definitions(graph: Graph) -> int:
    """Replace each occurrence of an entry's definition (`defined_as`) by the entry; returns how many.
    A part of the definition read elsewhere too (the sigmoid of x * sigmoid(x)) stays for those readers."""
    entries = [op for op in OPS.values() if op.defined_as]
    matcher = Matcher([parse_rule(f"{op.defined_as} == {op.name}({', '.join(op.inputs)})") for op in entries])
    done = 0
    while found := matcher.matches(graph):  # one at a time: a rewrite may change the next match's nodes
        m = found[0]
        op, root = entries[m.rule], graph.node(m.roots[0])
        (out,) = graph.add(op, [m.tensors[name] for name in op.inputs])
        graph.replace_uses(m.roots[0], out)
        for node in reversed([n for n in graph.topo_order() if n.id in m.nodes]):  # readers before what they read
            if not graph.users()[node.id] and not any(r in graph.outputs for r in node.outputs):
                graph.remove(node.id)
        graph.rename(out, root.names[0])
        done += 1
    return done
