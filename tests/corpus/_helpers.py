"""Small wrappers over onnx.helper shared by the hand-written corpus builders."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT
Shape = Sequence[int | str] | None


def value(name: str, shape: Shape = None, elem_type: int = FLOAT) -> onnx.ValueInfoProto:
    """A typed graph input/output; ``shape=None``: unknown rank, as old files had."""
    return helper.make_tensor_value_info(name, elem_type, shape)


def weight(rng: np.random.Generator, *shape: int, scale: float = 0.5) -> np.ndarray:
    """Seeded float32 weights, scaled so stacked layers stay in a sane range."""
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def tensor(name: str, array: np.ndarray | float | Sequence[float]) -> TensorProto:
    """An initializer (or Constant value); Python ints become int64, floats float32."""
    array = np.asarray(array)
    if array.dtype == np.float64:
        array = array.astype(np.float32)
    return numpy_helper.from_array(array, name)


def ints(name: str, values: Sequence[int]) -> TensorProto:
    """An int64 tensor, the type ONNX wants for shapes, axes, pads and counts."""
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[TensorProto] = (),
    *,
    opset: int,
    name: str,
    extra_opsets: dict[str, int] | None = None,
    ir_version: int | None = None,
) -> onnx.ModelProto:
    """A model stamped with the IR version of its opset's era, as tools then wrote it.

    IR < 4 required every initializer to be listed in ``graph.input`` too, so
    such models get that, which is the quirk old files carry.
    """
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(domain, v) for domain, v in (extra_opsets or {}).items()]
    ir_version = ir_version or helper.find_min_ir_version_for(opsets)
    inputs = list(inputs)
    if ir_version < 4:
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in initializers]
    graph = helper.make_graph(list(nodes), name, inputs, list(outputs), list(initializers))
    return helper.make_model(
        graph,
        opset_imports=opsets,
        ir_version=ir_version,
        producer_name="taso-py-corpus",
        producer_version="1",
    )
