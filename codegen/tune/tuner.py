"""The tuner: search a template's knob space by measuring candidates a cost model ranks best.

A template is `fn(cfg) -> (schedule, args)`; run with an empty `Config` it records its
knobs (the space) and gives the default schedule. `tune` measures the default first, then
repeats: propose a batch (random while the model knows too little, else simulated
annealing over the space scored by the model, plus some random picks to keep exploring),
compile each candidate (a batch in parallel) and time it for real in a child process
(`runner`), append the records, retrain. A candidate whose schedule is illegal, that does
not compile, crashes, runs past the time limit or computes something else than the default
schedule is recorded as a failure and never proposed again. Records keep each measured
kernel's features, so a workload tuned for the first time starts with a model trained on
the records of the same template (the same knobs) on other shapes.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from taso_py.codegen.errors import CodegenError, ScheduleError
from taso_py.codegen.lower.ir import Buffer, PrimFunc
from taso_py.codegen.schedule.schedule import Schedule
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.tune import records
from taso_py.codegen.tune.cost_model import CostModel
from taso_py.codegen.tune.features import extract, feature_names
from taso_py.codegen.tune.records import Record
from taso_py.codegen.tune.runner import Measurement, Runner
from taso_py.codegen.tune.space import Config, Point, Space

Template = Callable[[Config], tuple[Schedule, list[Tensor]]]
ArgsBuilder = Callable[[Sequence[Tensor]], list[np.ndarray]]


def random_args(args: Sequence[Tensor], seed: int = 0) -> list[np.ndarray]:
    """Arrays for a kernel's arguments: standard normal floats, small integers."""
    rng = np.random.default_rng(seed)
    out = []
    for t in args:
        if t.dtype.startswith("float"):
            out.append(rng.standard_normal(t.shape).astype(t.dtype))
        else:
            out.append(rng.integers(0, 8, t.shape).astype(t.dtype))
    return out


@dataclass
class Built:
    library: Path
    params: list[Buffer]
    schedule: Schedule
    args: list[Tensor]


@dataclass
class TuneResult:
    workload: str
    best: Config
    best_seconds: float
    default_seconds: float | None  # the default schedule measured by this call; None when it failed
    measured: int  # candidates measured by this call
    failures: int  # of which failed
    space_size: int
    transferred: int  # other workloads' records the cost model started from


