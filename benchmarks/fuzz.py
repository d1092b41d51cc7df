"""The fuzzing campaign: random models through `taso optimize` and `taso compile`, damaged ones through the CLI.

    python -m benchmarks.fuzz --cases 10000 [--seed S] [--compile-every N] [--workers K] [--json OUT]

Each case is a model from `benchmarks.fuzzgen.generate(seed)` and runs in-process, through the
Python API the commands use (import, `optimizer.optimize`, `save_model`, `codegen.graph.compile_graph`,
`CompiledModel`), so that 10,000 cases fit in about an hour on two cores. Each case is checked:

- optimize: the written model is equal to the original in ONNX Runtime on fresh inputs
  (`runtime.compare_models`), keeps the graph's input and output names, shapes and dtypes, passes
  onnx's full check, and the input file is untouched;
- compile (every `--compile-every`-th case, for `--target`, cpu or cuda): the compiled module's
  outputs against ORT's;
- mutation: the case's bytes damaged (`fuzzgen.mutate`) through `taso info`, `taso optimize` and
  (every `--compile-every`-th case) `taso compile`, via click's CliRunner: exit 0, 1 or 2 with one
  `taso: error:` line, never an internal error or a traceback;
- a sample (every `--cli-every`-th case) goes through the real `taso` command in a subprocess too.

Cases run in worker processes, one case at a time each; a case over `--case-timeout` seconds is a
hang (its worker is killed and replaced), a worker that dies is a crash. The optimizer is priced by
a roofline whose per-operator prices are scaled by random factors (`Jittered`), or by a roofline
that charges a lot per operator: the real cost models rarely pick most rewrites on graphs this
small, and a rewrite that is never applied is never checked.

The tally goes to `--json` (default benchmarks/results/fuzz.json) and, as a table, to stdout and
to the same path with `.md`. While cases run, the tally so far is written to `--json` every
`CHECKPOINT_SECONDS` (`"finished": false`), so a campaign cut short by a time limit (the GPU
machine's) still says how far it got and what failed. `--replay SEED` reruns one case in this
process with tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import onnx

from benchmarks.fuzzgen import Case, feeds_for, generate, invalid_reason, mutate
from taso_py.atomic import write_json
from taso_py.cost.analytical import Roofline
from taso_py.cost.model import CostModel, OpCall
from taso_py.errors import TasoError
from taso_py.library.store import Library
from taso_py.library.store import load as load_library
from taso_py.onnx_io import OnnxModel, load_model, save_model
from taso_py.optimizer import optimize
from taso_py.runtime import ROUNDING_FACTOR, compare_models, compare_outputs, random_feeds
from taso_py.runtime import run as ort_run
from taso_py.search.backtracking import Settings
from taso_py.search.settings import EqsatSettings

RESULTS = Path(__file__).parent / "results"
NO_KERNEL_REFUSAL = "refused: no kernel"  # an opaque op, or an op the target has no kernel for
ROUNDING_NOTE = "ok by rounding"  # failed rtol against ORT, passed against the graph in float64
CHECKPOINT_SECONDS = 10.0  # the tally so far is written this often (`finished`: false) while cases run


# ---- the optimizer's prices --------------------------------------------------------------------

@dataclass(frozen=True)
class Jittered:
    """A roofline with each operator call's price scaled by a fixed random factor (0.25x to 4x,
    from the seed and the call): each case prefers other graphs, so more of the rules get applied."""

    seed: int
    name: str = "jittered"
    unit: str = "ms"
    seconds = 0.0  # nothing is timed (not a field)

    def cost(self, call: OpCall) -> float:
        digest = hashlib.blake2b(f"{self.seed}|{call.key}".encode(), digest_size=8).digest()
        factor = 4.0 ** (2 * int.from_bytes(digest, "little") / 2**64 - 1)
        return Roofline().cost(call) * factor

    def prepare(self, calls: Iterable[OpCall]) -> None:
        """Nothing to measure."""


def fuzz_cost(seed: int) -> CostModel:
    """The cost model for a case: jittered, merge-loving (a large cost per operator) or the plain roofline."""
    return random.Random(seed).choice([Jittered(seed), Jittered(seed), Roofline(overhead_us=50.0), Roofline()])


def fuzz_settings(seed: int) -> Settings | EqsatSettings:
    """Search settings for a case: every other case equality saturation with its defaults (some with
    a tiny node bound), the others the α-search with α from greedy to adventurous and budgets small
    enough for a fuzzer."""
    rng = random.Random(seed + 1)
    if rng.random() < 0.5:
        return EqsatSettings(node_limit=rng.choice([200, 20000]))
    return Settings(alpha=rng.choice([1.0, 1.05, 1.3, 1.5]), budget=rng.choice([20, 60, 150, 400]), timeout=20.0,
                    seed=seed)


# ---- one case ----------------------------------------------------------------------------------

@dataclass
class Result:
    """What happened to one case: `optimize` is ok | wrong | crash | hang | refused: ... | invalid
    (the generator made a model ORT does not run: a bug of the generator)."""

    seed: int
    optimize: str = "ok"
    detail: str = ""
    rewrites: int = 0
    compile: str | None = None  # ok | wrong | crash | refused: no kernel
    compile_detail: str = ""
    mutation: str | None = None  # the kind of damage
    mutation_outcome: str | None = None  # clean | crash | traceback (a hang is the whole case's)
    mutation_detail: str = ""
    cli: str | None = None  # the subprocess sample: ok | wrong | crash | hang
    cli_detail: str = ""
    seconds: float = 0.0
    tags: list[str] = field(default_factory=list)


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return f"{type(e).__name__}: {text.splitlines()[0][:300]}"


def refusal_reason(message: str) -> str:
    """A refusal's message with names and numbers taken out, so that equal causes count together."""
    message = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", message.splitlines()[0] if message else "")
    return re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", message)[:160]


