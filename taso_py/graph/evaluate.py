"""Run a graph with the operators' numpy reference semantics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from taso_py.errors import GraphError, InputError
from taso_py.graph.ir import Graph, Ref
from taso_py.types import TensorType


def check_feeds(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Feeds as arrays of exactly the inputs' shapes and types; a clear error otherwise."""
    wanted = {n.attrs.name: n.attrs.type for n in graph.inputs}
    unknown = sorted(set(feeds) - set(wanted))
    if unknown:
        raise InputError(f"no graph input named {unknown[0]!r} (inputs: {', '.join(wanted)})")
    out = {}
    for name, t in wanted.items():
        if name not in feeds:
            raise InputError(f"graph input {name!r} ({t}) was not fed")
        value = np.asarray(feeds[name])
        if value.shape != t.shape or value.dtype != t.dtype.numpy:
            raise InputError(f"input {name!r} must be {t}, got {value.dtype.name}{list(value.shape)}")
        out[name] = value
    return out


def evaluate(graph: Graph, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None,
             wide: bool = False) -> dict[str, np.ndarray]:
    """Graph outputs (all, or those named) for the given input values.

    Intermediate values are dropped once their last reader has run, so whole models fit. `wide`
    computes in float64 from the same float32 inputs and weights: the truth that float32 results,
    ORT's and ours, are judged against where rounding alone may explain a difference. Nodes outside
    the algebra run in ORT in their declared types (their inputs rounded to them), since ORT
    implements many operators (If, TopK, ...) for float32 only; that rounding is one ulp of an input.
    """
    feeds = check_feeds(graph, feeds)
    if wide:
        feeds = {k: _widen(v) for k, v in feeds.items()}
    chosen = [(n, r) for n, r in zip(graph.output_names, graph.outputs) if outputs is None or n in outputs]
    live = graph.live_ids()
    order = [n for n in graph.topo_order() if n.id in live]
    readers = Counter(r for n in order for r in n.inputs) + Counter(r for _, r in chosen)
    values: dict[Ref, np.ndarray] = {}
    for node in order:
        if node.op.name == "input":
            results: tuple[np.ndarray, ...] = (feeds[node.attrs.name],)
        else:
            args = [values[r] for r in node.inputs]
            if wide and node.op.name == "opaque":
                args = [_narrow(v, graph.type(r)) for v, r in zip(args, node.inputs)]
            results = node.op.evaluate(args, node.attrs)
            if wide:
                results = tuple(_widen(np.asarray(v)) for v in results)
        _check_results(node, results)
        for ref, value in zip(node.outputs, results):
            if readers[ref]:
                values[ref] = value
        for r in node.inputs:
            readers[r] -= 1
            if not readers[r]:
                values.pop(r, None)
    return {name: values[ref] for name, ref in chosen}


def _widen(value: np.ndarray) -> np.ndarray:
    return value.astype(np.float64) if value.dtype.kind == "f" and value.dtype.itemsize < 8 else value


def _narrow(value: np.ndarray, t: TensorType) -> np.ndarray:
    return value.astype(t.dtype.numpy) if value.dtype != t.dtype.numpy else value


def _check_results(node: object, results: tuple[np.ndarray, ...]) -> None:
    """A reference that disagrees with its own shape rule is a bug: say where."""
    if len(results) != len(node.types):
        raise GraphError(f"{node.op.name} %{node.id} produced {len(results)} values, expected {len(node.types)}")
    for t, v in zip(node.types, results):
        if t.shape is not None and tuple(v.shape) != t.shape:
            raise GraphError(f"{node.op.name} %{node.id} produced shape {list(v.shape)}, expected {t}")