class _Search:
    """The state of one tuning: what is measured, what failed, features, the model."""

    def __init__(self, template: Template, space: Space, args_builder: ArgsBuilder, kernel: str,
                 repeat: int, timeout: float, seed: int) -> None:
        self.template = template
        self.space = space
        self.args_builder = args_builder
        self.kernel = kernel
        self.repeat = repeat
        self.timeout = timeout
        self.rng = random.Random(seed)
        self.model = CostModel(seed=seed)
        self.features: dict[Point, np.ndarray] = {}
        self.invalid: dict[Point, str] = {}
        self.seconds: dict[Point, float] = {}
        self.failed: dict[Point, str] = {}
        self.reference: list[np.ndarray] | None = None
        self.arrays: list[np.ndarray] | None = None
        self.kernels: dict[Point, str] = {}  # a hash of each lowered candidate's kernel
        self.offset = 0.0  # log seconds of the best candidate the model was trained with
        self.fitted = 0  # measured candidates the model was trained with
        self.duplicates: set[Point] = set()
        self.runner = Runner()

    def visited(self, p: Point) -> bool:
        return p in self.seconds or p in self.failed or p in self.invalid or p in self.duplicates

    # ---- candidates ----------------------------------------------------------------------------

    def lower(self, p: Point) -> tuple[PrimFunc, Schedule, list[Tensor]] | str:
        """The candidate's kernel, schedule and arguments, or why its schedule is illegal."""
        from taso_py.codegen.lower import lower
        cfg = self.space.config(p)
        try:
            sch, args = self.template(cfg)
            f = lower(sch, args, self.kernel)
        except ScheduleError as e:
            self.invalid[p] = str(e)
            return str(e)
        self.features[p] = extract(f, cfg.values, self.space.knobs)
        self.kernels[p] = hashlib.sha1(str(f).encode()).hexdigest()
        return f, sch, args

    def feature(self, p: Point) -> np.ndarray | None:
        if p not in self.features and p not in self.invalid:
            self.lower(p)
        return self.features.get(p)

    def propose(self, n: int, explore: float) -> list[Point]:
        """`n` unvisited points: the model's best found by simulated annealing, a fraction at random.

        A point whose schedule is illegal, or whose kernel is one already measured or picked
        (a knob the other knobs make inert), is passed over: it would only cost a trial.
        """
        picked: list[Point] = []
        taken = {self.kernels[p] for p in (*self.seconds, *self.failed) if p in self.kernels}

        def pick(p: Point) -> None:
            if self.visited(p) or p in picked or self.feature(p) is None:
                return
            if self.kernels[p] in taken:
                self.duplicates.add(p)
                return
            taken.add(self.kernels[p])
            picked.append(p)

        if self.model.trained:
            n_model = n - round(n * explore)
            scored = self.anneal(max(2 * n, 16), steps=12)
            for p, _ in sorted(scored.items(), key=lambda t: t[1]):
                if len(picked) == n_model:
                    break
                pick(p)
        for _ in range(20 * n + 100):
            if len(picked) == n:
                break
            pick(self.space.random(self.rng))
        if len(picked) < n:  # a small space nearly done: take what is left in order
            for p in _all_points(self.space):
                if len(picked) == n:
                    break
                pick(p)
        return picked

    def anneal(self, chains: int, steps: int) -> dict[Point, float]:
        """Predicted scores of the unvisited points simulated annealing walked through."""
        best_known = sorted(self.seconds, key=self.seconds.__getitem__)[: chains // 2]
        starts = best_known + [self.space.random(self.rng) for _ in range(chains - len(best_known))]
        scores = self.scores(starts)
        cur = [(p, s) for p, s in zip(starts, scores) if math.isfinite(s)]
        seen: dict[Point, float] = {p: s for p, s in cur if not self.visited(p)}
        for step in range(steps):
            temp = 1.0 - step / steps
            moves = [self.space.neighbour(p, self.rng) for p, _ in cur]
            for c, (q, sq) in enumerate(zip(moves, self.scores(moves))):
                if not math.isfinite(sq):
                    continue
                if not self.visited(q):
                    seen[q] = sq
                s = cur[c][1]
                if sq < s or (temp > 0 and self.rng.random() < math.exp((s - sq) / temp)):
                    cur[c] = (q, sq)
        return seen

    def scores(self, points: Sequence[Point]) -> list[float]:
        """Log seconds: measured where known, else the model's prediction (inf: illegal schedule)."""
        out = [math.log(self.seconds[p]) if p in self.seconds else math.inf for p in points]
        todo = [k for k, p in enumerate(points) if p not in self.seconds and self.feature(p) is not None]
        if todo:
            for k, v in zip(todo, self.model.predict([self.features[points[k]] for k in todo])):
                out[k] = float(v) + self.offset
        return out

    def fit(self, history: Sequence[tuple[np.ndarray, float]]) -> None:
        """Retrain on the measured candidates and `history` (other workloads' (features, time / their
        best)); the model learns times relative to the best, `offset` puts them back in log seconds."""
        pts = [p for p in self.seconds if self.feature(p) is not None]
        if not pts or len(pts) == self.fitted:
            return
        best = min(self.seconds[p] for p in pts)
        self.offset = math.log(best)
        self.model.fit([self.features[p] for p in pts] + [f for f, _ in history],
                       [self.seconds[p] / best for p in pts] + [r for _, r in history])
        self.fitted = len(pts)

    # ---- measuring -----------------------------------------------------------------------------

    def build(self, p: Point) -> Built | str:
        """The candidate compiled (gcc runs in a subprocess: candidates of a batch build in parallel);
        only the runner's child loads it."""
        from taso_py.codegen.backends.c import CEmitter, compile_shared
        got = self.lower(p)
        if isinstance(got, str):
            return got
        f, sch, args = got
        try:
            return Built(compile_shared(CEmitter().module([f])), f.params, sch, args)
        except CodegenError as e:
            return str(e)

    def measure(self, p: Point, built: Built | str | None = None) -> Measurement:
        """Run the candidate (in the runner's child process) on the args' arrays; its result must be the default's."""
        built = self.build(p) if built is None else built
        if isinstance(built, str):
            return Measurement(None, built)
        if self.arrays is None:  # made once: every candidate runs on the same inputs as the reference
            self.arrays = self.args_builder(built.args)
        arrays = self.arrays
        for a, b in zip(arrays, built.params):
            if a.shape != b.shape or a.dtype != np.dtype(b.dtype) or not a.flags.c_contiguous:
                raise CodegenError(f"args_builder gave a {a.dtype} array of shape {a.shape} for {b.name} "
                                   f"({b.dtype} {b.shape})")
        outs = [k for k, t in enumerate(built.args) if any(t == o for o in built.schedule.outputs)]
        m = self.runner.run(built.library, self.kernel, arrays, outs, self.repeat, self.timeout)
        if m.seconds is not None and self.reference is not None:
            for got, ref in zip(m.outputs, self.reference):
                if not np.allclose(got, ref, rtol=1e-3, atol=1e-3, equal_nan=True):
                    err = float(np.nanmax(np.abs(got.astype(np.float64) - ref)))
                    return Measurement(None, f"wrong result: differs from the default schedule's by {err:.3g}")
        return m


def _all_points(space: Space) -> Iterator[Point]:
    import itertools
    return itertools.product(*(range(len(o)) for o in space.options))


@contextmanager
def _progress(enabled: bool, total: int, label: str) -> Iterator[Callable[[str], None]]:
    """A progress bar (rich) advanced once per measured candidate."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[best]}"), disable=not enabled, transient=True) as bar:
        task = bar.add_task(label, total=total, best="")
        yield lambda best: bar.update(task, advance=1, best=best)


def tune(template: Template, args_builder: ArgsBuilder | None = None, trials: int = 32,
         records_path: str | Path | None = None, *, name: str | None = None, batch_size: int = 8,
         explore: float = 0.25, repeat: int = 5, timeout: float = 2.0, seed: int = 0,
         early_stopping: int | None = None, progress: bool = True) -> TuneResult:
    """Measure up to `trials` new candidates of `template`; return the fastest config ever recorded.

    `args_builder(args)` makes the arrays the kernel runs on (random ones by default). Records
    already in `records_path` (default: `records.default_path()`) for this workload are not
    measured again: they train the model from the start and count towards the best. With
    `early_stopping`, tuning ends once that many candidates in a row were no faster than the
    best. `timeout` bounds one run of a candidate.
    """
    records_path = records_path or records.default_path()
    cfg0 = Config()
    _sch0, args0 = template(cfg0)
    space = Space(dict(cfg0.space))
    key = records.workload_key(name or getattr(template, "__name__", "template"), args0)
    search = _Search(template, space, args_builder or random_args, "tuned", repeat, timeout, seed)
    for rec in records.read(records_path, key):
        p = space.point(rec.config)
        if p is None:
            continue
        if rec.ok:
            search.seconds[p] = min(rec.seconds, search.seconds.get(p, math.inf))  # type: ignore[arg-type]
        else:
            search.failed[p] = rec.error or "failed"
    history = _history(records_path, key, space)
    default = space.point(cfg0.chosen())
    assert default is not None
    measured = failures = 0
    label = f"tuning {key if len(key) <= 40 else key[:39] + '…'}"
    with _progress(progress, trials, label) as advance, search.runner:

        stale = 0  # candidates measured since the best last improved

        def run(batch: Sequence[Point]) -> None:
            nonlocal measured, failures, stale
            with ThreadPoolExecutor(max_workers=max(1, min(len(batch), os.cpu_count() or 1))) as pool:
                built = list(pool.map(search.build, batch))
            for p, b in zip(batch, built):  # timed one at a time, nothing else running
                best = min(search.seconds.values(), default=math.inf)
                m = search.measure(p, b)
                _record(search, records_path, key, p, m)
                measured += 1
                failures += m.seconds is None
                stale = 0 if m.seconds is not None and m.seconds < best else stale + 1
                advance(_best_text(search))

        # the default runs first: what it computes is the reference every candidate must match
        ref = search.measure(default)
        search.reference = ref.outputs or None
        default_seconds = ref.seconds
        if not search.visited(default) or default in search.invalid:
            search.invalid.pop(default, None)
            _record(search, records_path, key, default, ref)
            measured, failures = 1, int(ref.seconds is None)
            advance(_best_text(search))
        while measured < trials and (early_stopping is None or stale < early_stopping):
            search.fit(history)
            known_invalid = set(search.invalid)
            batch = search.propose(min(batch_size, trials - measured), explore)
            # illegal schedules met while searching: recorded (never retried), not counted as trials
            records.append(records_path, [Record(key, space.config(p).values, None, search.invalid[p])
                                          for p in search.invalid if p not in known_invalid and p not in batch])
            if not batch:
                break
            run(batch)
    if not search.seconds:
        raise CodegenError(f"tuning {key}: no candidate ran (first failure: "
                           f"{next(iter(search.failed.values()), 'none measured')})")
    best = min(search.seconds, key=search.seconds.__getitem__)
    return TuneResult(key, space.config(best), search.seconds[best], default_seconds, measured, failures, space.size,
                      len(history))


def _history(path: str | Path, key: str, space: Space) -> list[tuple[np.ndarray, float]]:
    """Transfer learning: the measured candidates of other workloads with the same knobs (the same
    template on other shapes), as (features, time relative to that workload's best)."""
    n = len(feature_names(space.names))
    by_workload: dict[str, list[Record]] = {}
    for r in records.read(path):
        if r.workload != key and r.ok and r.features and len(r.features) == n and set(r.config) == set(space.names):
            by_workload.setdefault(r.workload, []).append(r)
    rows = []
    for recs in by_workload.values():
        best = min(r.seconds for r in recs)  # type: ignore[type-var]
        rows += [(np.asarray(r.features), r.seconds / best) for r in recs]  # type: ignore[operator]
    return rows


def _record(search: _Search, path: str | Path, key: str, p: Point, m: Measurement) -> None:
    if m.seconds is None:
        search.failed[p] = m.error or "failed"
        search.invalid.pop(p, None)
    else:
        search.seconds[p] = m.seconds
    feats = search.features.get(p) if m.seconds is not None else None
    records.append(path, [Record(key, search.space.config(p).values, m.seconds, m.error,
                                 None if feats is None else tuple(float(x) for x in feats))])


def _best_text(search: _Search) -> str:
    return f"best {min(search.seconds.values()) * 1e3:.3f} ms" if search.seconds else ""
