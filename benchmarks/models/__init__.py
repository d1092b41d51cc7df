"""TASO's evaluation models built in code as ONNX (no downloads), at full or small size.

``build(name, size, seed)`` returns a ModelProto with seeded random weights; the same
seed gives a byte-identical model.  "small" keeps each architecture and op mix but shrinks
widths, depths and inputs (< 2M params) so tests run in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx

from .bert import bert
from .builder import count_params
from .inception import inception_v3
from .nasnet import nasnet_a
from .nasrnn import nasrnn
from .resnet import resnet50, resnext50
from .squeezenet import squeezenet
from .vgg import vgg19

SIZES = ("full", "small")


@dataclass(frozen=True)
class ModelSpec:
    """A benchmark model: a one-line description and its ``(size, seed)`` builder."""

    description: str
    builder: Callable[[str, int], onnx.ModelProto]


MODELS: dict[str, ModelSpec] = {
    "resnet50": ModelSpec("ResNet-50, 224x224, bottleneck blocks [3,4,6,3]", resnet50),
    "resnext50": ModelSpec("ResNeXt-50 32x4d, 224x224, group=32 3x3 convs", resnext50),
    "inception_v3": ModelSpec("Inception-v3, 299x299, no auxiliary head", inception_v3),
    "squeezenet": ModelSpec("SqueezeNet 1.1, 224x224, Fire modules", squeezenet),
    "bert": ModelSpec("BERT-base encoder, 12 layers, hidden 768, seq 64, separate Q/K/V", bert),
    "nasnet_a": ModelSpec("NASNet-A Mobile 4@1056, 224x224", nasnet_a),
    "nasrnn": ModelSpec("NAS recurrent cell, hidden 512, unrolled 5 steps", nasrnn),
    "vgg19": ModelSpec("VGG-19, 224x224, with 3 FC layers", vgg19),
}

__all__ = ["MODELS", "SIZES", "ModelSpec", "build", "count_params", "names"]


def names() -> list[str]:
    """Model names in the suite's canonical order."""
    return list(MODELS)


def build(name: str, size: str = "full", seed: int = 0) -> onnx.ModelProto:
    """Build model ``name`` at ``size`` ("full" or "small") with weights seeded by ``seed``."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(MODELS)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; valid sizes: {', '.join(SIZES)}")
    return MODELS[name].builder(size, seed)
