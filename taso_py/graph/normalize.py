"""Normal forms the optimizer works on: batch norm folded into convolutions, nested splits flattened.

`fold_batchnorm` is what ONNX Runtime does when it loads a model: an inference batch norm right
after a convolution with constant weights becomes part of the convolution's weights and bias.
Doing it first keeps the cost model honest: priced apart, a batch norm looks like a separate
operator that a merge of convolutions leaves in place, while in ORT it costs nothing until a
rewrite puts something between it and its convolution. The equivalence check of `taso
optimize` covers the arithmetic (it changes the weights, not the math).

`fuse_activations` is ORT's other load-time fusion: a relu, sigmoid or tanh that alone reads a
convolution becomes its `act`. Priced apart, the activation looks like an operator a rewrite may
move or merge (`concat(relu(a), relu(b))` → `relu(concat(a, b))`), which in ORT trades a free
fused activation for a real one. Both are identities of the operator table's own definitions
(`conv2d(..., act=relu)` is relu of the convolution), and the equivalence check covers them.

Nested splits become one split: the form merges of many operators need to pay off.

The library's merge rules split a merged result in two. Merging eight matmuls that share an
input, two at a time, therefore leaves a tree of seven two-way splits, each a copy in ONNX
Runtime; one eight-way split is one copy. `flatten_splits` rewrites a split of one output of
another split, along the same axis, into a single split. Each step is an instance of
`IDENTITIES`, which the verifier proves from the operator axioms (tests/test_optimizer.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from taso_py.graph.ir import Graph, Ref
from taso_py.ops.elementwise import ACTIVATIONS

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


def fold_batchnorm(graph: Graph) -> int:
    """Fold each batch norm that alone reads a convolution (no fused activation, constant weights)
    into that convolution's weights and bias; returns how many."""
    folded = 0
    for bn_id in [n.id for n in graph.topo_order() if n.op.name == "batchnorm"]:
        bn = graph.nodes[bn_id]  # as it is now: folding an earlier one may have rewritten its input
        users = graph.users()
        source = bn.inputs[0]
        conv = graph.nodes[source.node]
        params = [graph.weight(r) for r in bn.inputs[1:]]
        weights = [graph.weight(r) for r in conv.inputs[1:]]
        if (conv.op.name != "conv2d" or conv.attrs.act != "none" or len(users[conv.id]) != 1
                or source in graph.outputs or any(v is None for v in (*params, *weights))):
            continue
        scale, bias, mean, var = (np.asarray(v, np.float64) for v in params)
        factor = scale / np.sqrt(var + bn.attrs.epsilon)
        w = np.asarray(weights[0], np.float64)
        b = np.asarray(weights[1], np.float64) if len(weights) > 1 else np.zeros(w.shape[0])
        dtype = weights[0].dtype
        new_w = graph.add_weight((w * factor.reshape(-1, 1, 1, 1)).astype(dtype))
        new_b = graph.add_weight(((b - mean) * factor + bias).astype(dtype))
        (out,) = graph.add("conv2d", [conv.inputs[0], new_w, new_b], conv.attrs)
        graph.replace_uses(bn.outputs[0], out)
        graph.remove(bn.id)
        graph.remove(conv.id)
        folded += 1
    graph.remove_unused()
    return folded


def batchnorm_to_affine(graph: Graph) -> int:
    """Rewrite each batch norm left with constant parameters as x * s + t (s, t per channel): two
    element-wise operators that fuse with their neighbours and run in any layout; returns how many."""
    done = 0
    for bn_id in [n.id for n in graph.topo_order() if n.op.name == "batchnorm"]:
        bn = graph.nodes[bn_id]  # as it is now: rewriting an earlier one (a chain) may have rewired its input
        params = [graph.weight(r) for r in bn.inputs[1:]]
        if any(v is None for v in params):
            continue
        scale, bias, mean, var = (np.asarray(v, np.float64) for v in params)
        factor = scale / np.sqrt(var + bn.attrs.epsilon)
        dtype = bn.types[0].dtype.numpy
        shape = (-1,) + (1,) * (len(bn.types[0].shape) - 2)
        s = graph.add_weight(factor.reshape(shape).astype(dtype))
        t = graph.add_weight((bias - mean * factor).reshape(shape).astype(dtype))
        (scaled,) = graph.add("mul", [bn.inputs[0], s])
        (out,) = graph.add("add", [scaled, t])
        graph.replace_uses(bn.outputs[0], out)
        graph.remove(bn.id)
        done += 1
    return done


def fuse_activations(graph: Graph) -> int:
    """Make each activation that alone reads a convolution without one that convolution's `act`."""
    fused = 0
    for act_id in [n.id for n in graph.topo_order() if n.op.name in ACTIVATIONS]:
        act = graph.nodes[act_id]  # as it is now: fusing an earlier one may have rewritten its input
        users = graph.users()
        source = act.inputs[0]
        conv = graph.nodes.get(source.node)
        if (conv is None or conv.op.name != "conv2d" or conv.attrs.act != "none" or len(users[conv.id]) != 1
                or source in graph.outputs):
            continue
        (out,) = graph.add("conv2d", list(conv.inputs), dataclasses.replace(conv.attrs, act=act.op.name))
        graph.replace_uses(act.outputs[0], out)
        graph.remove(act.id)
        graph.remove(conv.id)
        fused += 1
    return fused