def interface(model: onnx.ModelProto) -> tuple[list[tuple], list[tuple]]:
    """The graph's real inputs (not initializers) and outputs: (name, dtype, dims)."""
    inits = {t.name for t in model.graph.initializer}

    def sig(v: onnx.ValueInfoProto) -> tuple:
        t = v.type.tensor_type
        return v.name, t.elem_type, tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim)

    return [sig(i) for i in model.graph.input if i.name not in inits], [sig(o) for o in model.graph.output]


def check_optimize(case: Case, work: Path, library: Library, result: Result) -> OnnxModel | None:
    """Import, optimize and write the case as `taso optimize` does, and check what was written;
    the optimized model for the compile check, or None."""
    source = work / "model.onnx"
    data = case.model.SerializeToString()
    source.write_bytes(data)
    target = work / "model.taso.onnx"
    try:
        imported = load_model(source)
        optimized = optimize(imported, library, fuzz_cost(case.seed), fuzz_settings(case.seed))
        result.rewrites = len(optimized.outcome.applied)
        save_model(optimized.model, target)
    except TasoError as e:
        result.optimize, result.detail = f"refused: {refusal_reason(str(e))}", _first_line(e)
        return None
    problems = []
    if source.read_bytes() != data:
        problems.append("the input file changed")
    written = onnx.load(str(target))
    try:
        onnx.checker.check_model(str(target), full_check=True)
    except Exception as e:  # the checker raises several types
        problems.append(f"onnx.checker: {_first_line(e)}")
    if interface(written) != interface(case.model):
        problems.append(f"interface changed: {interface(case.model)} -> {interface(written)}")
    try:
        comparison = compare_models(source, target, random_feeds(imported.graph, case.seed + 1))
        if not comparison.ok:
            problems.append(f"outputs differ on {comparison.worst_output!r}: max abs {comparison.max_abs:.3g}, "
                            f"max rel {comparison.max_rel:.3g}")
    except TasoError as e:
        problems.append(f"the written model does not run: {_first_line(e)}")
    if problems:
        result.optimize, result.detail = "wrong", "; ".join(problems)
    return optimized.model


