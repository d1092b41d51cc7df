"""The contract between an operator entry and onnx_io.

An entry's `OnnxMapping` says which ONNX op types import into it and how it exports.
The functions see the ONNX side only through the two small contexts below, which
`taso_py.onnx_io` implements, so the op table does not depend on the importer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from taso_py.types import TensorType


class Ref(Protocol):
    """A tensor in the graph being built (see taso_py.graph.Ref)."""


class ImportContext(Protocol):
    """One ONNX node being translated into IR nodes."""

    opset: int
    op_type: str

    @property
    def n_inputs(self) -> int: ...
    @property
    def n_outputs(self) -> int: ...
    def input(self, i: int) -> Any: ...  # Ref, or None for an absent optional input
    def type(self, i: int) -> TensorType: ...
    def const(self, i: int) -> np.ndarray | None: ...  # the value when input i is a constant
    def attr(self, name: str, default: Any = None) -> Any: ...
    def output_used(self, i: int) -> bool: ...
    def add(self, op: str, inputs: Sequence[Any], **attrs: Any) -> tuple[Any, ...]: ...


class ExportContext(Protocol):
    """The ONNX graph being written."""

    opset: int

    def emit(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | int = 1,
             **attrs: Any) -> list[str]: ...
    def const(self, value: np.ndarray, hint: str = "const") -> str: ...


@dataclass(frozen=True)
class ExportNode:
    """What an export function sees of one IR node."""

    inputs: Sequence[str]
    outputs: Sequence[str]
    attrs: Any
    in_types: Sequence[TensorType]
    out_types: Sequence[TensorType]


ImportFn = Callable[[ImportContext], tuple[Any, ...]]
ExportFn = Callable[[ExportContext, ExportNode], None]


@dataclass(frozen=True)
class OnnxMapping:
    """ONNX op types that import into an operator, and how it exports."""

    imports: Mapping[str, ImportFn] = field(default_factory=dict)
    export: ExportFn | None = None


def direct_import(op: str, **attr_names: str) -> ImportFn:
    """Import an ONNX op whose inputs map one to one; `attr_names` maps ours to ONNX's."""

    def translate(ctx: ImportContext) -> tuple[Any, ...]:
        values = {ours: ctx.attr(theirs) for ours, theirs in attr_names.items()}
        inputs = [ctx.input(i) for i in range(ctx.n_inputs)]
        while inputs and inputs[-1] is None:  # trailing optional inputs left out
            inputs.pop()
        return ctx.add(op, inputs, **{k: v for k, v in values.items() if v is not None})

    return translate


def direct_export(op_type: str, attr_fn: Callable[[Any], dict[str, Any]] | None = None) -> ExportFn:
    """Export as one ONNX node; `attr_fn` gives its ONNX attributes from ours."""

    def write(ctx: ExportContext, node: ExportNode) -> None:
        ctx.emit(op_type, node.inputs, node.outputs, **(attr_fn(node.attrs) if attr_fn else {}))

    return write
