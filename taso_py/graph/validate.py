"""IR well-formedness as a list of named checks (a spec), run after import and in tests
after every rewrite. Each check yields problems naming the node; `validate` raises the first."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from taso_py.errors import GraphError, TasoError
from taso_py.graph.ir import Graph

Check = Callable[[Graph], Iterator[str]]


def refs_exist(g: Graph) -> Iterator[str]:
    for node in g.nodes.values():
        for r in node.inputs:
            if r.node not in g.nodes or r.index >= len(g.nodes[r.node].types):
                yield f"{node.op.name} %{node.id} reads {r}, which does not exist"
    for name, r in zip(g.output_names, g.outputs):
        if r.node not in g.nodes or r.index >= len(g.nodes[r.node].types):
            yield f"graph output {name!r} is {r}, which does not exist"


def acyclic(g: Graph) -> Iterator[str]:
    try:
        g.topo_order()
    except GraphError as e:
        yield str(e)


def types_agree(g: Graph) -> Iterator[str]:
    """Each node's stored output types are what its shape rule gives for its inputs."""
    for node in g.nodes.values():
        try:
            in_types = [g.type(r) for r in node.inputs]
            want = node.op.infer(in_types, node.attrs)
        except TasoError as e:
            yield f"{node.op.name} %{node.id}: {e}"
            continue
        if tuple(want) != node.types:
            yield f"{node.op.name} %{node.id} claims {', '.join(map(str, node.types))}, shape rule gives " \
                  f"{', '.join(map(str, want))}"


def names_unique(g: Graph) -> Iterator[str]:
    counts = Counter(n for node in g.nodes.values() for n in node.names)
    for name, k in counts.items():
        if k > 1 or not name:
            yield f"tensor name {name!r} is used {k} times" if name else "a tensor has an empty name"


def outputs_named(g: Graph) -> Iterator[str]:
    if not g.outputs:
        yield "graph has no outputs"
    if len(g.outputs) != len(g.output_names):
        yield f"{len(g.outputs)} outputs but {len(g.output_names)} output names"
    for name, k in Counter(g.output_names).items():
        if k > 1 or not name:
            yield f"graph output name {name!r} is used {k} times" if name else "a graph output has no name"


def inputs_listed(g: Graph) -> Iterator[str]:
    kinds = {i: g.nodes[i].op.name for i in g.input_ids if i in g.nodes}
    for i in g.input_ids:
        if kinds.get(i) != "input":
            yield f"graph input %{i} is not an input node"
    for node in g.nodes.values():
        if node.op.name == "input" and node.id not in g.input_ids:
            yield f"input node %{node.id} ({node.attrs.name!r}) is not a graph input"


SPEC: tuple[Check, ...] = (refs_exist, acyclic, types_agree, names_unique, outputs_named, inputs_listed)


def problems(g: Graph) -> list[str]:
    """Every problem the spec finds (refs first: later checks assume them)."""
    found = list(refs_exist(g))
    if found:
        return found
    return [p for check in SPEC[1:] for p in check(g)]


def validate(g: Graph) -> Graph:
    """Raise a GraphError naming the first problem; return the graph for chaining."""
    found = problems(g)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise GraphError(f"invalid graph {g.name!r}: {found[0]}{more}")
    return g
