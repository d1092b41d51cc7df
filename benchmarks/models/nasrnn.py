"""The NAS recurrent cell (Zoph & Le 2017) unrolled over time, as in TASO's nasrnn example.

Each step feeds x_t and h to eight independent MatMul pairs (the gate inputs) and combines
them through a fixed tree of add/mul with sigmoid/tanh/relu.  Eight MatMuls sharing one
input are what TASO merges into a single wide MatMul.  Unlike TASO's example, which draws
fresh weights at every step, the 16 weight matrices are shared across steps as in a real RNN.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from .builder import OnnxBuilder

GATES = 8


@dataclass(frozen=True)
class NasRnnConfig:
    hidden: int
    steps: int


CONFIGS = {
    "full": NasRnnConfig(hidden=512, steps=5),
    "small": NasRnnConfig(hidden=32, steps=5),
}


def _cell(b: OnnxBuilder, x: str, h: str, weights: list[tuple[str, str]]) -> str:
    """One NAS cell step: gate inputs t_i = x W_i + h U_i, then the searched combine tree."""
    t = [b.add(b.matmul(x, w), b.matmul(h, u)) for w, u in weights]
    m0 = b.add(b.relu(t[0]), b.sigmoid(t[3]))
    m1 = b.add(b.sigmoid(t[1]), b.tanh(t[2]))
    m2 = b.mul(b.sigmoid(t[4]), b.tanh(t[5]))
    m3 = b.mul(b.sigmoid(t[6]), b.relu(t[7]))
    m4 = b.add(b.sigmoid(m1), b.tanh(m2))
    m5 = b.mul(b.tanh(m0), b.tanh(m3))
    m6 = b.mul(b.tanh(m4), b.tanh(m5))
    return b.tanh(m6)


def nasrnn(size: str, seed: int) -> onnx.ModelProto:
    """NasRNN: hidden 512, 5 steps; input x [T, 1, H], output the final hidden state [1, H]."""
    cfg = CONFIGS[size]
    b = OnnxBuilder("nasrnn", seed)
    hid = cfg.hidden
    std = hid**-0.5
    weights = [(b.normal((hid, hid), std, "w_x"), b.normal((hid, hid), std, "w_h")) for _ in range(GATES)]
    h = b.normal((1, hid), 0.5, "h0")
    x = b.input("x", [cfg.steps, 1, hid])
    for x_t in b.split(x, [1] * cfg.steps, axis=0):
        h = _cell(b, b.reshape(x_t, [1, hid]), h, weights)
    return b.model({"output": (h, [1, hid])}, opset=17)
