"""The quantization scheme of the accelerator target and `run_layer`, its entry point.

Scheme (integer-only inference, symmetric, no zero points):
- activations: int8 per tensor, real = q * s_x with s_x a power of two or any positive
  float (`activation_scale`: max|x| / 127);
- weights: int8 per output channel, real = q * s_w[c] (`quantize_weights`: max|w[c]| / 127);
- bias: int32 in the accumulator's scale s_x * s_w[c] (`quantize_bias`);
- accumulation: int32 (int8 x int8 products; wraps modulo 2^32, which the bounds below
  keep from happening for real layers);
- requantize to the next layer's scale s_y: y = clip((acc * m[c] + 2^(shift-1)) >> shift,
  lo, 127) with m[c] = round(s_x * s_w[c] / s_y * 2^shift) and lo = 0 after a ReLU else -128
  (`requant_params`: the largest shift <= 24 whose multipliers fit in 16 bits; computed in 64
  bits by the ALU's `requant`, so it never overflows). With power-of-two scales m[c] = 1.
The error of one layer against float inference (`error_bound`, per output element, for an
output scale that does not clip): with K products per output,
  s_x/2 sum|w| + s_w[c]/2 sum|x| + K s_x s_w[c]/4   (rounding x and w to their grids)
  + s_x s_w[c]/2                                  (rounding the bias)
  + s_y (|acc| 2^-(shift+1) + 1/2)                (the multiplier's and the output's rounding);
ReLU does not increase it. `dequantize` maps results back.

API: `run_layer(kind, x, w, bias, attrs, config, latency_hiding)` runs one "conv2d" (x: int8
(1, C, H, W), w: int8 (OC, C, KH, KW)) or "matmul" (x: int8 (M, K), w: int8 (K, N)) layer on
the simulated accelerator and returns (output, `Stats`): int8 when `attrs.shift` is set,
else the int32 accumulators (+ bias, ReLU). `reference` computes the same bit for bit in
numpy. The host packs tensors into 16-channel tiles (zero-padding channels), subsamples the
input of a strided 1x1 convolution, and turns a convolution with fewer input channels than
one tile (a network's first layer) into an im2col matmul.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from taso_py.codegen.backends.accel.codegen import ConvShape, Epilogue, choose_tiling, conv2d_program
from taso_py.codegen.backends.accel.config import AccelConfig
from taso_py.codegen.backends.accel.simulator import Simulator, Stats
from taso_py.codegen.errors import CodegenError


@dataclass(frozen=True)
class LayerAttrs:
    """Convolution geometry and the epilogue: `mult` (per output channel) with `shift`
    requantizes to int8; without `shift` the output is int32."""

    stride: int = 1
    pad: int = 0
    relu: bool = False
    shift: int | None = None
    mult: tuple[int, ...] | None = None


# ---- the scheme ------------------------------------------------------------------------------

def activation_scale(x: np.ndarray, power_of_two: bool = False) -> float:
    s = float(np.max(np.abs(x))) / 127 or 1.0
    return 2.0 ** math.ceil(math.log2(s)) if power_of_two else s


def quantize(x: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
    return np.clip(np.round(x / scale), -127, 127).astype(np.int8)


def dequantize(q: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
    return q.astype(np.float32) * np.float32(scale)


def quantize_weights(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per output channel (axis 0): int8 weights and their scales."""
    scales = np.max(np.abs(w.reshape(w.shape[0], -1)), axis=1) / 127
    scales = np.where(scales > 0, scales, 1.0)
    return quantize(w, scales.reshape(-1, *([1] * (w.ndim - 1)))), scales


def quantize_bias(b: np.ndarray, s_x: float, s_w: np.ndarray) -> np.ndarray:
    return np.round(b / (s_x * s_w)).astype(np.int32)


def requant_params(s_x: float, s_w: np.ndarray, s_y: float) -> tuple[int, tuple[int, ...]]:
    """(shift, per-channel multipliers) approximating s_x * s_w[c] / s_y."""
    ratio = s_x * np.asarray(s_w, np.float64) / s_y
    shift = 24
    while shift > 1 and np.max(np.round(ratio * 2.0 ** shift)) >= 1 << 15:
        shift -= 1
    return shift, tuple(int(m) for m in np.round(ratio * 2.0 ** shift))


