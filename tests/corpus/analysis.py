"""Which ONNX ops a model should leave outside taso-py's algebra.

Used by the corpus test to check each entry's ``opaque_ops`` against the
graph, so the declared expectations the importer is judged by cannot drift
from what the exporters actually emit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx

# fmt: off
ALGEBRA_OPS = frozenset({
    "Conv", "ConvTranspose", "BatchNormalization", "Relu", "Sigmoid", "Tanh", "Gelu", "Erf", "MaxPool",
    "AveragePool", "GlobalAveragePool", "Flatten", "Gemm", "MatMul", "Add", "Mul", "Sub",
    "Div", "Sum", "Concat", "Split", "Transpose", "Reshape", "Squeeze", "Unsqueeze",
    "Softmax", "LayerNormalization", "Pad", "Dropout", "Identity",
    "Slice", "Gather", "Expand", "Where", "Cast",
    "Clip", "HardSigmoid", "HardSwish", "LeakyRelu", "PRelu", "Softplus", "Exp", "Log", "Neg", "Abs",
    "Sqrt", "Reciprocal", "Pow", "ReduceMean", "ReduceSum", "ReduceMax", "Resize", "Upsample",
})
# fmt: on
"""ONNX op types (default domain) that import into the algebra."""


def static_shaped(model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]]) -> set[str]:
    """Names of tensors with fully known shapes once inputs take ``input_shapes``."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for value in model.graph.input:
        if value.name in input_shapes:
            shape = value.type.tensor_type.shape
            shape.ClearField("dim")
            for size in input_shapes[value.name]:
                shape.dim.add().dim_value = size
    graph = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    values = [*graph.input, *graph.value_info, *graph.output]
    known = {
        v.name
        for v in values
        if v.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)
    }
    return known | {t.name for t in graph.initializer}


def topological(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Nodes in dependency order, whatever order the file lists them in.

    Names no node produces (graph inputs, initializers, outer-scope values)
    count as available from the start.
    """
    produced = {out for node in graph.node for out in node.output}
    available: set[str] = set()
    pending = list(graph.node)
    while pending:
        blocked = []
        for node in pending:
            if all(name in available or name not in produced for name in node.input):
                available.update(node.output)
                yield node
            else:
                blocked.append(node)
        if len(blocked) == len(pending):
            raise ValueError(f"graph {graph.name!r} has a cycle")
        pending = blocked


def is_foldable(node: onnx.NodeProto, constant: set[str], static: set[str]) -> bool:
    """Whether the importer folds ``node``: constant inputs, or Shape of static data.

    Nodes with subgraphs may read outer-scope values, so they never fold.
    """
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return False
    if node.op_type == "Shape" and node.input[0] in static:
        return True
    return all(name in constant for name in node.input if name)


# import only with these inputs constant (indices, bounds, a target shape)
CONSTANT_INPUTS = {"Gather": (1,), "Slice": (1, 2, 3, 4), "Expand": (1,), "Clip": (1, 2), "Pow": (1,),
                   "ReduceMean": (1,), "ReduceSum": (1,), "ReduceMax": (1,), "Resize": (1, 2, 3), "Upsample": (1,)}
FLOAT_TYPES = (onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)


def in_algebra(node: onnx.NodeProto, constant: set[str]) -> bool:
    """Whether a non-constant ``node`` imports into the algebra (Pad: constant mode only; Gather, Slice,
    Expand, Clip, Pow, reductions: constant indices, bounds, exponent or axes; Cast: to a float type)."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in ALGEBRA_OPS:
        return False
    if any(i < len(node.input) and node.input[i] and node.input[i] not in constant
           for i in CONSTANT_INPUTS.get(node.op_type, ())):
        return False
    if node.op_type == "Cast":
        return next(a.i for a in node.attribute if a.name == "to") in FLOAT_TYPES
    if node.op_type in ("Resize", "Upsample"):  # nearest or linear, no antialias, no roi-based mapping
        attrs = {a.name: a for a in node.attribute}
        return (attrs["mode"].s if "mode" in attrs else b"nearest") in (b"nearest", b"linear") and \
            not (attrs["antialias"].i if "antialias" in attrs else 0) and \
            (attrs["coordinate_transformation_mode"].s if "coordinate_transformation_mode" in attrs else b"") \
            not in (b"tf_crop_and_resize", b"half_pixel_symmetric")
    mode = next((a.s for a in node.attribute if a.name == "mode"), b"constant")
    return node.op_type != "Pad" or mode == b"constant"


def imported_nodes(
    model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]] | None = None
) -> Iterator[tuple[onnx.NodeProto, bool]]:
    """Top-level nodes the importer does not fold, each with whether it imports into the algebra."""
    static = static_shaped(model, input_shapes or {})
    constant = {t.name for t in model.graph.initializer}
    for node in topological(model.graph):
        if is_foldable(node, constant, static):
            constant.update(node.output)
        else:
            yield node, in_algebra(node, constant)


def opaque_op_types(
    model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]] | None = None
) -> frozenset[str]:
    """Op types of top-level nodes that neither fold nor import into the algebra."""
    return frozenset(node.op_type for node, inside in imported_nodes(model, input_shapes) if not inside)


def algebra_node_counts(
    model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]] | None = None
) -> tuple[int, int]:
    """(nodes, nodes inside the algebra) over the top-level nodes import does not fold away (constants,
    shape-only subgraphs on static shapes): the numerator and denominator of a model's algebra coverage."""
    flags = [inside for _, inside in imported_nodes(model, input_shapes)]
    return len(flags), sum(flags)
