"""Running models in ONNX Runtime: random inputs, and the one equivalence criterion every
rewritten or compiled model must meet (`compare_outputs`, `check_equivalent`)."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import onnx

from taso_py.errors import InputError, TasoError, first_line
from taso_py.graph import Graph
from taso_py.ort import session
from taso_py.types import TensorType

INF = float("inf")
CHUNK = 1 << 20  # elements drawn or compared at a time: bounds the float64 temporaries at a few MiB


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input the outputs depend on (see random_arrays), for a graph
    that fits in memory (`check_memory`); zeros for the others, which ONNX Runtime still wants fed:
    `np.zeros` leaves their pages untouched, so a huge input nothing reads costs nothing (fuzz case
    170395: an unread 8 GiB input drew normals for minutes on a 128 GiB machine)."""
    check_memory(graph)
    return _feeds(graph, seed)


def _feeds(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    live = graph.live_ids()
    drawn = random_arrays([(n.attrs.name, n.attrs.type.shape, n.attrs.type.dtype.numpy)
                           for n in graph.inputs if n.id in live], seed)
    return {n.attrs.name: drawn[n.attrs.name] if n.id in live else np.zeros(n.attrs.type.shape,
                                                                            n.attrs.type.dtype.numpy)
            for n in graph.inputs}


def available_memory() -> int:
    """Bytes this machine can still give a process (MemAvailable: free plus reclaimable caches)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def check_memory(graph: Graph, sets: int = 0) -> None:
    """Refuse (InputError) a model whose tensors, live at once as a run in topological order keeps
    them, need more memory than is available: ONNX Runtime would allocate them for the check, the
    kernel overcommits, and the process is killed with no error to report (fuzz case 102850: a
    flipped bit in a Pad's sizes made 31 GiB of outputs on a 23 GiB machine). A lower bound of what
    ORT needs: it also frees a tensor after its last reader, and keeps weights and outputs. With
    `sets`, what a check on that many input sets holds beside: their inputs and both models' outputs."""
    live_ids = graph.live_ids()
    order = [n for n in graph.topo_order() if n.id in live_ids]
    readers = Counter(r for n in order for r in dict.fromkeys(n.inputs))
    kept = set(graph.outputs) | {r for n in order if n.op.name == "weight" for r in n.outputs}

    def size(t: TensorType) -> int:
        return math.prod(t.shape) * t.dtype.numpy.itemsize if t.shape is not None and t.dtype is not None else 0

    live = peak = 0
    worst = ""
    for node in order:
        live += sum(size(t) for t in node.types)
        if live > peak:
            peak, worst = live, f"{node.names[0]!r} ({node.types[0]})"
        inputs = dict.fromkeys(node.inputs)
        for r in inputs:
            readers[r] -= 1
        for r in [*inputs, *node.outputs]:  # last read now, or never read
            if readers[r] == 0 and r not in kept:
                live -= size(graph.type(r))
    held = sets * (sum(size(n.attrs.type) for n in graph.inputs if n.id in live_ids)
                   + 2 * sum(size(graph.type(r)) for r in graph.outputs))
    available = available_memory()
    if peak + held > available:
        what = f"checking the model on {sets} input sets" if sets else "running the model"
        raise InputError(f"{what} needs {_gib(peak + held)} at once (at tensor {worst}), more than "
                         f"the {_gib(available)} of memory available; check its shapes and constants, "
                         "or give smaller input shapes with --input-shape")


def _gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.2f} MiB"


def random_arrays(specs: Iterable[tuple[str, Sequence[int], np.dtype]], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded arrays by name: normal floats, small non-negative ints (safe as indices), random bools.

    Drawn a chunk at a time into arrays of their own type (the same stream as one draw of each
    whole), so the float64 draw of a float32 input never exists whole. Refused (InputError) when
    they would not fit in memory: the kernel overcommits, so numpy's allocation succeeds and
    filling it gets the process killed, with no error to report."""
    specs = [(name, tuple(shape), np.dtype(dtype)) for name, shape, dtype in specs]
    need = sum(math.prod(shape) * dtype.itemsize for _, shape, dtype in specs)
    available = available_memory()
    if need > available:
        raise InputError(f"random inputs for the check need {_gib(need)}, more than the {_gib(available)} of "
                         "memory available; give smaller input shapes with --input-shape")
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape, dtype in specs:
        value = np.empty(shape, dtype)
        flat = value.reshape(-1)
        for start in range(0, flat.size, CHUNK):
            n = min(CHUNK, flat.size - start)
            if dtype.kind == "f":
                flat[start:start + n] = rng.standard_normal(n)
            elif dtype.kind == "b":
                flat[start:start + n] = rng.random(n) < 0.5
            else:
                flat[start:start + n] = rng.integers(0, 2, n)
        feeds[name] = value
    return feeds


def run(model: onnx.ModelProto | str | Path, feeds: Mapping[str, np.ndarray], threads: int = 0
        ) -> dict[str, np.ndarray]:
    return run_sets(model, [feeds], threads)[0]


def run_sets(model: onnx.ModelProto | str | Path, feed_sets: Sequence[Mapping[str, np.ndarray]], threads: int = 0
             ) -> list[dict[str, np.ndarray]]:
    """The outputs by name for each input set, from one session."""
    sess = session(model, threads)
    names = [o.name for o in sess.get_outputs()]
    try:
        return [dict(zip(names, sess.run(names, dict(feeds)))) for feeds in feed_sets]
    except Exception as e:  # ORT raises its own exception types
        raise InputError(f"ONNX Runtime failed to run the model: {first_line(e)}") from None


# what chance alone may leave to a verdict that a model runs faster (`Latency.pays`)
SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class Latency:
    """Median milliseconds of an original and an optimized model, timed in turn in one process, and
    in how many of the runs in turn (pairs) the optimized one was the faster."""

    original_ms: float
    optimized_ms: float
    runs: int
    threads: int
    faster: int  # pairs in which the optimized model ran faster
    ratio: float | None = None  # the median of the pairs' ratios, original over optimized (`of`)

    @classmethod
    def of(cls, original: Sequence[float], optimized: Sequence[float], threads: int) -> Latency:
        """From the milliseconds of runs in turn, the i-th of each list a pair."""
        return cls(statistics.median(original), statistics.median(optimized), len(original), threads,
                   sum(b < a for a, b in zip(original, optimized)),
                   statistics.median(a / b for a, b in zip(original, optimized)))

    @property
    def speedup(self) -> float:
        """The median pair's ratio: the two runs of a pair saw one state of the machine, and the sign
        test (`chance`) judges the same pairs. The ratio of the two medians, taken from runs in
        different states, moved three times as far: NASNet-A's file against itself, 40 pairs at a time,
        1.001x to 1.086x against 0.993x to 1.020x (Zen 3, 2 threads). The medians' ratio stands in
        where the pairs are not known."""
        return self.ratio if self.ratio is not None else self.original_ms / self.optimized_ms

    @property
    def chance(self) -> float:
        """The one-sided sign test: how likely the optimized model is the faster in `faster` pairs or
        more if both ran equally fast (each pair a fair coin)."""
        return _upper_tail(self.runs, self.faster)

    @property
    def pays(self) -> bool:
        """Faster beyond the noise of the timings: a lower median, and the optimized model the faster in
        more pairs than chance alone would make it in SIGNIFICANCE of such timings. A median over 1.0
        alone let noise decide: NASNet-A's one kept rewiring (predicted 1.000x) measured 1.004x in the
        acceptance, and 0.935x at 1 thread and 0.984x at 2 threads in the suite after."""
        return self.speedup > 1.0 and self.chance < SIGNIFICANCE

    def to_json(self) -> dict:
        fields = {k: v for k, v in asdict(self).items() if k != "ratio"}  # the ratio is the speedup
        return {**fields, "speedup": self.speedup, "chance": round(self.chance, 6)}


def _upper_tail(n: int, k: int) -> float:
    """P(at least k heads in n tosses of a fair coin), in logarithms (n is in the thousands for models of
    a tenth of a millisecond)."""
    whole, half = math.lgamma(n + 1), n * math.log(0.5)
    return min(1.0, sum(math.exp(whole - math.lgamma(i + 1) - math.lgamma(n - i + 1) + half) for i in range(k, n + 1)))


def latency(original: onnx.ModelProto | str | Path, optimized: onnx.ModelProto | str | Path,
            feeds: Mapping[str, np.ndarray], threads: int = 0, runs: int = 10, min_seconds: float = 1.0,
            warmup: int = 3) -> Latency:
    """Both models on the same inputs, timed in turn (`in_turn`) so that both see the same machine;
    thread spinning is off (see `session`), so neither session's idle threads steal the other's
    cores. At least `runs` each, and more until `min_seconds` have passed: ten runs of a model of a
    tenth of a millisecond are noise (0.94x to 1.94x, measured)."""
    sessions = [session(original, threads), session(optimized, threads)]
    feed = dict(feeds)  # once, not in every timed run
    for s in sessions:
        for _ in range(warmup):
            s.run(None, feed)
    return in_turn(lambda: sessions[0].run(None, feed), lambda: sessions[1].run(None, feed),
                   runs, min_seconds, threads or os.cpu_count() or 1)


def in_turn(original: Callable[[], object], optimized: Callable[[], object], runs: int, min_seconds: float,
            threads: int) -> Latency:
    """Two runners timed in pairs, at least `runs` pairs and `min_seconds`, each running first in
    every other pair: what the second run of a pair gains from the first (its input in cache) then
    counts for neither (SqueezeNet's file against itself, the second run always the optimized one,
    was the faster in 21 of 25 pairs)."""
    runners = (original, optimized)
    samples: tuple[list[float], list[float]] = ([], [])
    began = time.perf_counter()
    while len(samples[0]) < runs or time.perf_counter() - began < min_seconds:
        for i in (0, 1) if len(samples[0]) % 2 == 0 else (1, 0):
            started = time.perf_counter()
            runners[i]()
            samples[i].append((time.perf_counter() - started) * 1e3)
    return Latency.of(samples[0], samples[1], threads)


CLOSE_CALL = 0.03  # a speedup this close to 1.0 is timed again before it decides anything


def settled_latency(original: onnx.ModelProto | str | Path, optimized: onnx.ModelProto | str | Path,
                    feeds: Mapping[str, np.ndarray], threads: int = 0, runs: int = 10) -> Latency:
    """`latency`, and when its speedup is within CLOSE_CALL of 1.0, `latency` again with twice the runs
    and at least two seconds, whose verdict stands. What it decides (keep a group of rewrites, write
    the rewritten model) turns on gains of 1-2%, while one model timed twice swings by a few percent
    on a shared 2-core machine (NASNet-A's file against itself: 0.995x to 1.017x)."""
    first = latency(original, optimized, feeds, threads, runs)
    if abs(first.speedup - 1) >= CLOSE_CALL:
        return first
    return latency(original, optimized, feeds, threads, 2 * runs, min_seconds=2.0)


DEFAULT_RTOL = 1e-4
CHECK_SEEDS = 2  # random input sets every rewritten model is checked on
# an output that fails rtol passes if it is at most this many times further from the float64 truth than
# ORT's float32 result is (ill-conditioned outputs: see `arbitrate`)
ROUNDING_FACTOR = 2.0
MEASURES = {"normwise_error": "max|a-b| / max|a| over an output's finite elements (judged)",
            "max_elementwise_error": "max |a-b| / (|a| + tiny), tiny the smallest normal number of the "
                                     "output's float type (reported, not judged)"}


def criterion(rtol: float = DEFAULT_RTOL, atol: float = 0.0) -> str:
    """The equivalence criterion in words, as reports print it."""
    floor = f" (or max|a-b| <= {atol:g})" if atol else ""
    return (f"per output, max|a-b| / max|a| <= {rtol:g}{floor}, or, for an output that fails it, at most "
            f"{ROUNDING_FACTOR:g}x the reference's own normwise error against the graph computed in float64 (or within "
            "the machine epsilon of a narrower float type, e.g. float16, it is computed through); NaN/Inf "
            "at the same positions; integer, bool and string outputs equal; shapes and dtypes equal")


@dataclass(frozen=True)
class OutputError:
    """How one output of a candidate differs from the reference's (worst over the input sets).

    `normwise` is max|a-b| / max|a| over the finite elements: what the criterion bounds, since a
    sum of thousands of terms taken in another order moves every element by about eps·max|a|, so an
    element near zero has a large error of its own while the output is right. `elementwise` is
    max |a-b| / (|a| + tiny) (tiny: the smallest normal number of the output's float type), the
    worst single element, at `worst_index`: reported, never judged. `problem` says why the output
    fails whatever the tolerance (shape, dtype, NaN/Inf positions, integers differ), or is "".
    `truth` is (the reference's, the candidate's) normwise error against the float64 evaluation
    of the graph, for an output that failed rtol and was arbitrated (`arbitrate`), else None.
    `floor` is the machine epsilon of the narrowest float type the output is computed through
    (float16's 9.8e-4 after a cast to float16), set by `arbitrate`, else 0: such an output is
    only determined to that precision (see `_precision_floors`).
    """

    name: str
    max_abs: float
    normwise: float
    elementwise: float
    worst_index: tuple[int, ...] | None = None
    problem: str = ""
    truth: tuple[float, float] | None = None
    floor: float = 0.0

    def to_json(self) -> dict:
        return {"name": self.name, "max_abs_error": self.max_abs, "normwise_error": self.normwise,
                "max_elementwise_error": self.elementwise,
                "worst_element": list(self.worst_index) if self.worst_index is not None else None,
                "problem": self.problem or None,
                "float64_normwise_error": None if self.truth is None else
                {"reference": self.truth[0], "candidate": self.truth[1]},
                "precision_floor": self.floor or None}


@dataclass(frozen=True)
class Comparison:
    """A candidate's outputs against a reference's, by the one criterion (see `compare_outputs`).

    `max_rel` is the largest normwise error max|a-b| / max|a| of any output, `max_elem_rel` the
    largest per-element error max |a-b| / (|a| + tiny), `worst_output` the output that fails (or has
    the largest normwise error), `inputs` how many random input sets were compared.
    """

    max_abs: float
    max_rel: float
    ok: bool
    worst_output: str
    max_elem_rel: float = 0.0
    rtol: float = DEFAULT_RTOL
    atol: float = 0.0
    inputs: int = 1
    outputs: tuple[OutputError, ...] = ()

    @property
    def worst(self) -> OutputError | None:
        return next((o for o in self.outputs if o.name == self.worst_output), None)

    def describe(self) -> str:
        """One line about the worst output: what is wrong with it, or how close it is."""
        w = self.worst or OutputError(self.worst_output, self.max_abs, self.max_rel, self.max_elem_rel)
        if w.problem:
            return f"output {w.name!r}: {w.problem}"
        where = f" at {list(w.worst_index)}" if w.worst_index is not None else ""
        verdict = "" if w.normwise <= self.rtol else f" > rtol {self.rtol:g}"
        truth = "" if w.truth is None else (
            f"; against the graph in float64: reference {w.truth[0]:.3g}, candidate {w.truth[1]:.3g}, "
            f"{'within' if self.ok else 'over'} {ROUNDING_FACTOR:g}x the reference's"
            + (f" or the precision floor {w.floor:.3g} of a narrower float type it is computed through"
               if w.floor else ""))
        return (f"output {w.name!r}: normwise error max|a-b| / max|a| {w.normwise:.3g}{verdict} (max abs error "
                f"{w.max_abs:.3g}; worst element |a-b| / (|a| + tiny) {w.elementwise:.3g}{where}{truth})")

    def to_json(self) -> dict:
        return {"ok": self.ok, "criterion": criterion(self.rtol, self.atol), "rtol": self.rtol, "atol": self.atol,
                "input_sets": self.inputs, "worst_output": self.worst_output,
                "max_abs_error": self.max_abs, "max_rel_error": self.max_rel, "normwise_error": self.max_rel,
                "max_elementwise_error": self.max_elem_rel, "measures": MEASURES,
                "outputs": [o.to_json() for o in self.outputs]}


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def _tiny(dtype: np.dtype) -> float:
    """The smallest normal number of a float type (float32's for types numpy has no finfo of)."""
    try:
        return float(np.finfo(dtype).tiny)
    except (TypeError, ValueError):
        return float(np.finfo(np.float32).tiny)


def compare_output(name: str, a: np.ndarray, b: np.ndarray) -> OutputError:
    """The errors of candidate `b` against reference `a` (see `OutputError`)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return OutputError(name, INF, INF, INF, None, f"shape {b.shape} differs from the reference's {a.shape}")
    if a.dtype != b.dtype:
        return OutputError(name, INF, INF, INF, None, f"dtype {b.dtype} differs from the reference's {a.dtype}")
    if a.dtype.kind in "biuOSU":  # integers, bools, strings: equal or wrong
        differ = a != b
        if not differ.any():
            return OutputError(name, 0.0, 0.0, 0.0)
        first = _index(int(np.argmax(differ)), a.shape)
        return OutputError(name, INF, INF, INF, first, f"{int(differ.sum())} of {a.size} elements differ "
                           f"({a.dtype} output: must be equal), first at {list(first)}: {a[first]!r} vs {b[first]!r}")
    if _bitwise_equal(a, b):  # the common case, in one pass and no float64 copies
        return OutputError(name, 0.0, 0.0, 0.0, _index(0, a.shape) if a.size else None)
    f = _float_errors(a, b)
    if f.mismatches:
        first = _index(f.first_mismatch, a.shape)
        return OutputError(name, INF, INF, INF, first, f"NaN/Inf at different positions ({f.mismatches} "
                           f"elements, first at {list(first)}: {a[first]} vs {b[first]})")
    return OutputError(name, f.max_abs, f.normwise, f.elementwise, _index(f.worst, a.shape) if a.size else None)


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same bits everywhere (so the same NaN and ±Inf positions, and no error), chunk by chunk."""
    if a.dtype.kind not in "fc" or a.dtype.itemsize not in (2, 4, 8):
        return False
    bits = np.dtype(f"u{a.dtype.itemsize}")
    fa, fb = np.ravel(a).view(bits), np.ravel(b).view(bits)
    return all(np.array_equal(fa[i:i + CHUNK], fb[i:i + CHUNK]) for i in range(0, fa.size, CHUNK))


@dataclass(frozen=True)
class _FloatErrors:
    max_abs: float
    normwise: float
    elementwise: float
    worst: int  # flat index of the worst element
    mismatches: int  # elements where NaN/±Inf differ
    first_mismatch: int


def _float_errors(a: np.ndarray, b: np.ndarray) -> _FloatErrors:
    """`b` against `a` chunk by chunk, in float64 (complex128): NaN/±Inf positions that differ, and
    over the elements finite in both (the others count as 0) max|a-b|, the normwise error
    max|a-b| / max|a| and the worst |a-b| / (|a| + tiny). In chunks so that a model with
    gigabyte-sized outputs is checked in the memory the outputs already take (fuzz case 41864: an
    8 GiB output, compared whole, needed seven times its size)."""
    fa, fb = np.ravel(a), np.ravel(b)
    wide = np.complex128 if a.dtype.kind == "c" or b.dtype.kind == "c" else np.float64
    tiny = _tiny(a.dtype)
    max_abs = scale = 0.0
    elementwise, worst, mismatches, first_mismatch = -1.0, 0, 0, -1
    for start in range(0, fa.size, CHUNK):
        x, y = fa[start:start + CHUNK], fb[start:start + CHUNK]
        both = np.isfinite(x) & np.isfinite(y)
        if not both.all():  # NaN where NaN, +inf where +inf, -inf where -inf
            mismatch = ~both & ~((np.isnan(x) & np.isnan(y)) | (x == y))
            count = int(mismatch.sum())
            if count and first_mismatch < 0:
                first_mismatch = start + int(np.argmax(mismatch))
            mismatches += count
        x64 = np.where(both, x, 0).astype(wide)
        diff = np.abs(x64 - np.where(both, y, 0).astype(wide))
        magnitude = np.abs(x64)
        max_abs = max(max_abs, float(diff.max(initial=0.0)))
        scale = max(scale, float(magnitude.max(initial=0.0)))
        per_element = diff / (magnitude + tiny)
        i = int(np.argmax(per_element))
        if float(per_element[i]) > elementwise:
            elementwise, worst = float(per_element[i]), start + i
    normwise = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else INF)
    return _FloatErrors(max_abs, normwise, max(elementwise, 0.0), worst, mismatches, first_mismatch)


def _passes(e: OutputError, rtol: float, atol: float) -> bool:
    if e.problem:
        return False
    if e.normwise <= rtol or e.max_abs <= atol:
        return True
    return e.truth is not None and e.truth[1] <= max(rtol, e.floor, ROUNDING_FACTOR * e.truth[0])


def arbitrate(comparison: Comparison, truth: Callable[[], Graph], feed_sets: Sequence[Mapping[str, np.ndarray]],
              references: Sequence[Mapping[str, np.ndarray]], candidates: Sequence[Mapping[str, np.ndarray]]
              ) -> Comparison:
    """A second look at float outputs that fail rtol by magnitude alone: both results against the
    truth, the graph `truth()` gives evaluated in float64 on the same inputs (its numpy references).
    That graph is the reference model's, never the candidate's (a wrong candidate would be its own
    truth); it is only built (often an import) when some output needs the second look.

    An ill-conditioned output (large terms that nearly cancel) is far from the truth in ORT's
    float32 too: such an output passes if the candidate is at most ROUNDING_FACTOR times further
    from the truth than the reference, or within rtol of it, or within the precision floor of an
    output computed through a narrower float type (`_precision_floors`). Outputs with a `problem` and references
    that cannot be evaluated (nodes outside the algebra run in ORT in float32 there, see
    `graph.evaluate`) leave the verdict as it was.
    """
    from taso_py.graph.evaluate import evaluate

    suspects = {e.name for e in comparison.outputs if not e.problem and not _passes(e, comparison.rtol,
                                                                                      comparison.atol)}
    if comparison.ok or not suspects:
        return comparison
    try:
        graph = truth()
    except TasoError:  # the reference does not import (e.g. shapes only ORT knows): no second look
        return comparison
    if not suspects <= set(graph.output_names):
        return comparison
    try:
        truths = [evaluate(graph, feeds, sorted(suspects), wide=True) for feeds in feed_sets]
    except (TasoError, ValueError, TypeError):  # a reference that does not take float64: no second look
        return comparison
    floors = _precision_floors(graph, suspects)
    errors = []
    for e in comparison.outputs:
        if e.name in suspects and truths[0][e.name].dtype.kind == "f":
            ref = max(_float_errors(t[e.name], r[e.name]).normwise for t, r in zip(truths, references))
            cand = max(_float_errors(t[e.name], c[e.name]).normwise for t, c in zip(truths, candidates))
            e = replace(e, truth=(ref, cand), floor=floors[e.name])
        errors.append(e)
    return _verdict(errors, comparison.rtol, comparison.atol, comparison.inputs)


def _precision_floors(graph: Graph, names: Iterable[str]) -> dict[str, float]:
    """Per named output, the machine epsilon of the narrowest float type among the tensors it is
    computed from (0 when none is narrower than float32).

    Rounding to such a type is a step function: where a float32 value sits within one float32 ulp
    of a float16 rounding boundary, two correct float32 computations (ORT's and ours) round to
    neighbouring float16 values, and the float64 truth, which rounds the same way as one of them,
    cannot tell which is right (fuzz case 91900). Downstream of that step an output is determined
    to the narrow type's precision, not to rtol."""
    f32 = float(np.finfo(np.float32).eps)

    def eps(t: TensorType) -> float:
        e = float(np.finfo(t.dtype.numpy).eps) if t.dtype is not None and t.dtype.is_float else 0.0
        return e if e > f32 else 0.0

    floor: dict[int, float] = {}  # node id -> the floor of what it computes, in one topological pass
    for node in graph.topo_order():
        floor[node.id] = max([*(eps(t) for t in node.types), *(floor[r.node] for r in node.inputs), 0.0])
    wanted = set(names)
    return {name: floor[ref.node] for name, ref in zip(graph.output_names, graph.outputs) if name in wanted}


def _worse(e: OutputError, other: OutputError) -> OutputError:
    """Per output, the worst of two input sets."""
    if e.problem or other.problem:
        return e if e.problem else other
    index = e.worst_index if e.elementwise >= other.elementwise else other.worst_index
    return OutputError(e.name, max(e.max_abs, other.max_abs), max(e.normwise, other.normwise),
                       max(e.elementwise, other.elementwise), index)


def _verdict(errors: Sequence[OutputError], rtol: float = DEFAULT_RTOL, atol: float = 0.0,
            inputs: int = 1) -> Comparison:
    """The verdict over a set of outputs: every one must pass."""
    failing = [e for e in errors if not _passes(e, rtol, atol)]
    pool = failing or list(errors)
    worst = max(pool, key=lambda e: (bool(e.problem), e.normwise), default=None)
    return Comparison(max((e.max_abs for e in errors), default=0.0), max((e.normwise for e in errors), default=0.0),
                      not failing, worst.name if worst else "", max((e.elementwise for e in errors), default=0.0),
                      rtol, atol, inputs, tuple(errors))


def compare_outputs(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray],
                    rtol: float = DEFAULT_RTOL, atol: float = 0.0, *, truth: Callable[[], Graph] | None = None,
                    feeds: Mapping[str, np.ndarray] | None = None) -> Comparison:
    """taso-py's one equivalence criterion, on the outputs of one input set: per output, max|a-b| /
    max|a| <= rtol (or max|a-b| <= atol, an absolute floor, 0 by default), NaN and ±Inf at the same
    positions, integer/bool/string outputs equal, shapes and dtypes equal (see `OutputError`); with
    `truth` (the reference's graph) and the `feeds` both ran on, the float64 second look (`arbitrate`)."""
    return compare_output_sets([reference], [candidate], rtol, atol, truth=truth,
                               feed_sets=[feeds] if feeds is not None else ())


def compare_output_sets(references: Sequence[Mapping[str, np.ndarray]],
                        candidates: Sequence[Mapping[str, np.ndarray]],
                        rtol: float = DEFAULT_RTOL, atol: float = 0.0, *, truth: Callable[[], Graph] | None = None,
                        feed_sets: Sequence[Mapping[str, np.ndarray]] = ()) -> Comparison:
    """`compare_outputs` over several input sets (`feed_sets`, needed with `truth`): each output at
    its worst over the sets."""
    errors: dict[str, OutputError] = {}
    for reference, candidate in zip(references, candidates):
        for name, a in reference.items():
            if name not in candidate or candidate[name] is None:
                e = OutputError(name, INF, INF, INF, None, "missing from the candidate's outputs")
            else:
                e = compare_output(name, a, candidate[name])
            errors[name] = _worse(errors[name], e) if name in errors else e
    comparison = _verdict(list(errors.values()), rtol, atol, len(references))
    return arbitrate(comparison, truth, feed_sets, references, candidates) if truth is not None else comparison


def compare_models(reference: onnx.ModelProto | str | Path, candidate: onnx.ModelProto | str | Path,
                   feeds: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]],
                   rtol: float = DEFAULT_RTOL, atol: float = 0.0, outputs: Sequence[str] | None = None,
                   truth: Callable[[], Graph] | None = None) -> Comparison:
    """Run both models in ONNX Runtime on the same input sets (one, or a list) and compare their
    outputs by `compare_outputs`, each output at its worst over the sets (with `truth`, the
    reference's graph, the float64 second look)."""
    sets = [feeds] if isinstance(feeds, Mapping) else list(feeds)
    want = run_sets(reference, sets)
    got = run_sets(candidate, sets)
    if outputs is not None:
        want = [{k: v for k, v in w.items() if k in outputs} for w in want]
    return compare_output_sets(want, got, rtol, atol, truth=truth, feed_sets=sets)


def check_equivalent(reference: onnx.ModelProto | str | Path, candidate: onnx.ModelProto | str | Path,
                     graph: Graph, seed: int = 0, rtol: float = DEFAULT_RTOL, atol: float = 0.0,
                     seeds: int = CHECK_SEEDS, truth: Callable[[], Graph] | None = None) -> Comparison:
    """The check a rewritten model must pass before it is written: `compare_models` on `seeds`
    random input sets (seeds `seed`, `seed + 1`, ...) for the inputs of `graph`, outputs that fail
    by rounding alone arbitrated against the reference's graph `truth()` in float64 (`arbitrate`)."""
    check_memory(graph, seeds)  # the sets' inputs included, so each draw needs no check of its own
    return compare_models(reference, candidate, [_feeds(graph, seed + k) for k in range(seeds)], rtol, atol,
                          truth=truth)
