"""`taso generate-rules`: enumerate, verify and prune a rule library (see generator.pipeline)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from taso_py.cli.common import emit_json, json_option
from taso_py.errors import InputError
from taso_py.generator.executor import make_executor
from taso_py.generator.pipeline import Checkpoint, Settings, generate
from taso_py.generator.world import GEN_OPS, LIBRARY_OPS


def _ops(value: str | None) -> tuple[str, ...]:
    if not value:
        return LIBRARY_OPS
    chosen = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [o for o in chosen if o not in GEN_OPS]
    if unknown:
        raise InputError(f"--ops: {unknown[0]!r} is not an operator the generator knows "
                         f"(known: {', '.join(GEN_OPS)})")
    return chosen


@click.command("generate-rules")
@click.option("--max-ops", type=click.IntRange(1, 6), default=3, show_default=True,
              help="Largest graph (operators, constants included) on either side of a rule.")
@click.option("--ops", "op_list", metavar="A,B,...",
              help="Operators to enumerate (default: the shipped library's: TASO's, activations, slices, reductions).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Local worker processes (default: all cores).")
@click.option("--scheduler", metavar="ADDRESS", help="Run the shards on a Dask scheduler, e.g. tcp://host:8786.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the fingerprint inputs.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds per proof; running out is UNKNOWN and the rule is dropped.")
@click.option("-o", "--out", type=click.Path(path_type=Path), default=Path("rules/generated.json"),
              show_default=True, help="Where to write the library (atomically).")
@click.option("--resume", is_flag=True, help="Reuse the proofs of an interrupted run (OUT.checkpoint.jsonl).")
@json_option
def generate_rules(max_ops: int, op_list: str | None, workers: int | None, scheduler: str | None, seed: int,
                   timeout: float, out: Path, resume: bool, as_json: bool) -> None:
    """Enumerate graphs, pair equal ones, prove the pairs and write the pruned rule library.

    Example: taso generate-rules --max-ops 3 -o rules/default.json
    """
    settings = Settings(max_ops=max_ops, ops=_ops(op_list), seed=seed, timeout=timeout)
    checkpoint_path = out.with_name(out.name + ".checkpoint.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    executor = make_executor(workers, scheduler)
    checkpoint = Checkpoint(checkpoint_path, resume)
    console = Console(stderr=True)
    started = time.perf_counter()
    try:
        with Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as bar:
            def progress(stage: str, total: int) -> Callable[[int], None]:
                task = bar.add_task(stage, total=total)
                if not console.is_terminal:  # a log file gets a line per stage, with the time since the start
                    console.print(f"{time.perf_counter() - started:8.0f} s  {stage}: {total}", highlight=False)
                return lambda n: bar.advance(task, n)

            library = generate(settings, executor, checkpoint, progress)
    finally:
        executor.close()
        checkpoint.close()
    library.generator["wall_seconds"] = round(time.perf_counter() - started, 2)
    library.save(out)
    checkpoint_path.unlink(missing_ok=True)
    counts = library.generator["counts"]
    if as_json:
        emit_json({"out": str(out), "rules": len(library), "counts": counts,
                   "seconds": library.generator["seconds"], "wall_seconds": library.generator["wall_seconds"]})
    else:
        stages = " → ".join(f"{k} {v}" for k, v in counts.items())
        console.print(f"{stages}\nwrote {len(library)} rules to {out} "
                      f"in {library.generator['wall_seconds']:.0f} s", highlight=False)
