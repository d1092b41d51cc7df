"""The graph IR: building, validation spec, topological order, canonical hash, evaluation,
constant folding and the networkx and text views."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

from benchmarks import models
from taso_py.errors import GraphError, InputError, ShapeError
from taso_py.graph import Graph, Ref, canonical_hash, dump, evaluate, fold_constants, to_networkx, validate
from taso_py.graph.validate import problems
from taso_py.onnx_io import load_model
from taso_py.types import DType, TensorType

X = TensorType((1, 4, 8, 8))
RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((8, 4, 3, 3)).astype(np.float32)
W2 = RNG.standard_normal((8, 4, 1, 1)).astype(np.float32)


def two_branch(order: str = "ab", names: str = "") -> Graph:
    """relu(conv3x3(x)) + conv1x1(x), with the branches added in either order."""
    g = Graph("g")
    x = g.add_input("x", X)
    branches = {}
    for which in order:
        if which == "a":
            w = g.add_weight(W1, f"{names}w1")
            branches["a"] = g.add("conv2d", [x, w], pad=1, act="relu", names=[f"{names}a"])[0]
        else:
            w = g.add_weight(W2, f"{names}w2")
            branches["b"] = g.add("conv2d", [x, w], names=[f"{names}b"])[0]
    (y,) = g.add("add", [branches["a"], branches["b"]])
    g.set_outputs([y], ["y"])
    return g


def feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal(X.shape).astype(np.float32)}


def test_a_tensor_types_cached_hash_follows_its_value() -> None:
    """Equal types hash alike however they were made: built, replaced, copied or pickled (a pickle
    makes the type anew, so the hash is the loading process's), and a changed field changes it."""
    import copy
    import pickle

    t = TensorType((2, 3), DType.FLOAT32)
    same = [TensorType((2, 3)), dataclasses.replace(TensorType((2, 4)), shape=(2, 3)), copy.deepcopy(t),
            pickle.loads(pickle.dumps(t))]
    assert all(u == t and hash(u) == hash(t) for u in same)
    assert len({t, *same, TensorType((3, 2)), TensorType((2, 3), DType.FLOAT16)}) == 3
    assert pickle.loads(pickle.dumps(DType.INT64)) is DType.INT64
    made = subprocess.run([sys.executable, "-c", "import pickle, sys; from taso_py.types import TensorType; "
                           "sys.stdout.write(pickle.dumps(TensorType((2, 3))).hex())"],
                          capture_output=True, text=True, check=True, timeout=60)
    elsewhere = pickle.loads(bytes.fromhex(made.stdout))  # hashed in that process, with its DType ids
    assert elsewhere == t and hash(elsewhere) == hash(t) and elsewhere in {t}


def test_build_infers_types_and_validates() -> None:
    g = validate(two_branch())
    assert g.type(g.outputs[0]) == TensorType((1, 8, 8, 8))
    assert g.topo_order()[0].kind == "input"


def test_topological_order_puts_inputs_first() -> None:
    g = two_branch()
    seen: set[int] = set()
    for node in g.topo_order():
        assert all(r.node in seen for r in node.inputs)
        seen.add(node.id)


def test_hash_equal_for_isomorphic_graphs() -> None:
    assert canonical_hash(two_branch("ab")) == canonical_hash(two_branch("ba", names="other_"))


def test_hash_ignores_operand_order_of_commutative_ops_only() -> None:
    def build(op: str, swap: bool) -> Graph:
        g = Graph()
        a, b = g.add_input("a", TensorType((2, 3))), g.add_input("b", TensorType((2, 3)))
        g.set_outputs(list(g.add(op, [b, a] if swap else [a, b])), ["y"])
        return g

    assert canonical_hash(build("add", False)) == canonical_hash(build("add", True))
    assert canonical_hash(build("sub", False)) != canonical_hash(build("sub", True))


def test_hash_differs_for_different_graphs() -> None:
    base = canonical_hash(two_branch())
    other_attr = two_branch()
    conv = next(n for n in other_attr.nodes.values() if n.kind == "conv2d" and n.attrs.act == "relu")
    other_attr.nodes[conv.id] = dataclasses.replace(conv, attrs=dataclasses.replace(conv.attrs, act="sigmoid"))
    other_weight = two_branch()
    w = next(n for n in other_weight.nodes.values() if n.kind == "weight")
    other_weight.replace_uses(w.outputs[0], other_weight.add_weight(np.zeros_like(w.attrs.value)))
    hashes = {base, canonical_hash(other_attr), canonical_hash(other_weight)}
    assert len(hashes) == 3


def test_hash_distinguishes_every_suite_model_and_is_stable() -> None:
    hashes = [canonical_hash(load_model(models.build(n, "small")).graph) for n in models.names()]
    assert len(set(hashes)) == len(hashes)
    assert canonical_hash(load_model(models.build("bert", "small")).graph) == hashes[models.names().index("bert")]


def test_validation_names_the_node() -> None:
    g = two_branch()
    conv = next(n for n in g.nodes.values() if n.kind == "conv2d")
    g.nodes[conv.id] = dataclasses.replace(conv, types=(TensorType((1, 1, 1, 1)),))
    with pytest.raises(GraphError, match=rf"conv2d %{conv.id} claims f32\[1,1,1,1\]"):
        validate(g)


def test_validation_finds_dangling_refs_and_cycles() -> None:
    g = two_branch()
    add = next(n for n in g.nodes.values() if n.kind == "add")
    g.nodes[add.id] = dataclasses.replace(add, inputs=(Ref(99), add.inputs[1]))
    assert "reads %99, which does not exist" in problems(g)[0]
    g = two_branch()
    conv = next(n for n in g.nodes.values() if n.kind == "conv2d" and n.attrs.act == "relu")
    add = next(n for n in g.nodes.values() if n.kind == "add")
    g.nodes[conv.id] = dataclasses.replace(conv, inputs=(add.outputs[0], conv.inputs[1]))
    with pytest.raises(GraphError, match="cycle"):
        g.topo_order()


def test_validation_finds_duplicate_names_and_missing_outputs() -> None:
    g = two_branch()
    conv = next(n for n in g.nodes.values() if n.kind == "conv2d")
    g.nodes[conv.id] = dataclasses.replace(conv, names=("x",))
    assert any("'x' is used 2 times" in p for p in problems(g))
    g.outputs, g.output_names = [], []
    assert "graph has no outputs" in problems(g)


def test_add_rejects_bad_shapes_and_taken_names() -> None:
    g = two_branch()
    x = g.inputs[0].outputs[0]
    with pytest.raises(ShapeError, match="matmul"):
        g.add("matmul", [x, g.add_weight(np.ones((3, 3), np.float32))])
    with pytest.raises(GraphError, match="already in use"):
        g.add("relu", [x], names=["y"] if "y" in g._names else ["a"])


def test_evaluate_matches_numpy_and_checks_feeds() -> None:
    g = two_branch()
    out = evaluate(g, feeds())["y"]
    x = feeds()["x"]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    a = np.maximum(sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + 8, j:j + 8], W1[:, :, i, j])
                       for i in range(3) for j in range(3)), 0)
    b = np.einsum("nchw,oc->nohw", x, W2[:, :, 0, 0])
    np.testing.assert_allclose(out, a + b, rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match="was not fed"):
        evaluate(g, {})
    with pytest.raises(InputError, match="must be f32"):
        evaluate(g, {"x": np.zeros((1, 4, 8, 7), np.float32)})
    with pytest.raises(InputError, match="no graph input named 'z'"):
        evaluate(g, {**feeds(), "z": np.zeros(1)})


