"""`taso optimize MODEL -o OUT`: rewrite a model with proved rules to run faster, checked in ORT."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.progress import Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from taso_py.acceptance import JUDGE_BUDGET_SECONDS, InContext, Trial, accept
from taso_py.cli.common import (
    check_options,
    emit_json,
    input_shape_option,
    json_option,
    load,
    model_argument,
    output_path,
    save_checked,
    search_option,
    search_settings,
)
from taso_py.cli.rules import library_option
from taso_py.cost.context import ContextTimings
from taso_py.cost.model import CostModel
from taso_py.graph.regions import diff
from taso_py.library.store import load as load_library
from taso_py.optimizer import Optimized, cost_model, optimize
from taso_py.runtime import CHECK_SEEDS, Comparison, Latency, check_memory, random_feeds, settled_latency
from taso_py.search.settings import EqsatSettings


@click.command("optimize")
@model_argument
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write (default: MODEL.taso.onnx).")
@library_option
@click.option("--cost", type=click.Choice(["measured", "analytical"]), default="measured", show_default=True,
              help="measured: each operator timed in ONNX Runtime here (cached); analytical: a roofline.")
@click.option("--alpha", type=click.FloatRange(min=1.0), default=1.05, show_default=True,
              help="Keep exploring graphs up to alpha x the best cost.")
@click.option("--budget", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Most graphs the search expands.")
@click.option("--timeout", type=click.FloatRange(min=0.0), default=None,
              help="Seconds of search (default: 30 for backtrack; 5 for eqsat, saturation and extraction "
                   "together, less operator timing; a slower CPU may need more).")
@click.option("--rounds", type=click.IntRange(min=1), default=EqsatSettings.rounds, show_default=True,
              help="eqsat: saturations, each of the graph the last one extracted, while one gains and the "
                   "time left fits another (merged operators merge again only in the next).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for ties and the check's inputs.")
@click.option("--threads", type=click.IntRange(min=0), default=0,
              help="ORT threads for measuring costs and timing the result (default: all cores).")
@click.option("--speed-runs", type=click.IntRange(min=0), default=10, show_default=True,
              help="Runs of each model (at least; timing goes on for a second) in ONNX Runtime to confirm "
                   "the result is faster (0: trust the cost model).")
@click.option("--min-speedup", type=click.FloatRange(min=0.0), default=1.0, show_default=True,
              help="Keep the rewritten model only if ONNX Runtime runs it at least this much faster; "
                   "otherwise write the original model as it came.")
@search_option("eqsat")
@input_shape_option
@check_options
@json_option
def optimize_command(model: Path, out: Path | None, library_path: Path | None, cost: str, alpha: float, budget: int,
                     timeout: float | None, rounds: int, seed: int, threads: int, speed_runs: int, min_speedup: float,
                     search: str, input_shapes: tuple[str, ...], no_check: bool, rtol: float, atol: float,
                     as_json: bool) -> None:
    """Find a faster equivalent of MODEL with the proved rules and write it, checked against MODEL.

    Example: taso optimize model.onnx -o model.taso.onnx
    """
    target = output_path(model, out, ".taso.onnx")
    imported = load(model, input_shapes)
    if not no_check:
        check_memory(imported.graph, CHECK_SEEDS)  # refused before the search, not after it
    library = load_library(library_path)
    pricing = cost_model(cost, threads, imported.opset)
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True,
                  disable=as_json) as bar:
        task = bar.add_task("measuring operator costs")

        def progress(step: int, value: float) -> None:
            bar.update(task, description=f"saturation: iteration {step}, {value:,.0f} e-nodes" if search == "eqsat"
                       else f"search: {step} graphs expanded, best cost {value:.4g} {pricing.unit}")

        # eqsat's rewrites priced in context during the search too, when the result will be timed in ORT anyway
        judge = InContext(ContextTimings(threads, imported.origin, pricing, budget=JUDGE_BUDGET_SECONDS),
                          lambda text: bar.update(task, description=text)) if speed_runs and search == "eqsat" else None
        settings = search_settings(search, alpha, budget, timeout, seed, rounds)
        result = optimize(imported, library, pricing, settings, progress, judge)
        written, trials, accepted = result.model, [], None
        feeds: dict[str, np.ndarray] = {}  # the timings' inputs, drawn only when there is something to time
        # regions, not rules applied: a common subexpression (two relus of one tensor), which eqsat's e-graph
        # holds once, leaves the graph changed with no rule applied
        regions = diff(result.start, result.model.graph)
        if speed_runs and regions:
            feeds = random_feeds(imported.graph, seed)
            accepted = accept(result.model, result.start, result.model.graph, pricing, feeds, threads, speed_runs,
                              lambda text: bar.update(task, description=text))
            written, trials = replace(result.model, graph=accepted.graph), accepted.trials
    speed: list[Latency] = []

    def faster(staged: Path) -> None:
        """The regions ORT ran faster one group at a time; the last word is a timing of the whole
        model against the user's file."""
        speed.append(settled_latency(model, staged, feeds, threads, speed_runs))
        if speed[0].speedup < min_speedup:
            raise NotFaster

    how = "optimized"  # or "unchanged" (the user's file, byte for byte) or "re-exported"
    try:
        if not regions or (trials and not any(t.kept for t in trials)):
            raise NotFaster
        check = save_checked(model, written, target, "optimized", not no_check, rtol, atol, seed,
                             then=faster if trials else None)
    except NotFaster:
        # nothing of the search is written: the user's file as it came, unless its weights live beside it
        how = "re-exported" if imported.origin.external_data else "unchanged"
        check = save_checked(model, imported, target, how, not no_check, rtol, atol, seed, copy=how == "unchanged")
    report = _report(model, target, result, pricing, check, search)
    report["written"] = how
    report["search"]["regions"] = len(regions)  # places the graph changed: rules applied miss common subexpressions
    if judge is not None:
        report["search"]["in_context"] = judge.to_json()
    kept = "optimized" if how == "optimized" else "original"
    report["speed"] = ({**(speed[0].to_json() if speed else {}), "kept": kept,
                        "predicted_in_context": round(accepted.predicted, 4), "groups": [t.to_json() for t in trials]}
                       if accepted is not None and trials else None)
    if as_json:
        emit_json(report)
    else:
        console.print(_table(result, pricing.unit))
        o = result.outcome
        gain = o.original_cost / o.cost if o.cost else 1.0
        checked = (f"; ORT check on {check.inputs} input sets: normwise error max|a-b| / max|a| {check.max_rel:.2g} "
                   f"(worst element |a-b| / (|a| + tiny) {check.max_elem_rel:.2g})" if check else "; not checked")
        fused = result.batchnorms_folded + result.activations_fused
        folded = (f" ({result.batchnorms_folded} batch norms and {result.activations_fused} activations fused "
                  "into convolutions first, as ORT does)") if fused else ""
        steps = (f"{o.expanded} saturation iterations, {o.generated:,} e-nodes" if search == "eqsat"
                 else f"{o.expanded} graphs expanded")
        console.print(f"search cost{folded} {o.original_cost:.4g} → {o.cost:.4g} {pricing.unit} ({gain:.3f}x) with "
                      f"{len(o.applied)} rewrites ({len(regions)} regions changed); {steps}"
                      f" in {o.seconds:.1f} s ({o.stopped})" + (
                          f", of which {judge.seconds:.1f} s pricing {judge.judged} extractions' rewrites in context "
                          f"({judge.slower} regions slower there, extracted again without them)"
                          if judge is not None and judge.judged else "") + checked, highlight=False)
        if accepted is not None and trials:
            console.print(_trials_table(trials))
            console.print(f"predicted in context (the groups that pay where they sit, all kept): "
                          f"{accepted.predicted:.3f}x", highlight=False)
            if speed:
                t = speed[0]
                verdict = "" if kept == "optimized" else f"; below --min-speedup {min_speedup:g}"
                console.print(f"ONNX Runtime, {t.threads} threads, median of {t.runs} runs each: {t.original_ms:.3f} → "
                              f"{t.optimized_ms:.3f} ms ({t.speedup:.3f}x, the median pair's ratio){verdict}",
                              highlight=False)
            else:
                console.print("ONNX Runtime ran none of the rewrites faster", highlight=False)
        console.print(f"wrote {target}" + {"optimized": "", "unchanged": " (the input as it came: no rewrite kept)",
                                           "re-exported": " (the input re-exported: no rewrite kept)"}[how],
                      highlight=False)


