"""Fresh tensor names that can never collide with a name of the model.

ONNX names are one namespace across a model and its subgraphs (the checker rejects a subgraph
name equal to an outer one), and a model may use any string, including the names taso-py makes
up itself (`split_1`, `conv2d_0`, `const_3`). Every name the importer, the optimizer and the
exporter create has the form `{hint}_{n}`, with `n` above every number that ends a name of the
model (`model_names`, subgraphs included): a name of the model ending in `_{n}` would need a
smaller `n`, so no made-up name can equal one, whatever the graph later frees or renames.
Within a graph or a written model, each source also skips the names already taken there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import onnx

from taso_py.graph import Graph
from taso_py.onnx_io.scopes import subgraphs

# a counter as fresh names write it (no leading zeros); longer suffixes can never be reached
_SUFFIX = re.compile(r"_(0|[1-9]\d{0,17})\Z")


def model_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name a graph mentions: inputs, outputs, initializers, value infos and node
    inputs and outputs, in its subgraphs too (the empty name of an absent optional input is left out)."""
    names: set[str] = set()
    stack = [graph]
    while stack:
        g = stack.pop()
        names.update(v.name for part in (g.input, g.output, g.value_info) for v in part)
        names.update(t.name for t in g.initializer)
        names.update(t.values.name for t in g.sparse_initializer)
        for node in g.node:
            names.update(node.input)
            names.update(node.output)
            stack.extend(subgraphs(node))
    names.discard("")
    return names


def fresh_floor(names: Iterable[str]) -> int:
    """The smallest counter from which `{hint}_{n}` equals none of `names`, for any hint."""
    return max((int(m.group(1)) + 1 for n in names if isinstance(n, str) and (m := _SUFFIX.search(n))), default=0)


def avoid_names(graph: Graph, names: Iterable[str]) -> None:
    """Make every name `graph.fresh_name` hands out from now on (in the graph and its copies,
    which keep the counter) differ from `names`; the counter only grows, so this holds even after
    the graph frees one of them by removing a node."""
    graph.skip_suffixes(fresh_floor(names))


class NameSource:
    """Fresh names for a model being written: never in `taken` (which it extends), never equal to
    a name ending in a number below its floor."""

    def __init__(self, taken: set[str]) -> None:
        self._taken = taken
        self._counter = fresh_floor(taken)

    def fresh(self, hint: str) -> str:
        while f"{hint}_{self._counter}" in self._taken:
            self._counter += 1
        name = f"{hint}_{self._counter}"
        self._counter += 1
        self._taken.add(name)
        return name
