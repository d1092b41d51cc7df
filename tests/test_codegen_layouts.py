"""Whole graphs in the blocked layout with any channel count: padded and segmented tensors, the
convolution forms (Winograd, plain input, depthwise, narrow groups), blocked pools, pads, concat
and split, batch norms left after folding; every result against the reference semantics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from taso_py.codegen.graph import compile_graph, layout, partition
from taso_py.codegen.graph.compiler import prepare
from taso_py.codegen.runtime import CompiledModel
from taso_py.codegen.topi import winograd
from taso_py.graph import Graph, evaluate
from taso_py.graph.normalize import fold_batchnorm
from taso_py.types import TensorType

RNG = np.random.default_rng(2)


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]) or 1)).astype(np.float32)


def check(g: Graph, tmp: Path, rtol: float = 1e-4) -> dict:
    """Compile `g`, run it on random inputs, compare each output (max|a-b| / max|a|); the manifest."""
    compile_graph(g, tmp / "m")
    model = CompiledModel(tmp / "m")
    feeds = {n.attrs.name: RNG.standard_normal(n.attrs.type.shape).astype(np.float32) for n in g.inputs}
    got, want = model.run(feeds), evaluate(g, feeds)
    for name, ref in want.items():
        err = np.abs(got[name] - ref).max() / max(np.abs(ref).max(), 1e-30)
        assert err <= rtol, f"{name}: max rel error {err:.3g}"
    return model.manifest


def kernels_ir(tmp: Path) -> str:
    return (tmp / "m" / "kernels.ir").read_text()


@pytest.mark.parametrize("m", sorted(winograd.MATRICES))
def test_winograd_matrices_compute_a_convolution(m: int) -> None:
    bt, g, at = (np.array(x, np.float64) for x in winograd.MATRICES[m])
    d, w = RNG.standard_normal(m + 2), RNG.standard_normal(3)
    np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), np.convolve(d, w[::-1], "valid"), rtol=1e-12)


@pytest.mark.parametrize(("size", "m"), [(19, 4), (7, 2), (28, 4)])
def test_winograd_convolution_with_its_epilogue_matches(tmp_path: Path, size: int, m: int) -> None:
    """conv 3x3 -> + bias -> + residual -> relu, one kernel; the tiles overhang the output (19 = 5 * 4 - 1)."""
    g = Graph()
    x = g.add_input("x", TensorType((1, 64, size, size)))
    (c,) = g.add("conv2d", [x, g.add_weight(_w(64, 64, 3, 3)), g.add_weight(_w(64))], pad=(1, 1, 1, 1))
    (s,) = g.add("add", [c, x])
    (y,) = g.add("relu", [s])
    g.set_outputs([y], ["y"])
    assert winograd.tile_size((1, 64, size, size), (64,), 16) == m
    check(g, tmp_path)
    assert "conv2d_winograd" in kernels_ir(tmp_path)


def test_odd_channel_counts_stay_blocked_end_to_end(tmp_path: Path) -> None:
    """An image (3 channels, read as NCHW), 20 and 44 channels (padded), a concat of two 44s (two
    segments), a 1x1 over the segments, a split inside a block, pools: one transform in, one out."""
    g = Graph()
    x = g.add_input("x", TensorType((1, 3, 20, 20)))
    (a,) = g.add("conv2d", [x, g.add_weight(_w(20, 3, 3, 3)), g.add_weight(_w(20))], pad=(1, 1, 1, 1), act="relu")
    (p,) = g.add("maxpool2d", [a], kernel=(3, 3), stride=(2, 2), pad=(1, 1, 1, 1))
    (b,) = g.add("conv2d", [p, g.add_weight(_w(44, 20, 1, 1))], act="relu")
    (d,) = g.add("conv2d", [p, g.add_weight(_w(44, 20, 3, 3))], pad=(1, 1, 1, 1))
    (cat,) = g.add("concat", [b, d], axis=1)
    (e,) = g.add("conv2d", [cat, g.add_weight(_w(24, 88, 1, 1)), g.add_weight(_w(24))])
    (s0, s1) = g.add("split", [e], axis=1, sizes=(10, 14))
    (q,) = g.add("avgpool2d", [s1], kernel=(3, 3), stride=(1, 1), pad=(1, 1, 1, 1))
    (r,) = g.add("add", [q, g.add_weight(_w(1, 14, 1, 1))])
    (gp,) = g.add("global_avgpool", [s0])
    g.set_outputs([r, gp, cat], ["r", "gp", "cat"])
    manifest = check(g, tmp_path)
    transforms = [k["group"] for k in manifest["kernels"] if k["group"].startswith("layout_")]
    assert transforms.count("layout_nchw16c") == 0  # the image is read as NCHW by the first convolution
    assert transforms.count("layout_nchw") == 3  # the three outputs


def test_segments_follow_concat_and_split() -> None:
    segs = (44, 44)
    assert layout.blocks(segs, 16) == 6
    np.testing.assert_array_equal(layout.positions(segs, 16)[[0, 43, 44, 87]], [0, 43, 48, 91])
    assert layout.split_aligned((44, 44, 8), (44, 52)) == [(44,), (44, 8)]
    assert layout.split_aligned((44, 44), (40, 48)) is None


def test_an_activation_that_moves_zero_stays_in_nchw() -> None:
    """sigmoid(0) = 0.5 would leave padding lanes non-zero: on 20 channels it is computed in NCHW."""
    g = Graph()
    x = g.add_input("x", TensorType((1, 16, 8, 8)))
    (a,) = g.add("conv2d", [x, g.add_weight(_w(20, 16, 1, 1))])
    (s,) = g.add("sigmoid", [a])
    (r,) = g.add("relu", [a])
    g.set_outputs([s, r])
    g2 = prepare(g)
    groups = partition(g2)
    plan = layout.choose(g2, groups, 16)
    lays = {grp.nodes[-1].op.name: lay for grp, lay in zip(groups, plan.layouts)}
    assert lays["sigmoid"] == layout.PLAIN and lays["relu"] == 16


def test_depthwise_and_narrow_groups_on_padded_blocks(tmp_path: Path) -> None:
    g = Graph()
    x = g.add_input("x", TensorType((1, 44, 12, 12)))
    (dw,) = g.add("conv2d", [x, g.add_weight(_w(44, 1, 5, 5)), g.add_weight(_w(44))], pad=(2, 2, 2, 2),
                  groups=44, act="relu")
    (pw,) = g.add("conv2d", [dw, g.add_weight(_w(64, 44, 1, 1))])
    (gc,) = g.add("conv2d", [pw, g.add_weight(_w(64, 4, 3, 3))], pad=(1, 1, 1, 1), groups=16)  # 4 per group
    (g8,) = g.add("conv2d", [gc, g.add_weight(_w(64, 8, 3, 3))], stride=(2, 2), pad=(1, 1, 1, 1), groups=8)
    g.set_outputs([g8], ["y"])
    check(g, tmp_path)
    assert "layout_nchw16c" in [k["group"] for k in CompiledModel(tmp_path / "m").manifest["kernels"]]


def test_batch_norms_that_do_not_fold_become_an_affine_map(tmp_path: Path) -> None:
    """A batch norm after a concat, and two after one convolution (both fold, one after the other)."""
    g = Graph()
    x = g.add_input("x", TensorType((1, 16, 10, 10)))
    (a,) = g.add("conv2d", [x, g.add_weight(_w(24, 16, 3, 3))], pad=(1, 1, 1, 1))

    def bn(t: object, c: int) -> object:
        params = [g.add_weight(np.abs(_w(c)) + 0.5) for _ in range(4)]
        return g.add("batchnorm", [t, *params], epsilon=1e-3)[0]

    b1 = bn(a, 24)
    b2 = bn(b1, 24)
    (cat,) = g.add("concat", [b2, x], axis=1)
    b3 = bn(cat, 40)
    (y,) = g.add("relu", [b3])
    g.set_outputs([y], ["y"])
    check(g, tmp_path, rtol=2e-4)
    folded = g.copy()
    assert fold_batchnorm(folded) == 2 and [n.op.name for n in folded.topo_order()].count("batchnorm") == 1


def test_a_convolution_whose_weight_is_an_input_stays_plain(tmp_path: Path) -> None:
    """Blocked convolutions pack their weights at compile time: one whose weight is fed at run time
    (found by the fuzzer: a KeyError at packing) is computed in NCHW, beside a blocked sibling."""
    g = Graph()
    x = g.add_input("x", TensorType((1, 5, 9, 9)))
    k = g.add_input("k", TensorType((7, 5, 3, 3)))
    (a,) = g.add("conv2d", [x, k], pad=(1, 1, 1, 1))
    (b,) = g.add("conv2d", [x, g.add_weight(_w(7, 5, 3, 3))], pad=(1, 1, 1, 1))
    (y,) = g.add("add", [a, b])
    g.set_outputs([y], ["y"])
    groups = [k["group"] for k in check(g, tmp_path)["kernels"]]
    assert any(name.startswith("layout_nchw16c") for name in groups)  # the constant one is blocked
