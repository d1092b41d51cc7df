"""Property tests over random shapes and attributes: the shape rule agrees with the reference's
outputs, the reference with ONNX Runtime (both checked by `check_graph`), and the algebraic
identities that rewrite rules rely on hold."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from taso_py.errors import ShapeError
from taso_py.ops.conv import ACTS
from tests.test_ops import build, chain, check_graph, random_feeds

PROPERTY = settings(max_examples=40, deadline=None)
small = st.integers(1, 3)


def spatial(draw: st.DrawFn, kernel: tuple[int, int], pad: tuple[int, ...], dilation: tuple[int, int] = (1, 1)
            ) -> tuple[int, int]:
    """Height and width that a (dilated) kernel fits in once padded."""
    return tuple(draw(st.integers(max(1, (k - 1) * d + 1 - pad[i] - pad[i + 2]), 7))  # type: ignore[return-value]
                 for i, (k, d) in enumerate(zip(kernel, dilation)))


@st.composite
def conv_cases(draw: st.DrawFn) -> tuple[list, dict]:
    groups, per_group_in, per_group_out = draw(small), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kernel, stride = draw(st.tuples(small, small)), draw(st.tuples(small, small))
    dilation = draw(st.tuples(st.integers(1, 2), st.integers(1, 2)))
    pad = draw(st.tuples(*[st.integers(0, 2)] * 4))
    out = groups * per_group_out
    shapes = [(draw(st.integers(1, 2)), groups * per_group_in, *spatial(draw, kernel, pad, dilation)),
              (out, per_group_in, *kernel)] + ([(out,)] if draw(st.booleans()) else [])
    return shapes, {"stride": stride, "pad": pad, "dilation": dilation, "groups": groups,
                    "act": draw(st.sampled_from(ACTS))}


@st.composite
def pool_cases(draw: st.DrawFn) -> tuple[str, list, dict]:
    kernel, stride = draw(st.tuples(small, small)), draw(st.tuples(small, small))
    pad = tuple(draw(st.integers(0, kernel[i % 2] - 1)) for i in range(4))
    op, extra = draw(st.sampled_from([("maxpool2d", {}), ("avgpool2d", {"count_include_pad": False}),
                                      ("avgpool2d", {"count_include_pad": True})]))
    shape = (1, 2, *spatial(draw, kernel, pad))
    return op, [shape], {"kernel": kernel, "stride": stride, "pad": pad, "ceil_mode": draw(st.booleans()), **extra}


@st.composite
def matmul_shapes(draw: st.DrawFn) -> list[tuple[int, ...]]:
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)).input_shapes
    m, k, n = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    a = (k,) if not batch[0] and draw(st.booleans()) else (*batch[0], m, k)
    b = (k,) if not batch[1] and draw(st.booleans()) else (*batch[1], k, n)
    return [a, b]


@PROPERTY
@given(conv_cases())
def test_conv2d(case: tuple[list, dict]) -> None:
    shapes, attrs = case
    check_graph(build("conv2d", shapes, **attrs))


@PROPERTY
@given(pool_cases())
def test_pools(case: tuple[str, list, dict]) -> None:
    op, shapes, attrs = case
    check_graph(build(op, shapes, **attrs))


@PROPERTY
@given(matmul_shapes(), st.sampled_from(["float32", "int32"]))
def test_matmul_broadcasting(shapes: list, dtype: str) -> None:
    graph = build("matmul", shapes, dtype)
    assert graph.type(graph.outputs[0]).shape == np.matmul(*(np.zeros(s) for s in shapes)).shape
    check_graph(graph)


@PROPERTY
@given(st.sampled_from(["add", "mul", "sub", "div"]), st.sampled_from(["float32", "int32"]),
       st.one_of(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=3).map(lambda s: s.input_shapes),
                 st.tuples(*[hnp.array_shapes(min_dims=0, max_dims=3, max_side=3)] * 2)))
def test_broadcasting_ops(op: str, dtype: str, shapes: tuple) -> None:
    try:
        want = np.broadcast_shapes(*shapes)
    except ValueError:
        with pytest.raises(ShapeError, match=f"^{op}: "):
            build(op, list(shapes), dtype)
        return
    graph = build(op, list(shapes), dtype)
    assert graph.type(graph.outputs[0]).shape == want
    check_graph(graph)


@PROPERTY
@given(st.data())
def test_split_inverts_concat(data: st.DataObject) -> None:
    base = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, max_side=3))
    axis = data.draw(st.integers(-len(base), len(base) - 1))
    sizes = data.draw(st.lists(small, min_size=1, max_size=3))
    shapes = [(*base[:axis % len(base)], n, *base[axis % len(base) + 1:]) for n in sizes]
    graph = chain(shapes, (["joined"], "concat", [f"x{i}" for i in range(len(sizes))], {"axis": axis}),
                  ([f"part{i}" for i in range(len(sizes))], "split", ["joined"], {"axis": axis, "sizes": sizes}))
    feeds = random_feeds(graph)
    out = check_graph(graph, data.draw(st.sampled_from([11, 13, 17])), feeds)
    for i in range(len(sizes)):
        np.testing.assert_array_equal(out[f"part{i}"], feeds[f"x{i}"])


@PROPERTY
@given(st.data())
def test_transpose_composition(data: st.DataObject) -> None:
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=5, max_side=3))
    p, q = (data.draw(st.permutations(range(len(shape)))) for _ in range(2))
    graph = chain([shape], (["t"], "transpose", ["x0"], {"perm": p}), (["twice"], "transpose", ["t"], {"perm": q}),
                  (["once"], "transpose", ["x0"], {"perm": [p[i] for i in q]}))
    out = check_graph(graph)
    np.testing.assert_array_equal(out["twice"], out["once"])