class NotFaster(Exception):
    """Nothing to write but the original: no rewrite found, or ONNX Runtime does not run it faster."""


def _trials_table(trials: list[Trial]) -> Table:
    table = Table(title="rewrites timed in ONNX Runtime, group by group")
    for column in ("change", "regions", "predicted", "in context", "measured (ms)", "speedup", "kept"):
        table.add_column(column, justify="left" if column == "change" else "right")
    for t in trials:
        m = t.measured
        table.add_row(t.change, str(t.regions), f"{t.predicted:.3f}x",
                      "-" if t.in_context is None else f"{t.in_context:.3f}x",
                      f"{m.original_ms:.3f} → {m.optimized_ms:.3f}" if m else "-", f"{m.speedup:.3f}x" if m else "-",
                      "yes" if t.kept else ("no: " + t.reason if t.reason else "no"))
    return table


def _table(result: Optimized, unit: str) -> Table:
    table = Table(title="operators before and after")
    for col in ("operator", "before", f"cost ({unit})", "after", f"cost ({unit})"):
        table.add_column(col, justify="left" if col == "operator" else "right")
    for op in sorted(set(result.before) | set(result.after)):
        b, a = result.before.get(op, (0, 0.0)), result.after.get(op, (0, 0.0))
        table.add_row(op, str(b[0]), f"{b[1]:.4g}", str(a[0]), f"{a[1]:.4g}")
    table.add_row("total", str(sum(v[0] for v in result.before.values())),
                  f"{sum(v[1] for v in result.before.values()):.4g}",
                  str(sum(v[0] for v in result.after.values())), f"{sum(v[1] for v in result.after.values()):.4g}",
                  style="bold")
    return table


def _report(model: Path, target: Path, result: Optimized, pricing: CostModel, check: Comparison | None,
            search: str) -> dict:
    o = result.outcome
    return {
        "input": str(model), "output": str(target),
        "cost": {"model": pricing.name, "unit": pricing.unit, "original": o.original_cost, "optimized": o.cost,
                 "speedup": o.original_cost / o.cost if o.cost else 1.0},
        "rules_applied": result.applied(), "batchnorms_folded": result.batchnorms_folded,
        "activations_fused": result.activations_fused,
        "rejected": result.rejected(),
        "search": {"kind": search, "expanded": o.expanded, "generated": o.generated, "matches_priced": o.matches,
                   "seconds": round(o.seconds, 3), "stopped": o.stopped, "rules": len(result.rules)},
        "operators": {"before": {k: v[0] for k, v in result.before.items()},
                      "after": {k: v[0] for k, v in result.after.items()}},
        "check": check.to_json() if check else None,
    }
