"""`taso convert MODEL -o OUT`: round-trip a model through the graph IR.

Useful on its own: it fixes dynamic input shapes, folds constant subgraphs and legacy
forms (Sum, Dropout, shape arithmetic) and re-exports checker-clean, and it is checked
against the original in ONNX Runtime before anything is written.
"""

from __future__ import annotations

from pathlib import Path

import click

from taso_py.cli.common import emit_json, input_shape_option, json_option, load, model_argument, output_path
from taso_py.errors import TasoError
from taso_py.onnx_io import save_model
from taso_py.runtime import Comparison, compare_models, random_feeds


class CheckFailed(TasoError):
    exit_code = 1


@click.command()
@model_argument
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write (default: MODEL.converted.onnx).")
@input_shape_option
@click.option("--no-check", is_flag=True, help="Skip the ONNX Runtime comparison with the original.")
@click.option("--rtol", default=1e-4, show_default=True, help="Relative tolerance of the check.")
@click.option("--atol", default=1e-5, show_default=True, help="Absolute tolerance of the check.")
@json_option
def convert(model: Path, out: Path | None, input_shapes: tuple[str, ...], no_check: bool, rtol: float,
            atol: float, as_json: bool) -> None:
    """Import MODEL into the graph IR and export it again, checked against the original."""
    target = output_path(model, out, ".converted.onnx")
    imported = load(model, input_shapes)
    result: list[Comparison] = []

    def verify(staged: Path) -> None:
        feeds = random_feeds(imported.graph)
        comparison = compare_models(model, staged, feeds, rtol, atol)
        result.append(comparison)
        if not comparison.ok:
            raise CheckFailed(f"converted model differs from the original on output {comparison.worst_output!r}: "
                              f"max abs error {comparison.max_abs:.3g}, max rel error {comparison.max_rel:.3g}")

    save_model(imported, target, before_publish=None if no_check else verify)
    report = {"input": str(model), "output": str(target), "check": result[0].to_json() if result else None}
    if as_json:
        emit_json(report)
    else:
        check = f" (ORT check: max rel error {result[0].max_rel:.2g})" if result else ""
        click.echo(f"wrote {target}{check}", err=True)
