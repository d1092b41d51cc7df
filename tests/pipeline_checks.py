"""Checks that several operator test files share: a one-output model's import against ONNX Runtime,
fused groups of operators against the numpy reference through the C backend, the CUDA emulation and
a real GPU where one exists, and a model through `taso optimize`, `taso compile` and `taso run --check`
as a user runs them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from click.testing import CliRunner
from test_cuda import Group, cuda_modules

from taso_py.cli import main
from taso_py.codegen.backends.c import build
from taso_py.codegen.lower import lower
from taso_py.codegen.topi import schedule_group
from taso_py.codegen.tune.space import Config
from taso_py.graph import Graph, evaluate
from taso_py.onnx_io import load_model, to_onnx
from taso_py.runtime import run

RNG = np.random.default_rng(0)


def node_kinds(g: Graph) -> list[str]:
    """The graph's operators, sorted, without its inputs and weights."""
    return sorted(n.kind for n in g.nodes.values() if n.kind not in ("input", "weight"))


def imports_and_agrees(model: onnx.ModelProto, kinds: list[str], tol: dict[str, float] | None = None) -> Graph:
    """`model` (input x, output y) imports as `kinds`, and its shape rule, the reference and ORT on the export
    agree with ORT on the original: exactly, or within `tol` (`assert_allclose`'s rtol and atol)."""
    imported = load_model(model)
    assert node_kinds(imported.graph) == kinds
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32)}
    want = run(model, feeds)["y"]
    (out,) = imported.graph.outputs
    assert imported.graph.type(out).known_shape == want.shape
    for got in (evaluate(imported.graph, feeds)["y"], run(to_onnx(imported), feeds)["y"]):
        assert got.shape == want.shape
        if tol is None:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, **tol)
    return imported.graph


def check_c_kernels(groups: Sequence[Group]) -> None:
    """Every group compiled into one C module (every parallel-loop decision taken) and checked."""
    mod = build([lower(schedule_group(g.outs, Config({"parallel_min_elements": 0})), [*g.ins, *g.outs], g.name)
                 for g in groups])
    for g in groups:
        g.check(mod)


def check_cuda_kernels(groups: Sequence[Group]) -> None:
    """Every group's CUDA source checked under the CPU emulation, and on the GPU where one exists."""
    for mod in cuda_modules([g.lower() for g in groups]):
        for g in groups:
            g.check(mod)


def optimize_compile_run(model: Path, work: Path) -> dict[str, Any]:
    """`taso optimize`, `taso compile --target cpu` and `taso run --check` on `model`; each must
    succeed and the compiled outputs match ONNX Runtime's. Returns the run's JSON report."""
    runner = CliRunner()
    done = runner.invoke(main, ["optimize", str(model), "--cost", "analytical", "-o", str(work / "o.onnx")])
    assert done.exit_code == 0, done.output
    out = work / "m.cpu"
    done = runner.invoke(main, ["compile", str(model), "--target", "cpu", "-o", str(out), "--json"])
    assert done.exit_code == 0, done.output
    done = runner.invoke(main, ["run", str(out), "--check", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output[done.output.index("{"):])  # after any warning lines
    assert report["check"]["ok"] and report["check"]["max_rel_error"] < 1e-4
    return report
