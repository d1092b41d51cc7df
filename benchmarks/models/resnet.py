"""ResNet-50 (He et al. 2016) and ResNeXt-50 32x4d (Xie et al. 2017), torchvision layout.

Both use bottleneck blocks with the stride on the 3x3 conv ("ResNet v1.5"); ResNeXt only
widens the 3x3 conv and splits it into 32 groups, which is the pattern TASO rewrites.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from .builder import OnnxBuilder


@dataclass(frozen=True)
class ResNetConfig:
    """Width/depth knobs; ``bottleneck = planes * width_per_group / 64 * groups``."""

    blocks: tuple[int, ...]
    stem: int
    planes: tuple[int, ...]
    groups: int
    width_per_group: int
    classes: int
    image: int


EXPANSION = 4
# Random BatchNorm statistics do not renormalise, so unscaled residual sums grow ~2x per
# block (logits ~1e4 at full depth).  Fixup-style down-scaling of the branch's last conv and
# of the projection shortcut keeps every stage's activations at std ~1-2.
RESIDUAL_GAIN = 0.2
SHORTCUT_GAIN = 0.5
FULL_BLOCKS = (3, 4, 6, 3)
FULL_PLANES = (64, 128, 256, 512)
SMALL_PLANES = (8, 16, 32, 64)

CONFIGS = {
    ("resnet50", "full"): ResNetConfig(FULL_BLOCKS, 64, FULL_PLANES, 1, 64, 1000, 224),
    ("resnet50", "small"): ResNetConfig((1, 1, 1, 1), 8, SMALL_PLANES, 1, 64, 10, 32),
    ("resnext50", "full"): ResNetConfig(FULL_BLOCKS, 64, FULL_PLANES, 32, 4, 1000, 224),
    ("resnext50", "small"): ResNetConfig((1, 1, 1, 1), 8, SMALL_PLANES, 8, 16, 10, 32),
}


def _bottleneck(b: OnnxBuilder, x: str, cin: int, planes: int, stride: int, cfg: ResNetConfig) -> str:
    """1x1 reduce -> 3x3 (grouped, strided) -> 1x1 expand, plus identity/projection shortcut."""
    width = planes * cfg.width_per_group // 64 * cfg.groups
    cout = planes * EXPANSION
    y = b.conv_bn(x, cin, width, 1)
    y = b.conv_bn(y, width, width, 3, stride, group=cfg.groups)
    y = b.conv_bn(y, width, cout, 1, relu=False, gain=RESIDUAL_GAIN)
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = b.conv_bn(x, cin, cout, 1, stride, relu=False, gain=SHORTCUT_GAIN)
    return b.relu(b.add(y, shortcut))


def _build(name: str, cfg: ResNetConfig, seed: int) -> onnx.ModelProto:
    b = OnnxBuilder(name, seed)
    x = b.input("input", [1, 3, cfg.image, cfg.image])
    x = b.conv_bn(x, 3, cfg.stem, 7, 2, 3)
    x = b.max_pool(x, 3, 2, 1)
    channels = cfg.stem
    for stage, (blocks, planes) in enumerate(zip(cfg.blocks, cfg.planes, strict=True)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _bottleneck(b, x, channels, planes, stride, cfg)
            channels = planes * EXPANSION
    logits = b.classifier(x, channels, cfg.classes)
    return b.model({"output": (logits, [1, cfg.classes])}, opset=17)


def resnet50(size: str, seed: int) -> onnx.ModelProto:
    """ResNet-50: 16 bottleneck blocks, ~25.6M parameters at full size."""
    return _build("resnet50", CONFIGS["resnet50", size], seed)


def resnext50(size: str, seed: int) -> onnx.ModelProto:
    """ResNeXt-50 32x4d: group=32 3x3 convs, ~25.0M parameters at full size."""
    return _build("resnext50", CONFIGS["resnext50", size], seed)
