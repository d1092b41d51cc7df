"""`taso info MODEL`: what is in a model, and which of it taso-py's algebra covers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from taso_py.cli.common import emit_json, input_shape_option, json_option, load, model_argument
from taso_py.graph import Graph, canonical_hash
from taso_py.onnx_io import OnnxModel


def summarize(model: OnnxModel) -> dict:
    g: Graph = model.graph
    nodes = [n for n in g.nodes.values() if n.op.name not in ("input", "weight")]
    weights = [n.attrs.value for n in g.nodes.values() if n.op.name == "weight"]
    algebra = Counter(n.op.name for n in nodes if n.op.algebra)
    opaque = Counter(n.attrs.label for n in nodes if n.op.name == "opaque")

    def tensors(refs: list, names: list[str]) -> list[dict]:
        return [{"name": name, "shape": list(g.type(r).shape) if g.type(r).shape is not None else None,
                 "dtype": g.type(r).dtype.value if g.type(r).dtype else None} for r, name in zip(refs, names)]

    return {
        "model": model.source, "graph": g.name, "opset": model.opset, "opsets": model.origin.opsets,
        "producer": " ".join(p for p in (model.origin.producer_name, model.origin.producer_version) if p),
        "nodes": len(nodes), "algebra_nodes": sum(algebra.values()), "opaque_nodes": sum(opaque.values()),
        "ops": dict(sorted(algebra.items())), "opaque_ops": dict(sorted(opaque.items())),
        "parameters": int(sum(w.size for w in weights)), "parameter_bytes": int(sum(w.nbytes for w in weights)),
        "inputs": tensors([n.outputs[0] for n in g.inputs], [n.attrs.name for n in g.inputs]),
        "outputs": tensors(g.outputs, g.output_names), "hash": canonical_hash(g), "notes": model.notes,
    }


def _print(info: dict) -> None:
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold]{info['model']}[/]  graph {info['graph']!r}, opset {info['opset']}"
                  + (f", from {info['producer']}" if info["producer"] else ""))
    console.print(f"{info['nodes']} nodes: {info['algebra_nodes']} in the algebra, {info['opaque_nodes']} opaque; "
                  f"{info['parameters']:,} parameters ({info['parameter_bytes'] / 2**20:.1f} MiB)")
    io = Table(title="inputs and outputs", title_justify="left")
    for col in ("", "name", "shape", "dtype"):
        io.add_column(col)
    for kind in ("inputs", "outputs"):
        for t in info[kind]:
            shape = "?" if t["shape"] is None else "x".join(map(str, t["shape"])) or "scalar"
            io.add_row(kind[:-1], t["name"], shape, t["dtype"] or "?")
    console.print(io)
    ops = Table(title="operators", title_justify="left")
    for col, justify in (("operator", "left"), ("count", "right"), ("kind", "left")):
        ops.add_column(col, justify=justify)
    for name, count in info["ops"].items():
        ops.add_row(name, str(count), "algebra")
    for name, count in info["opaque_ops"].items():
        ops.add_row(name, str(count), "opaque")
    console.print(ops)
    for note in info["notes"]:
        console.print(f"note: {note}")


@click.command()
@model_argument
@input_shape_option
@json_option
def info(model: Path, input_shapes: tuple[str, ...], as_json: bool) -> None:
    """Operator counts, parameters, inputs and outputs of MODEL, and which nodes are opaque."""
    summary = summarize(load(model, input_shapes))
    emit_json(summary) if as_json else _print(summary)
