"""Operators the code generator has no kernel for run through ONNX Runtime inside the module.

A user's model usually has a few nodes outside the algebra (a TopK, a Loop, an LSTM) or that
a target cannot compile (an empty tensor, a string). Refusing the whole model for them would
leave the rest uncompiled, so each such fused group is marked *fallback*; groups are ordered
(topologically) so that fallback groups run back to back where the graph allows, and each run
of them becomes one *region*: a small ONNX model kept in the compiled directory that the
module runs in an ORT session, reading and writing the arena in place (plain NCHW). On a GPU
target ORT runs on the host, and the kernels' segments copy what crosses (`module.transfers`).

When the regions cannot be cut cleanly (a tensor of unknown shape or of a type the arena
cannot hold would cross between a region and a kernel), the whole graph is one region: the
model still compiles, and the report says that nothing runs on our kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from taso_py.codegen import topi
from taso_py.codegen.backends.c.emit import C_TYPES
from taso_py.codegen.graph.partition import Group, make_group
from taso_py.codegen.target import Target
from taso_py.graph.ir import Graph, Node, Ref
from taso_py.types import TensorType

# writes a region's graph to a file as ONNX: the frontend's exporter, at the model's opsets
# (the code generator itself does not read or write ONNX)
RegionWriter = Callable[[Graph, Path], None]


def held_in_arena(t: TensorType) -> bool:
    """Whether a tensor can live in the arena: a static, non-empty shape of a type C has."""
    return t.is_known and 0 not in t.shape and t.dtype.value in C_TYPES


def unsupported(g: Graph, node: Node, target: Target) -> str | None:
    """Why the code generator cannot compile `node` for `target` (None when it can)."""
    if node.op.name == "opaque":
        return node.attrs.label
    if node.op not in topi.COMPUTE or node.op.name in target.unsupported:
        return node.op.name
    for t in [*node.types, *(g.type(r) for r in node.inputs)]:
        if not held_in_arena(t):
            return f"{node.op.name} on {t}"
    return None


@dataclass
class Region:
    """A run of fallback groups: their nodes (in order), what they read and what is read of them."""

    nodes: list[Node]
    inputs: list[Ref]
    outputs: list[Ref]

    @property
    def label(self) -> str:
        ops = [n.attrs.label if n.op.name == "opaque" else n.op.name for n in self.nodes]
        return "+".join(dict.fromkeys(ops))[:48]


def order_groups(g: Graph, groups: Sequence[Group], fallback: Sequence[bool]) -> list[int]:
    """A topological order of the groups (by index) that keeps each kind running as long as the
    graph allows, so that fallback groups make few regions (each a hand-over to ORT)."""
    producer = {r: k for k, grp in enumerate(groups) for r in grp.outputs}
    needs = [{producer[r] for r in grp.inputs if r in producer} - {k} for k, grp in enumerate(groups)]
    readers: list[list[int]] = [[] for _ in groups]
    for k, deps in enumerate(needs):
        for d in deps:
            readers[d].append(k)
    waiting = [len(d) for d in needs]
    ready = sorted(k for k, w in enumerate(waiting) if w == 0)
    order: list[int] = []
    kind = False
    while ready:
        same = [k for k in ready if fallback[k] == kind]
        k = min(same) if same else min(ready)
        kind = fallback[k]
        ready.remove(k)
        order.append(k)
        for r in readers[k]:
            waiting[r] -= 1
            if waiting[r] == 0:
                ready.append(r)
    assert len(order) == len(groups), "the fused groups depend on each other in a cycle"
    return order


def plan(g: Graph, groups: Sequence[Group], target: Target, forced: Collection[int] = ()
         ) -> list[Group | Region] | None:
    """Groups and regions in run order, or None when the regions cannot be cut cleanly (then the
    whole graph is one region: `whole`); the nodes in `forced` run in ORT too (their kernel
    failed to build)."""
    fallback = [any(n.id in forced or unsupported(g, n, target) for n in grp.nodes) for grp in groups]
    if not any(fallback):
        return list(groups)
    users = g.users()
    steps: list[Group | Region] = []
    run: list[Node] = []
    for k in order_groups(g, groups, fallback):
        if fallback[k]:
            run += groups[k].nodes
            continue
        if run:
            steps.append(_region(g, run, users))
            run = []
        steps.append(groups[k])
    if run:
        steps.append(_region(g, run, users))
    for step in steps:
        if isinstance(step, Group) and not all(held_in_arena(g.type(r)) for r in step.inputs + step.outputs):
            return None
        if isinstance(step, Region) and not all(held_in_arena(g.type(r)) or r.node in g.input_ids
                                                for r in step.inputs):
            return None
    return steps


def whole(g: Graph) -> Region:
    """The whole graph as one region (see the module docstring)."""
    nodes = [n for n in g.topo_order() if n.op.name not in ("input", "weight")]
    return _region(g, nodes, g.users())


def _region(g: Graph, nodes: list[Node], users: dict[int, list[Node]]) -> Region:
    grp = make_group(g, nodes, users)
    data = [r for r in grp.inputs if g.weight(r) is None]
    return Region(nodes, data, grp.outputs)


def subgraph(g: Graph, region: Region) -> Graph:
    """The region as a graph of its own: its data inputs as graph inputs, the weights it reads as
    weights, its nodes with their tensor names, and the tensors read outside as outputs."""
    return g.cut(region.nodes, [(g.name_of(r), g.type(r)) for r in region.inputs], region.outputs,
                 f"{g.name}_region")
