"""Inception-v3 (Szegedy et al. 2016), torchvision layout without the auxiliary head.

The factorised 1x7/7x1 and 1x3/3x1 convolutions and the many parallel branches sharing an
input are what make this model interesting for TASO's conv-merging rewrites.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from .builder import IntOrPair, OnnxBuilder

BN_EPS = 1e-3


@dataclass(frozen=True)
class InceptionConfig:
    """``width`` scales every channel count; ``repeats`` is how many A/C/E blocks to keep."""

    width: float
    repeats: tuple[int, int, int]
    classes: int
    image: int


CONFIGS = {
    "full": InceptionConfig(1.0, (3, 4, 2), 1000, 299),
    "small": InceptionConfig(0.125, (1, 1, 1), 10, 75),
}

# Per-block extra widths from the paper/torchvision: pool_features of Mixed_5b/c/d and the
# 7x7 bottleneck width of Mixed_6b/c/d/e.
POOL_FEATURES = (32, 64, 64)
C7_WIDTHS = (128, 160, 160, 192)
# (kernel, pads) of the factorised 7x7: a 1x7 row and a 7x1 column.
ROW7 = ((1, 7), (0, 3))
COL7 = ((7, 1), (3, 0))


class _Net:
    """Channel-tracking wrapper so block code reads as (out_channels, kernel, ...) lists."""

    def __init__(self, builder: OnnxBuilder, width: float) -> None:
        self.b = builder
        self.width = width

    def ch(self, channels: int) -> int:
        """Scaled channel count (at least 1)."""
        return max(1, round(channels * self.width))

    def conv(self, x: str, cin: int, cout: int, kernel: IntOrPair, stride: int = 1, pads: IntOrPair = 0) -> str:
        """BasicConv2d: conv -> BN(eps=1e-3) -> ReLU, with ``cout`` given at full width."""
        return self.b.conv_bn(x, cin, self.ch(cout), kernel, stride, pads, eps=BN_EPS)

    def chain(self, x: str, cin: int, layers: list[tuple[int, IntOrPair, IntOrPair]]) -> tuple[str, int]:
        """Sequence of stride-1 BasicConv2d given as (out_channels, kernel, pads)."""
        for cout, kernel, pads in layers:
            x, cin = self.conv(x, cin, cout, kernel, 1, pads), self.ch(cout)
        return x, cin

    def avg_branch(self, x: str, cin: int, cout: int) -> tuple[str, int]:
        """3x3/1 average pool (PyTorch counts the padding) then a 1x1 conv."""
        pooled = self.b.avg_pool(x, 3, 1, 1, count_include_pad=True)
        return self.conv(pooled, cin, cout, 1), self.ch(cout)

    def concat(self, branches: list[tuple[str, int]]) -> tuple[str, int]:
        return self.b.concat([t for t, _ in branches]), sum(c for _, c in branches)


def _block_a(n: _Net, x: str, cin: int, pool_features: int) -> tuple[str, int]:
    return n.concat(
        [
            n.chain(x, cin, [(64, 1, 0)]),
            n.chain(x, cin, [(48, 1, 0), (64, 5, 2)]),
            n.chain(x, cin, [(64, 1, 0), (96, 3, 1), (96, 3, 1)]),
            n.avg_branch(x, cin, pool_features),
        ]
    )


def _block_b(n: _Net, x: str, cin: int) -> tuple[str, int]:
    """Grid reduction 35 -> 17."""
    dbl, c = n.chain(x, cin, [(64, 1, 0), (96, 3, 1)])
    return n.concat(
        [
            (n.conv(x, cin, 384, 3, 2), n.ch(384)),
            (n.conv(dbl, c, 96, 3, 2), n.ch(96)),
            (n.b.max_pool(x, 3, 2), cin),
        ]
    )


def _block_c(n: _Net, x: str, cin: int, c7: int) -> tuple[str, int]:
    """Factorised 7x7 convolutions as 1x7 / 7x1 pairs."""
    return n.concat(
        [
            n.chain(x, cin, [(192, 1, 0)]),
            n.chain(x, cin, [(c7, 1, 0), (c7, *ROW7), (192, *COL7)]),
            n.chain(x, cin, [(c7, 1, 0), (c7, *COL7), (c7, *ROW7), (c7, *COL7), (192, *ROW7)]),
            n.avg_branch(x, cin, 192),
        ]
    )


def _block_d(n: _Net, x: str, cin: int) -> tuple[str, int]:
    """Grid reduction 17 -> 8."""
    b3, c3 = n.chain(x, cin, [(192, 1, 0)])
    b7, c7 = n.chain(x, cin, [(192, 1, 0), (192, *ROW7), (192, *COL7)])
    return n.concat(
        [
            (n.conv(b3, c3, 320, 3, 2), n.ch(320)),
            (n.conv(b7, c7, 192, 3, 2), n.ch(192)),
            (n.b.max_pool(x, 3, 2), cin),
        ]
    )


def _split_1x3_3x1(n: _Net, x: str, cin: int) -> tuple[str, int]:
    """Expanded-filter-bank pair: parallel 1x3 and 3x1 convs concatenated."""
    return n.concat([n.chain(x, cin, [(384, (1, 3), (0, 1))]), n.chain(x, cin, [(384, (3, 1), (1, 0))])])


def _block_e(n: _Net, x: str, cin: int) -> tuple[str, int]:
    return n.concat(
        [
            n.chain(x, cin, [(320, 1, 0)]),
            _split_1x3_3x1(n, *n.chain(x, cin, [(384, 1, 0)])),
            _split_1x3_3x1(n, *n.chain(x, cin, [(448, 1, 0), (384, 3, 1)])),
            n.avg_branch(x, cin, 192),
        ]
    )


def _stem(n: _Net, x: str) -> tuple[str, int]:
    """299 -> 35: five convs and two max pools."""
    x, c = n.conv(x, 3, 32, 3, 2), n.ch(32)
    x, c = n.chain(x, c, [(32, 3, 0), (64, 3, 1)])
    x = n.b.max_pool(x, 3, 2)
    x, c = n.chain(x, c, [(80, 1, 0), (192, 3, 0)])
    return n.b.max_pool(x, 3, 2), c


def inception_v3(size: str, seed: int) -> onnx.ModelProto:
    """Inception-v3: 3xA, B, 4xC, D, 2xE, ~23.8M parameters at full size."""
    cfg = CONFIGS[size]
    n = _Net(OnnxBuilder("inception_v3", seed), cfg.width)
    x, c = _stem(n, n.b.input("input", [1, 3, cfg.image, cfg.image]))
    n_a, n_c, n_e = cfg.repeats
    for pool_features in POOL_FEATURES[-n_a:]:
        x, c = _block_a(n, x, c, pool_features)
    x, c = _block_b(n, x, c)
    for c7 in C7_WIDTHS[-n_c:]:
        x, c = _block_c(n, x, c, c7)
    x, c = _block_d(n, x, c)
    for _ in range(n_e):
        x, c = _block_e(n, x, c)
    logits = n.b.classifier(x, c, cfg.classes)
    return n.b.model({"output": (logits, [1, cfg.classes])}, opset=17)
