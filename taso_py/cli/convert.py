"""`taso convert MODEL -o OUT`: round-trip a model through the graph IR.

Useful on its own: it fixes dynamic input shapes, folds constant subgraphs and legacy
forms (Sum, Dropout, shape arithmetic) and re-exports checker-clean, and it is checked
against the original in ONNX Runtime before anything is written.
"""

from __future__ import annotations

from pathlib import Path

import click

from taso_py.cli.common import (
    check_options,
    emit_json,
    input_shape_option,
    json_option,
    load,
    model_argument,
    output_path,
    save_checked,
)


@click.command()
@model_argument
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write (default: MODEL.converted.onnx).")
@input_shape_option
@check_options
@json_option
def convert(model: Path, out: Path | None, input_shapes: tuple[str, ...], no_check: bool, rtol: float,
            atol: float, as_json: bool) -> None:
    """Import MODEL into the graph IR and export it again, checked against the original."""
    target = output_path(model, out, ".converted.onnx")
    imported = load(model, input_shapes)
    check = save_checked(model, imported, target, "converted", not no_check, rtol, atol)
    report = {"input": str(model), "output": str(target), "check": check.to_json() if check else None}
    if as_json:
        emit_json(report)
    else:
        checked = f" (ORT check: max rel error {check.max_rel:.2g})" if check else ""
        click.echo(f"wrote {target}{checked}", err=True)
