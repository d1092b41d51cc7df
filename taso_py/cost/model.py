"""The cost-model interface and the cost of a whole graph.

A cost model prices one operator application, given the types of its inputs and outputs,
its attributes and which inputs are constant (weights). The search only adds and compares
these prices, so a model may be measured (ONNX Runtime on this machine), analytical (a
roofline) or, for the code generator, the measured time of its own compiled kernels: the target
is a parameter of the model, not of the search.

Nodes whose inputs are all constant cost nothing: they are folded into weights before the
model is written (or compiled).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from taso_py.graph.ir import Graph, Node
from taso_py.ops.schema import OpDef
from taso_py.types import TensorType


@dataclass(frozen=True, eq=False)
class OpCall:
    """One operator application as a cost model sees it (hashable: models cache by it)."""

    op: OpDef
    attrs: Any
    inputs: tuple[TensorType, ...]
    outputs: tuple[TensorType, ...]
    constant: tuple[bool, ...]  # which inputs are weights

    def _ident(self) -> tuple:
        return self.op.name, self.attrs, self.inputs, self.outputs, self.constant

    def __hash__(self) -> int:
        return hash(self._ident())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpCall) and self._ident() == other._ident()

    @property
    def key(self) -> str:
        ins = ";".join(f"{'w' if c else 'x'}{t}" for t, c in zip(self.inputs, self.constant))
        return f"{self.op.name}|{self.attrs!r}|{ins}"


class CostModel(Protocol):
    name: str
    unit: str

    def cost(self, call: OpCall) -> float: ...

    @property
    def seconds(self) -> float:
        """Seconds spent timing operators in this process (`Measured`), 0 for a model that times
        nothing: the search's time bound moves on by it (`search.extract.extract`)."""

    def prepare(self, calls: Iterable[OpCall]) -> None:
        """Price many calls at once before the search asks for them one by one (optional work)."""


def constant_nodes(graph: Graph) -> set[int]:
    """Weights and the nodes computed from weights only (folded before deployment)."""
    const: set[int] = set()
    for node in graph.topo_order():
        if node.op.name == "weight" or (node.op.algebra and node.inputs
                                        and all(r.node in const for r in node.inputs)):
            const.add(node.id)
    return const


def call_of(graph: Graph, node: Node, const: set[int]) -> OpCall:
    return OpCall(node.op, node.attrs, tuple(graph.type(r) for r in node.inputs), node.types,
                  tuple(r.node in const for r in node.inputs))


def priced(graph: Graph, const: set[int] | None = None) -> list[tuple[Node, OpCall]]:
    """The nodes that cost something at run time: algebra operators not computed from weights only.

    Opaque nodes are left out: no rewrite changes them, so they add the same to every candidate."""
    const = constant_nodes(graph) if const is None else const
    return [(n, call_of(graph, n, const)) for n in graph.nodes.values()
            if n.op.algebra and n.id not in const]


def graph_cost(graph: Graph, model: CostModel) -> float:
    return sum(model.cost(call) for _, call in priced(graph))


def costs_by_op(graph: Graph, model: CostModel) -> dict[str, tuple[int, float]]:
    """Operator name -> (count, total cost): the before/after table of `taso optimize`."""
    out: dict[str, tuple[int, float]] = {}
    for node, call in priced(graph):
        count, total = out.get(node.op.name, (0, 0.0))
        out[node.op.name] = (count + 1, total + model.cost(call))
    return out


def prepare_graph(graph: Graph, model: CostModel) -> None:
    model.prepare(call for _, call in priced(graph))
