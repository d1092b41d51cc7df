"""Models whose key op stays opaque to the algebra but sits between algebra ops.

They check that the importer keeps opaque nodes (and their subgraphs, with
outer-scope references) intact while still optimizing around them.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from ._helpers import ints, model, tensor, value, weight
from .model import Registry

MODELS = Registry("onnx.helper")
node = helper.make_node


@MODELS.add(
    11,
    opaque=("TopK",),
    note="TopK between MatMuls; its int64 indices are a second graph output",
)
def topk_op11() -> onnx.ModelProto:
    rng = np.random.default_rng(211)
    nodes = [
        node("MatMul", ["x", "w1"], ["scores"]),
        node("TopK", ["scores", "k"], ["top", "indices"], axis=-1, largest=1, sorted=1),
        node("Relu", ["top"], ["r"]),
        node("MatMul", ["r", "w2"], ["y"]),
    ]
    inits = [
        tensor("w1", weight(rng, 8, 16)),
        ints("k", [4]),
        tensor("w2", weight(rng, 4, 3)),
    ]
    outputs = [value("y", [2, 3]), value("indices", [2, 4], TensorProto.INT64)]
    return model(nodes, [value("x", [2, 8])], outputs, inits, opset=11, name="topk")


def _loop_body() -> onnx.GraphProto:
    """RNN-like step ``h = tanh(h @ w_loop + gate)``.

    ``w_loop`` and ``gate`` are not body inputs: they come from the outer scope.
    """
    nodes = [
        node("MatMul", ["h_in", "w_loop"], ["hw"]),
        node("Add", ["hw", "gate"], ["pre"]),
        node("Tanh", ["pre"], ["h_out"]),
        node("Identity", ["cond_in"], ["cond_out"]),
        node("Identity", ["h_out"], ["h_scan"]),
    ]
    inputs = [
        value("iter", [], TensorProto.INT64),
        value("cond_in", [], TensorProto.BOOL),
        value("h_in"),
    ]
    outputs = [value("cond_out", [], TensorProto.BOOL), value("h_out"), value("h_scan")]
    return helper.make_graph(nodes, "loop_body", inputs, outputs)


@MODELS.add(
    11,
    opaque=("Loop",),
    note="Loop with an empty (omitted) cond input whose body reads two OUTER-SCOPE "
    "tensors by name: an initializer and a computed tensor; ONNX's Loop inference leaves "
    "the loop-carried output shapeless, so the Relu reading it stays opaque too",
    shapeless_ops=frozenset({"Relu"}),
)
def loop_outer_scope_op11() -> onnx.ModelProto:
    rng = np.random.default_rng(212)
    nodes = [
        node("MatMul", ["x", "w_in"], ["h0"]),
        node("Sigmoid", ["h0"], ["gate"]),
        node("Loop", ["trip_count", "", "h0"], ["h_final", "h_all"], body=_loop_body()),
        node("Relu", ["h_final"], ["y"]),
    ]
    inits = [
        tensor("w_in", weight(rng, 4, 6)),
        tensor("w_loop", weight(rng, 6, 6)),
        tensor("trip_count", np.int64(3)),
    ]
    return model(
        nodes,
        [value("x", [2, 4])],
        [value("y", [2, 6]), value("h_all", [3, 2, 6])],
        inits,
        opset=11,
        name="loop",
    )


def _branch(name: str, weight_name: str, activation: str) -> onnx.GraphProto:
    """If branch reading the outer-scope input ``x`` and an outer-scope weight."""
    nodes = [
        node("MatMul", ["x", weight_name], [f"{name}_mm"]),
        node(activation, [f"{name}_mm"], [f"{name}_out"]),
    ]
    return helper.make_graph(nodes, name, [], [value(f"{name}_out", [2, 3])])


@MODELS.add(
    11,
    opaque=("If",),
    note="If on a bool graph input; both branches read outer-scope tensors",
)
def if_branches_op11() -> onnx.ModelProto:
    rng = np.random.default_rng(213)
    nodes = [
        node(
            "If",
            ["flag"],
            ["branch"],
            then_branch=_branch("then", "w_then", "Relu"),
            else_branch=_branch("else", "w_else", "Sigmoid"),
        ),
        node("Add", ["branch", "bias"], ["y"]),
    ]
    inits = [
        tensor("w_then", weight(rng, 4, 3)),
        tensor("w_else", weight(rng, 4, 3)),
        tensor("bias", weight(rng, 3)),
    ]
    inputs = [value("x", [2, 4]), value("flag", [], TensorProto.BOOL)]
    return model(nodes, inputs, [value("y", [2, 3])], inits, opset=11, name="if")


@MODELS.add(
    11,
    opaque=("LRN",),
    note="AlexNet-era LRN plus a hand-rolled normalization (ReduceMean/Pow/Sqrt) between convs",
)
def lrn_custom_norm_op11() -> onnx.ModelProto:
    rng = np.random.default_rng(214)
    nodes = [
        node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("LRN", ["c1"], ["lrn"], size=3, alpha=1e-4, beta=0.75, bias=1.0),
        node("ReduceMean", ["lrn"], ["mean"], axes=[2, 3], keepdims=1),
        node("Sub", ["lrn", "mean"], ["centered"]),
        node("Pow", ["centered", "two"], ["sq"]),
        node("ReduceMean", ["sq"], ["var"], axes=[2, 3], keepdims=1),
        node("Add", ["var", "eps"], ["var_eps"]),
        node("Sqrt", ["var_eps"], ["std"]),
        node("Div", ["centered", "std"], ["normed"]),
        node("Conv", ["normed", "w2"], ["y"], kernel_shape=[1, 1]),
    ]
    inits = [
        tensor("w1", weight(rng, 4, 3, 3, 3)),
        tensor("two", np.float32(2.0)),
        tensor("eps", np.float32(1e-5)),
        tensor("w2", weight(rng, 2, 4, 1, 1)),
    ]
    return model(
        nodes,
        [value("x", [1, 3, 6, 6])],
        [value("y", [1, 2, 6, 6])],
        inits,
        opset=11,
        name="lrn",
    )


@MODELS.add(
    13,
    opaque=("Gather",),
    note="BERT-style int64 token-id input looked up with Gather on an embedding table, then algebra ops",
)
def embedding_gather_op13() -> onnx.ModelProto:
    rng = np.random.default_rng(215)
    nodes = [
        node("Gather", ["table", "ids"], ["emb"], axis=0),
        node("MatMul", ["emb", "w"], ["mm"]),
        node("Relu", ["mm"], ["y"]),
    ]
    inits = [tensor("table", weight(rng, 10, 8)), tensor("w", weight(rng, 8, 4))]
    return model(
        nodes,
        [value("ids", [2, 5], TensorProto.INT64)],
        [value("y", [2, 5, 4])],
        inits,
        opset=13,
        name="embedding",
    )