def check_compile(case: Case, model: OnnxModel, work: Path, result: Result, target: str = "cpu") -> None:
    """Compile the optimized graph for `target` as `taso compile` does (operators without a kernel
    in ORT regions where the target has them), run the module and compare it with the original in ORT.
    cuda without a GPU runs on the CPU emulation of the CUDA runtime (the host code and the kernels'
    indexing are checked, not nvcc's code)."""
    from taso_py.codegen.backends.cuda import device_count
    from taso_py.codegen.backends.cuda.emulate import compile_emulated
    from taso_py.codegen.graph import compile_graph
    from taso_py.codegen.runtime import CompiledModel
    from taso_py.codegen.target import CUDA, Target
    from taso_py.onnx_io.exporter import region_writer

    try:
        chosen = Target.parse(target)
        compile_graph(model.graph, work / "compiled", chosen, write_region=region_writer(model.origin))
        if chosen is CUDA and not device_count():  # no GPU here: the same source on the CUDA emulation
            shutil.copyfile(compile_emulated((work / "compiled" / CUDA.source).read_text()),
                            work / "compiled" / "model.so")
        compiled = CompiledModel(work / "compiled")
        feeds = random_feeds(model.graph, case.seed + 2)
        comparison = compare_outputs(ort_run(work / "model.onnx", feeds), compiled.run(feeds),
                                     truth=lambda: load_model(work / "model.onnx").graph, feeds=feeds)
    except TasoError as e:
        if "no code generator for operator 'opaque'" in str(e) or "cannot run through ONNX Runtime" in str(e):
            result.compile = NO_KERNEL_REFUSAL
        else:
            result.compile = "crash"
        result.compile_detail = _first_line(e)
        return
    if comparison.ok:
        result.compile = "ok"
        if any(o.truth is not None for o in comparison.outputs):  # passed on the float64 second look
            result.compile_detail = f"{ROUNDING_NOTE}: {comparison.describe()}"
    else:
        result.compile = "wrong"
        result.compile_detail = comparison.describe()


# ---- the command line ----------------------------------------------------------------------------

OPTIMIZE_ARGS = ("--cost", "analytical", "--speed-runs", "0", "--budget", "30", "--timeout", "5")
COMPILE_ARGS = ("--target", "cpu", "--cost", "analytical", "--speed-runs", "0")


