"""Small hand-written versions of well-known architectures, as torch modules.

This module imports torch at the top, so only the torch builders in
``torch_models`` import it (lazily): the rest of the corpus must work without
torch. Each net is a few thousand parameters, enough to keep the real
exporter's op patterns (ReLU6 -> Clip, depthwise convs, pre-activation BN,
``view(x.size(0), -1)``, ...) while running in well under a millisecond.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    """Conv without bias followed by BN, the building block of most CNN zoos."""
    return [
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]


class AlexNetTiny(nn.Module):
    """AlexNet layout: big strided first conv, overlapping max pools, dropout MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 5, stride=2, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2),
            nn.Conv2d(16, 16, 3, padding=1),
            nn.ReLU(inplace=True),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(2)
        self.classifier = nn.Sequential(
            nn.Dropout(),
            nn.Linear(16 * 2 * 2, 32),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(32, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 linear projection."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.block = nn.Sequential(
            *conv_bn(cin, hidden, 1),
            nn.ReLU6(inplace=True),
            *conv_bn(hidden, hidden, 3, stride, groups=hidden),
            nn.ReLU6(inplace=True),
            *conv_bn(hidden, cout, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_res else y


class MobileNetV2Tiny(nn.Module):
    """Stem, two inverted residuals (one strided, one residual), classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            *conv_bn(3, 8, 3, stride=2),
            nn.ReLU6(inplace=True),
            InvertedResidual(8, 12, stride=2, expand=4),
            InvertedResidual(12, 12, stride=1, expand=4),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(12, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1).reshape(x.shape[0], -1)
        return self.classifier(x)


class InceptionBlock(nn.Module):
    """GoogLeNet inception module: four parallel branches concatenated on channels."""

    def __init__(self, cin: int = 8) -> None:
        super().__init__()
        self.b1 = nn.Sequential(nn.Conv2d(cin, 4, 1), nn.ReLU())
        self.b2 = nn.Sequential(nn.Conv2d(cin, 4, 1), nn.ReLU(), nn.Conv2d(4, 6, 3, padding=1), nn.ReLU())
        self.b3 = nn.Sequential(nn.Conv2d(cin, 2, 1), nn.ReLU(), nn.Conv2d(2, 4, 5, padding=2), nn.ReLU())
        self.b4 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1), nn.Conv2d(cin, 4, 1), nn.ReLU())
        self.fc = nn.Linear(18, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, (1, 1)), 1))


class DenseBlock(nn.Module):
    """DenseNet block: pre-activation BN-ReLU-Conv layers, outputs concatenated."""

    def __init__(self, cin: int = 8, growth: int = 4, layers: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(
                nn.BatchNorm2d(cin + i * growth),
                nn.ReLU(inplace=True),
                nn.Conv2d(cin + i * growth, 2 * growth, 1, bias=False),
                nn.BatchNorm2d(2 * growth),
                nn.ReLU(inplace=True),
                nn.Conv2d(2 * growth, growth, 3, padding=1, bias=False),
            )
            for i in range(layers)
        )
        cout = cin + layers * growth
        self.transition = nn.Sequential(
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout // 2, 1, bias=False),
            nn.AvgPool2d(2, stride=2),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(torch.cat(features, 1)))
        return self.transition(torch.cat(features, 1))


class ResNetBasic(nn.Module):
    """ResNet basic block + head, flattened the old way: ``x.view(x.size(0), -1)``.

    (The ``view`` is the point: it is what old exporters turned into Shape ops.)
    """

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.stem = nn.Sequential(*conv_bn(3, c, 3), nn.ReLU(inplace=True))
        self.body = nn.Sequential(*conv_bn(c, c, 3), nn.ReLU(inplace=True), *conv_bn(c, c, 3))
        self.pool = nn.AvgPool2d(4)
        self.fc = nn.Linear(c * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = F.relu(self.body(x) + x)
        x = self.pool(x)
        return self.fc(x.view(x.size(0), -1))


class TransformerEncoder(nn.Module):
    """One post-norm ``nn.TransformerEncoderLayer`` (batch_first, GELU) + projection."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            d,
            heads,
            dim_feedforward=64,
            dropout=0.1,
            activation="gelu",
            batch_first=True,
        )
        self.head = nn.Linear(d, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(x))


class SelfAttention(nn.Module):
    """``nn.MultiheadAttention`` self-attention returning head-averaged weights too."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, weights = self.attn(x, x, x, need_weights=True)
        return out, weights


class RecurrentHead(nn.Module):
    """Sequence classifier: an RNN (GRU or LSTM) whose last step feeds a Linear."""

    def __init__(self, cell: str, d_in: int = 8, hidden: int = 16) -> None:
        super().__init__()
        rnn_type = {"gru": nn.GRU, "lstm": nn.LSTM}[cell]
        self.rnn = rnn_type(d_in, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.fc(F.relu(out[:, -1]))


class UpsampleDecoder(nn.Module):
    """FPN/U-Net style decoder step: upsample by 2 with F.interpolate, then conv."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.conv_in = nn.Conv2d(4, 8, 3, padding=1)
        self.conv_out = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.conv_in(x))
        align = False if self.mode == "bilinear" else None
        y = F.interpolate(y, scale_factor=2.0, mode=self.mode, align_corners=align)
        return self.conv_out(y)


class MlpDropoutBn(nn.Module):
    """MLP with eval Dropout and BatchNorm1d after a Linear (not folded into Gemm)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(16, 32),
            nn.BatchNorm1d(32),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(32, 8),
            nn.Dropout(0.1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ShuffleUnit(nn.Module):
    """ShuffleNetV2 unit: channel split (chunk), a depthwise branch, concat, channel shuffle
    (view -> transpose -> view), then a strided downsampling unit with two branches."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        half = c // 2
        self.branch = nn.Sequential(*conv_bn(half, half, 1), nn.ReLU(inplace=True),
                                    *conv_bn(half, half, 3, groups=half), *conv_bn(half, half, 1),
                                    nn.ReLU(inplace=True))
        self.down_left = nn.Sequential(*conv_bn(c, c, 3, 2, groups=c), *conv_bn(c, c, 1), nn.ReLU(inplace=True))
        self.down_right = nn.Sequential(*conv_bn(c, c, 1), nn.ReLU(inplace=True), *conv_bn(c, c, 3, 2, groups=c),
                                        *conv_bn(c, c, 1), nn.ReLU(inplace=True))

    @staticmethod
    def shuffle(x: torch.Tensor, groups: int = 2) -> torch.Tensor:
        n, c, h, w = x.shape
        return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=1)
        x = self.shuffle(torch.cat([a, self.branch(b)], 1))
        return self.shuffle(torch.cat([self.down_left(x), self.down_right(x)], 1))


