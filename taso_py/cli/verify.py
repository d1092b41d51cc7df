"""`taso verify-rule` and `taso axioms`: prove a rule, list and validate the operator axioms."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from itertools import repeat
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from taso_py import ops
from taso_py.cli.common import emit_json, json_option
from taso_py.generator.executor import process_pool
from taso_py.library import format_rule, parse_rule
from taso_py.library.proof import Status

if TYPE_CHECKING:
    from taso_py.verifier.results import Vacuous


@click.command("verify-rule")
@click.argument("rule")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds for the proof; running out is UNKNOWN, never PROVED.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the refuter's random inputs.")
@json_option
def verify_rule(rule: str, timeout: float, seed: int, as_json: bool) -> None:
    """Prove RULE from the operator axioms, or refute it with a counterexample.

    Exit 0 when PROVED; 1 when REFUTED, VACUOUS (no shapes make both sides defined with equal
    shapes: the rule can never apply) or UNKNOWN; 2 for a malformed rule.
    Example: taso verify-rule "matmul(matmul(a, b), c) == matmul(a, matmul(b, c))"
    """
    from taso_py.verifier.prover import prove

    parsed = parse_rule(rule)
    result = prove(parsed, timeout=timeout, seed=seed)
    if as_json:
        emit_json({"rule": format_rule(parsed), **result.to_json()})
    else:
        out = Console(highlight=False, soft_wrap=True, markup=False)
        out.print(f"[bold]{result.status}[/]  {escape(format_rule(parsed))}  ({result.seconds:.2f} s)", markup=True)
        if result.status is Status.PROVED:
            out.print(f"  axioms used: {result.explanation()}")
            out.print(f"  preconditions: {', '.join(result.preconditions) or 'none beyond both sides being defined'}")
        elif result.status is Status.VACUOUS:
            _print_vacuous(out, result)
        elif result.status is Status.REFUTED:
            cx = result.counterexample
            out.print(f"  counterexample: {cx.summary()}")
            for name, value in cx.inputs.items():
                out.print(f"  {name} = {value.tolist()}")
            out.print(f"  left  = {cx.src.tolist()}\n  right = {cx.dst.tolist()}")
        else:
            out.print(f"  reason: {result.reason}")
    sys.exit(0 if result.status is Status.PROVED else 1)


def _print_vacuous(out: Console, result: Vacuous) -> None:
    """The reason, then per rank assignment both sides' symbolic shapes and what cannot all hold."""
    from taso_py.verifier.vacuity import ranks_text

    out.print(f"  reason: {result.reason}")
    for case in result.cases:
        out.print(f"  at {ranks_text(case.ranks)}:")
        out.print(f"    left shape:  {', '.join(case.left)}")
        out.print(f"    right shape: {', '.join(case.right)}")
        out.print("    these cannot all hold (every dim is at least 1):")
        for c in case.conflict:
            out.print(f"      {c}")


@click.group("axioms")
def axioms() -> None:
    """The operator axioms the verifier proves rules from."""


@axioms.command("list")
@json_option
def list_axioms(as_json: bool) -> None:
    """Every axiom with its text and what it says."""
    rows = [{"name": a.name, "text": a.text, "doc": a.doc} for a in ops.AXIOMS.values()]
    if as_json:
        emit_json({"axioms": rows})
        return
    table = Table(title=f"{len(rows)} axioms", title_justify="left", show_lines=False)
    for col in ("name", "axiom"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["name"], escape(r["text"]))
    Console(highlight=False).print(table)


@axioms.command("validate")
@click.option("--full", is_flag=True,
              help="Up to 400 distinct instances per axiom (dims in 1..4) instead of 6, in parallel.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Processes for --full (default: cores).")
@click.option("--only", "names", multiple=True, metavar="NAME", help="Validate only this axiom (repeatable).")
@json_option
def validate_axioms(full: bool, workers: int | None, names: tuple[str, ...], as_json: bool) -> None:
    """Check every axiom against the operators' semantics by symbolic execution on concrete shapes.

    Exit 1 naming the axioms that fail, with the shapes and values that break them."""
    from taso_py.verifier.validation import Report

    unknown = [n for n in names if n not in ops.AXIOMS]
    if unknown:
        raise click.BadParameter(f"unknown axiom {unknown[0]!r}", param_hint="--only")
    todo = list(names or ops.AXIOMS)
    reports: list[Report] = []
    with Progress(console=Console(stderr=True), transient=True, disable=as_json) as progress:
        task = progress.add_task("validating axioms", total=len(todo))
        for report in _reports(todo, full, workers):
            reports.append(report)
            progress.advance(task)
    failed = [r for r in reports if not r.ok]
    if as_json:
        emit_json({"full": full, "axioms": [r.to_json() for r in reports], "failed": [r.axiom for r in failed]})
    else:
        _print_reports(reports, full)
    sys.exit(1 if failed else 0)


def _reports(names: list[str], full: bool, workers: int | None) -> Iterator:
    """Validation reports in order: in this process (fast mode) or a process pool (--full)."""
    if not full:
        yield from map(_validate, names, repeat(False))
        return
    with process_pool(workers or os.cpu_count() or 1) as pool:
        yield from pool.map(_validate, names, repeat(True))


def _validate(name: str, full: bool) -> object:
    from taso_py.verifier.validation import validate

    return validate(ops.AXIOMS[name], full=full)


def _print_reports(reports: list, full: bool) -> None:
    out = Console(highlight=False, soft_wrap=True)
    table = Table(title=f"axiom validation ({'full' if full else 'fast'})", title_justify="left")
    for col, justify in (("axiom", "left"), ("instances", "right"), ("seconds", "right"), ("result", "left")):
        table.add_column(col, justify=justify)
    for r in reports:
        result = "valid" if r.ok else ("[red]INVALID[/]" if r.failures else "[yellow]no instances[/]")
        table.add_row(r.axiom, str(r.instances), f"{r.seconds:.2f}", result)
    out.print(table)
    for r in reports:
        for f in r.failures:
            out.print(f"[red]{r.axiom}[/]: {escape(f.instance.describe())}: {escape(f.message)}")
    total = sum(r.instances for r in reports)
    out.print(f"{sum(r.ok for r in reports)}/{len(reports)} axioms valid on {total} instances")