def judge_cli(code: int, stderr: str, exception: BaseException | None = None) -> tuple[str, str]:
    """('clean', '') when a command kept the contract: exit 0, or exit 1/2 with exactly one
    `taso: error:` line on stderr (other lines only log lines), and never a traceback or an
    internal error; else ('crash' | 'traceback', why)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("taso: error:")]
    if exception is not None and not isinstance(exception, SystemExit):
        return "crash", _first_line(exception)
    if "Traceback (most recent call last)" in stderr:
        # the exception's line: the traceback's first unindented line (a command may go on after one
        # printed as "Exception ignored in", so the last line of stderr may be its own)
        after = lines[next(i for i, x in enumerate(lines) if "Traceback (most recent call last)" in x) + 1:]
        return "traceback", next((x for x in after if not x.startswith(" ")), lines[-1])[:300]
    if code == 3 or any("internal error" in line for line in errors):
        return "crash", (errors or lines or [f"exit {code}"])[-1][:300]
    if code == 0:
        return "clean", ""
    if code not in (1, 2):
        return "crash", f"exit {code}: {(lines or [''])[-1][:300]}"
    stray = [line for line in lines if not line.startswith("taso: ")]
    if len(errors) != 1 or stray:
        return "traceback", f"exit {code} with {len(errors)} error lines and {len(stray)} other lines: " + \
            " | ".join(lines)[:300]
    return "clean", ""


def run_cli(args: Sequence[str]) -> tuple[int, str, BaseException | None]:
    """One `taso` command in this process (click's CliRunner): exit code, stderr, escaped exception."""
    from click.testing import CliRunner

    from taso_py.cli import main

    result = CliRunner().invoke(main, list(args))
    if os.environ.get("TASO_DEBUG") and result.exc_info and not isinstance(result.exception, SystemExit):
        traceback.print_exception(*result.exc_info)  # --replay: where the internal error came from
    return result.exit_code, result.stderr, result.exception


def check_mutation(case: Case, work: Path, result: Result, with_compile: bool, kind: str | None = None) -> None:
    """The case's bytes damaged (by `kind`, or a kind chosen by the seed), through `taso info`,
    `taso optimize` and maybe `taso compile`."""
    kind, data = mutate(case.model.SerializeToString(), case.seed, kind)
    result.mutation = kind
    bad = work / "damaged.onnx"
    bad.write_bytes(data)
    commands = [["info", str(bad)], ["optimize", str(bad), "-o", str(work / "damaged.taso.onnx"), *OPTIMIZE_ARGS]]
    if with_compile:
        commands.append(["compile", str(bad), "-o", str(work / "damaged.cpu"), *COMPILE_ARGS])
    for args in commands:
        verdict, why = judge_cli(*run_cli(args))
        if verdict != "clean":
            result.mutation_outcome, result.mutation_detail = verdict, f"taso {args[0]}: {why}"
            return
        if bad.read_bytes() != data:
            result.mutation_outcome, result.mutation_detail = "crash", f"taso {args[0]} changed its input file"
            return
    result.mutation_outcome = "clean"


def check_subprocess(case: Case, work: Path, result: Result, timeout: float, with_compile: bool) -> None:
    """The case through the real `taso` command: `optimize` must write a model (exit 0), and the
    damaged bytes a clean exit; `compile` (maybe) exit 0."""
    source = work / "model.onnx"
    source.write_bytes(case.model.SerializeToString())
    _, data = mutate(case.model.SerializeToString(), case.seed + 1)
    (work / "cli_damaged.onnx").write_bytes(data)
    runs: list[tuple[list[str], set[int]]] = [
        (["optimize", str(source), "-o", str(work / "cli.taso.onnx"), *OPTIMIZE_ARGS], {0}),
        (["info", str(work / "cli_damaged.onnx")], {0, 2}),
    ]
    if with_compile:
        runs.append((["compile", str(source), "-o", str(work / "cli.cpu"), *COMPILE_ARGS], {0}))
    for args, allowed in runs:
        try:
            proc = subprocess.run([sys.executable, "-m", "taso_py", *args], capture_output=True, text=True,
                                  timeout=timeout, check=False, env={**os.environ, "TASO_DEBUG": ""})
        except subprocess.TimeoutExpired:
            result.cli, result.cli_detail = "hang", f"taso {args[0]} ran over {timeout:g} s"
            return
        verdict, why = judge_cli(proc.returncode, proc.stderr)
        if verdict != "clean" or proc.returncode not in allowed:
            result.cli = "crash" if verdict != "clean" else "wrong"
            result.cli_detail = f"taso {args[0]} exit {proc.returncode}: {why or proc.stderr.strip()[-300:]}"
            return
    comparison = compare_models(source, work / "cli.taso.onnx", feeds_for(case.model, case.seed + 3))
    result.cli = "ok" if comparison.ok else "wrong"
    if not comparison.ok:
        result.cli_detail = f"taso optimize: outputs differ on {comparison.worst_output!r} (max rel " \
                            f"{comparison.max_rel:.3g})"


def run_case(seed: int, library: Library, with_compile: bool = False, with_mutation: bool = True,
             with_subprocess: bool = False, subprocess_timeout: float = 120.0, target: str = "cpu") -> Result:
    """Every check of one case (a crash of taso-py in one check is that check's result)."""
    started = time.perf_counter()
    try:
        case = generate(seed)
    except Exception as e:  # the generator's bug
        return Result(seed, optimize="invalid", detail=f"the generator failed: {_first_line(e)}")
    result = Result(seed, tags=sorted(case.tags))
    invalid = invalid_reason(case.model)
    if invalid:  # the generator's bug: nothing to hold taso-py to
        result.optimize, result.detail = "invalid", invalid
        return result
    work = Path(tempfile.mkdtemp(prefix=f"fuzz{seed}."))
    try:
        optimized = None
        try:
            optimized = check_optimize(case, work, library, result)
        except Exception as e:  # a bug in taso-py
            result.optimize, result.detail = "crash", _first_line(e)
        if with_compile and optimized is not None:
            try:
                check_compile(case, optimized, work, result, target)
            except Exception as e:  # a bug in taso-py
                result.compile, result.compile_detail = "crash", _first_line(e)
        if with_mutation:
            try:
                check_mutation(case, work, result, with_compile)
            except Exception as e:  # a bug in the campaign or in click
                result.mutation_outcome, result.mutation_detail = "crash", _first_line(e)
        if with_subprocess:
            check_subprocess(case, work, result, subprocess_timeout, with_compile)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.seconds = round(time.perf_counter() - started, 3)
    return result


# ---- workers and the watchdog ----------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    seed: int
    compile: bool
    subprocess: bool
    target: str = "cpu"  # of the compile check (the damaged files' `taso compile` stays on cpu)


def run_job(job: Job, library: Library) -> Result:
    """What a worker does with a job (the default `runner` of `campaign`)."""
    return run_case(job.seed, library, job.compile, True, job.subprocess, target=job.target)


def _worker(conn: Connection, runner: str) -> None:
    """Runs jobs from `conn` with `runner` ("module:function") until it closes, after saying it is
    ready (imports take seconds, which must not count against a case); ORT logs nothing here."""
    import importlib
    import logging

    logging.disable(logging.WARNING)
    with contextlib.suppress(ImportError):
        import onnxruntime

        onnxruntime.set_default_logger_severity(4)
    module, _, name = runner.partition(":")
    run = getattr(importlib.import_module(module), name)
    library = load_library(None)
    conn.send(None)
    while True:
        try:
            job: Job = conn.recv()
        except EOFError:
            return
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                result = run(job, library)
        except Exception as e:  # a bug of the campaign itself: say so, and go on
            result = Result(job.seed, optimize="crash", detail=f"the campaign failed: {_first_line(e)}")
        conn.send(result)


STARTUP_TIMEOUT = 300.0  # seconds for a worker's imports


class _Slot:
    """One worker process and the job it is running (none until it says it is ready)."""

    def __init__(self, ctx: BaseContext, runner: str) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, runner), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.job: Job | None = None
        self.since = time.perf_counter()

    def give(self, job: Job) -> None:
        self.job, self.since = job, time.perf_counter()
        self.conn.send(job)

    def died(self) -> str:
        self.proc.join(5)
        code = self.proc.exitcode
        return f"signal {signal.Signals(-code).name}" if code and code < 0 else f"exit {code}"

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)