class MBConvSE(nn.Module):
    """EfficientNet's MBConv: 1x1 expand with SiLU, depthwise 3x3, squeeze-and-excitation
    (global pool, two 1x1 convs, sigmoid gate), 1x1 projection, residual."""

    def __init__(self, c: int = 8, expand: int = 4) -> None:
        super().__init__()
        hidden = c * expand
        self.expand = nn.Sequential(*conv_bn(c, hidden, 1), nn.SiLU())
        self.depthwise = nn.Sequential(*conv_bn(hidden, hidden, 3, groups=hidden), nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(hidden, c // 2, 1), nn.SiLU(),
                                nn.Conv2d(c // 2, hidden, 1), nn.Sigmoid())
        self.project = nn.Sequential(*conv_bn(hidden, c, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.depthwise(self.expand(x))
        return x + self.project(y * self.se(y))


class UNetBlock(nn.Module):
    """U-Net step: strided conv down, ConvTranspose2d up, skip concat, conv, sigmoid mask."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.inc = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(inplace=True))
        self.down = nn.Sequential(nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.ReLU(inplace=True))
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.out = nn.Sequential(nn.Conv2d(2 * c, c, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(c, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.inc(x)
        return torch.sigmoid(self.out(torch.cat([skip, self.up(self.down(skip))], 1)))


def randomize_bn_stats(net: nn.Module, generator: torch.Generator) -> None:
    """Give every BatchNorm trained-looking statistics.

    Fresh BNs have running_var == weight == 1 and running_mean == bias == 0,
    which the legacy exporter deduplicates into Identity nodes; a trained
    model does not look like that (one corpus entry keeps it on purpose).
    """
    for module in net.modules():
        if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
            n = module.num_features
            with torch.no_grad():
                module.weight.copy_(1 + 0.2 * torch.randn(n, generator=generator))
                module.bias.copy_(0.1 * torch.randn(n, generator=generator))
                module.running_mean.copy_(0.1 * torch.randn(n, generator=generator))
                module.running_var.copy_(0.5 + torch.rand(n, generator=generator))


# ---- issue 20: classic backbones at narrow widths and small inputs, recurrent cells, transformers ----


def _divisible(value: float, divisor: int = 8) -> int:
    """torchvision's ``_make_divisible``: channels rounded to a multiple of 8, never 10% below ``value``."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv-BN, identity or 1x1 conv-BN shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(inplace=True), *conv_bn(cout, cout, 3))
        self.shortcut = (
            nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18: 7x7/2 stem, max pool, four stages of two basic blocks, global pool, fc."""

    def __init__(self, widths: tuple[int, ...] = (8, 16, 32, 64), classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [*conv_bn(3, widths[0], 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        cin = widths[0]
        for i, width in enumerate(widths):
            layers += [BasicBlock(cin, width, 1 if i == 0 else 2), BasicBlock(width, width, 1)]
            cin = width
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class MobileNetV2(nn.Module):
    """MobileNetV2's full inverted-residual table (t, c, n, s) at a quarter of the width."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))

    def __init__(self, width: float = 0.25, last: int = 128, classes: int = 10) -> None:
        super().__init__()
        cin = _divisible(32 * width)
        layers: list[nn.Module] = [*conv_bn(3, cin, 3, 2), nn.ReLU6(inplace=True)]
        for t, c, n, s in self.SETTINGS:
            cout = _divisible(c * width)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        layers += [*conv_bn(cin, last, 1), nn.ReLU6(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation: global pool, 1x1 reduce + activation, 1x1 expand, gate, multiply."""

    def __init__(self, c: int, squeeze: int, act: type[nn.Module], gate: type[nn.Module]) -> None:
        super().__init__()
        self.fc = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, squeeze, 1), act(), nn.Conv2d(squeeze, c, 1),
                                gate())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.fc(x)


class MobileNetV3Block(nn.Module):
    """MobileNetV3 bneck: 1x1 expand, kxk depthwise, optional SE (Hardsigmoid gate), 1x1 project."""

    def __init__(self, cin: int, k: int, hidden: int, cout: int, se: bool, act: type[nn.Module], stride: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [*conv_bn(cin, hidden, 1), act()] if hidden != cin else []
        layers += [*conv_bn(hidden, hidden, k, stride, groups=hidden), act()]
        if se:
            layers.append(SqueezeExcite(hidden, _divisible(hidden // 4), nn.ReLU, nn.Hardsigmoid))
        layers += conv_bn(hidden, cout, 1)
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_res else y


class MobileNetV3Small(nn.Module):
    """MobileNetV3-Small's bneck table (k, exp, out, SE, Hardswish?, stride) at half width."""

    SETTINGS = ((3, 16, 16, True, False, 2), (3, 72, 24, False, False, 2), (3, 88, 24, False, False, 1),
                (5, 96, 40, True, True, 2), (5, 240, 40, True, True, 1), (5, 240, 40, True, True, 1),
                (5, 120, 48, True, True, 1), (5, 144, 48, True, True, 1), (5, 288, 96, True, True, 2),
                (5, 576, 96, True, True, 1), (5, 576, 96, True, True, 1))

    def __init__(self, width: float = 0.5, classes: int = 10) -> None:
        super().__init__()
        cin = _divisible(16 * width)
        layers: list[nn.Module] = [*conv_bn(3, cin, 3, 2), nn.Hardswish()]
        for k, exp, out, se, hs, stride in self.SETTINGS:
            cout = _divisible(out * width)
            layers.append(MobileNetV3Block(cin, k, _divisible(exp * width), cout, se,
                                           nn.Hardswish if hs else nn.ReLU, stride))
            cin = cout
        last = _divisible(576 * width)
        layers += [*conv_bn(cin, last, 1), nn.Hardswish()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(last, 128), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(128, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class MBConv(nn.Module):
    """EfficientNet MBConv: 1x1 expand (SiLU), kxk depthwise (SiLU), SE (a quarter of the input width),
    1x1 projection, residual when the shape allows."""

    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = [*conv_bn(cin, hidden, 1), nn.SiLU()] if expand != 1 else []
        layers += [*conv_bn(hidden, hidden, k, stride, groups=hidden), nn.SiLU(),
                   SqueezeExcite(hidden, max(1, cin // 4), nn.SiLU, nn.Sigmoid), *conv_bn(hidden, cout, 1)]
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_res else y


class EfficientNetB0(nn.Module):
    """EfficientNet-B0's stage table (expand, k, stride, channels, repeats) at a quarter of the width and
    half the depth (repeats rounded up, as EfficientNet's own depth multiplier does)."""

    SETTINGS = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
                (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))

    def __init__(self, width: float = 0.25, depth: float = 0.5, last: int = 160, classes: int = 10) -> None:
        super().__init__()
        cin = _divisible(32 * width)
        layers: list[nn.Module] = [*conv_bn(3, cin, 3, 2), nn.SiLU()]
        for expand, k, stride, c, n in self.SETTINGS:
            cout = _divisible(c * width)
            for i in range(math.ceil(n * depth)):
                layers.append(MBConv(cin, cout, k, stride if i == 0 else 1, expand))
                cin = cout
        layers += [*conv_bn(cin, last, 1), nn.SiLU()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class ShuffleV2Unit(nn.Module):
    """ShuffleNetV2 unit: stride 1 splits the channels and transforms one half; stride 2 runs both
    branches on the whole input; either way the halves are concatenated and shuffled."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        half = cout // 2
        self.stride = stride
        if stride == 2:
            self.left = nn.Sequential(*conv_bn(cin, cin, 3, 2, groups=cin), *conv_bn(cin, half, 1),
                                      nn.ReLU(inplace=True))
        branch_in = cin if stride == 2 else half
        self.right = nn.Sequential(*conv_bn(branch_in, half, 1), nn.ReLU(inplace=True),
                                   *conv_bn(half, half, 3, stride, groups=half), *conv_bn(half, half, 1),
                                   nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            x = torch.cat([a, self.right(b)], 1)
        else:
            x = torch.cat([self.left(x), self.right(x)], 1)
        return ShuffleUnit.shuffle(x)


class ShuffleNetV2(nn.Module):
    """ShuffleNetV2: 3x3/2 stem, max pool, three stages (the real [4, 8, 4] units halved; the first unit
    strided), 1x1 conv, global mean, fc."""

    def __init__(self, widths: tuple[int, ...] = (24, 24, 48, 96, 256), repeats: tuple[int, ...] = (2, 4, 2),
                 classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [*conv_bn(3, widths[0], 3, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        cin = widths[0]
        for n, width in zip(repeats, widths[1:4]):
            layers += [ShuffleV2Unit(cin if i == 0 else width, width, 2 if i == 0 else 1) for i in range(n)]
            cin = width
        layers += [*conv_bn(cin, widths[4], 1), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(widths[4], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean([2, 3]))


class DenseNet(nn.Module):
    """DenseNet-BC: stem, dense blocks of [3, 6, 4] bottleneck layers (growth 8), transitions halving the
    channels, final BN-ReLU, global pool, fc."""

    def __init__(self, blocks: tuple[int, ...] = (3, 6, 4), growth: int = 8, classes: int = 10) -> None:
        super().__init__()
        c = 2 * growth
        layers: list[nn.Module] = [*conv_bn(3, c, 3, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        for i, n in enumerate(blocks):
            block = DenseBlock(c, growth, n)
            c += n * growth
            if i == len(blocks) - 1:  # after the last block, the head's BN-ReLU instead of a transition
                block.transition = nn.Identity()
            else:
                c //= 2
            layers.append(block)
        layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def double_conv(cin: int, cout: int) -> nn.Sequential:
    """U-Net's (3x3 conv, BN, ReLU) x 2."""
    return nn.Sequential(*conv_bn(cin, cout, 3), nn.ReLU(inplace=True), *conv_bn(cout, cout, 3), nn.ReLU(inplace=True))


class UNet(nn.Module):
    """U-Net: three max-pool downsamplings, ConvTranspose2d upsamplings, skip concats, 1x1 output conv."""

    def __init__(self, widths: tuple[int, ...] = (8, 16, 32, 64), classes: int = 2) -> None:
        super().__init__()
        self.downs = nn.ModuleList(double_conv(cin, cout) for cin, cout in zip((3, *widths[:-1]), widths))
        self.ups = nn.ModuleList(nn.ConvTranspose2d(c, c // 2, 2, stride=2) for c in widths[:0:-1])
        self.convs = nn.ModuleList(double_conv(c, c // 2) for c in widths[:0:-1])
        self.out = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, down in enumerate(self.downs):
            x = down(F.max_pool2d(x, 2) if i else x)
            skips.append(x)
        for up, conv, skip in zip(self.ups, self.convs, skips[-2::-1]):
            x = conv(torch.cat([skip, up(x)], 1))
        return self.out(x)


class TransformerEncoderStack(nn.Module):
    """``nn.TransformerEncoder`` of two post-norm layers (ReLU, batch_first) with a final LayerNorm."""

    def __init__(self, d: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
        self.head = nn.Linear(d, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


class UnrolledCell(nn.Module):
    """``nn.LSTMCell`` or ``nn.GRUCell`` stepped over the sequence in a Python loop (zero initial state),
    the last hidden state into a Linear: the exporters unroll it into MatMuls and gates."""

    def __init__(self, cell: str, d_in: int = 8, hidden: int = 16) -> None:
        super().__init__()
        self.lstm = cell == "lstm"
        self.cell = (nn.LSTMCell if self.lstm else nn.GRUCell)(d_in, hidden)
        self.fc = nn.Linear(hidden, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.shape[0], self.cell.hidden_size)
        c = torch.zeros_like(h)
        for t in range(x.shape[1]):
            if self.lstm:
                h, c = self.cell(x[:, t], (h, c))
            else:
                h = self.cell(x[:, t], h)
        return self.fc(h)


class HuggingFace(nn.Module):
    """A ``transformers`` model built from a tiny config (random weights, nothing downloaded), fed
    embeddings (BERT, GPT-2: ``inputs_embeds``, so the graph input is a float tensor) or pixels (ViT);
    returns the last hidden state. Eager attention: the model's own MatMul/Softmax."""

    def __init__(self, arch: str, d: int = 32, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        import transformers

        common = {"num_hidden_layers": layers, "num_attention_heads": heads, "attn_implementation": "eager"}
        if arch == "bert":
            config = transformers.BertConfig(vocab_size=64, hidden_size=d, intermediate_size=2 * d,
                                             max_position_embeddings=32, **common)
            self.model, self.key = transformers.BertModel(config, add_pooling_layer=False), "inputs_embeds"
        elif arch == "gpt2":
            config = transformers.GPT2Config(vocab_size=64, n_embd=d, n_layer=layers, n_head=heads, n_positions=32,
                                             bos_token_id=0, eos_token_id=0, attn_implementation="eager")
            self.model, self.key = transformers.GPT2Model(config), "inputs_embeds"
        else:
            config = transformers.ViTConfig(hidden_size=d, intermediate_size=2 * d, image_size=32, patch_size=8,
                                            **common)
            self.model, self.key = transformers.ViTModel(config, add_pooling_layer=False), "pixel_values"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(**{self.key: x}).last_hidden_state
