"""NASNet-A Mobile 4@1056 (Zoph et al. 2018), following the TF-slim / Cadene layout.

Two reduction-style stem cells, then three stages of N normal cells separated by reduction
cells.  Separable convs are depthwise (group=C) + 1x1 convs, and each cell adds many small
branches that share inputs: lots of small fusable ops for TASO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import onnx

from .builder import BN_VARIANCE_GAIN, OnnxBuilder

BN_EPS = 1e-3
# Every cell output sums pairs of branches (doubling the variance), and He-initialised convs
# only preserve variance, so the 1x1 convs adapting cell inputs use gain 1 instead of 2 to
# keep activations O(1) across the 16 cells.
CELL_INPUT_GAIN = 1.0 / BN_VARIANCE_GAIN


@dataclass(frozen=True)
class NasNetConfig:
    """``filters`` is penultimate_filters / 24; ``cells`` is N, normal cells per stage."""

    stem: int
    filters: int
    cells: int
    classes: int
    image: int


CONFIGS = {
    "full": NasNetConfig(stem=32, filters=44, cells=4, classes=1000, image=224),
    "small": NasNetConfig(stem=8, filters=16, cells=2, classes=10, image=64),
}


class Feat(NamedTuple):
    """A feature map: tensor name, channel count and (square) spatial size."""

    name: str
    channels: int
    size: int


def _halved(size: int) -> int:
    """Spatial size after a stride-2 op padded k//2 (or a 1x1/2 pool): ceil(size / 2)."""
    return (size + 1) // 2


def _relu_conv_bn(b: OnnxBuilder, x: Feat, cout: int) -> Feat:
    """NASNet's pre-activation 1x1 conv that adapts a cell input to the cell's width."""
    y = b.conv(b.relu(x.name), x.channels, cout, 1, gain=CELL_INPUT_GAIN)
    return Feat(b.batch_norm(y, cout, BN_EPS), cout, x.size)


def _sep(b: OnnxBuilder, x: Feat, cout: int, kernel: int, stride: int = 1) -> str:
    """Stacked separable conv: (ReLU -> sep conv -> BN) twice, the first one strided."""
    y = b.separable_conv_bn(b.relu(x.name), x.channels, cout, kernel, stride, BN_EPS)
    return b.separable_conv_bn(b.relu(y), cout, cout, kernel, 1, BN_EPS)


def _avg(b: OnnxBuilder, x: str, stride: int = 1) -> str:
    """3x3 average pool with TF 'SAME' semantics (padding not counted)."""
    return b.avg_pool(x, 3, stride, 1, count_include_pad=False)


def _factorized_reduction(b: OnnxBuilder, x: Feat, cout: int) -> Feat:
    """Halve the spatial size with two 1x1/2 paths, the second shifted by one pixel."""
    x_relu = b.relu(x.name)
    shifted = b.pad(x_relu, [0, 0, -1, -1, 0, 0, 1, 1])  # == pad(0,1,0,1)[:, :, 1:, 1:]
    pooled = [b.avg_pool(t, 1, 2, 0, count_include_pad=False) for t in (x_relu, shifted)]
    paths = [b.conv(t, x.channels, cout // 2, 1, gain=CELL_INPUT_GAIN) for t in pooled]
    return Feat(b.batch_norm(b.concat(paths), cout, BN_EPS), cout, _halved(x.size))


def _cell_inputs(b: OnnxBuilder, cur: Feat, prev: Feat | None, filters: int) -> tuple[Feat, Feat]:
    """Adapt cur with a 1x1 conv and prev to cur's width and size (stem cell 0 has no prev)."""
    h = _relu_conv_bn(b, cur, filters)
    if prev is None:
        return h, cur
    if prev.size != cur.size:
        return h, _factorized_reduction(b, prev, filters)
    return h, _relu_conv_bn(b, prev, filters)


def _normal_cell(b: OnnxBuilder, cur: Feat, prev: Feat, filters: int) -> Feat:
    """Five add-combinations of separable convs, avg pools and identities; concat with prev."""
    h, p = _cell_inputs(b, cur, prev, filters)
    combos = [
        b.add(_sep(b, h, filters, 5), _sep(b, p, filters, 3)),
        b.add(_sep(b, p, filters, 5), _sep(b, p, filters, 3)),
        b.add(_avg(b, h.name), p.name),
        b.add(_avg(b, p.name), _avg(b, p.name)),
        b.add(_sep(b, h, filters, 3), h.name),
    ]
    return Feat(b.concat([p.name, *combos]), 6 * filters, cur.size)


def _reduction_cell(b: OnnxBuilder, cur: Feat, prev: Feat | None, filters: int) -> Feat:
    """Stride-2 combinations; the last two reuse the first, output is concat of combos 1-4."""
    h, p = _cell_inputs(b, cur, prev, filters)
    c0 = b.add(_sep(b, h, filters, 5, 2), _sep(b, p, filters, 7, 2))
    c1 = b.add(b.max_pool(h.name, 3, 2, 1), _sep(b, p, filters, 7, 2))
    c2 = b.add(_avg(b, h.name, 2), _sep(b, p, filters, 5, 2))
    c3 = b.add(_avg(b, c0), c1)
    c4 = b.add(_sep(b, Feat(c0, filters, _halved(cur.size)), filters, 3), b.max_pool(h.name, 3, 2, 1))
    return Feat(b.concat([c1, c2, c3, c4]), 4 * filters, _halved(cur.size))


def nasnet_a(size: str, seed: int) -> onnx.ModelProto:
    """NASNet-A Mobile: 3x3/2 stem conv, 2 stem cells, 3 x 4 normal + 2 reduction cells."""
    cfg = CONFIGS[size]
    b = OnnxBuilder("nasnet_a", seed)
    x = b.input("input", [1, 3, cfg.image, cfg.image])
    stem = b.conv_bn(x, 3, cfg.stem, 3, 2, 0, relu=False, eps=BN_EPS)
    x0 = Feat(stem, cfg.stem, (cfg.image - 3) // 2 + 1)
    s0 = _reduction_cell(b, x0, None, cfg.filters // 4)
    prev, cur = s0, _reduction_cell(b, s0, x0, cfg.filters // 2)
    for stage in range(3):
        filters = cfg.filters * 2**stage
        if stage > 0:
            prev, cur = cur, _reduction_cell(b, cur, prev, filters)
        for _ in range(cfg.cells):
            prev, cur = cur, _normal_cell(b, cur, prev, filters)
    logits = b.classifier(b.relu(cur.name), cur.channels, cfg.classes)
    return b.model({"output": (logits, [1, cfg.classes])}, opset=17)