def campaign(jobs: Sequence[Job], workers: int, case_timeout: float,
             runner: str = "benchmarks.fuzz:run_job") -> Iterator[Result]:
    """The results of `jobs` (in completion order), from `workers` processes each running
    `runner(job, library)`; a case over `case_timeout` seconds is a hang and a worker that dies a
    crash (both get a new worker)."""
    ctx = multiprocessing.get_context("spawn")
    pending = list(reversed(jobs))
    slots = [_Slot(ctx, runner) for _ in range(max(1, min(workers, len(jobs))))]
    try:
        while any(s.job is not None for s in slots) or (pending and slots):
            ready = set(wait([s.conn for s in slots], timeout=1.0))
            for slot in list(slots):
                if not slot.ready:  # starting up
                    if slot.conn in ready:
                        try:
                            slot.conn.recv()
                        except (EOFError, OSError):
                            raise RuntimeError(f"a fuzzing worker died while starting ({slot.died()})") from None
                        slot.ready = True
                    elif time.perf_counter() - slot.since > STARTUP_TIMEOUT:
                        raise RuntimeError(f"a fuzzing worker did not start in {STARTUP_TIMEOUT:g} s")
                    else:
                        continue
                elif slot.job is not None:
                    job, done, lost = slot.job, None, False  # lost: the worker died or hangs
                    if slot.conn in ready:
                        try:
                            done = slot.conn.recv()
                        except (EOFError, OSError):
                            done, lost = Result(job.seed, optimize="crash",
                                                detail=f"worker process died ({slot.died()})"), True
                    elif time.perf_counter() - slot.since > case_timeout:
                        done, lost = Result(job.seed, optimize="hang", detail=f"over {case_timeout:g} s"), True
                    if done is None:
                        continue
                    slot.job = None
                    if lost:
                        slot.stop()
                        slots[slots.index(slot)] = _Slot(ctx, runner)
                    yield done
                    if lost:
                        continue
                if pending:
                    slot.give(pending.pop())
                elif slot.job is None:
                    slot.stop()
                    slots.remove(slot)
    finally:
        for slot in slots:
            slot.stop()


# ---- the tally -------------------------------------------------------------------------------------

def failing(r: Result) -> bool:
    """Whether a case found something to look at (a valid model refused included)."""
    return (r.optimize != "ok" or r.compile not in (None, "ok", NO_KERNEL_REFUSAL)
            or r.mutation_outcome not in (None, "clean") or r.cli not in (None, "ok"))


