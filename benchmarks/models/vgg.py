"""VGG-19 (Simonyan & Zisserman 2015), configuration E with its three FC layers.

A long plain chain of 3x3 conv + ReLU: the model where TASO's gains come mostly from
fusing and from the huge, memory-bound FC layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from .builder import OnnxBuilder

# Conv output channels per stage; each stage ends with a 2x2/2 max pool.
STAGES = ((64, 64), (128, 128), (256,) * 4, (512,) * 4, (512,) * 4)
FC_WIDTH = 4096


@dataclass(frozen=True)
class VggConfig:
    """``width`` divides every conv and FC width."""

    width: int
    classes: int
    image: int


CONFIGS = {
    "full": VggConfig(1, 1000, 224),
    "small": VggConfig(8, 10, 32),
}


def vgg19(size: str, seed: int) -> onnx.ModelProto:
    """VGG-19: 16 conv layers, 5 max pools, FC-4096, FC-4096, FC-1000; ~143.7M params."""
    cfg = CONFIGS[size]
    b = OnnxBuilder("vgg19", seed)
    x = b.input("input", [1, 3, cfg.image, cfg.image])
    channels = 3
    for stage in STAGES:
        for cout in stage:
            x = b.relu(b.conv(x, channels, cout // cfg.width, 3))
            channels = cout // cfg.width
        x = b.max_pool(x, 2, 2)
    spatial = cfg.image // 2 ** len(STAGES)
    fc = FC_WIDTH // cfg.width
    x = b.relu(b.gemm(b.flatten(x), channels * spatial * spatial, fc, gain=2.0))
    x = b.relu(b.gemm(x, fc, fc, gain=2.0))
    logits = b.gemm(x, fc, cfg.classes, gain=2.0)
    return b.model({"output": (logits, [1, cfg.classes])}, opset=17)
