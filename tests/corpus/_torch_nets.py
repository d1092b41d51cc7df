"""Small hand-written versions of well-known architectures, as torch modules.

This module imports torch at the top, so only the torch builders in
``torch_models`` import it (lazily): the rest of the corpus must work without
torch. Each net is a few thousand parameters, enough to keep the real
exporter's op patterns (ReLU6 -> Clip, depthwise convs, pre-activation BN,
``view(x.size(0), -1)``, ...) while running in well under a millisecond.
"""

from __future__ import annotations

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