def tally(results: Sequence[Result]) -> dict[str, Any]:
    """Counts per outcome, the refusals by reason and up to 20 example seeds per kind of failure."""
    opt = Counter(r.optimize if not r.optimize.startswith("refused") else "refused" for r in results)
    comp = Counter(r.compile for r in results if r.compile is not None)
    mut = Counter(r.mutation_outcome for r in results if r.mutation_outcome is not None)
    cli = Counter(r.cli for r in results if r.cli is not None)
    examples: dict[str, list[dict[str, Any]]] = {}

    def example(kind: str, r: Result, detail: str) -> None:
        found = examples.setdefault(kind, [])
        if len(found) < 20:
            found.append({"seed": r.seed, "detail": detail})

    for r in results:
        if r.optimize != "ok":
            example(f"optimize {r.optimize}", r, r.detail)
        if r.compile not in (None, "ok", NO_KERNEL_REFUSAL):
            example(f"compile {r.compile}", r, r.compile_detail)
        if r.mutation_outcome not in (None, "clean"):
            example(f"mutation {r.mutation_outcome}", r, f"{r.mutation}: {r.mutation_detail}")
        if r.cli not in (None, "ok"):
            example(f"cli {r.cli}", r, r.cli_detail)
    return {
        "cases": len(results),
        "invalid_models": opt["invalid"],
        "optimize": {"ok": opt["ok"], "wrong": opt["wrong"], "crash": opt["crash"], "hang": opt["hang"],
                     "refused": opt["refused"],
                     "refused_by_reason": dict(Counter(r.optimize[len("refused: "):] for r in results
                                                       if r.optimize.startswith("refused")).most_common()),
                     "with_rewrites": sum(1 for r in results if r.optimize == "ok" and r.rewrites),
                     "rewrites": sum(r.rewrites for r in results)},
        "compile": {"cases": sum(comp.values()), "ok": comp["ok"], "wrong": comp["wrong"], "crash": comp["crash"],
                    "ok_by_rounding": [r.seed for r in results if r.compile_detail.startswith(ROUNDING_NOTE)],
                    "refused_by_reason": {k: v for k, v in comp.items() if k.startswith("refused")}},
        "mutations": {"cases": sum(mut.values()), "clean": mut["clean"], "crash": mut["crash"],
                      "traceback": mut["traceback"],
                      "by_kind": dict(Counter(r.mutation for r in results if r.mutation).most_common())},
        "cli_sample": {"cases": sum(cli.values()), "ok": cli["ok"], "wrong": cli["wrong"], "crash": cli["crash"],
                       "hang": cli["hang"]},
        "tags": dict(Counter(t for r in results for t in r.tags).most_common()),
        "examples": examples,
    }


