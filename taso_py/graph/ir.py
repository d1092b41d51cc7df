"""The graph IR: a DAG of nodes over graph inputs and constant weights.

Every tensor is a `Ref` (node id, output index). Nodes are immutable; a `Graph` owns
them by id, so copying a graph for the search is a shallow dict copy. Graph inputs and
weights are nodes too (kinds `input` and `weight` of the op table), so every consumer
walks one kind of thing.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from taso_py import ops
from taso_py.errors import GraphError
from taso_py.ops.schema import OpDef
from taso_py.ops.structural import InputAttrs, WeightAttrs
from taso_py.types import TensorType


@dataclass(frozen=True, order=True)
class Ref:
    """Output `index` of node `node`."""

    node: int
    index: int = 0

    def __str__(self) -> str:
        return f"%{self.node}" if self.index == 0 else f"%{self.node}.{self.index}"


@dataclass(frozen=True, eq=False)
class Node:
    id: int
    op: OpDef
    inputs: tuple[Ref, ...]
    attrs: Any
    types: tuple[TensorType, ...]
    names: tuple[str, ...]  # tensor names of the outputs (ONNX names kept, fresh ones for new nodes)

    @property
    def outputs(self) -> tuple[Ref, ...]:
        return tuple(Ref(self.id, i) for i in range(len(self.types)))

    @property
    def kind(self) -> str:
        return self.op.name


class Graph:
    """A mutable container of immutable nodes, with graph inputs and named outputs."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.nodes: dict[int, Node] = {}
        self.input_ids: list[int] = []
        self.outputs: list[Ref] = []
        self.output_names: list[str] = []
        self._next_id = 0
        self._names: set[str] = set()
        self._name_counter = 0

    # ---- building ------------------------------------------------------------------------

    def add_input(self, name: str, type: TensorType) -> Ref:
        if not type.is_known:
            raise GraphError(f"graph input {name!r} needs a known shape and type, got {type}")
        node = self._insert(ops.get("input"), (), InputAttrs(name, type), (type,), (name,))
        self.input_ids.append(node.id)
        return Ref(node.id)

    def add_weight(self, value: np.ndarray, name: str | None = None) -> Ref:
        value = np.asarray(value)
        node = self._insert(ops.get("weight"), (), WeightAttrs(value), (TensorType.of(value),),
                            (name or self.fresh_name("w"),))
        return Ref(node.id)

    def add(self, op: str | OpDef, inputs: Sequence[Ref], attrs: Any = None, *,
            names: Sequence[str] | None = None, **values: Any) -> tuple[Ref, ...]:
        """Apply an operator: attributes are validated and the output types inferred."""
        opdef = ops.get(op) if isinstance(op, str) else op
        if attrs is None:
            attrs = opdef.make_attrs(**values)
        in_types = [self.type(r) for r in inputs]
        types = opdef.infer(in_types, attrs)
        attrs = opdef.canonical(attrs, in_types)
        names = tuple(names) if names is not None else tuple(self.fresh_name(opdef.name) for _ in types)
        return self._insert(opdef, tuple(inputs), attrs, types, names).outputs

    def add_node(self, op: OpDef, inputs: Sequence[Ref], attrs: Any, types: Sequence[TensorType],
                 names: Sequence[str]) -> Node:
        """Insert a node with given types (opaque nodes, whose types come from ONNX)."""
        for r in inputs:
            self.type(r)
        return self._insert(op, tuple(inputs), attrs, tuple(types), tuple(names))

    def _insert(self, op: OpDef, inputs: tuple[Ref, ...], attrs: Any, types: tuple[TensorType, ...],
                names: tuple[str, ...]) -> Node:
        if len(names) != len(types):
            raise GraphError(f"{op.name}: {len(types)} outputs but {len(names)} names")
        for n in names:
            if n in self._names:
                raise GraphError(f"{op.name}: tensor name {n!r} is already in use")
        self._names.update(names)
        node = Node(self._next_id, op, inputs, attrs, types, names)
        self.nodes[node.id] = node
        self._next_id += 1
        return node

    def put(self, node: Node) -> None:
        """Insert `node` as it is, or put it in place of the node with its id: moves a node between
        versions of one graph (`graph.regions`), whose ids and names never clash."""
        old = self.nodes.get(node.id)
        if old is not None:
            self._names.difference_update(old.names)
        self._names.update(node.names)
        self.nodes[node.id] = node
        self._next_id = max(self._next_id, node.id + 1)

    def set_outputs(self, refs: Sequence[Ref], names: Sequence[str] | None = None) -> None:
        for r in refs:
            self.type(r)
        self.outputs = list(refs)
        self.output_names = list(names) if names is not None else [self.name_of(r) for r in refs]

    def fresh_name(self, hint: str) -> str:
        """A tensor name `{hint}_{n}` not used in this graph now; `n` only grows (see `skip_suffixes`)."""
        while f"{hint}_{self._name_counter}" in self._names:
            self._name_counter += 1
        self._name_counter += 1
        return f"{hint}_{self._name_counter - 1}"

    def skip_suffixes(self, below: int) -> None:
        """Fresh names from now on end in a number at least `below` (in copies too): a model's names
        that end in smaller numbers can then never be handed out, even after their node is removed."""
        self._name_counter = max(self._name_counter, below)

    def reserve_names(self, names: Iterable[str]) -> None:
        """Keep names from being handed out (e.g. names referenced inside ONNX subgraphs)."""
        self._names.update(names)

    # ---- reading -------------------------------------------------------------------------

    def node(self, ref: Ref | int) -> Node:
        node_id = ref.node if isinstance(ref, Ref) else ref
        try:
            return self.nodes[node_id]
        except KeyError:
            raise GraphError(f"no node %{node_id} in graph {self.name!r}") from None

    def type(self, ref: Ref) -> TensorType:
        node = self.node(ref)
        if not 0 <= ref.index < len(node.types):
            raise GraphError(f"{node.op.name} %{node.id} has no output {ref.index}")
        return node.types[ref.index]

    def name_of(self, ref: Ref) -> str:
        return self.node(ref).names[ref.index]

    def weight(self, ref: Ref) -> np.ndarray | None:
        """The value of a constant tensor, None for anything computed at run time."""
        node = self.node(ref)
        return node.attrs.value if node.op.name == "weight" else None

    @property
    def inputs(self) -> list[Node]:
        return [self.nodes[i] for i in self.input_ids]

    def __len__(self) -> int:
        return len(self.nodes)

    def users(self) -> dict[int, list[Node]]:
        """Node id -> the nodes that read any of its outputs."""
        out: dict[int, list[Node]] = {i: [] for i in self.nodes}
        for node in self.nodes.values():
            for i in dict.fromkeys(r.node for r in node.inputs):
                if i in out:
                    out[i].append(node)
        return out

    def topo_order(self) -> list[Node]:
        """Nodes with every node after its inputs (ties broken by id, so it is deterministic)."""
        pending = {i: len({r.node for r in n.inputs}) for i, n in self.nodes.items()}
        users = self.users()
        ready = [i for i, k in pending.items() if k == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            node = self.nodes[heapq.heappop(ready)]
            order.append(node)
            for user in users[node.id]:
                pending[user.id] -= 1
                if pending[user.id] == 0:
                    heapq.heappush(ready, user.id)
        if len(order) != len(self.nodes):
            stuck = min(i for i, k in pending.items() if k > 0)
            missing = [r for r in self.nodes[stuck].inputs if r.node not in self.nodes]
            if missing:
                raise GraphError(f"{self.nodes[stuck].op.name} %{stuck} reads {missing[0]}, which does not exist")
            raise GraphError(f"graph has a cycle through {self.nodes[stuck].op.name} %{stuck}")
        return order

    def live_ids(self) -> set[int]:
        """Nodes the outputs depend on."""
        live: set[int] = set()
        stack = [r.node for r in self.outputs]
        while stack:
            i = stack.pop()
            if i not in live:
                live.add(i)
                stack.extend(r.node for r in self.node(i).inputs)
        return live

    # ---- rewriting -----------------------------------------------------------------------

    def replace_uses(self, old: Ref, new: Ref) -> None:
        """Every reader of `old` (nodes and graph outputs) reads `new` instead."""
        self.type(new)
        for node in list(self.nodes.values()):
            if old in node.inputs:
                inputs = tuple(new if r == old else r for r in node.inputs)
                self.nodes[node.id] = dataclasses.replace(node, inputs=inputs)
        self.outputs = [new if r == old else r for r in self.outputs]

    def rename(self, ref: Ref, name: str) -> None:
        """Give output `ref` the tensor name `name` (which must be free)."""
        node = self.node(ref)
        if node.names[ref.index] == name:
            return
        if name in self._names:
            raise GraphError(f"tensor name {name!r} is already in use")
        self._names.discard(node.names[ref.index])
        self._names.add(name)
        names = (*node.names[:ref.index], name, *node.names[ref.index + 1:])
        self.nodes[node.id] = dataclasses.replace(node, names=names)

    def remove(self, node_id: int) -> None:
        """Drop a node that nothing reads any more; its names become free again."""
        node = self.nodes.pop(node_id)
        self._names.difference_update(node.names)
        if node_id in self.input_ids:
            self.input_ids.remove(node_id)

    def remove_unused(self) -> int:
        """Remove nodes the outputs do not depend on (graph inputs stay); returns how many."""
        live = self.live_ids() | set(self.input_ids)
        dead = [i for i in self.nodes if i not in live]
        for i in dead:
            self.remove(i)
        return len(dead)

    def cut(self, nodes: Sequence[Node], inputs: Sequence[tuple[str, TensorType]], outputs: Sequence[Ref],
            name: str, output_names: Sequence[str] | None = None) -> Graph:
        """`nodes` (in topological order) as a graph of their own: `inputs` (tensor name and type) as its
        inputs, every other tensor they read from outside is a weight copied in, and `outputs` end it
        under their names here, or `output_names`. ONNX Runtime runs a part of a model this way (a
        fallback region, a rewrite with its neighbours)."""
        sub = Graph(name)
        by_name = {n: sub.add_input(n, t) for n, t in inputs}
        refs: dict[Ref, Ref] = {}
        for node in nodes:
            for r in node.inputs:
                if r not in refs:
                    value = self.weight(r)
                    refs[r] = by_name[self.name_of(r)] if value is None else sub.add_weight(value, self.name_of(r))
            new = sub.add_node(node.op, [refs[r] for r in node.inputs], node.attrs, node.types, node.names)
            refs.update(zip(node.outputs, new.outputs))
        sub.set_outputs([refs[r] for r in outputs], list(output_names or [self.name_of(r) for r in outputs]))
        return sub

    def copy(self) -> Graph:
        other = Graph(self.name)
        other.nodes = dict(self.nodes)
        other.input_ids = list(self.input_ids)
        other.outputs = list(self.outputs)
        other.output_names = list(self.output_names)
        other._next_id = self._next_id
        other._names = set(self._names)
        other._name_counter = self._name_counter
        return other
