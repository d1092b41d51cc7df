"""`taso rules list|show|stats|verify`: look inside a rule library and re-prove it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from taso_py.cli.common import emit_json, json_option
from taso_py.generator.executor import LocalExecutor
from taso_py.generator.pipeline import task_prove
from taso_py.library.draw import render_png, to_dot
from taso_py.library.proof import Status
from taso_py.library.stats import stats
from taso_py.library.store import Library, load

library_option = click.option("--library", "library_path", type=click.Path(path_type=Path), default=None,
                              help="Rule library JSON (default: the shipped rules/default.json).")


@click.group("rules")
def rules() -> None:
    """Inspect and re-verify a rule library."""


@rules.command("list")
@library_option
@click.option("--op", "op_name", metavar="NAME", help="Only rules that use this operator.")
@json_option
def list_rules(library_path: Path | None, op_name: str | None, as_json: bool) -> None:
    """One line per rule: id, size, outputs, proof status and text."""
    library = load(library_path)
    entries = [e for e in library if op_name is None or op_name in e.ops]
    if as_json:
        emit_json({"library": str(library_path or "default"), "count": len(entries),
                   "rules": [{"id": e.id, "text": e.text, "size": e.size, "outputs": len(e.rule.src),
                              "status": e.proof.status.value, "ops": e.ops} for e in entries]})
        return
    table = Table(title=f"{len(entries)} rules", title_justify="left")
    for column in ("id", "size", "out", "status", "rule"):
        table.add_column(column, overflow="fold")
    for e in entries:
        table.add_row(e.id, str(e.size), str(len(e.rule.src)), e.proof.status.value, escape(e.text))
    Console(soft_wrap=False).print(table)


@rules.command("show")
@click.argument("rule_id")
@library_option
@click.option("--format", "fmt", type=click.Choice(["text", "dot", "json"]), default="text", show_default=True)
@click.option("--png", type=click.Path(path_type=Path), help="Also draw source and destination into this PNG.")
def show(rule_id: str, library_path: Path | None, fmt: str, png: Path | None) -> None:
    """Show one rule (RULE_ID or an unambiguous prefix of it)."""
    entry = load(library_path).get(rule_id)
    if png is not None:
        render_png(to_dot(entry), png)
    if fmt == "json":
        click.echo(json.dumps(entry.to_json(), indent=2))
    elif fmt == "dot":
        click.echo(to_dot(entry), nl=False)
    else:
        proof = entry.proof
        click.echo(f"{entry.id}  ({entry.provenance}, {len(entry.rule.src)} output(s), {entry.size} operators)")
        click.echo(f"  {entry.text}")
        how, seconds = proof.detail.get("method", "?"), proof.detail.get("seconds", 0)
        click.echo(f"  proof: {proof.status} by {how} in {seconds:.3f} s")
        click.echo(f"  axioms: {', '.join(proof.axioms) or 'none'}")
        pre = ", ".join(proof.preconditions) or "both sides defined, with equal shapes"
        click.echo(f"  preconditions: {pre}")
    if png is not None:
        click.echo(f"wrote {png}", err=True)


@rules.command("stats")
@library_option
@json_option
def stats_cmd(library_path: Path | None, as_json: bool) -> None:
    """Counts per generation stage, per operator and per size; time per stage."""
    library = load(library_path)
    s = stats(library)
    if as_json:
        emit_json(s)
        return
    out = Console(highlight=False)
    out.print(f"{s['rules']} rules ({s['multi_output']} multi-output, {s['parametric']} parametric); "
              f"proofs: {', '.join(f'{k} {v}' for k, v in s['proof_status'].items())}")
    stages = Table("stage", "count", "seconds", title="generation", title_justify="left")
    for name, count in s["stages"].items():
        seconds = s["stage_seconds"].get(name)
        stages.add_row(name, str(count), "" if seconds is None else f"{seconds:.1f}")
    out.print(stages)
    per_op = Table("operator", "rules", title="per operator", title_justify="left")
    for name, count in s["per_operator"].items():
        per_op.add_row(name, str(count))
    per_size = Table("operators in rule", "rules", title="per size", title_justify="left")
    for size, count in s["per_size"].items():
        per_size.add_row(size, str(count))
    out.print(per_op)
    out.print(per_size)


@rules.command("verify")
@library_option
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True, help="Seconds per proof.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Processes (default: all cores).")
@json_option
def verify(library_path: Path | None, timeout: float, workers: int | None, as_json: bool) -> None:
    """Re-prove every rule of the library; exit 1 naming any that is not PROVED.

    A VACUOUS rule (no shapes make both sides defined with equal shapes: it can never apply) is
    flagged like a REFUTED or UNKNOWN one, with the reason."""
    library: Library = load(library_path)
    entries = list(library)
    chunks = [entries[i:i + 8] for i in range(0, len(entries), 8)]
    results: dict[str, dict] = {}
    executor = LocalExecutor(workers)
    try:
        with Progress(console=Console(stderr=True), transient=True, disable=as_json) as bar:
            task = bar.add_task("proving", total=len(entries))
            for i, found in executor.map(task_prove, [([e.text for e in c], timeout, 0) for c in chunks]):
                for e, result in zip(chunks[i], found):
                    results[e.id] = result
                bar.advance(task, len(found))
    finally:
        executor.close()
    status = {k: Status(r["status"]) for k, r in results.items()}
    failed = [e for e in entries if status[e.id] is not Status.PROVED]
    seconds = sorted(r["seconds"] for r in results.values())
    vacuous = [e for e in failed if status[e.id] is Status.VACUOUS]
    if as_json:
        emit_json({"rules": len(entries), "proved": len(entries) - len(failed), "vacuous": len(vacuous),
                   "failed": [{"id": e.id, "text": e.text, **results[e.id]} for e in failed],
                   "median_seconds": seconds[len(seconds) // 2] if seconds else 0.0})
    else:
        for e in failed:
            reason = results[e.id].get("reason")
            click.echo(f"{results[e.id]['status']}  {e.id}  {e.text}" + (f"\n  {reason}" if reason else ""), err=True)
        named = ", ".join(f"{e.id} ({results[e.id]['status']})" for e in failed)
        click.echo(f"{len(entries) - len(failed)}/{len(entries)} rules PROVED"
                   + (f"; {len(failed)} failed: {named}" if failed else ""))
    sys.exit(1 if failed else 0)