def error_bound(kind: str, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: LayerAttrs, s_x: float,
                s_w: np.ndarray, s_y: float) -> np.ndarray:
    """The bound above for float `x`, `w`, `b` (layouts as `run_layer`'s), shaped like the output."""
    s_w = np.asarray(s_w, np.float64)
    bias = np.zeros(len(s_w)) if b is None else np.abs(b)
    if kind == "matmul":
        k, shape = w.shape[0], (x.shape[0], w.shape[1])
        sum_w, sum_x = np.abs(w).sum(0)[None, :], np.abs(x).sum(1)[:, None]
        sw, bias = s_w[None, :], bias[None, :]
    else:
        cols, oh, ow = _im2col(np.abs(x[0]), w.shape[2], w.shape[3], attrs.stride, attrs.pad)
        k, shape = cols.shape[0], (1, w.shape[0], oh, ow)
        sum_w, sum_x = np.abs(w).reshape(w.shape[0], -1).sum(1)[:, None], cols.sum(0)[None, :]
        sw, bias = s_w[:, None], bias[:, None]
    acc = 127 * 127 * k + bias / (s_x * sw) + 1  # |acc| in integer units
    shift = 31 if attrs.shift is None else attrs.shift
    bound = s_x / 2 * sum_w + sw / 2 * sum_x + k * s_x * sw / 4 + s_x * sw / 2 + s_y * (acc * 2.0 ** -(shift + 1) + 0.5)
    return bound.reshape(shape)


# ---- the reference ---------------------------------------------------------------------------

def reference(kind: str, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, attrs: LayerAttrs) -> np.ndarray:
    """What the accelerator computes, in numpy (int8 inputs, exact int32 semantics)."""
    if kind == "matmul":
        acc = _wrap(x.astype(np.float64) @ w.astype(np.float64))
        chan_axis = 1
    elif kind == "conv2d":
        cols, oh, ow = _im2col(x[0], w.shape[2], w.shape[3], attrs.stride, attrs.pad)
        acc = _wrap(w.reshape(w.shape[0], -1).astype(np.float64) @ cols.astype(np.float64)).reshape(1, -1, oh, ow)
        chan_axis = 1
    else:
        raise CodegenError(f"accel: no layer kind {kind!r} (conv2d, matmul)")
    shape = [1] * acc.ndim
    shape[chan_axis] = -1
    if bias is not None:
        acc = _wrap(acc.astype(np.int64) + bias.astype(np.int64).reshape(shape))
    if attrs.shift is None:
        return np.maximum(acc, 0) if attrs.relu else acc
    if attrs.mult is None:
        raise CodegenError("accel: a requantizing layer needs per-channel multipliers (attrs.mult)")
    m = np.asarray(attrs.mult, np.int64).reshape(shape)
    y = np.clip((acc.astype(np.int64) * m + (1 << (attrs.shift - 1))) >> attrs.shift, -(1 << 31), (1 << 31) - 1)
    return np.clip(y, 0 if attrs.relu else -128, 127).astype(np.int8)


def _wrap(a: np.ndarray) -> np.ndarray:
    return np.round(a).astype(np.int64).astype(np.int32)


