"""The dense operators of the operator library (matmul, conv2d): compiled through their CPU
templates under several knob settings, each result compared with the operator's numpy reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from taso_py.codegen import te
from taso_py.codegen.backends.c import build
from taso_py.codegen.lower import Intrinsic, lower, walk_stmts
from taso_py.codegen.schedule import create_schedule
from taso_py.codegen.topi import conv, registry
from taso_py.codegen.topi import linalg as _linalg  # noqa: F401  (registers matmul)
from taso_py.codegen.tune.space import Config
from taso_py.ops import OPS
from taso_py.ops.conv import Conv2dAttrs
from taso_py.types import TensorType

RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def out_types(op: str, arrays: Sequence[np.ndarray], attrs: Any) -> list[TensorType]:
    return list(OPS[op].shape([TensorType.of(a) for a in arrays], attrs))


def compile_group(outs: Sequence[te.Tensor], ins: Sequence[te.Tensor], cfg: Config, name: str = "k"):  # type: ignore[no-untyped-def]
    s = registry.schedule_group(outs, cfg)
    f = lower(s, [*ins, *outs], name)
    return f, build(f)[name]


# ---- matmul ----------------------------------------------------------------------------------

def check_op(op: str, arrays: Sequence[np.ndarray], attrs: Any = None, knobs: dict | None = None) -> Any:
    """Compile `op` alone under `knobs`, run it, compare with its numpy reference; the lowered kernel."""
    types = out_types(op, arrays, attrs)
    ins = [te.placeholder(x.shape, name=f"in{k}") for k, x in enumerate(arrays)]
    (y,) = registry.compute(op, ins, attrs, types)
    f, kernel = compile_group([y], ins, Config(knobs))
    out = np.full(y.shape, np.nan, np.float32)
    kernel(*arrays, out)
    (want,) = OPS[op].ref(list(arrays), attrs)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    return f


def matmul_case(a_shape: tuple[int, ...], b_shape: tuple[int, ...], knobs: dict | None = None) -> Any:
    return check_op("matmul", [rand(*a_shape), rand(*b_shape)], None, knobs)


def uses_gemm(f: Any) -> bool:
    return any(isinstance(s, Intrinsic) for s in walk_stmts(f.body))


@pytest.mark.parametrize("knobs", [
    {},
    {"kernel": "vector", "tile_m": 4, "tile_n": 16, "k_unroll": 4, "order": "mn", "pack_b": True},
    {"kernel": "gemm", "tile_m": 6, "tile_n": 16, "k_block": 64, "pack_b": True},
    {"kernel": "gemm", "tile_m": 2, "tile_n": 32, "order": "mn", "pack_b": False},
])
def test_matmul_2d_under_several_knob_settings(knobs: dict) -> None:
    f = matmul_case((48, 128), (128, 64), knobs)
    assert uses_gemm(f) == (knobs.get("kernel", "gemm") == "gemm")


@pytest.mark.parametrize("knobs", [{"tile_m": 8, "tile_n": 16}, {"pack_b": True, "tile_m": 4, "tile_n": 32},
                                   {"kernel": "vector", "pack_b": True, "tile_m": 6, "tile_n": 16}])
def test_matmul_odd_sizes_that_do_not_divide_the_tiles(knobs: dict) -> None:
    f = matmul_case((37, 29), (29, 45), knobs)
    assert not uses_gemm(f)  # tails: the guarded vector loops, not the whole-tile micro-kernel


def test_matmul_odd_sizes_default_tiles_divide() -> None:
    f = matmul_case((37, 29), (29, 45))
    assert uses_gemm(f)  # a 1 x 45 tile divides 37 x 45: the micro-kernel with no tail


@pytest.mark.parametrize(("a_shape", "b_shape"), [
    ((3, 16, 24), (3, 24, 32)),        # BERT's per-head products
    ((2, 3, 16, 8), (2, 3, 8, 16)),    # rank 4
    ((2, 1, 12, 8), (3, 8, 32)),       # batch dims broadcast both ways
    ((4, 16, 24), (24, 32)),           # a weight shared by the batch
    ((1, 64), (64, 32)),               # a single row (NasRNN's batch of one)
    ((24,), (3, 24, 16)),              # 1-D left operand
    ((5, 24), (24,)),                  # 1-D right operand
])
def test_matmul_batched_broadcast_and_vectors(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    matmul_case(a_shape, b_shape)
    if len(a_shape) > 1 and len(b_shape) > 1:
        matmul_case(a_shape, b_shape, {"kernel": "vector", "pack_b": True, "tile_m": 2})


@pytest.mark.parametrize("knobs", [{}, {"kernel": "vector", "tile_m": 8, "tile_n": 16}, {"pack_b": True}])
def test_matmul_with_fused_bias_and_relu(knobs: dict) -> None:
    m, k, n = 32, 48, 64
    a, b, bias = rand(m, k), rand(k, n), rand(n)
    ta, tb, tbias = (te.placeholder(x.shape, name=nm) for x, nm in ((a, "A"), (b, "B"), (bias, "bias")))
    (y,) = registry.compute("matmul", [ta, tb], None, [TensorType((m, n))])
    added = te.compute((m, n), lambda i, j: y[i, j] + tbias[j], name="add", tag="injective")
    out_t = te.compute((m, n), lambda i, j: te.max_(added[i, j], 0.0), name="relu", tag="injective")
    f, kernel = compile_group([out_t], [ta, tb, tbias], Config(knobs))
    out = np.full((m, n), np.nan, np.float32)
    kernel(a, b, bias, out)
    np.testing.assert_allclose(out, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)
    assert not [s for s in walk_stmts(f.body) if getattr(s, "buffer", None) is not None
                and s.buffer.shape == (m, n) and s.buffer.name.startswith("matmul")]  # no full-size temporary


# ---- conv2d (NCHW) -----------------------------------------------------------------------------

CONV_CASES = {
    "1x1": ((1, 16, 7, 9), (32, 16, 1, 1), {}, False),
    "3x3-pad": ((2, 8, 9, 11), (16, 8, 3, 3), {"pad": (1, 1, 1, 1)}, False),
    "stride2": ((1, 8, 13, 13), (16, 8, 3, 3), {"stride": (2, 2), "pad": (1, 1, 1, 1)}, False),
    "groups": ((1, 8, 10, 10), (8, 4, 3, 3), {"groups": 2, "pad": (1, 1, 1, 1)}, False),
    "groups-pixel-major": ((1, 8, 9, 9), (16, 4, 3, 3), {"groups": 2, "pad": (1, 1, 1, 1), "act": "relu"}, True),
    "depthwise": ((1, 8, 10, 10), (8, 1, 3, 3), {"groups": 8, "pad": (1, 1, 1, 1)}, True),
    "bias-relu": ((1, 16, 8, 8), (16, 16, 3, 3), {"pad": (1, 1, 1, 1), "act": "relu"}, True),
    "dilated-asym-pad": ((1, 4, 11, 10), (8, 4, 3, 3), {"pad": (2, 1, 0, 1), "dilation": (2, 2)}, True),
    "odd-sigmoid": ((1, 3, 7, 5), (5, 3, 2, 3), {"act": "sigmoid"}, True),
    "stem-row-inner": ((1, 3, 15, 15), (8, 3, 5, 5), {"stride": (2, 2), "pad": (2, 2, 2, 2)}, True),
}
CONV_KNOBS = [{}, {"kernel": "vector", "tile_oc": 8, "tile_w": 4},
              {"tile_oc": 8, "tile_w": 6, "ic_block": 8}, {"kernel": "vector", "tile_oc": 16, "tile_w": 16}]


@pytest.mark.parametrize("knobs", CONV_KNOBS)
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv2d_matches_the_reference(case: str, knobs: dict) -> None:
    x_shape, w_shape, attrs, has_bias = CONV_CASES[case]
    arrays = [rand(*x_shape), rand(*w_shape)] + ([rand(w_shape[0])] if has_bias else [])
    check_op("conv2d", arrays, Conv2dAttrs(**attrs), knobs)


def test_conv2d_uses_the_micro_kernel_when_tiles_divide() -> None:
    f = check_op("conv2d", [rand(1, 16, 8, 8), rand(16, 16, 3, 3), rand(16)],
                 Conv2dAttrs(pad=(1, 1, 1, 1), act="relu"), {"tile_oc": 8, "tile_w": 8})
    assert uses_gemm(f)
    # the padded input is computed once, not per tile: its buffer holds the whole padded image
    assert any(getattr(s, "buffer", None) is not None and s.buffer.shape == (1, 16, 10, 10)
               for s in walk_stmts(f.body))


# ---- conv2d in the blocked layout ----------------------------------------------------------------

def run_plain(t: te.Tensor, ins: Sequence[te.Tensor], *arrays: np.ndarray) -> np.ndarray:
    """A layout transform compiled with its default schedule (one loop nest)."""
    kernel = build(lower(create_schedule(t), [*ins, t], "pack"))["pack"]
    out = np.full(t.shape, np.nan, np.float32)
    kernel(*arrays, out)
    return out


def test_nchwc_supports_groups_of_whole_blocks_only() -> None:
    assert conv.nchwc_supports(Conv2dAttrs(groups=32), (1024, 32, 3, 3), 16)  # ResNeXt's last stage
    assert conv.nchwc_supports(Conv2dAttrs(groups=32), (128, 4, 3, 3), 16)  # 4 per group: 4 groups a block
    assert not conv.nchwc_supports(Conv2dAttrs(groups=8), (24, 3, 3, 3), 16)  # 3 per group: blocks cut groups
    assert conv.nchwc_supports(Conv2dAttrs(groups=64), (64, 1, 3, 3), 16)  # depthwise: channels in the lanes
    assert conv.nchwc_supports(Conv2dAttrs(groups=24), (24, 1, 3, 3), 16)  # depthwise, the last block padded
    assert conv.nchwc_supports(Conv2dAttrs(), (20, 12, 1, 1), 16)  # groups = 1: channels padded


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "cb", "knobs"), [
    ((1, 16, 10, 12), (32, 16, 3, 3), {"pad": (1, 1, 1, 1)}, 8, {}),
    ((1, 16, 10, 12), (32, 16, 3, 3), {"pad": (1, 1, 1, 1), "act": "relu"}, 16, {"tile_w": 4}),
    ((2, 12, 9, 9), (20, 12, 1, 1), {"act": "relu"}, 8, {"tile_w": 4}),  # channels padded, width tail
    ((1, 8, 11, 11), (8, 8, 3, 3), {"stride": (2, 2), "pad": (0, 1, 1, 0)}, 8, {"tile_w": 6}),
    ((1, 32, 8, 8), (32, 16, 3, 3), {"groups": 2, "pad": (1, 1, 1, 1), "act": "relu"}, 8, {}),  # whole-block groups
    ((1, 32, 7, 7), (64, 8, 1, 1), {"groups": 4}, 8, {"tile_w": 4}),
    ((1, 16, 9, 9), (16, 1, 3, 3), {"groups": 16, "pad": (1, 1, 1, 1), "act": "relu"}, 8, {}),  # depthwise
    ((1, 12, 9, 9), (12, 1, 3, 3), {"groups": 12, "pad": (1, 1, 1, 1), "act": "relu"}, 8, {}),  # padded lanes
    ((2, 16, 11, 10), (16, 1, 5, 5), {"groups": 16, "pad": (2, 2, 2, 2), "stride": (2, 2)}, 16, {"tile_w": 4}),
])
def test_conv2d_nchwc_with_packing_matches_the_reference(x_shape: tuple, w_shape: tuple, attrs: dict, cb: int,
                                                          knobs: dict) -> None:
    a = Conv2dAttrs(**attrs)
    assert conv.nchwc_supports(a, w_shape, cb)
    x, w, bias = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    tx, tw, tb = te.placeholder(x.shape, name="x"), te.placeholder(w.shape, name="w"), te.placeholder(bias.shape,
                                                                                                         name="b")
    xp = conv.pack_data(tx, cb)
    wp = conv.pack_weight(tw, cb, cb, a.groups)
    packed_x, packed_w = run_plain(xp, [tx], x), run_plain(wp, [tw], w)
    assert packed_x.shape == (x_shape[0], -(-x_shape[1] // cb), *x_shape[2:], cb)
    txp, twp = te.placeholder(xp.shape, name="xp"), te.placeholder(wp.shape, name="wp")
    y = conv.conv2d_nchwc(txp, twp, tb, a, w_shape[0])
    _, kernel = compile_group([y], [txp, twp, tb], Config(knobs))
    out = np.full(y.shape, np.nan, np.float32)
    kernel(packed_x, packed_w, bias, out)
    ty = te.placeholder(y.shape, name="y")
    got = run_plain(conv.unpack_data(ty, w_shape[0]), [ty], out)
    (want,) = OPS["conv2d"].ref([x, w, bias], a)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_fused_injective_producers_are_materialized_for_the_micro_kernel() -> None:
    # matmul(transpose(a), b) and a 1x1 conv of relu(x), the producers fused into the group
    a, b = rand(24, 16), rand(24, 32)
    ta, tb = te.placeholder(a.shape, name="A"), te.placeholder(b.shape, name="B")
    at = te.compute((16, 24), lambda i, j: ta[j, i], name="transpose", tag="injective")
    (y,) = registry.compute("matmul", [at, tb], None, [TensorType((16, 32))])
    f, kernel = compile_group([y], [ta, tb], Config({"tile_m": 8, "tile_n": 32}))
    out = np.full(y.shape, np.nan, np.float32)
    kernel(a, b, out)
    np.testing.assert_allclose(out, a.T @ b, rtol=1e-4, atol=1e-4)
    assert uses_gemm(f)

    x, w = rand(1, 8, 6, 8), rand(16, 8, 1, 1)
    tx, tw = te.placeholder(x.shape, name="x"), te.placeholder(w.shape, name="w")
    rx = te.compute(x.shape, lambda *i: te.max_(tx[i], 0.0), name="relu", tag="injective")
    attrs = Conv2dAttrs()
    (y,) = registry.compute("conv2d", [rx, tw], attrs, out_types("conv2d", [x, w], attrs))
    f, kernel = compile_group([y], [tx, tw], Config({"tile_oc": 8, "tile_w": 8}))
    out = np.full(y.shape, np.nan, np.float32)
    kernel(x, w, out)
    np.testing.assert_allclose(out, OPS["conv2d"].ref([np.maximum(x, 0), w], attrs)[0], rtol=1e-4, atol=1e-4)
    assert uses_gemm(f)


def test_conv2d_with_a_reshaping_consumer_keeps_a_buffer_of_its_own() -> None:
    # conv -> flatten fused: the consumer does not read the conv tile by tile
    x, w, bias = rand(1, 8, 6, 6), rand(16, 8, 3, 3), rand(16)
    attrs = Conv2dAttrs(pad=(1, 1, 1, 1), act="relu")
    ins = [te.placeholder(a.shape, name=f"in{k}") for k, a in enumerate((x, w, bias))]
    (y,) = registry.compute("conv2d", ins, attrs, out_types("conv2d", [x, w, bias], attrs))
    flat = te.compute((1, 16 * 36), lambda b, k: y[b, k // 36, k // 6 % 6, k % 6], name="flatten", tag="injective")
    f, kernel = compile_group([flat], ins, Config({"tile_w": 6, "tile_oc": 16}))
    out = np.full(flat.shape, np.nan, np.float32)
    kernel(x, w, bias, out)
    want = OPS["conv2d"].ref([x, w, bias], attrs)[0].reshape(1, -1)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    assert uses_gemm(f)


@pytest.mark.parametrize("knobs", [{}, {"kernel": "vector"}])
def test_matmul_that_is_also_an_output_next_to_its_consumer(knobs: dict) -> None:
    a, b = rand(16, 24), rand(24, 32)
    ta, tb = te.placeholder(a.shape, name="A"), te.placeholder(b.shape, name="B")
    (y,) = registry.compute("matmul", [ta, tb], None, [TensorType((16, 32))])
    r = te.compute(y.shape, lambda i, j: te.max_(y[i, j], 0.0), name="relu", tag="injective")
    s = registry.schedule_group([y, r], Config(knobs))
    kernel = build(lower(s, [ta, tb, y, r], "two"))["two"]
    out_y, out_r = np.full(y.shape, np.nan, np.float32), np.full(y.shape, np.nan, np.float32)
    kernel(a, b, out_y, out_r)
    np.testing.assert_allclose(out_y, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out_r, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
