"""SqueezeNet 1.1 (Iandola et al. 2016), torchvision layout.

Fire modules (1x1 squeeze, then parallel 1x1 and 3x3 expands sharing one input) and
ceil-mode max pools; no BatchNorm, so plain He-initialised convs keep activations O(1).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from .builder import OnnxBuilder

# (squeeze, expand) per Fire module; "M" is a 3x3/2 ceil-mode max pool.
LAYOUT: tuple[tuple[int, int] | str, ...] = (
    "M", (16, 64), (16, 64),
    "M", (32, 128), (32, 128),
    "M", (48, 192), (48, 192), (64, 256), (64, 256),
)  # fmt: skip


@dataclass(frozen=True)
class SqueezeNetConfig:
    """``width`` divides every channel count."""

    width: int
    classes: int
    image: int


CONFIGS = {
    "full": SqueezeNetConfig(1, 1000, 224),
    "small": SqueezeNetConfig(4, 10, 64),
}


def _fire(b: OnnxBuilder, x: str, cin: int, squeeze: int, expand: int) -> str:
    """Squeeze 1x1 -> ReLU, then concat(ReLU(1x1 expand), ReLU(3x3 expand))."""
    s = b.relu(b.conv(x, cin, squeeze, 1))
    return b.concat([b.relu(b.conv(s, squeeze, expand, 1)), b.relu(b.conv(s, squeeze, expand, 3))])


def squeezenet(size: str, seed: int) -> onnx.ModelProto:
    """SqueezeNet 1.1: 3x3/2 stem conv, 8 Fire modules, conv classifier; ~1.24M params."""
    cfg = CONFIGS[size]
    b = OnnxBuilder("squeezenet", seed)
    x = b.input("input", [1, 3, cfg.image, cfg.image])
    channels = 64 // cfg.width
    x = b.relu(b.conv(x, 3, channels, 3, 2, 0))
    for layer in LAYOUT:
        if isinstance(layer, str):
            x = b.max_pool(x, 3, 2, ceil_mode=True)
        else:
            squeeze, expand = (c // cfg.width for c in layer)
            x, channels = _fire(b, x, channels, squeeze, expand), 2 * expand
    x = b.relu(b.conv(x, channels, cfg.classes, 1))
    logits = b.flatten(b.global_avg_pool(x))
    return b.model({"output": (logits, [1, cfg.classes])}, opset=17)
