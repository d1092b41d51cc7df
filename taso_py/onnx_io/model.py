"""An imported model: the graph IR plus what export must restore that the IR does not model."""

from __future__ import annotations

from dataclasses import dataclass, field

from taso_py.graph import Graph

DEFAULT_OPSET = 17


@dataclass
class OnnxOrigin:
    """Model-level ONNX facts kept for export (opsets, IR version, metadata, local functions)."""

    opsets: dict[str, int] = field(default_factory=lambda: {"": DEFAULT_OPSET})
    ir_version: int = 8
    producer_name: str = ""
    producer_version: str = ""
    domain: str = ""
    model_version: int = 0
    doc_string: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    functions: tuple[bytes, ...] = ()  # serialized FunctionProtos, for opaque nodes that call them
    names: frozenset[str] = frozenset()  # every tensor name of the source model: made-up names avoid them
    external_data: bool = False  # the source kept tensors in files beside it: its bytes alone are not the model


@dataclass
class OnnxModel:
    graph: Graph
    origin: OnnxOrigin = field(default_factory=OnnxOrigin)
    source: str | None = None
    notes: list[str] = field(default_factory=list)  # why nodes were kept opaque, what was folded

    @property
    def opset(self) -> int:
        return self.origin.opsets.get("", DEFAULT_OPSET)
