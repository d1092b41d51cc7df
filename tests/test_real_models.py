"""Real architectures written elsewhere (torch.nn modules exported by both of torch's exporters,
models with operators outside the algebra) through the three commands a user runs, with the
default settings: `taso optimize`, `taso compile`, `taso run --check`."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from taso_py.cli import main
from tests.corpus import CORPUS, CorpusModel, params, save

REAL = [e for e in CORPUS if e.source.startswith("torch") or e.opaque_ops]


def _taso(*args: str) -> dict:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_corpus_holds_enough_architectures() -> None:
    """At least ten architectures from torch.nn (each net counted once, whatever the exporter)."""
    nets = {e.build.__wrapped__.args[0] for e in CORPUS if e.source.startswith("torch")}  # type: ignore[attr-defined]
    assert len(nets) >= 10, sorted(nets)


def test_twelve_architectures_come_from_both_exporters() -> None:
    """Issue 20: at least twelve architectures (a net and its arguments) exported by the legacy
    TorchScript exporter at opset 17 and by dynamo at opset 18."""
    exports: dict[tuple, set[tuple[str, int]]] = {}
    for e in CORPUS:
        if e.source.startswith("torch"):
            net, args = e.build.__wrapped__.args[:2]  # type: ignore[attr-defined]
            exports.setdefault((net, args), set()).add((e.source, e.opset))
    both = [arch for arch, made in exports.items() if {("torch-legacy", 17), ("torch-dynamo", 18)} <= made]
    assert len(both) >= 12, sorted(both)


@pytest.mark.parametrize("entry", params(REAL))
def test_optimize_compile_and_run_check(tmp_path: Path, entry: CorpusModel) -> None:
    path = save(entry.build(), tmp_path / "m.onnx", external_data=entry.external_data)
    before = path.read_bytes()
    shapes = [f"{name}={','.join(map(str, dims))}" for name, dims in entry.input_shapes.items()]
    shape_args = [a for s in shapes for a in ("--input-shape", s)]
    optimized = _taso("optimize", str(path), "-o", str(tmp_path / "o.onnx"), *shape_args)
    assert optimized["check"]["ok"]
    onnx.checker.check_model(str(tmp_path / "o.onnx"), full_check=True)
    compiled = _taso("compile", str(path), "-o", str(tmp_path / "out"), *shape_args)
    assert compiled["check"]["max_rel_error"] <= 1e-4
    assert (compiled["fallback_nodes"] > 0) == bool(entry.opaque_ops)
    ran = _taso("run", str(tmp_path / "out"), "--check")
    assert ran["check"]["ok"]
    assert path.read_bytes() == before
