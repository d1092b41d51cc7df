"""`taso compile MODEL -o DIR` and `taso run DIR`: the optimized graph through taso-py's own compiler."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from taso_py.cli.common import (
    CheckFailed,
    emit_json,
    input_shape_option,
    json_option,
    load,
    model_argument,
    reference_graph,
    search_option,
    search_settings,
)
from taso_py.cli.rules import library_option
from taso_py.codegen.target import CPU, TARGETS, Target
from taso_py.graph import Graph
from taso_py.library.store import load as load_library
from taso_py.onnx_io import load_model, save_model
from taso_py.onnx_io.exporter import region_writer
from taso_py.onnx_io.model import OnnxModel
from taso_py.optimizer import cost_model, optimize
from taso_py.runtime import (
    CHECK_SEEDS,
    ROUNDING_FACTOR,
    check_equivalent,
    check_memory,
    compare_output_sets,
    compare_outputs,
)
from taso_py.runtime import run as ort_run
from taso_py.runtime import run_sets as ort_run_sets


@click.command("compile")
@model_argument
@click.option("--target", "target_name", type=click.Choice(list(TARGETS)), default=CPU.name, show_default=True,
              help="What to generate code for.")
@click.option("-o", "--output", "out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Directory for the compiled model (replaced if it holds an earlier compile).")
@click.option("--no-optimize", is_flag=True, help="Compile the graph as imported (skip the superoptimizer).")
@library_option
@click.option("--cost", type=click.Choice(["kernels", "measured", "analytical"]), default="kernels",
              show_default=True, help="The superoptimizer's cost model: taso-py's own kernels on this machine "
              "(--target cpu; a roofline for the others), ONNX Runtime's timings, or a roofline.")
@click.option("--speed-runs", type=click.IntRange(min=0), default=10, show_default=True,
              help="Time the optimized module against the imported graph's (--target cpu, at least this many runs "
              "each) and keep the faster; 0 keeps the optimized one untimed.")
@click.option("--tune", "trials", type=click.IntRange(min=0), default=0, show_default=True,
              help="Measured schedule candidates per kernel (0: default schedules, or earlier tuning records).")
@click.option("--records", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Tuning records to read and extend (default: ~/.cache/taso-py/tuning.jsonl).")
@search_option("backtrack")
@input_shape_option
@json_option
def compile_command(model: Path, target_name: str, out: Path, no_optimize: bool, library_path: Path | None, cost: str,
                    speed_runs: int, trials: int, records: Path | None, search: str, input_shapes: tuple[str, ...],
                    as_json: bool) -> None:
    """Compile MODEL into DIR: fused kernels in C, one shared library, a manifest and the weights.

    Example: taso compile model.onnx --target cpu -o model.cpu && taso run model.cpu --check
    """
    from taso_py.codegen.graph import compile_graph
    from taso_py.codegen.graph.module import check_destination, publish
    from taso_py.codegen.graph.tuning import config_source

    target = Target.parse(target_name)
    if Path(model).resolve() == Path(out).resolve():
        raise click.UsageError("the output directory cannot be the model file")
    if trials and not target.native:
        raise click.UsageError(f"--tune measures kernels on this CPU; it does not apply to --target {target.name}")
    check_destination(Path(out))
    started = time.perf_counter()
    imported = load(model, input_shapes)
    check_memory(imported.graph, CHECK_SEEDS)  # the module is run against ORT before it is published
    console = Console(stderr=True)
    graph_model: OnnxModel = imported
    rewrites, predicted = 0, 1.0
    if not no_optimize:
        library = load_library(library_path)
        if cost == "kernels" and target.native:
            from taso_py.codegen.cost import KernelCost
            model_cost = KernelCost()
        else:
            model_cost = cost_model("analytical" if cost == "kernels" else cost, 0, imported.opset)
        result = optimize(imported, library, model_cost, search_settings(search))
        graph_model, rewrites = result.model, len(result.outcome.applied)
        predicted = result.outcome.original_cost / result.outcome.cost if result.outcome.cost else 1.0
    config_for = config_source(records, trials, progress=not as_json) if target.native else None
    race = rewrites > 0 and target.native and speed_runs > 0
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{Path(out).name}.", dir=Path(out).parent))
    speed = None
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True, disable=as_json) as bar:
            candidates = [("optimized", graph_model, rewrites > 0)] + ([("original", imported, False)] if race else [])
            reports = {}
            for label, candidate, checked in candidates:
                task = bar.add_task(f"generating kernels ({label} graph)", total=None)
                reports[label] = compile_graph(
                    candidate.graph, stage / label, target, config_for,
                    write_onnx=lambda path, c=candidate, k=checked: _save_checked(model, c, path, k),
                    progress=lambda done, total, t=task: bar.update(t, completed=done, total=total),
                    write_region=region_writer(candidate.origin))
            kept = "optimized"
            if race:
                from taso_py.codegen.runtime import CompiledModel, side_by_side
                bar.add_task("timing the optimized module against the original's", total=None)
                t = side_by_side(CompiledModel(stage / "original"), CompiledModel(stage / "optimized"), speed_runs)
                # as `taso optimize` keeps a group: faster beyond the noise of the timings, not a median alone
                kept = "optimized" if t.pays else "original"
                speed = {**t.to_json(), "predicted_speedup": round(predicted, 4), "kept": kept}
            bar.add_task(f"checking the compiled module against {Path(model).name} in ONNX Runtime", total=None)
            check = _check_module(model, stage / kept, target, reference_graph(model, imported.graph))
        publish(stage / kept, Path(out))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    report = reports[kept]
    if kept == "original":
        rewrites = 0
    seconds = time.perf_counter() - started
    doc = {"model": str(model), "output": str(out), "target": target.name, "optimized": not no_optimize,
           "rewrites": rewrites, "groups": report.groups, "kernels": report.kernels,
           "unique_kernels": report.unique_kernels, "arena_bytes": report.arena_bytes,
           "intermediate_bytes_unshared": report.unshared_bytes, "weight_bytes": report.weight_bytes,
           "accel_layers": report.accel_layers, "kernel_nodes": report.kernel_nodes,
           "fallback_nodes": report.fallback_nodes, "onnxruntime_regions": report.regions,
           "kernel_failures": report.kernel_failures,
           "check": check, "tuning_trials": trials, "speed": speed, "seconds": round(seconds, 2),
           "stage_seconds": {k: round(v, 3) for k, v in report.seconds.items()}}
    if as_json:
        emit_json(doc)
        return
    opt = f"{rewrites} rewrites by the superoptimizer, " if not no_optimize else ""
    if speed is not None:
        opt = (f"the superoptimized graph runs {speed['speedup']:.3f}x the imported one's speed here (predicted "
               f"{predicted:.3f}x), so the {kept} graph is compiled: {rewrites} rewrites, ")
    if target.offload is not None:
        opt += f"{report.accel_layers} layers on the accelerator (int8), "
    console.print(f"{opt}{report.groups} fused groups → {report.kernels} kernels ({report.unique_kernels} distinct); "
                  f"intermediates in a {report.arena_bytes / 2**20:.1f} MiB arena "
                  f"(unshared: {report.unshared_bytes / 2**20:.1f} MiB); {seconds:.1f} s", highlight=False)
    for failure in report.kernel_failures:
        console.print(f"warning: no kernel could be built for {failure}; ONNX Runtime runs it", highlight=False)
    if report.fallback_nodes:
        console.print(f"{report.kernel_nodes} nodes on taso-py's kernels, {report.fallback_nodes} without a kernel "
                      f"run by ONNX Runtime inside the module ({report.regions} regions)", highlight=False)
    if "max_rel_error" in check:
        judged = [o for o in check["outputs"] if o["float64_normwise_error"]]
        second = (f"; over rtol on {len(judged)} output(s) whose float64 truth ORT misses by as much (ill-"
                  f"conditioned: within {ROUNDING_FACTOR:g}x ORT's own error)") if judged else ""
        console.print(f"checked against {Path(model).name} in ONNX Runtime on {check['input_sets']} input sets: "
                      f"normwise error {check['max_rel_error']:.3g} (max|a-b| / max|a| <= {check['rtol']:g}{second})",
                      highlight=False)
    else:
        console.print(f"not checked: {check['skipped']}", highlight=False)
    console.print(f"wrote {out}", highlight=False)


def _save_checked(original: Path, graph_model: OnnxModel, path: Path, check: bool) -> None:
    """The graph being compiled, as ONNX (what `taso run --check` compares with); a superoptimized
    graph is first checked against the original model in ONNX Runtime by the criterion `taso
    optimize` uses (`runtime.check_equivalent`: two seeded input sets)."""
    def verify(staged: Path) -> None:
        result = check_equivalent(original, staged, graph_model.graph,
                                  truth=reference_graph(original, graph_model.graph))
        if not result.ok:
            raise CheckFailed(f"the optimized graph differs from {original.name} on {result.describe()}; "
                              "nothing compiled")

    save_model(graph_model, path, before_publish=verify if check else None)


def _check_module(original: Path, directory: Path, target: Target, truth: Callable[[], Graph]) -> dict:
    """Run the compiled module and the original model in ONNX Runtime on the same seeded input
    sets, judged by the one criterion (`runtime.compare_output_sets`, then `runtime.arbitrate`
    against the original's graph in float64) at the target's tolerance; a difference is a
    CheckFailed (exit 1) and the directory is not published."""
    from taso_py.codegen.runtime import CompiledModel, random_inputs

    reason = target.unavailable()
    if reason is not None:
        return {"skipped": reason}
    compiled = CompiledModel(directory)
    sets = [random_inputs(compiled, seed) for seed in range(CHECK_SEEDS)]
    result = compare_output_sets(ort_run_sets(original, sets), [compiled.run(feeds) for feeds in sets], target.rtol,
                                 truth=truth, feed_sets=sets)
    if not result.ok:
        raise CheckFailed(f"the compiled module differs from {Path(original).name} on {result.describe()}; "
                          "nothing written")
    return result.to_json()


@click.command("run")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--check", is_flag=True, help="Compare the outputs with ONNX Runtime on the same random inputs.")
@click.option("--repeat", type=click.IntRange(min=0), default=0, show_default=True,
              help="Time this many runs (median); with --check also time ONNX Runtime.")
@click.option("--profile", is_flag=True, help="Time each kernel on its own and list the slowest.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--rtol", type=float, default=None,
              help="Tolerance of --check on max|a-b| / max|a| per output (default 1e-4; 0.05 for --target accel).")
@json_option
def run_command(directory: Path, check: bool, repeat: int, profile: bool, seed: int, rtol: float | None,
                as_json: bool) -> None:
    """Run a compiled model on seeded random inputs; --check compares with ONNX Runtime.

    Example: taso run model.cpu --check --repeat 20
    """
    from taso_py.codegen.runtime import CompiledModel, random_inputs

    compiled = CompiledModel(directory)
    quantized = compiled.target.offload is not None
    feeds = random_inputs(compiled, seed)
    outputs = compiled.run(feeds)
    doc: dict = {"directory": str(directory), "outputs": {k: list(v.shape) for k, v in outputs.items()}}
    comparison = None
    if check:
        reference = directory / "model.onnx"
        if not reference.is_file():
            raise CheckFailed(f"{directory} has no model.onnx to check against")
        # the one criterion (runtime.compare_outputs), on this run's inputs; int8 layers get a wider rtol
        tolerance = rtol if rtol is not None else compiled.target.rtol
        comparison = compare_outputs(ort_run(reference, feeds), outputs, tolerance,
                                     truth=lambda: load_model(reference).graph, feeds=feeds)
        doc["check"] = {**comparison.to_json(), "int8_layers": quantized}
    if compiled.stats:
        cycles = sum(st.cycles for st in compiled.stats)
        macs = sum(st.macs for st in compiled.stats)
        doc["accelerator"] = {"layers": len(compiled.stats), "cycles": cycles, "macs": macs}
    if repeat:
        doc["latency_ms"] = compiled.latency_ms(feeds, repeat)
        doc["runs"] = repeat
    if profile:
        doc["kernels"] = [{"kernel": t.kernel, "group": t.group, "ms": t.ms, "gflops": round(t.gflops, 2),
                           "gbytes": round(t.gbytes, 2)} for t in compiled.profile(feeds, max(repeat, 3))]
    if as_json:
        emit_json(doc)
    else:
        console = Console()
        for name, shape in doc["outputs"].items():
            console.print(f"output {name}: {tuple(shape)}", highlight=False)
        if comparison is not None:
            verdict = "matches" if comparison.ok else "DIFFERS from"
            console.print(f"{verdict} ONNX Runtime: {comparison.describe()}; criterion: max|a-b| / max|a| <= "
                          f"{tolerance:g} per output" + (" (int8 layers)" if quantized else ""), highlight=False)
        if "accelerator" in doc:
            a = doc["accelerator"]
            console.print(f"accelerator: {a['layers']} layers, {a['cycles']:,} cycles, {a['macs']:,} MACs",
                          highlight=False)
        if repeat:
            console.print(f"latency: {doc['latency_ms']:.3f} ms (median of {repeat} runs)", highlight=False)
        if profile:
            table = Table("kernel", "computes", "ms", "share", "GFLOP/s", "GB/s")
            total = sum(k["ms"] for k in doc["kernels"]) or 1.0
            for k in sorted(doc["kernels"], key=lambda k: -k["ms"])[:15]:
                table.add_row(k["kernel"], k["group"], f"{k['ms']:.3f}", f"{k['ms'] / total:.0%}",
                              f"{k['gflops']:.1f}", f"{k['gbytes']:.1f}")
            console.print(table)
    if comparison is not None and not comparison.ok:
        raise CheckFailed(f"compiled model differs from ONNX Runtime on {comparison.describe()}")
