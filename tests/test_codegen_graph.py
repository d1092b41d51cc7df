"""The graph compiler's passes: fusion decisions on small graphs and the static memory planner."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import models
from taso_py.codegen.graph import Lifetime, partition, plan_memory
from taso_py.graph import Graph
from taso_py.onnx_io import load_model
from taso_py.types import TensorType

RNG = np.random.default_rng(0)
X = TensorType((1, 4, 8, 8))


def _w(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _kinds(graph: Graph) -> list[list[str]]:
    return [[n.op.name for n in g.nodes] for g in partition(graph)]


def test_conv_bias_relu_is_one_group() -> None:
    g = Graph()
    x = g.add_input("x", X)
    (c,) = g.add("conv2d", [x, g.add_weight(_w(8, 4, 3, 3))], pad=1)
    (b,) = g.add("add", [c, g.add_weight(_w(1, 8, 1, 1))])
    (y,) = g.add("relu", [b])
    g.set_outputs([y])
    assert _kinds(g) == [["conv2d", "add", "relu"]]


def test_injective_chain_is_one_group() -> None:
    g = Graph()
    a, b, c = (g.add_input(n, X) for n in "abc")
    (m,) = g.add("mul", [a, b])
    (s,) = g.add("add", [m, c])
    (y,) = g.add("relu", [s])
    g.set_outputs([y])
    assert _kinds(g) == [["mul", "add", "relu"]]


def test_two_anchors_never_share_a_group() -> None:
    g = Graph()
    x = g.add_input("x", X)
    (c1,) = g.add("conv2d", [x, g.add_weight(_w(4, 4, 1, 1))])
    (c2,) = g.add("conv2d", [c1, g.add_weight(_w(4, 4, 1, 1))])
    g.set_outputs([c2])
    assert _kinds(g) == [["conv2d"], ["conv2d"]]


def test_reduction_takes_its_injective_input() -> None:
    g = Graph()
    x = g.add_input("x", X)
    (r,) = g.add("relu", [x])
    (p,) = g.add("global_avgpool", [r])
    g.set_outputs([p])
    assert _kinds(g) == [["relu", "global_avgpool"]]


def test_pooling_takes_its_element_wise_output_not_its_input() -> None:
    """Pooling is complex-out-fusable (as in TVM): a relu before it would be recomputed per window."""
    g = Graph()
    x = g.add_input("x", X)
    (r,) = g.add("relu", [x])
    (p,) = g.add("maxpool2d", [r], kernel=(2, 2), stride=(2, 2))
    (y,) = g.add("sigmoid", [p])
    g.set_outputs([y])
    assert _kinds(g) == [["relu"], ["maxpool2d", "sigmoid"]]


def test_an_element_wise_prologue_joins_the_convolution_it_alone_feeds() -> None:
    """relu -> depthwise conv (NASNet's separable convolutions): the relu is computed in the conv's
    padding pass; a relu read by two convolutions stays a kernel of its own."""
    g = Graph()
    x = g.add_input("x", X)
    (r,) = g.add("relu", [x])
    (c,) = g.add("conv2d", [r, g.add_weight(_w(4, 1, 3, 3))], pad=(1, 1, 1, 1), groups=4)
    (r2,) = g.add("relu", [c])
    (a,) = g.add("conv2d", [r2, g.add_weight(_w(4, 4, 1, 1))])
    (b,) = g.add("conv2d", [r2, g.add_weight(_w(4, 4, 1, 1))])
    g.set_outputs([a, b])
    assert _kinds(g) == [["relu", "conv2d", "relu"], ["conv2d"], ["conv2d"]]


def test_a_tensor_read_twice_ends_its_group() -> None:
    """relu(conv(x)) feeds two readers: it is computed once, as its group's output."""
    g = Graph()
    x = g.add_input("x", X)
    (c,) = g.add("conv2d", [x, g.add_weight(_w(4, 4, 1, 1))])
    (r,) = g.add("relu", [c])
    (c2,) = g.add("conv2d", [r, g.add_weight(_w(4, 4, 1, 1))])
    (y,) = g.add("add", [c2, r])
    g.set_outputs([y])
    groups = partition(g)
    assert [[n.op.name for n in gr.nodes] for gr in groups] == [["conv2d", "relu"], ["conv2d", "add"]]
    assert groups[0].outputs == [r]
    assert r in groups[1].inputs


def test_fusion_never_makes_groups_depend_on_each_other() -> None:
    """add(conv_a(x), conv_b(relu(conv_a(x)))) would be a cycle if the add joined conv_a's group."""
    g = Graph()
    x = g.add_input("x", X)
    (a,) = g.add("conv2d", [x, g.add_weight(_w(4, 4, 1, 1))])
    (r,) = g.add("relu", [a])
    (a2,) = g.add("conv2d", [x, g.add_weight(_w(4, 4, 1, 1))])
    (b,) = g.add("conv2d", [r, g.add_weight(_w(4, 4, 1, 1))])
    (y,) = g.add("add", [a2, b])
    g.set_outputs([y])
    _check_topological(g)


def _check_topological(g: Graph) -> None:
    groups = partition(g)
    produced = {n.id for n in g.nodes.values() if n.op.name in ("input", "weight")}
    seen_nodes: list[int] = []
    for group in groups:
        assert group.anchor is None or sum(n.op.fusion.value != "injective" for n in group.nodes) == 1
        for ref in group.inputs:
            assert ref.node in produced, f"group {group.name} reads {ref} before it is computed"
        produced |= {n.id for n in group.nodes}
        seen_nodes += [n.id for n in group.nodes]
    computed = [n.id for n in g.nodes.values() if n.op.name not in ("input", "weight")]
    assert sorted(seen_nodes) == sorted(computed)  # every node in exactly one group


@pytest.mark.parametrize("name", models.names())
def test_suite_partitions_are_topological(name: str) -> None:
    _check_topological(load_model(models.build(name, "small")).graph)


def test_chain_reuses_two_buffers() -> None:
    """On a chain only a tensor and its successor are alive at once: the arena holds two."""
    chain = [Lifetime(f"t{k}", 1000, k, k + 1) for k in range(10)]
    plan = plan_memory(chain)
    assert plan.arena_bytes == 2 * 1024
    assert plan.unshared_bytes == 10 * 1024
    assert plan.arena_bytes < plan.unshared_bytes


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 20), st.integers(0, 6)), min_size=1, max_size=30))
def test_live_tensors_never_overlap(spec: list[tuple[int, int, int]]) -> None:
    tensors = [Lifetime(f"t{k}", n, first, first + span) for k, (n, first, span) in enumerate(spec)]
    plan = plan_memory(tensors)
    for a in tensors:
        for b in tensors:
            if a.key < b.key and not (a.last < b.first or b.last < a.first):
                oa, ob = plan.offsets[a.key], plan.offsets[b.key]
                assert oa + a.nbytes <= ob or ob + b.nbytes <= oa, (a, b, oa, ob)
    assert plan.arena_bytes <= plan.unshared_bytes
