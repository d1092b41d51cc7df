"""Models exported from torch by the legacy TorchScript exporter and by dynamo.

torch is imported only inside the builders, so listing the corpus works
without it; the corpus test skips these entries when torch is missing.
The nets themselves live in ``_torch_nets`` (which imports torch at the top).
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import onnx

from .model import CorpusModel, cached

if TYPE_CHECKING:
    import torch


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' deprecation and tracer warnings; expected here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def export_legacy(
    net: torch.nn.Module,
    example: torch.Tensor,
    opset: int,
    *,
    named: bool = True,
    **options: Any,
) -> onnx.ModelProto:
    """TorchScript-based ``torch.onnx.export(dynamo=False)``.

    ``named=False`` keeps the exporter's own tensor names (``input.1``,
    ``onnx::Transpose_0``, bare numbers), as files found in the wild have.
    """
    import torch

    if named:
        options = {"input_names": ["x"], "output_names": ["y"], **options}
    buffer = io.BytesIO()
    with _quiet():
        torch.onnx.export(net, (example,), buffer, opset_version=opset, dynamo=False, **options)
    return onnx.load_from_string(buffer.getvalue())


def export_dynamo(net: torch.nn.Module, example: torch.Tensor, opset: int) -> onnx.ModelProto:
    """``torch.onnx.export(dynamo=True)``: torch.export + onnxscript, ~1-3 s each."""
    import torch

    with _quiet():
        program = torch.onnx.export(
            net,
            (example,),
            dynamo=True,
            opset_version=opset,
            input_names=["x"],
            output_names=["y"],
            verbose=False,
        )
    return program.model_proto


def make_net(net: str, args: tuple[Any, ...], *, trained_bn: bool = True) -> torch.nn.Module:
    """Seeded eval-mode instance of ``_torch_nets.<net>``."""
    import torch

    from . import _torch_nets

    torch.manual_seed(0)
    module = getattr(_torch_nets, net)(*args)
    if trained_bn:
        _torch_nets.randomize_bn_stats(module, torch.Generator().manual_seed(1))
    return module.eval()


def build_torch(
    net: str,
    args: tuple[Any, ...],
    shape: tuple[int, ...],
    opset: int,
    dynamo: bool,
    trained_bn: bool,
    options: dict[str, Any],
) -> onnx.ModelProto:
    """Export one net on a seeded example input."""
    import torch

    module = make_net(net, args, trained_bn=trained_bn)
    example = torch.randn(shape, generator=torch.Generator().manual_seed(2))
    if dynamo:
        return export_dynamo(module, example, opset)
    return export_legacy(module, example, opset, **options)


def torch_model(
    name: str,
    net: str,
    shape: tuple[int, ...],
    opset: int,
    *,
    note: str,
    opaque: tuple[str, ...] = (),
    args: tuple[Any, ...] = (),
    dynamo: bool = False,
    trained_bn: bool = True,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    slow: bool = False,
    **options: Any,
) -> CorpusModel:
    """A corpus entry exporting ``_torch_nets.<net>(*args)``.

    ``options`` go to the legacy exporter; the dynamo exporter takes none here.
    """
    if dynamo and options:
        raise TypeError(f"{name}: exporter options {sorted(options)} are legacy-only")
    builder = functools.partial(build_torch, net, args, shape, opset, dynamo, trained_bn, options)
    return CorpusModel(
        name,
        cached(builder),
        opset,
        "torch-dynamo" if dynamo else "torch-legacy",
        frozenset(opaque),
        input_shapes=input_shapes or {},
        note=note,
        slow=slow,
    )


def both_exporters(
    name: str,
    net: str,
    shape: tuple[int, ...],
    *,
    note: str,
    args: tuple[Any, ...] = (),
    opaque: tuple[str, ...] = (),
    fast: tuple[str, ...] = (),
) -> list[CorpusModel]:
    """``<name>_torch_op17`` (legacy exporter) and ``<name>_dynamo_op18`` of one architecture; both slow
    unless ``fast`` names the exporter ("legacy", "dynamo")."""
    return [
        torch_model(f"{name}_torch_op17", net, shape, 17, args=args, opaque=opaque, slow="legacy" not in fast,
                    note=f"{note} (legacy TorchScript exporter)"),
        torch_model(f"{name}_dynamo_op18", net, shape, 18, args=args, opaque=opaque, dynamo=True,
                    slow="dynamo" not in fast, note=f"{note} (dynamo exporter)"),
    ]


MODELS: list[CorpusModel] = [
    torch_model(
        "alexnet_torch_op9",
        "AlexNetTiny",
        (1, 3, 40, 40),
        9,
        note="AlexNet layout; eval Dropout vanishes, AdaptiveAvgPool -> AveragePool, torch.flatten -> Flatten",
    ),
    torch_model(
        "mobilenetv2_torch_op9",
        "MobileNetV2Tiny",
        (1, 3, 32, 32),
        9,
        note="ReLU6 -> Clip-6 with min/max attributes; depthwise convs (group=C); Conv+BN folded by the exporter",
    ),
    torch_model(
        "mobilenetv2_torch_op11",
        "MobileNetV2Tiny",
        (1, 3, 32, 32),
        11,
        note="ReLU6 -> Clip-11 with min/max as Constant inputs; depthwise convs",
    ),
    torch_model(
        "inception_torch_op13",
        "InceptionBlock",
        (1, 8, 12, 12),
        13,
        note="GoogLeNet inception block: 4 branches (1x1, 3x3, 5x5, pool-proj) -> Concat",
    ),
    torch_model(
        "densenet_torch_op17",
        "DenseBlock",
        (1, 8, 8, 8),
        17,
        note="DenseNet block: growing Concats, pre-activation BN kept (not after a Conv)",
    ),
    torch_model(
        "resnet_view_torch_op9",
        "ResNetBasic",
        (1, 3, 16, 16),
        9,
        do_constant_folding=False,
        note="ResNet basic block, x.view(x.size(0), -1); do_constant_folding=False "
        "as in old torch: BN stays after Conv, an all-zero Pad-2 before "
        "AveragePool, shape built by Unsqueeze(axes attr)/Concat of Constants",
    ),
    torch_model(
        "resnet_dynbatch_torch_op13",
        "ResNetBasic",
        (1, 3, 16, 16),
        13,
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        input_shapes={"x": (2, 3, 16, 16)},
        note="dynamic batch axis: view(x.size(0), -1) becomes "
        "Shape->Gather->Unsqueeze->Concat->Reshape, static only once input_shapes "
        "fixes the batch",
    ),
    torch_model(
        "transformer_torch_op17",
        "TransformerEncoder",
        (2, 8, 32),
        17,
        note="nn.TransformerEncoderLayer (batch_first, gelu, eval): native "
        "LayerNormalization, GELU as Erf, packed QKV unflattened and picked with "
        "Gather on data",
    ),
    torch_model(
        "transformer_torch_op14",
        "TransformerEncoder",
        (2, 8, 32),
        14,
        note="same layer before opset 17: LayerNorm decomposed into "
        "ReduceMean/Sub/Pow/Sqrt/Div (opset 14, not 13: the exporter refuses "
        "scaled_dot_product_attention below 14)",
    ),
    torch_model(
        "mha_torch_op13",
        "SelfAttention",
        (2, 6, 16),
        13,
        named=False,
        note="nn.MultiheadAttention with need_weights (ReduceMean over heads); "
        "exporter-chosen names like 'onnx::Transpose_0' and numeric outputs; two "
        "graph outputs",
    ),
    torch_model(
        "gru_torch_op11",
        "RecurrentHead",
        (2, 5, 8),
        11,
        args=("gru",),
        opaque=("GRU",),
        note="GRU (opaque) with h0 built by Shape/Gather/Expand; last step taken with Gather",
    ),
    torch_model(
        "lstm_torch_op9",
        "RecurrentHead",
        (2, 5, 8),
        9,
        args=("lstm",),
        opaque=("LSTM",),
        named=False,
        note="LSTM (opaque) at opset 9; last step taken with Slice+Squeeze",
    ),
    torch_model(
        "upsample_torch_op9",
        "UpsampleDecoder",
        (1, 4, 6, 6),
        9,
        args=("nearest",),
        note="F.interpolate(scale_factor=2, nearest) -> Upsample-9",
    ),
    torch_model(
        "resize_torch_op11",
        "UpsampleDecoder",
        (1, 4, 6, 6),
        11,
        args=("bilinear",),
        note="F.interpolate(bilinear, align_corners=False) -> Resize-11",
    ),
    torch_model(
        "mlp_dropout_bn_torch_op13",
        "MlpDropoutBn",
        (4, 16),
        13,
        trained_bn=False,
        note="eval Dropout (removed by the exporter) and BatchNorm1d after Linear "
        "(kept); fresh BN stats equal its weight/bias, so the exporter dedups them "
        "into Identity(initializer)",
    ),
    torch_model(
        "shufflenetv2_torch_op13",
        "ShuffleUnit",
        (1, 16, 12, 12),
        13,
        note="ShuffleNetV2 units: chunk -> Shape/Gather/Div/Slice (legacy exporter), channel shuffle as "
        "Reshape/Transpose/Reshape, depthwise convs, a strided two-branch unit",
    ),
    torch_model(
        "efficientnet_mbconv_torch_op13",
        "MBConvSE",
        (1, 8, 10, 10),
        13,
        note="EfficientNet MBConv: SiLU as Sigmoid*Mul, depthwise conv, squeeze-and-excitation "
        "(GlobalAveragePool, 1x1 convs, a broadcast Mul gate), residual",
    ),
    torch_model(
        "unet_torch_op13",
        "UNetBlock",
        (1, 3, 16, 16),
        13,
        note="U-Net step: strided Conv, ConvTranspose (stride 2), skip Concat, Sigmoid",
    ),
    torch_model(
        "resnet_dynamo_op18",
        "ResNetBasic",
        (1, 3, 16, 16),
        18,
        dynamo=True,
        note="dynamo exporter (torch.export + onnxscript): IR 10, Conv+BN fused by "
        "the onnxscript rewriter, node metadata_props",
    ),
    torch_model(
        "transformer_dynamo_op18",
        "TransformerEncoder",
        (2, 8, 32),
        18,
        dynamo=True,
        note="dynamo exporter on nn.TransformerEncoderLayer: LayerNormalization-17, SDPA decomposed",
    ),
    # issue 20: whole architectures at narrow widths, each through both exporters (most marked slow)
    *both_exporters("resnet18", "ResNet18", (1, 3, 64, 64),
                    note="ResNet-18: 7x7/2 stem, max pool, [2, 2, 2, 2] basic blocks with 1x1 projection "
                    "shortcuts, widths 8-64"),
    *both_exporters("mobilenetv2_w025", "MobileNetV2", (1, 3, 64, 64),
                    note="MobileNetV2's full inverted-residual table at width 0.25: 17 blocks, ReLU6 as Clip"),
    *both_exporters("mobilenetv3_small", "MobileNetV3Small", (1, 3, 64, 64),
                    note="MobileNetV3-Small's bneck table at width 0.5: HardSwish, SE gates with HardSigmoid"),
    *both_exporters("efficientnet_b0", "EfficientNetB0", (1, 3, 64, 64),
                    note="EfficientNet-B0's MBConv stages (width 0.25, depth 0.5): SiLU, 5x5 depthwise, SE"),
    *both_exporters("shufflenetv2_stages", "ShuffleNetV2", (1, 3, 64, 64),
                    note="ShuffleNetV2 with three stages of units: chunk, channel shuffle, strided two-branch units"),
    *both_exporters("densenet_bc", "DenseNet", (1, 3, 32, 32),
                    note="DenseNet-BC: three dense blocks (growth 8, bottlenecks), transitions with AveragePool"),
    *both_exporters("unet", "UNet", (1, 3, 32, 32),
                    note="U-Net: three levels of double convs, max pools, ConvTranspose (stride 2) up, skip Concats"),
    *both_exporters("transformer_stack", "TransformerEncoderStack", (2, 8, 32),
                    note="nn.TransformerEncoder: two post-norm ReLU layers and a final LayerNorm"),
    *both_exporters("mha", "SelfAttention", (2, 6, 16), fast=("legacy", "dynamo"),
                    note="nn.MultiheadAttention returning head-averaged attention weights"),
    *both_exporters("lstmcell", "UnrolledCell", (2, 5, 8), args=("lstm",),
                    note="nn.LSTMCell stepped 5 times in a Python loop: MatMul, Sigmoid, Tanh, no LSTM op"),
    *both_exporters("grucell", "UnrolledCell", (2, 5, 8), args=("gru",),
                    note="nn.GRUCell stepped 5 times in a Python loop: MatMul, Sigmoid, Tanh, no GRU op"),
    *both_exporters("bert", "HuggingFace", (2, 8, 32), args=("bert",),
                    note="transformers' BertModel from a tiny config (2 layers, hidden 32), fed inputs_embeds"),
    *both_exporters("gpt2", "HuggingFace", (2, 8, 32), args=("gpt2",),
                    note="transformers' GPT2Model from a tiny config (2 layers, n_embd 32), causal mask folded"),
    *both_exporters("vit", "HuggingFace", (1, 3, 32, 32), args=("vit",),
                    note="transformers' ViTModel from a tiny config: 8x8 patch Conv, CLS token Concat, 2 layers"),
]
