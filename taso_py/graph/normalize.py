"""Nested splits become one split: the form merges of many operators need to pay off.

The library's merge rules split a merged result in two. Merging eight matmuls that share an
input, two at a time, therefore leaves a tree of seven two-way splits, each a copy in ONNX
Runtime; one eight-way split is one copy. `flatten_splits` rewrites a split of one output of
another split, along the same axis, into a single split. Each step is an instance of
`IDENTITIES`, which the verifier proves from the operator axioms (tests/test_optimizer.py).
"""

from __future__ import annotations

from taso_py.graph.ir import Graph, Ref

IDENTITIES = (
    "split(split(x, axis=?k, sizes=[?p, ?q + ?r])[1], axis=?k, sizes=[?q, ?r])[0] == "
    "split(x, axis=?k, sizes=[?p, ?q, ?r])[1]",
    "split(split(x, axis=?k, sizes=[?p, ?q + ?r])[1], axis=?k, sizes=[?q, ?r])[1] == "
    "split(x, axis=?k, sizes=[?p, ?q, ?r])[2]",
    "split(split(x, axis=?k, sizes=[?p + ?q, ?r])[0], axis=?k, sizes=[?p, ?q])[0] == "
    "split(x, axis=?k, sizes=[?p, ?q, ?r])[0]",
    "split(split(x, axis=?k, sizes=[?p + ?q, ?r])[0], axis=?k, sizes=[?p, ?q])[1] == "
    "split(x, axis=?k, sizes=[?p, ?q, ?r])[1]",
    "split(x, axis=?k, sizes=[?p, ?q + ?r])[0] == split(x, axis=?k, sizes=[?p, ?q, ?r])[0]",
)


def flatten_splits(graph: Graph) -> int:
    """Merge every split that reads, alone, one output of a split on the same axis; returns how many."""
    merged = 0
    changed = True
    while changed:
        changed = False
        users = graph.users()
        for inner in list(graph.nodes.values()):
            if inner.op.name != "split":
                continue
            source = inner.inputs[0]
            outer = graph.nodes[source.node]
            if (outer.op.name != "split" or outer.attrs.axis != inner.attrs.axis
                    or source in graph.outputs
                    or any(source in u.inputs for u in users[outer.id] if u.id != inner.id)):
                continue
            i = source.index
            sizes = (*outer.attrs.sizes[:i], *inner.attrs.sizes, *outer.attrs.sizes[i + 1:])
            flat = graph.add("split", [outer.inputs[0]], axis=inner.attrs.axis, sizes=sizes)
            width = len(inner.attrs.sizes)
            for j in range(len(outer.types)):
                if j != i:
                    graph.replace_uses(Ref(outer.id, j), flat[j if j < i else j + width - 1])
            for k in range(width):
                graph.replace_uses(Ref(inner.id, k), flat[i + k])
            graph.remove(inner.id)
            graph.remove(outer.id)
            merged += 1
            changed = True
            break
    return merged
