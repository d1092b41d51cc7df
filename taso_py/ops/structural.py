"""Node kinds that are not operators of the algebra: graph inputs, weights and opaque ONNX nodes.

They live in the same table so that the graph IR treats every node alike (one shape rule,
one evaluation, one export per kind); `algebra=False` keeps the rule generator away from them.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from taso_py.errors import InputError
from taso_py.ops.schema import Fusion, OpDef
from taso_py.ort import run_anywhere
from taso_py.types import TensorType


@dataclass(frozen=True)
class InputAttrs:
    name: str
    type: TensorType


@dataclass(frozen=True, eq=False)
class WeightAttrs:
    """A constant tensor; equal weights have equal digests, whatever their names."""

    value: np.ndarray = field(repr=False)

    @functools.cached_property
    def digest(self) -> str:
        v = np.ascontiguousarray(self.value)
        return hashlib.blake2b(f"{v.dtype}{v.shape}".encode() + v.tobytes(), digest_size=16).hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WeightAttrs) and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"WeightAttrs({TensorType.of(self.value)}, {self.digest})"


@dataclass(frozen=True)
class OpaqueAttrs:
    """An ONNX node outside the algebra, kept byte for byte.

    The IR node's inputs are the non-empty names of `inputs` followed by `outer`, the
    outer-scope tensors its subgraphs read (so dependencies and liveness stay right).
    """

    op_type: str
    domain: str
    node: bytes = field(repr=False)  # the serialized NodeProto
    inputs: tuple[str, ...]
    outer: tuple[str, ...]
    opsets: tuple[tuple[str, int], ...]
    types: tuple[TensorType, ...]

    def proto(self) -> onnx.NodeProto:
        return onnx.NodeProto.FromString(self.node)

    @property
    def label(self) -> str:
        return f"{self.domain}::{self.op_type}" if self.domain not in ("", "ai.onnx") else self.op_type


def single_node_model(node: onnx.NodeProto, feeds: Mapping[str, np.ndarray],
                      opsets: Sequence[tuple[str, int]]) -> onnx.ModelProto:
    """A model of `node` alone, its inputs typed from `feeds` (to run it, or fold it at import)."""
    graph = helper.make_graph(
        [node], "single",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in node.output if o],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    return model


def _opaque_ref(xs: Sequence[np.ndarray], a: OpaqueAttrs) -> tuple[np.ndarray, ...]:
    feeds = dict(zip([n for n in a.inputs if n] + list(a.outer), xs))
    try:
        return run_anywhere(single_node_model(a.proto(), feeds, a.opsets), feeds)
    except Exception as e:
        raise InputError(f"cannot evaluate opaque {a.label} node: {e}") from None


def _no_ref(_xs: Sequence[np.ndarray], a: InputAttrs) -> tuple[np.ndarray, ...]:
    raise InputError(f"graph input {a.name!r} has no value: feed it")


graph_input = OpDef(
    "input", (), shape=lambda _ts, a: (a.type,), ref=_no_ref, attrs=InputAttrs, fusion=Fusion.OPAQUE,
    algebra=False, doc="a graph input (fed at run time)",
)
weight = OpDef(
    "weight", (), shape=lambda _ts, a: (TensorType.of(a.value),), ref=lambda _xs, a: (a.value,),
    attrs=WeightAttrs, fusion=Fusion.OPAQUE, algebra=False, doc="a constant tensor (an ONNX initializer)",
)
opaque = OpDef(
    "opaque", ("x",), optional=1, variadic=True, shape=lambda _ts, a: a.types, ref=_opaque_ref,
    attrs=OpaqueAttrs, fusion=Fusion.OPAQUE, algebra=False,
    doc="an ONNX node outside the algebra, exported back unchanged",
)

OPS = (graph_input, weight, opaque)