def table(doc: dict[str, Any]) -> str:
    """The tally as a Markdown table (what the README quotes)."""
    t = doc["tally"]
    o, c, m, s = t["optimize"], t["compile"], t["mutations"], t["cli_sample"]
    refused = ", ".join(f"{k}: {v}" for k, v in o["refused_by_reason"].items()) or "none"
    c_refused = ", ".join(f"{k}: {v}" for k, v in c["refused_by_reason"].items()) or "none"
    rows = [
        ("cases", f"{t['cases']:,} (seeds {doc['seed']}..{doc['seed'] + t['cases'] - 1}; "
                  f"{t['invalid_models']} invalid, the generator's fault)"),
        ("optimize: OK", f"{o['ok']:,} ({o['with_rewrites']:,} with rewrites, {o['rewrites']:,} rewrites)"),
        ("optimize: wrong outputs", f"{o['wrong']:,}"),
        ("optimize: crashes", f"{o['crash']:,}"),
        ("optimize: hangs", f"{o['hang']:,} (limit {doc['case_timeout']:g} s a case)"),
        ("optimize: refused", f"{o['refused']:,} ({refused})"),
        (f"compile + run (--target {doc.get('target', 'cpu')})",
         f"{c['cases']:,}: OK {c['ok']:,} ({len(c.get('ok_by_rounding', [])):,} of them within "
         f"{ROUNDING_FACTOR:g}x ORT's own error against float64), wrong {c['wrong']:,}, crash {c['crash']:,}; "
         f"{c_refused}"),
        ("damaged bytes through info / optimize / compile", f"{m['cases']:,}: clean {m['clean']:,}, "
                                                           f"crash {m['crash']:,}, traceback {m['traceback']:,}"),
        ("sample through the `taso` command", f"{s['cases']:,}: OK {s['ok']:,}, wrong {s['wrong']:,}, "
                                              f"crash {s['crash']:,}, hang {s['hang']:,}"),
        ("time", f"{doc['seconds']:,.0f} s with {doc['workers']} workers on {doc['machine']['cpu']} "
                 f"({doc['machine']['cores']} cores)"),
    ]
    lines = ["| fuzzing campaign | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1000, help="models to generate (default 1000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first case; case k has seed SEED + k")
    ap.add_argument("--compile-every", type=int, default=4, metavar="N",
                    help="compile and run every N-th case (0: never)")
    ap.add_argument("--target", choices=("cpu", "cuda"), default="cpu",
                    help="what the compile check builds for (cuda: nvcc and this machine's GPU, "
                         "or the CPU emulation of the CUDA runtime where there is none)")
    ap.add_argument("--cli-every", type=int, default=100, metavar="N",
                    help="run every N-th case through the `taso` command in a subprocess too (0: never)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--case-timeout", type=float, default=120.0, help="seconds before a case counts as a hang")
    ap.add_argument("--json", type=Path, default=RESULTS / "fuzz.json", metavar="OUT",
                    help="where to write the tally (and the table, as .md next to it)")
    ap.add_argument("--replay", type=int, metavar="SEED", help="run one case here, with tracebacks, and print it")
    args = ap.parse_args(argv)
    if args.replay is not None:
        return _replay(args.replay, args.target)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from benchmarks.machine_info import lscpu_model

    every = args.compile_every
    jobs = [Job(s, bool(every) and k % every == 0, bool(args.cli_every) and k % args.cli_every == 0, args.target)
            for k, s in enumerate(range(args.seed, args.seed + args.cases))]
    from taso_py.codegen.backends.cuda import device_count
    emulated = args.target == "cuda" and not device_count()
    results: list[Result] = []
    bad = 0
    started = written = time.perf_counter()

    def document(finished: bool) -> dict[str, Any]:
        done = sorted(results, key=lambda r: r.seed)
        return {"seed": args.seed, "workers": args.workers, "compile_every": every,
                "target": args.target + (" (emulated on the CPU: no GPU here)" if emulated else ""),
                "cli_every": args.cli_every, "cases_planned": len(jobs), "finished": finished,
                "case_timeout": args.case_timeout, "seconds": round(time.perf_counter() - started, 1),
                "machine": {"cpu": lscpu_model(), "cores": os.cpu_count(),
                            "load_average": [round(x, 2) for x in os.getloadavg()]},
                "tally": tally(done),
                "failures": [asdict(r) for r in done if failing(r)][:200]}

    args.json.parent.mkdir(parents=True, exist_ok=True)
    with Progress(TextColumn("fuzzing"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), TimeRemainingColumn()) as bar:
        task = bar.add_task("", total=len(jobs))
        for r in campaign(jobs, args.workers, args.case_timeout):
            results.append(r)
            bad += failing(r)
            bar.update(task, advance=1, description=f"{bad} failing")
            # what is done so far, on disk, for a campaign cut short by a time limit
            if time.perf_counter() - written > CHECKPOINT_SECONDS:
                write_json(args.json, document(finished=False))
                written = time.perf_counter()
    doc = document(finished=True)
    write_json(args.json, doc)
    text = table(doc)
    args.json.with_suffix(".md").write_text(text + "\n")
    print(text)
    print(f"wrote {args.json}")
    return doc


def _replay(seed: int, target: str = "cpu") -> dict[str, Any]:
    """One case in this process, with the model printed and tracebacks shown; compiled for `target`."""
    os.environ["TASO_DEBUG"] = "1"
    case = generate(seed)
    print(onnx.printer.to_text(case.model.graph))
    try:
        result = run_case(seed, load_library(None), with_compile=True, with_subprocess=True, target=target)
    except Exception:
        traceback.print_exc()
        raise
    doc = asdict(result)
    print(json.dumps(doc, indent=2))
    return doc


if __name__ == "__main__":
    main()
