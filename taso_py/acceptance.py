"""Keep the rewrites that pay in ONNX Runtime, revert the rest: regions priced where they sit, then
timed in the whole model.

The cost model prices operators one at a time; ORT runs the whole graph, fuses and re-lays it out
(it wraps a merged convolution's Split in layout reorders), so a search result can mix rewrites
that pay with rewrites that do not. The search's result is cut into independent regions
(`graph.regions`); regions that do the same thing (one signature: the operators added and removed)
form a group. Each region is first priced in context (`cost.context`: with its neighbours, as a
small model in ORT), which predicts what each group saves in the whole model; regions predicted to
save nothing are reverted untimed, each on its own (one signature may pay in one place and not in
another), the rest of each group is tried, most promising first: the model with the
group applied is timed against the model as accepted so far, runs interleaved, and the group is kept
only if ORT runs it faster beyond the timings' noise (`runtime.Latency.pays`: a sign test over the
runs in turn). Whole-model timings are what decides.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from taso_py.cost.context import NOTHING, ContextTimings, Price
from taso_py.cost.model import CostModel, graph_cost
from taso_py.errors import GraphError
from taso_py.graph.ir import Graph
from taso_py.graph.regions import Region, apply, diff, without_unused
from taso_py.onnx_io import OnnxModel
from taso_py.onnx_io.exporter import save_model
from taso_py.runtime import Latency, settled_latency

MAX_TRIALS = 8  # groups timed one at a time; the groups predicted to gain least are tried as one
# of timing contexts during the search (`InContext`): with a cold cache NASNet-A's and Inception-v3's
# extractions took 20 s of it, their search 27 s, near the α-search's 30 s default budget
JUDGE_BUDGET_SECONDS = 10.0


@dataclass
class Trial:
    """One group of regions applied on top of what was accepted before it, and what ORT made of it."""

    change: str
    regions: int
    predicted: float  # the cost model's speedup of this step
    measured: Latency | None
    kept: bool
    reason: str = ""
    in_context: float | None = None  # the whole model's speedup from this group, as its regions priced in context

    def to_json(self) -> dict:
        return {"change": self.change, "regions": self.regions, "predicted_speedup": round(self.predicted, 4),
                "predicted_in_context": None if self.in_context is None else round(self.in_context, 4),
                "measured": self.measured.to_json() if self.measured else None, "kept": self.kept,
                "reason": self.reason}


@dataclass
class Accepted:
    graph: Graph  # the start graph with the kept regions applied, unused nodes removed
    trials: list[Trial] = field(default_factory=list)
    predicted: float = 1.0  # speedup of the groups predicted to pay in context, all applied

    @property
    def kept(self) -> int:
        return sum(t.regions for t in self.trials if t.kept)


def describe(signature: tuple[tuple[str, int], ...]) -> str:
    """'+conv2d, +split, -conv2d x2': the operators a group adds and removes."""
    parts = [op if op.startswith("-") else f"+{op}" for op, _ in signature]
    return ", ".join(f"{p} x{k}" if k > 1 else p for p, (_, k) in zip(parts, signature, strict=True)) or "rewiring"


def groups(start: Graph, rewritten: Graph, model: CostModel) -> list[tuple[str, list[Region]]]:
    """(description, regions), the group the cost model expects most of first; at most MAX_TRIALS,
    the tail merged into one."""
    by_signature: dict[tuple[tuple[str, int], ...], list[Region]] = {}
    for region in diff(start, rewritten):
        by_signature.setdefault(region.signature(), []).append(region)
    base = graph_cost(without_unused(start), model)
    scored = []
    for signature, members in by_signature.items():
        try:
            cost = graph_cost(without_unused(apply(start, rewritten, members)), model)
        except GraphError:  # only together with another group
            cost = base
        scored.append((describe(signature), members, base / cost if cost else 1.0))
    scored.sort(key=lambda s: -s[2])
    if len(scored) > MAX_TRIALS:
        tail = scored[MAX_TRIALS - 1:]
        rest = [r for _, members, _ in tail for r in members]
        scored = [*scored[:MAX_TRIALS - 1], (f"{len(tail)} other kinds", rest, 1.0)]
    return [(change, members) for change, members, _ in scored]


class InContext:
    """Equality saturation's judge (`search.eqsat.Judge`): the regions of an extracted graph that run
    no faster in context than what they replace, so that the search extracts again without them.
    Prices are cached on disk (`cost.context`): `accept` reads them back untimed."""

    def __init__(self, context: ContextTimings, progress: Callable[[str], None] | None = None) -> None:
        self.context = context
        self.progress = progress
        self.seconds = 0.0  # spent judging (timing contexts, mostly), for the report: it is inside the search's time
        self.judged = 0  # extractions judged
        self.slower = 0  # regions found slower in context, over all of them

    def __call__(self, start: Graph, rewritten: Graph) -> list[Region]:
        began = time.perf_counter()
        slower = []
        regions = diff(start, rewritten)
        for k, region in enumerate(regions):
            if self.progress is not None:
                self.progress(f"search: pricing rewrites in context, {k + 1} of {len(regions)}")
            price = self.context.region(start, rewritten, region)
            if price is not None and price.saved_share <= 0:
                slower.append(region)
        self.context.save()
        self.seconds += time.perf_counter() - began
        self.judged += 1
        self.slower += len(slower)
        return slower

    def to_json(self) -> dict:
        return {"seconds": round(self.seconds, 3), "extractions_judged": self.judged, "regions_slower": self.slower}


def accept(model: OnnxModel, start: Graph, rewritten: Graph, cost: CostModel, feeds: Mapping[str, np.ndarray],
           threads: int, runs: int, progress: Callable[[str], None] | None = None) -> Accepted:
    """`start` with the groups of `rewritten`'s regions that ORT runs faster applied: groups priced
    in context first, then each group predicted to pay timed against the model accepted before it
    (interleaved runs, medians: `runtime.latency`)."""
    plan = groups(start, rewritten, cost)
    context = ContextTimings(threads, model.origin, cost)
    base = graph_cost(without_unused(start), cost)
    priced: list[tuple[str, list[Region], Price | None]] = []
    trials: list[Trial] = []
    for k, (change, members) in enumerate(plan):
        if progress is not None:
            progress(f"pricing rewrites in context: group {k + 1} of {len(plan)} ({change})")
        pays, slower = _split_by_price(context, start, rewritten, members)
        if slower:  # a region that is slower where it sits is reverted on its own, whatever its group does
            price = sum((p for _, p in slower), NOTHING)
            trials.append(Trial(change, len(slower), _predicted(start, base, rewritten, [r for r, _ in slower], cost),
                                None, False, f"slower in context, {price.before_ms:.3g} → {price.after_ms:.3g} ms",
                                price.speedup))
        if pays:
            priced.append((change, [r for r, _ in pays], _total([p for _, p in pays])))
    context.save()
    # what ORT saves where the rewrites sit first; groups that could not be priced after, as the cost model orders them
    priced.sort(key=lambda p: (0, -p[2].saved_share) if p[2] is not None else (1, 0.0))
    current, current_cost = start, base
    with tempfile.TemporaryDirectory(prefix="taso-accept-") as tmp:
        current_file = _write(model, current, Path(tmp) / "base.onnx")
        paying = NOTHING  # the groups tried, as priced in context
        for k, (change, members, price) in enumerate(priced):
            if progress is not None:
                progress(f"timing rewrites in ONNX Runtime: group {k + 1} of {len(priced)} ({change})")
            in_context = price.speedup if price is not None else None
            try:
                candidate = apply(current, rewritten, members)
            except GraphError:
                trials.append(Trial(change, len(members), 1.0, None, False,
                                    "would form a cycle with the groups reverted before it", in_context))
                continue
            candidate_cost = graph_cost(without_unused(candidate), cost)
            predicted = current_cost / max(candidate_cost, 1e-12)
            # a group that could not be priced counts with what the cost model expects it to save
            paying = paying + (price if price is not None else Price(0.0, 0.0, 1 - 1 / predicted))
            candidate_file = _write(model, candidate, Path(tmp) / f"group{k}.onnx")
            measured = settled_latency(current_file, candidate_file, feeds, threads, runs)
            kept = measured.pays
            trials.append(Trial(change, len(members), predicted, measured, kept, "", in_context))
            if kept:
                current, current_cost, current_file = candidate, candidate_cost, candidate_file
    return Accepted(without_unused(current), trials, paying.speedup)


def _split_by_price(context: ContextTimings, start: Graph, rewritten: Graph, members: list[Region]
                    ) -> tuple[list[tuple[Region, Price | None]], list[tuple[Region, Price]]]:
    """The regions of a group that save time in context or could not be priced (with their prices),
    and the prices of those that save nothing there. One signature can stand for different places:
    Inception-v3's merged 1x1 convolutions differ from block to block in what ORT does around them."""
    paying, slower = [], []
    for region in members:
        price = context.region(start, rewritten, region)
        if price is not None and price.saved_share <= 0:
            slower.append((region, price))
        else:
            paying.append((region, price))
    return paying, slower


def _predicted(start: Graph, base: float, rewritten: Graph, regions: list[Region], cost: CostModel) -> float:
    """The cost model's speedup of `regions` applied to `start` (of cost `base`; 1.0 when they need
    other regions)."""
    try:
        after = graph_cost(without_unused(apply(start, rewritten, regions)), cost)
    except GraphError:
        return 1.0
    return base / max(after, 1e-12)


def _total(prices: list[Price | None]) -> Price | None:
    """A group's price: None when one of its regions has none."""
    return None if any(p is None for p in prices) else sum(prices, NOTHING)


def _write(model: OnnxModel, graph: Graph, path: Path) -> Path:
    return save_model(OnnxModel(without_unused(graph), model.origin, model.source, model.notes), path)
