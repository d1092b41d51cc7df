"""Hand-written models at old opsets, one historical quirk each (onnx.helper).

These mimic files written by pre-2020 converters (caffe2, tf2onnx, keras2onnx,
early torch) that the importer still has to accept. Every builder is seeded.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from ._helpers import ints, model, tensor, value, weight
from .model import Registry
from .runtime import save

MODELS = Registry("onnx.helper")
node = helper.make_node


@MODELS.add(
    7,
    note="BatchNormalization-7 with the legacy `spatial` attribute, Dropout-7 with a "
    "`ratio` attribute and an unused mask output; IR 3, initializers listed as inputs",
)
def bn_spatial_dropout_op7() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    stats = [
        tensor("scale", 1 + weight(rng, 3, scale=0.1)),
        tensor("bias", weight(rng, 3)),
        tensor("mean", weight(rng, 3, scale=0.1)),
        tensor("var", 0.5 + rng.random(3)),
    ]
    nodes = [
        node(
            "BatchNormalization",
            ["x", "scale", "bias", "mean", "var"],
            ["bn"],
            epsilon=1e-3,
            momentum=0.9,
            spatial=1,
        ),
        node("Dropout", ["bn"], ["dropped", "mask"], ratio=0.25),
        node("Relu", ["dropped"], ["y"]),
    ]
    return model(
        nodes,
        [value("x", [1, 3, 6, 6])],
        [value("y", [1, 3, 6, 6])],
        stats,
        opset=7,
        name="caffe2_bn",
    )


@MODELS.add(
    7,
    note="Gemm-7 with transA=1, transB=1, alpha=0.5, beta=2 and a 1-D C broadcast over rows",
)
def gemm_trans_op7() -> onnx.ModelProto:
    rng = np.random.default_rng(70)
    nodes = [
        node("Gemm", ["x", "w", "c"], ["gemm"], transA=1, transB=1, alpha=0.5, beta=2.0),
        node("Relu", ["gemm"], ["y"]),
    ]
    return model(
        nodes,
        [value("x", [6, 4])],
        [value("y", [4, 5])],
        [tensor("w", weight(rng, 5, 6)), tensor("c", weight(rng, 5))],
        opset=7,
        name="gemm_t",
    )


@MODELS.add(
    8,
    note="variadic Sum of 3 and of 4 inputs with Sum-8 multidirectional broadcasting; "
    "IR 3 with initializers also in graph.input (old style)",
)
def sum_variadic_op8() -> onnx.ModelProto:
    rng = np.random.default_rng(8)
    nodes = [
        node("Sum", ["x", "a", "b"], ["sum3"]),
        node("Relu", ["x"], ["relu"]),
        node("Sum", ["sum3", "x", "c", "relu"], ["y"]),
    ]
    inits = [
        tensor("a", weight(rng, 4)),
        tensor("b", weight(rng, 3, 1)),
        tensor("c", weight(rng, 1, 3, 4)),
    ]
    return model(
        nodes,
        [value("x", [2, 3, 4])],
        [value("y", [2, 3, 4])],
        inits,
        opset=8,
        name="sums",
    )


@MODELS.add(
    9,
    note="Upsample-9 (scales as an input; deprecated in opset 10)",
)
def upsample_op9() -> onnx.ModelProto:
    rng = np.random.default_rng(9)
    nodes = [
        node("Conv", ["x", "w"], ["conv"], kernel_shape=[1, 1]),
        node("Upsample", ["conv", "scales"], ["up"], mode="nearest"),
        node("Relu", ["up"], ["y"]),
    ]
    inits = [
        tensor("w", weight(rng, 4, 2, 1, 1)),
        tensor("scales", [1.0, 1.0, 2.0, 2.0]),
    ]
    return model(
        nodes,
        [value("x", [1, 2, 3, 3])],
        [value("y", [1, 4, 6, 6])],
        inits,
        opset=9,
        name="up",
    )


@MODELS.add(
    10,
    note="Pad-2 form: `pads` and `value` attributes (inputs since opset 11), asymmetric pads",
)
def pad_attr_op10() -> onnx.ModelProto:
    rng = np.random.default_rng(10)
    nodes = [
        node(
            "Pad",
            ["x"],
            ["padded"],
            mode="constant",
            pads=[0, 0, 1, 2, 0, 0, 2, 1],
            value=0.5,
        ),
        node("Conv", ["padded", "w"], ["y"], kernel_shape=[3, 3]),
    ]
    return model(
        nodes,
        [value("x", [1, 2, 5, 5])],
        [value("y", [1, 3, 6, 6])],
        [tensor("w", weight(rng, 3, 2, 3, 3))],
        opset=10,
        name="pad2",
    )


@MODELS.add(
    10,
    note="MaxPool-10 with ceil_mode=1 (output 4x4, not 3x3) and explicit storage_order=0",
)
def maxpool_ceil_op10() -> onnx.ModelProto:
    nodes = [
        node(
            "MaxPool",
            ["x"],
            ["y"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            ceil_mode=1,
            storage_order=0,
        )
    ]
    return model(
        nodes,
        [value("x", [1, 2, 8, 8])],
        [value("y", [1, 2, 4, 4])],
        opset=10,
        name="pool",
    )


@MODELS.add(
    11,
    note="Split-11 with the `split` attribute, Squeeze/Unsqueeze-11 with `axes` "
    "attributes (all became inputs in opset 13)",
)
def split_squeeze_attrs_op11() -> onnx.ModelProto:
    nodes = [
        node("Split", ["x"], ["a", "b"], axis=1, split=[2, 4]),
        node("Unsqueeze", ["a"], ["a4"], axes=[1]),
        node("Relu", ["a4"], ["a4_relu"]),
        node("Squeeze", ["a4_relu"], ["a_out"], axes=[1]),
        node("Tanh", ["b"], ["b_out"]),
        node("Concat", ["b_out", "a_out"], ["y"], axis=1),
    ]
    return model(nodes, [value("x", [2, 6, 4])], [value("y", [2, 6, 4])], opset=11, name="split")


@MODELS.add(
    11,
    note="Softmax-11 on a 3-D tensor with axis=1: the input is coerced to 2-D [N, "
    "C*W], so it normalizes over dims 1 AND 2 (opset 13 changed it to one axis)",
)
def softmax_coerce2d_op11() -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    nodes = [
        node("MatMul", ["x", "w"], ["logits"]),
        node("Softmax", ["logits"], ["y"], axis=1),
    ]
    return model(
        nodes,
        [value("x", [2, 3, 4])],
        [value("y", [2, 3, 5])],
        [tensor("w", weight(rng, 4, 5))],
        opset=11,
        name="softmax",
    )


@MODELS.add(
    11,
    note="Reshape whose shape is Shape->Gather->Unsqueeze->Concat of a static tensor "
    "(the old `x.view(x.size(0), -1)` pattern), folded at import",
)
def reshape_shape_chain_op11() -> onnx.ModelProto:
    rng = np.random.default_rng(111)
    nodes = [
        node("Conv", ["x", "w"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("Shape", ["conv"], ["shape"]),
        node("Gather", ["shape", "zero"], ["batch"], axis=0),
        node("Unsqueeze", ["batch"], ["batch1"], axes=[0]),
        node("Concat", ["batch1", "minus_one"], ["new_shape"], axis=0),
        node("Reshape", ["conv", "new_shape"], ["flat"]),
        node("Gemm", ["flat", "fc", "fc_bias"], ["y"], transB=1),
    ]
    inits = [
        tensor("w", weight(rng, 2, 3, 3, 3)),
        tensor("zero", np.int64(0)),
        ints("minus_one", [-1]),
        tensor("fc", weight(rng, 5, 2 * 4 * 4, scale=0.1)),
        tensor("fc_bias", weight(rng, 5)),
    ]
    return model(
        nodes,
        [value("x", [2, 3, 4, 4])],
        [value("y", [2, 5])],
        inits,
        opset=11,
        name="view",
    )


@MODELS.add(
    11,
    note="a MatMul weight computed as ConstantOfShape(value=0.5) * Constant, folded at import",
)
def constant_of_shape_weight_op11() -> onnx.ModelProto:
    rng = np.random.default_rng(112)
    nodes = [
        node("Constant", [], ["w_shape"], value=ints("w_shape", [8, 4])),
        node(
            "ConstantOfShape",
            ["w_shape"],
            ["halves"],
            value=tensor("fill", np.array([0.5], np.float32)),
        ),
        node("Constant", [], ["w_scale"], value=tensor("w_scale", weight(rng, 8, 4))),
        node("Mul", ["halves", "w_scale"], ["w"]),
        node("MatMul", ["x", "w"], ["mm"]),
        node("Sigmoid", ["mm"], ["y"]),
    ]
    return model(nodes, [value("x", [3, 8])], [value("y", [3, 4])], opset=11, name="cos_weight")


@MODELS.add(
    11,
    note="Conv with auto_pad=SAME_UPPER and stride 2 on an even input (pads 0 before, "
    "1 after), then a Conv with no pads/strides/kernel_shape attributes at all",
)
def conv_same_upper_op11() -> onnx.ModelProto:
    rng = np.random.default_rng(113)
    nodes = [
        node(
            "Conv",
            ["x", "w1"],
            ["c1"],
            auto_pad="SAME_UPPER",
            strides=[2, 2],
            kernel_shape=[3, 3],
        ),
        node("Relu", ["c1"], ["r1"]),
        node("Conv", ["r1", "w2", "b2"], ["y"]),
    ]
    inits = [
        tensor("w1", weight(rng, 4, 3, 3, 3)),
        tensor("w2", weight(rng, 4, 4, 3, 3)),
        tensor("b2", weight(rng, 4)),
    ]
    return model(
        nodes,
        [value("x", [1, 3, 8, 8])],
        [value("y", [1, 4, 2, 2])],
        inits,
        opset=11,
        name="same",
    )


@MODELS.add(
    11,
    note="AveragePool with pads and count_include_pad=1 and =0 (border values differ)",
)
def avgpool_count_include_pad_op11() -> onnx.ModelProto:
    pool = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    nodes = [
        node("AveragePool", ["x"], ["with_pad"], count_include_pad=1, **pool),
        node("AveragePool", ["x"], ["without_pad"], count_include_pad=0, **pool),
    ]
    return model(
        nodes,
        [value("x", [1, 2, 5, 5])],
        [value("with_pad", [1, 2, 3, 3]), value("without_pad", [1, 2, 3, 3])],
        opset=11,
        name="avgpool",
    )


@MODELS.add(
    13,
    note="Constant nodes with `value`, `value_float` and `value_ints` attributes (opset 12+)",
)
def constant_attr_variants_op13() -> onnx.ModelProto:
    rng = np.random.default_rng(13)
    nodes = [
        node("Constant", [], ["w"], value=tensor("w", weight(rng, 12, 6))),
        node("Constant", [], ["half"], value_float=0.5),
        node("Constant", [], ["shape"], value_ints=[2, 3, 2]),
        node("MatMul", ["x", "w"], ["mm"]),
        node("Mul", ["mm", "half"], ["scaled"]),
        node("Reshape", ["scaled", "shape"], ["y"]),
    ]
    return model(
        nodes,
        [value("x", [2, 12])],
        [value("y", [2, 3, 2])],
        opset=13,
        name="constants",
    )


@MODELS.add(
    13,
    note="Identity chains on activations and on an initializer (converters leave these)",
)
def identity_chain_op13() -> onnx.ModelProto:
    rng = np.random.default_rng(131)
    nodes = [
        node("Identity", ["x"], ["x1"]),
        node("Identity", ["x1"], ["x2"]),
        node("Identity", ["b"], ["b1"]),
        node("Add", ["x2", "b1"], ["added"]),
        node("Identity", ["added"], ["a1"]),
        node("Relu", ["a1"], ["r"]),
        node("Identity", ["r"], ["r1"]),
        node("Identity", ["r1"], ["y"]),
    ]
    return model(
        nodes,
        [value("x", [2, 5])],
        [value("y", [2, 5])],
        [tensor("b", weight(rng, 5))],
        opset=13,
        name="identities",
    )


@MODELS.add(13, note="graph outputs that are directly a graph input and directly an initializer")
def graph_io_passthrough_op13() -> onnx.ModelProto:
    rng = np.random.default_rng(132)
    nodes = [node("Add", ["x", "w"], ["s"]), node("Relu", ["s"], ["y"])]
    return model(
        nodes,
        [value("x", [2, 4])],
        [value("y", [2, 4]), value("x", [2, 4]), value("w", [4])],
        [tensor("w", weight(rng, 4))],
        opset=13,
        name="passthrough",
    )


@MODELS.add(
    13,
    note="nodes listed in shuffled (non-topological) order, as some graph surgery "
    "scripts leave them; ORT sorts them itself",
    checker_error="the ONNX spec requires nodes to be topologically sorted; onnx.checker rejects the file",
)
def shuffled_nodes_op13() -> onnx.ModelProto:
    rng = np.random.default_rng(133)
    nodes = [
        node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("Relu", ["c"], ["r"]),
        node("Add", ["r", "x"], ["res"]),
        node("GlobalAveragePool", ["res"], ["gap"]),
        node("Flatten", ["gap"], ["flat"], axis=1),
        node("Gemm", ["flat", "fc"], ["y"], transB=1),
    ]
    order = [3, 0, 5, 2, 4, 1]
    inits = [tensor("w", weight(rng, 2, 2, 3, 3)), tensor("fc", weight(rng, 3, 2))]
    return model(
        [nodes[i] for i in order],
        [value("x", [1, 2, 5, 5])],
        [value("y", [1, 3])],
        inits,
        opset=13,
        name="shuffled",
    )


@MODELS.add(
    13,
    note="imports the ai.onnx.ml opset (as sklearn/lightgbm converters do) but uses no ml op",
)
def unused_ml_opset_op13() -> onnx.ModelProto:
    rng = np.random.default_rng(134)
    nodes = [node("Gemm", ["x", "w", "b"], ["g"]), node("Sigmoid", ["g"], ["y"])]
    return model(
        nodes,
        [value("x", [4, 3])],
        [value("y", [4, 2])],
        [tensor("w", weight(rng, 3, 2)), tensor("b", weight(rng, 2))],
        opset=13,
        extra_opsets={"ai.onnx.ml": 3},
        name="ml",
    )


@MODELS.add(
    13,
    external_data=True,
    note="weights stored as ONNX external data: built through save_as_external_data + "
    "reload; meant to be re-saved with save(..., external_data=True) and read by path",
)
def external_data_op13() -> onnx.ModelProto:
    rng = np.random.default_rng(135)
    nodes = [
        node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        node("Relu", ["h"], ["r"]),
        node("Gemm", ["r", "w2", "b2"], ["y"], transB=1),
    ]
    inits = [
        tensor("w1", weight(rng, 32, 16)),
        tensor("b1", weight(rng, 32)),
        tensor("w2", weight(rng, 4, 32)),
        tensor("b2", weight(rng, 4)),
    ]
    original = model(nodes, [value("x", [2, 16])], [value("y", [2, 4])], inits, opset=13, name="ext")
    with tempfile.TemporaryDirectory() as tmp:
        path = save(original, Path(tmp) / "ext.onnx", external_data=True)
        return onnx.load(path)


@MODELS.add(
    17,
    note="LayerNormalization-17 over the last axis with bias and over the last two "
    "axes (axis=1 on 3-D) without the optional bias",
)
def layernorm_op17() -> onnx.ModelProto:
    rng = np.random.default_rng(17)
    nodes = [
        node("LayerNormalization", ["x", "g1", "b1"], ["ln1"], axis=-1, epsilon=1e-5),
        node("MatMul", ["ln1", "w"], ["mm"]),
        node("LayerNormalization", ["mm", "g2"], ["y"], axis=1, epsilon=1e-3),
    ]
    inits = [
        tensor("g1", 1 + weight(rng, 8, scale=0.1)),
        tensor("b1", weight(rng, 8)),
        tensor("w", weight(rng, 8, 6)),
        tensor("g2", 1 + weight(rng, 4, 6, scale=0.1)),
    ]
    return model(
        nodes,
        [value("x", [2, 4, 8])],
        [value("y", [2, 4, 6])],
        inits,
        opset=17,
        name="ln",
    )


@MODELS.add(20, note="Gelu-20 (new op), exact and approximate='tanh'")
def gelu_op20() -> onnx.ModelProto:
    rng = np.random.default_rng(20)
    nodes = [
        node("MatMul", ["x", "w"], ["mm"]),
        node("Gelu", ["mm"], ["exact"]),
        node("Gelu", ["exact"], ["y"], approximate="tanh"),
    ]
    return model(
        nodes,
        [value("x", [3, 8])],
        [value("y", [3, 8])],
        [tensor("w", weight(rng, 8, 8))],
        opset=20,
        name="gelu",
    )
