"""Small models each built around one substitution the shipped library must find.

They stand for the places real models gain: projections sharing an input (with and without
biases, on matrices and on the rank-3 activations of transformers), sibling convolutions of an
Inception block, a 1x1 convolution beside a 3x3 one, and the gates of a recurrent cell. Each is
a whole ONNX model with seeded weights, as a user would hand it to `taso optimize`.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from .builder import OnnxBuilder

OPSET = 17


def parallel_matmuls(seed: int = 0) -> onnx.ModelProto:
    """Three MatMuls of one [32, 256] input (bias-free projections, as in TASO's examples)."""
    b = OnnxBuilder("parallel_matmuls", seed)
    x = b.input("x", [32, 256])
    outs = {f"y{i}": (b.matmul(x, b.normal((256, 256), 0.06, "w")), [32, 256]) for i in range(3)}
    return b.model(outs, OPSET)


def qkv_projections(seed: int = 0) -> onnx.ModelProto:
    """A transformer's Q, K and V: MatMul + Add of one [1, 64, 256] input."""
    b = OnnxBuilder("qkv_projections", seed)
    x = b.input("x", [1, 64, 256])
    outs = {name: (b.linear(x, 256, 256), [1, 64, 256]) for name in ("q", "k", "v")}
    return b.model(outs, OPSET)


def sibling_1x1_convs(seed: int = 0) -> onnx.ModelProto:
    """An Inception block's 1x1 convolutions (bias, ReLU) reading the same input."""
    b = OnnxBuilder("sibling_1x1_convs", seed)
    x = b.input("x", [1, 64, 28, 28])
    outs = {f"y{i}": (b.relu(b.conv(x, 64, c, 1)), [1, c, 28, 28]) for i, c in enumerate((32, 48, 64))}
    return b.model(outs, OPSET)


def sibling_1x1_3x3_convs(seed: int = 0) -> onnx.ModelProto:
    """A 1x1 and a 3x3 convolution of one input: TASO enlarges the 1x1 kernel to merge them."""
    b = OnnxBuilder("sibling_1x1_3x3_convs", seed)
    x = b.input("x", [1, 16, 14, 14])
    return b.model({"y0": (b.relu(b.conv(x, 16, 16, 1)), [1, 16, 14, 14]),
                    "y1": (b.relu(b.conv(x, 16, 16, 3)), [1, 16, 14, 14])}, OPSET)


def lstm_gates(seed: int = 0) -> onnx.ModelProto:
    """One LSTM step written out: four gates, each x W + h U + b, then the cell update."""
    b = OnnxBuilder("lstm_gates", seed)
    hid = 128
    x, h, c = b.input("x", [1, hid]), b.input("h", [1, hid]), b.input("c", [1, hid])
    gates = [b.add(b.add(b.matmul(x, b.normal((hid, hid), 0.09, "w")), b.matmul(h, b.normal((hid, hid), 0.09, "u"))),
                   b.normal((hid,), 0.01, "b")) for _ in range(4)]
    i, f, o = (b.sigmoid(g) for g in gates[:3])
    c_new = b.add(b.mul(f, c), b.mul(i, b.tanh(gates[3])))
    h_new = b.mul(o, b.tanh(c_new))
    return b.model({"h_out": (h_new, [1, hid]), "c_out": (c_new, [1, hid])}, OPSET)


BLOCKS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "parallel_matmuls": parallel_matmuls,
    "qkv_projections": qkv_projections,
    "sibling_1x1_convs": sibling_1x1_convs,
    "sibling_1x1_3x3_convs": sibling_1x1_3x3_convs,
    "lstm_gates": lstm_gates,
}
