"""Operator fusion: split a graph into groups, each compiled into one kernel (TVM's rules).

Walking the nodes in topological order, a node joins the group of a producer it alone
reads (a producer with one reader that is not a graph output) when:
- it is injective and that group has no anchor, or has an injective or complex-out-fusable
  anchor and the node is element-wise (bias add and activation after a conv or matmul);
- it is a reduction (pooling, softmax, ...) and that group is injective only (a reduction
  with its injective inputs);
- it is a convolution and that group holds only element-wise ops (a prologue: computed where
  the convolution pads its input).
Each group has at most one anchor (a non-injective operator), which picks its schedule.
A node only joins a group when its other computed inputs come from nodes ordered before
the group's first node, so fusing can never make two groups depend on each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from taso_py.graph.ir import Graph, Node, Ref
from taso_py.ops import elementwise
from taso_py.ops.schema import Fusion

_STRUCTURAL = ("input", "weight")
ELEMENTWISE = frozenset(op.name for op in elementwise.OPS)


@dataclass
class Group:
    """Nodes compiled into one kernel; `inputs` are read from outside, `outputs` read outside."""

    nodes: list[Node] = field(default_factory=list)
    inputs: list[Ref] = field(default_factory=list)
    outputs: list[Ref] = field(default_factory=list)

    @property
    def anchor(self) -> Node | None:
        return next((n for n in self.nodes if n.op.fusion is not Fusion.INJECTIVE), None)

    @property
    def name(self) -> str:
        head = self.anchor or self.nodes[-1]
        rest = [n.op.name for n in self.nodes if n is not head]
        return "_".join([head.op.name, *rest])[:48]


def partition(graph: Graph) -> list[Group]:
    """The fused groups of `graph`, each after the groups it reads (external inputs of a group all
    come before its first node, so ordering by first node is topological)."""
    order = [n for n in graph.topo_order() if n.op.name not in _STRUCTURAL]
    position = {n.id: k for k, n in enumerate(order)}
    users = graph.users()
    outputs = {r.node for r in graph.outputs}
    group_of: dict[int, int] = {}
    members: list[list[Node]] = []
    for node in order:
        target = _join(graph, node, users, outputs, group_of, members, position)
        if target is None:
            group_of[node.id] = len(members)
            members.append([node])
        else:
            group_of[node.id] = target
            members[target].append(node)
    groups = [make_group(graph, nodes, users) for nodes in members]
    return sorted(groups, key=lambda g: min(position[n.id] for n in g.nodes))


def _join(graph: Graph, node: Node, users: dict[int, list[Node]], outputs: set[int], group_of: dict[int, int],
          members: list[list[Node]], position: dict[int, int]) -> int | None:
    if node.op.fusion is Fusion.OPAQUE:
        return None
    for ref in node.inputs:
        producer = graph.nodes[ref.node]
        if producer.op.name in _STRUCTURAL or producer.id in outputs or len(users[producer.id]) != 1:
            continue
        g = group_of[producer.id]
        anchor = next((n for n in members[g] if n.op.fusion is not Fusion.INJECTIVE), None)
        if not _fusable(node, anchor, members[g]):
            continue
        first = min(position[n.id] for n in members[g])
        others = [graph.nodes[r.node] for r in node.inputs if r.node != producer.id]
        if all(o.op.name in _STRUCTURAL or group_of.get(o.id) == g or position[o.id] < first for o in others):
            return g
    return None


def _fusable(node: Node, anchor: Node | None, group: list[Node]) -> bool:
    if node.op.fusion is Fusion.INJECTIVE:
        if anchor is None:
            return len(node.types) == 1 or all(len(n.types) == 1 for n in group)
        return (anchor.op.fusion is Fusion.COMPLEX_OUT_FUSABLE and node.op.name in ELEMENTWISE
                and node.types[0].shape == anchor.types[0].shape)
    if node.op.fusion is Fusion.REDUCTION:
        return anchor is None and all(len(n.types) == 1 for n in group)
    # a convolution after element-wise ops only (NASNet's relu before each separable convolution):
    # they are computed where the convolution pads its input, not in a pass of their own
    return node.op.name == "conv2d" and anchor is None and all(n.op.name in ELEMENTWISE for n in group)


def make_group(graph: Graph, nodes: list[Node], users: dict[int, list[Node]]) -> Group:
    """The group of `nodes`: what it reads from outside, and what is read outside or is a graph output."""
    inside = {n.id for n in nodes}
    group = Group(nodes)
    for n in nodes:
        for r in n.inputs:
            if r.node not in inside and r not in group.inputs:
                group.inputs.append(r)
    graph_outputs = set(graph.outputs)
    for n in nodes:
        for r in n.outputs:
            read_outside = any(r in u.inputs for u in users[n.id] if u.id not in inside)
            if read_outside or r in graph_outputs:
                group.outputs.append(r)
    return group
