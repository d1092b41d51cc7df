"""The rewrites that turned one graph into another, as independent regions that can be applied one at a time.

A search rewrites a copy of its start graph: nodes keep their ids, a rewrite adds nodes with new ids
and points the readers of a tensor at an equivalent one (a new version of the reader, same id).
So the difference between the two graphs is the set of nodes of the rewritten graph that are not the
start graph's own objects; nodes of that set that read one another belong to one region (a merge and
its split, a reassociated chain), and a region reads the rest of the graph only through tensors both
graphs compute alike. Any subset of the regions can then be applied to the start graph on its own,
which is what lets `taso optimize` keep the rewrites that pay in ONNX Runtime and revert the rest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from taso_py.errors import GraphError
from taso_py.graph.ir import Graph, Node, Ref
from taso_py.types import TensorType


@dataclass(frozen=True)
class Region:
    """Nodes of the rewritten graph (in its topological order) and the graph outputs they redirect."""

    nodes: tuple[Node, ...]
    outputs: tuple[int, ...]
    removed: tuple[Node, ...]  # the start graph's nodes this region replaces or no longer reads

    def signature(self) -> tuple[tuple[str, int], ...]:
        """What the rewrite does, shapes aside: the operators it adds and removes. Regions with one
        signature (BERT's Q/K/V merge in each layer) are usually worth the same, and are timed together."""
        added = Counter(n.op.name for n in self.nodes if n.op.name != "weight")
        gone = Counter(n.op.name for n in self.removed if n.op.name != "weight")
        return tuple(sorted((op, k) for op, k in (added - gone).items())) + tuple(
            sorted((f"-{op}", k) for op, k in (gone - added).items()))


def diff(start: Graph, rewritten: Graph) -> list[Region]:
    """The regions that make `rewritten` out of `start`; `rewritten` must descend from a copy of `start`."""
    live_after = rewritten.live_ids()
    changed = {i: n for i, n in rewritten.nodes.items() if i in live_after and start.nodes.get(i) is not n}
    parent = {i: i for i in changed}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, n in changed.items():
        for r in n.inputs:
            # a node the start graph has too (a new version, same id) computes what it computed there:
            # reading it ties a region to nothing; reading a node the rewrite made does
            if r.node in changed and r.node not in start.nodes:
                parent[find(i)] = find(r.node)
    redirected = [k for k, (a, b) in enumerate(zip(start.outputs, rewritten.outputs, strict=True)) if a != b]
    by_root: dict[int, tuple[list[Node], list[int]]] = {}
    order = [n for n in rewritten.topo_order() if n.id in changed]
    for n in order:
        by_root.setdefault(find(n.id), ([], []))[0].append(n)
    loose: list[Region] = []
    for k in redirected:
        ref = rewritten.outputs[k]
        if ref.node in changed:
            by_root.setdefault(find(ref.node), ([], []))[1].append(k)
        else:  # an output pointed at a tensor the start graph already computes
            loose.append(Region((), (k,), ()))
    regions = []
    for nodes, outs in by_root.values():
        ids = {n.id for n in nodes}
        removed = _replaced(start, ids, outs, live_after)
        regions.append(Region(tuple(nodes), tuple(outs), removed))
    return regions + loose


def _replaced(start: Graph, ids: set[int], outputs: Sequence[int], live_after: set[int]) -> tuple[Node, ...]:
    """The start graph's nodes a region makes dead: those only the region's old versions (or its
    redirected outputs) kept alive, found by walking up from them through nodes the rewrite dropped."""
    stack = [r.node for i in ids if i in start.nodes for r in start.nodes[i].inputs]
    stack += [start.outputs[k].node for k in outputs]
    gone: dict[int, Node] = {i: start.nodes[i] for i in ids if i in start.nodes}
    while stack:
        i = stack.pop()
        if i in gone or i in live_after or i not in start.nodes:
            continue
        gone[i] = start.nodes[i]
        stack.extend(r.node for r in start.nodes[i].inputs)
    return tuple(gone.values())


def apply(base: Graph, rewritten: Graph, regions: Iterable[Region]) -> Graph:
    """`base` (the start graph, or one with other regions applied by this function) with `regions`
    of `rewritten` applied too, unused nodes kept (a later region may read them; `Graph.remove_unused`
    before export). Raises GraphError when the mix of old and new nodes would form a cycle."""
    g = base.copy()
    for region in regions:
        for n in region.nodes:
            g.put(n)
        for k in region.outputs:
            g.outputs[k] = rewritten.outputs[k]
    g.topo_order()  # a cycle raises
    return g


def without_unused(g: Graph) -> Graph:
    """A copy with only what the outputs need (graph inputs kept)."""
    out = g.copy()
    out.remove_unused()
    return out


def in_context(before: Graph, after: Graph, region: Region, hops: int = 1) -> tuple[Graph, Graph]:
    """The region as `before` computes it and as `after` (`before` with the region applied) does,
    each with the operators up to `hops` steps upstream and downstream of it, as graphs of their own.

    Both read the same graph inputs (every tensor either side reads from outside, by its name in the
    model) and end at the tensors the rest of the model reads, so their running times differ by what
    the rewrite changes in ONNX Runtime, its fusions and layout changes around the region included."""
    ids = {n.id for n in region.nodes} | {n.id for n in region.removed}
    sides = [(g, g.live_ids(), g.users()) for g in (before, after)]
    frontier = set(ids)
    for _ in range(hops):
        reached: set[int] = set()
        for g, live, users in sides:
            for i in frontier & live:
                reached.update(r.node for r in g.nodes[i].inputs)
                reached.update(u.id for u in users[i] if u.id in live)
        frontier = reached - ids
        ids |= frontier
    chosen = [[n for n in g.topo_order() if n.id in ids and n.id in live and n.op.name not in ("input", "weight")]
              for g, live, _ in sides]
    outside: dict[str, Ref] = {}
    for (g, _, _), nodes in zip(sides, chosen, strict=True):
        made = {n.id for n in nodes}
        for n in nodes:
            for r in n.inputs:
                if r.node not in made and g.weight(r) is None:
                    outside.setdefault(g.name_of(r), r)
    inputs = [(name, before.type(r) if r.node in before.nodes else after.type(r)) for name, r in outside.items()]
    before_cut, after_cut = (_cut(g, nodes, inputs, live) for (g, live, _), nodes in zip(sides, chosen, strict=True))
    return before_cut, after_cut


def _cut(g: Graph, nodes: list[Node], inputs: list[tuple[str, TensorType]], live: set[int]) -> Graph:
    """`nodes` of `g` as a graph reading `inputs` (`Graph.cut`); its outputs are the tensors the
    rest of `g` reads, or that are outputs of `g`."""
    made = {n.id for n in nodes}
    read_outside = {r for n in g.nodes.values() if n.id in live and n.id not in made for r in n.inputs}
    # the model's outputs in its order, each under the model's name for it (a rewrite may make two of
    # them one tensor: `relu(x)` and `transpose(transpose(relu(x)))`), then the rest by tensor name:
    # the two sides' outputs then correspond one to one
    ends = [(r, name) for r, name in zip(g.outputs, g.output_names, strict=True) if r.node in made]
    ends += sorted(((r, g.name_of(r)) for n in nodes for r in n.outputs if r in read_outside and r not in g.outputs),
                   key=lambda end: end[1])
    if not ends:
        raise GraphError("the region computes nothing the rest of the model reads")
    return g.cut(nodes, inputs, [r for r, _ in ends], f"{g.name}_context", [name for _, name in ends])