def _im2col(x: np.ndarray, kh: int, kw: int, stride: int, pad: int) -> tuple[np.ndarray, int, int]:
    """(C*KH*KW, OH*OW) columns of a (C, H, W) input, rows ordered (c, kh, kw)."""
    c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    cols = np.empty((c, kh, kw, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, i, j] = xp[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
    return cols.reshape(c * kh * kw, oh * ow), oh, ow


# ---- running a layer -------------------------------------------------------------------------

def run_layer(kind: str, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, attrs: LayerAttrs,
              config: AccelConfig | None = None, latency_hiding: bool = True, *, jitter: float = 0.0,
              seed: int | None = None) -> tuple[np.ndarray, Stats]:
    """One layer on the simulated accelerator; see the module docstring."""
    cfg = config or AccelConfig()
    if x.dtype != np.int8 or w.dtype != np.int8:
        raise CodegenError(f"accel: {kind} needs int8 input and weights, got {x.dtype} and {w.dtype}")
    want = {"matmul": (2, 2), "conv2d": (4, 4)}.get(kind)
    if want is None:
        raise CodegenError(f"accel: no layer kind {kind!r} (conv2d, matmul)")
    if (x.ndim, w.ndim) != want or (kind == "conv2d" and x.shape[0] != 1) or \
            x.shape[-1 if kind == "matmul" else 1] != w.shape[0 if kind == "matmul" else 1]:
        raise CodegenError(f"accel: {kind} of {x.shape} by {w.shape}: expected matmul (M, K) @ (K, N) or a batch-1 "
                           f"conv2d (1, C, H, W) * (OC, C, KH, KW)")
    if kind == "matmul":
        m, k = x.shape
        n = w.shape[1]
        xs, ws, shape = x.T.reshape(k, m, 1), w.T.reshape(n, k, 1, 1), ConvShape.matmul(m, k, n)
    else:
        xs, ws, shape = _device_conv(x[0], w, attrs, cfg)
    epi = Epilogue(bias=bias is not None, shift=attrs.shift, relu=attrs.relu)
    prog = conv2d_program(shape, epi, cfg, latency_hiding=latency_hiding, tiling=_tiling(shape, epi, cfg))
    icb, ocb = -(-shape.ic // cfg.block_in), -(-shape.oc // cfg.block_out)
    dram = {"inp": _pack_channels(xs, icb * cfg.block_in).reshape(icb, cfg.block_in, -1).transpose(0, 2, 1)
            .reshape(-1, cfg.block_in),
            "wgt": _pack_weights(ws, icb, ocb, cfg)}
    out_tiles, out_elems, out_dtype = prog.dram["out"]
    dram["out"] = np.zeros((out_tiles, out_elems), out_dtype)
    if bias is not None:
        dram["bias"] = _pack_channels(bias.astype(np.int32), ocb * cfg.block_out).reshape(ocb, cfg.block_out)
    if attrs.shift is not None:
        if attrs.mult is None:
            raise CodegenError("accel: a requantizing layer needs per-channel multipliers (attrs.mult)")
        dram["mult"] = _pack_channels(np.asarray(attrs.mult, np.int32), ocb * cfg.block_out).reshape(ocb, -1)
    stats = Simulator(cfg).run(prog.insns, dram, jitter=jitter, seed=seed)
    out = dram["out"].reshape(ocb, shape.oh, shape.ow, cfg.block_out).transpose(0, 3, 1, 2)
    out = out.reshape(ocb * cfg.block_out, shape.oh, shape.ow)[:shape.oc]
    if kind == "matmul":
        return np.ascontiguousarray(out[:, :, 0].T), stats
    oh = (x.shape[2] + 2 * attrs.pad - w.shape[2]) // attrs.stride + 1
    return np.ascontiguousarray(out.reshape(1, shape.oc, oh, -1)), stats


@functools.lru_cache(maxsize=512)
def _tiling(shape: ConvShape, epi: Epilogue, cfg: AccelConfig):  # type: ignore[no-untyped-def]
    return choose_tiling(shape, epi, cfg)


def device_shape(shape: ConvShape, cfg: AccelConfig | None = None) -> ConvShape:
    """The convolution the accelerator runs for `shape` after the host's rewrites."""
    cfg = cfg or AccelConfig()
    if shape.ic < cfg.block_in and shape.kh * shape.kw > 1:  # im2col on the host
        return ConvShape.matmul(shape.oh * shape.ow, shape.ic * shape.kh * shape.kw, shape.oc)
    if shape.kh == shape.kw == 1 and shape.stride > 1 and shape.pad == 0:  # subsample on the host
        return ConvShape(shape.ic, shape.oh, shape.ow, shape.oc, 1, 1)
    return shape


def _device_conv(x: np.ndarray, w: np.ndarray, attrs: LayerAttrs,
                 cfg: AccelConfig) -> tuple[np.ndarray, np.ndarray, ConvShape]:
    c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    shape = ConvShape(c, h, wd, oc, kh, kw, attrs.stride, attrs.pad)
    dev = device_shape(shape, cfg)
    if dev.kw == 1 and dev.iw == 1 and (kh, kw) != (1, 1):  # im2col
        cols, _, _ = _im2col(x, kh, kw, attrs.stride, attrs.pad)
        return cols.reshape(-1, dev.ih, 1), w.reshape(oc, -1, 1, 1), dev
    if dev != shape:
        s = attrs.stride
        return x[:, ::s, ::s][:, :dev.ih, :dev.iw], w, dev
    return x, w, dev


def _pack_channels(a: np.ndarray, channels: int) -> np.ndarray:
    """`a` with axis 0 zero-padded to `channels`."""
    pad = [(0, channels - a.shape[0])] + [(0, 0)] * (a.ndim - 1)
    return np.pad(a, pad)


def _pack_weights(w: np.ndarray, icb: int, ocb: int, cfg: AccelConfig) -> np.ndarray:
    oc, ic, kh, kw = w.shape
    wp = np.zeros((ocb * cfg.block_out, icb * cfg.block_in, kh, kw), np.int8)
    wp[:oc, :ic] = w
    wp = wp.reshape(ocb, cfg.block_out, icb, cfg.block_in, kh, kw).transpose(0, 2, 4, 5, 1, 3)
    return np.ascontiguousarray(wp).reshape(-1, cfg.wgt_tile_elems)