def test_fold_constants_keeps_names_and_values() -> None:
    g = Graph()
    x = g.add_input("x", TensorType((2, 3)))
    w = g.add_weight(np.arange(6, dtype=np.float32).reshape(3, 2), "w")
    (wt,) = g.add("transpose", [w], perm=(1, 0), names=["wt"])
    (scaled,) = g.add("scalar_mul", [wt], scale=2.0)
    (y,) = g.add("matmul", [x, g.add("transpose", [scaled], perm=(1, 0))[0]])
    g.set_outputs([y], ["y"])
    before = evaluate(g, {"x": np.ones((2, 3), np.float32)})["y"]
    assert fold_constants(g) == 3
    assert g.remove_unused() == 0  # the weights that only fed folded nodes are gone
    kinds = sorted(n.kind for n in g.nodes.values())
    assert kinds == ["input", "matmul", "weight"]
    np.testing.assert_array_equal(evaluate(validate(g), {"x": np.ones((2, 3), np.float32)})["y"], before)
    assert fold_constants(g) == 0


def test_copy_is_independent() -> None:
    g = two_branch()
    h = g.copy()
    (z,) = h.add("relu", [h.outputs[0]])
    h.set_outputs([z], ["y"])
    assert canonical_hash(g) != canonical_hash(h)
    validate(g)


def test_networkx_view() -> None:
    g = two_branch()
    nxg = to_networkx(g)
    assert nx.is_directed_acyclic_graph(nxg)
    assert nxg.number_of_nodes() == len(g)
    assert nxg.number_of_edges() == sum(len(n.inputs) for n in g.nodes.values())
    add = next(n for n in g.nodes.values() if n.kind == "add")
    assert sorted(d["dst_index"] for _, _, d in nxg.in_edges(add.id, data=True)) == [0, 1]


def test_text_dump() -> None:
    text = dump(two_branch())
    assert "graph g(x: f32[1,4,8,8])" in text
    assert "conv2d(" in text and "pad=1" in text and "act='relu'" in text
    assert text.strip().endswith("}") and "return y=" in text
