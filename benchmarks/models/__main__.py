"""Write benchmark models as NAME.onnx and print a summary table.

Usage: ``python -m benchmarks.models [--size small|full] [--out DIR] [--seed N] [NAME ...]``
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import onnx

from taso_py.atomic import write_bytes

from . import SIZES, build, count_params, names

# Summary table columns: (title, alignment and width).
COLUMNS = (("name", "<13"), ("ops", ">5"), ("params", ">12"), ("MB", ">7"), ("input", "<15"), ("output", "<10"))


def write_atomic(model: onnx.ModelProto, path: Path) -> int:
    """Write the model atomically; return its size in bytes."""
    data = model.SerializeToString()
    write_bytes(path, data)
    return len(data)


def _shape(value: onnx.ValueInfoProto) -> str:
    return "x".join(str(d.dim_value) for d in value.type.tensor_type.shape.dim)


def _table_row(cells: Sequence[str]) -> str:
    return "  ".join(f"{cell:{spec}}" for cell, (_, spec) in zip(cells, COLUMNS, strict=True)).rstrip()


def _summary(name: str, model: onnx.ModelProto, nbytes: int) -> str:
    g = model.graph
    params = f"{count_params(model):,}"
    return _table_row(
        [name, str(len(g.node)), params, f"{nbytes / 2**20:.1f}", _shape(g.input[0]), _shape(g.output[0])]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.models", description=__doc__)
    parser.add_argument("--size", choices=SIZES, default="full")
    parser.add_argument("--out", type=Path, default=Path("out/models"), help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"default: all of {', '.join(names())}")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(names()))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; valid names: {', '.join(names())}")
    args.out.mkdir(parents=True, exist_ok=True)
    print(_table_row([title for title, _ in COLUMNS]))
    for name in args.names or names():
        model = build(name, args.size, args.seed)
        print(_summary(name, model, write_atomic(model, args.out / f"{name}.onnx")), flush=True)


if __name__ == "__main__":
    main()
