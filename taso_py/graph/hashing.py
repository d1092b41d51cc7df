"""Canonical hashing: equal for isomorphic graphs, whatever their node ids, insertion
order or intermediate tensor names. The search deduplicates candidate graphs with it.

A node's digest covers its op, its attributes and its inputs' digests (sorted for
commutative ops); graph inputs are identified by name, weights by content.
"""

from __future__ import annotations

import hashlib
from typing import Any

from taso_py.graph.ir import Graph


def _blake(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def attrs_key(attrs: Any) -> str:
    """A deterministic text for attributes; kinds holding data provide a `digest`."""
    digest = getattr(attrs, "digest", None)
    return digest if isinstance(digest, str) else repr(attrs)


def node_digests(graph: Graph, *, values: bool = True) -> dict[int, str]:
    """Per node id; with `values` off, graph inputs and weights are known by their types alone."""
    digests: dict[int, str] = {}
    for node in graph.topo_order():
        inputs = [f"{digests[r.node]}.{r.index}" for r in node.inputs]
        if node.op.commutative:
            inputs.sort()
        attrs = attrs_key(node.attrs) if values or node.op.name not in ("input", "weight") else str(node.types[0])
        digests[node.id] = _blake(f"{node.op.name}|{attrs}|{','.join(inputs)}")
    return digests


def canonical_hash(graph: Graph) -> str:
    """Hex digest of the computation from the graph inputs to the outputs, in order."""
    digests = node_digests(graph)
    return _blake(";".join(f"{digests[r.node]}.{r.index}" for r in graph.outputs))


def structure_hash(graph: Graph) -> str:
    """Like `canonical_hash`, but blind to the values of weights and to input names: equal for
    graphs that run the same operators on the same shapes, which take the same time. BERT's twelve
    layers, each with its own weights, are then one timing (`cost.context`)."""
    digests = node_digests(graph, values=False)
    return _blake(";".join(f"{digests[r.node]}.{r.index}" for r in graph.outputs))
