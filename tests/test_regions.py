"""A search result cut into regions (`graph.regions`), and the regions kept by timing in ORT (`acceptance`).

Any subset of the regions applied to the start graph must compute what the start graph computes;
all of them together must be the search's result; and the acceptance must keep a region that ORT
runs much faster and revert one that it runs much slower.
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings

from taso_py.acceptance import accept
from taso_py.cost.analytical import Roofline
from taso_py.errors import GraphError
from taso_py.graph.evaluate import evaluate
from taso_py.graph.ir import Graph
from taso_py.graph.regions import apply, diff, without_unused
from taso_py.onnx_io import OnnxModel
from taso_py.search import backtracking
from taso_py.search.backtracking import Settings
from tests.op_count import OpCount
from tests.test_optimizer import RULES, _feeds, _graph, _same_outputs, small_graphs


def _two_merges() -> Graph:
    g, r = _graph({"w1": (8, 4), "w2": (8, 6), "w3": (8, 5), "w4": (8, 7)}, {"x": (3, 8), "y": (2, 8)})
    outs = [g.add("matmul", [r[a], r[w]])[0] for a, w in (("x", "w1"), ("x", "w2"), ("y", "w3"), ("y", "w4"))]
    g.set_outputs(outs, [f"o{i}" for i in range(4)])
    return g


def _check_every_subset(start: Graph, rewritten: Graph) -> int:
    regions = diff(start, rewritten)
    for k in range(len(regions) + 1):
        for subset in itertools.combinations(regions, k):
            try:
                g = without_unused(apply(start, rewritten, subset))
            except GraphError:
                assert 0 < k < len(regions), "the start graph and the full result never have a cycle"
                continue
            _same_outputs(start, g)
    return len(regions)


def test_two_independent_merges_are_two_regions_with_one_signature():
    start = _two_merges()
    rewritten = backtracking.search(start, RULES, OpCount(), Settings(timeout=10)).graph
    regions = diff(start, rewritten)
    assert len(regions) == 2 and regions[0].signature() == regions[1].signature()
    assert ("split", 1) in regions[0].signature() and ("-matmul", 1) in regions[0].signature()
    assert _check_every_subset(start, rewritten) == 2
    whole = without_unused(apply(start, rewritten, regions))
    assert sorted(n.op.name for n in whole.nodes.values()) == \
        sorted(n.op.name for n in without_unused(rewritten).nodes.values())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_graphs())
def test_any_subset_of_a_search_results_regions_keeps_the_outputs(g: Graph):
    rewritten = backtracking.search(g, RULES, OpCount(), Settings(timeout=5)).graph
    if len(diff(g, rewritten)) <= 5:
        _check_every_subset(g, rewritten)


def test_acceptance_keeps_the_region_ort_runs_faster_and_reverts_the_slower_one():
    """Region 1 reassociates (x @ a) @ b into x @ (a @ b), about 100x fewer flops; region 2 reads a
    large tensor through a concat and a split, copies ORT does not remove."""
    g, r = _graph({}, {"x": (2048, 16), "a": (16, 2048), "b": (2048, 16), "z": (1024, 1024)})
    (xa,) = g.add("matmul", [r["x"], r["a"]])
    (y1,) = g.add("matmul", [xa, r["b"]])
    (y2,) = g.add("relu", [r["z"]])
    g.set_outputs([y1, y2], ["y1", "y2"])
    rewritten = g.copy()
    (ab,) = rewritten.add("matmul", [r["a"], r["b"]])
    (fast,) = rewritten.add("matmul", [r["x"], ab])
    rewritten.replace_uses(y1, fast)
    (cat,) = rewritten.add("concat", [r["z"], r["z"]], axis=0)
    (half, _) = rewritten.add("split", [cat], axis=0, sizes=(1024, 1024))
    (slow,) = rewritten.add("relu", [half])
    rewritten.replace_uses(y2, slow)
    rewritten.remove_unused()
    feeds = _feeds(g)
    result = accept(OnnxModel(g), g, rewritten, Roofline(), feeds, threads=2, runs=5)
    assert [t.kept for t in sorted(result.trials, key=lambda t: "concat" in t.change)] == [True, False], \
        [t.to_json() for t in result.trials]
    ops = sorted(n.op.name for n in result.graph.nodes.values() if n.op.algebra)
    assert ops == ["matmul", "matmul", "relu"] and result.kept == 1
    assert result.graph.node(result.graph.outputs[0]).inputs[1].node not in g.nodes  # reads a @ b
    want, got = evaluate(g, feeds), evaluate(result.graph, feeds)
    for k in want:  # reassociation rounds differently: the normwise criterion of `taso optimize`
        assert np.abs(got[k] - want[k]).max() <= 1e-5 * np.abs(want[k]).max()
