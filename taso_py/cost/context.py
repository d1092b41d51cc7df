"""Costs in context: a rewrite priced where it sits, by ONNX Runtime itself.

The search's cost models price operators one at a time. Inside ORT, what a rewrite changes also
changes what ORT does around it: a merged convolution's Split is wrapped in layout reorders
(Inception-v3: 65 of them), a MatMul followed by its bias Add stops being one Gemm. So a region of
the search's result is timed as a small model of its own, its producers and consumers included
(`graph.regions.in_context`), before and after the rewrite; the difference is what the rewrite
saves where it sits. Timings are cached on disk by the pair's structure hash (weights' values and
tensor names left out), per machine and thread count, so a rewrite repeated in every layer of a
model, or met again in a later run, is timed once.

What a region saves in the whole model is its ratio in context weighted by the share of the model
its context is (by the search's cost model): the two small models are timed in turn, which ORT does
to within a few percent, while a whole model's time swings by 15% from one second to the next on a
shared machine (NasRNN at two threads: 2.8 to 3.8 ms), too much to subtract milliseconds from.
A context that is most of the model is the model: the whole model is timed with and without the
region, for longer (`WHOLE_SECONDS`), since its error is the prediction's. NasRNN's one region had a
context of 198 of its operators, priced at 0.948 of the model by the cost model, timed in 0.3 s:
predicted 1.92-2.08x where ORT measured 2.29-2.44x.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from taso_py.atomic import write_json
from taso_py.cache import cache_root, read_records
from taso_py.cost.measured import machine_key
from taso_py.cost.model import CostModel, graph_cost
from taso_py.errors import TasoError
from taso_py.graph.hashing import structure_hash
from taso_py.graph.ir import Graph
from taso_py.graph.regions import Region, apply, in_context, without_unused
from taso_py.onnx_io import OnnxModel, OnnxOrigin, to_onnx
from taso_py.runtime import latency, random_feeds

HOPS = 1  # neighbours on each side: enough for the reorders and fusions at the region's edges
MIN_SECONDS = 0.3  # per pair of small models, runs interleaved
WHOLE_SHARE = 0.5  # a context more than this share of the model (by the cost model) is timed as the whole model
WHOLE_SECONDS = 1.0  # per pair of whole models, as the acceptance times them (`runtime.latency`)
BUDGET_SECONDS = 30.0  # of timing per search result (the acceptance's); regions left over stay unpriced


@dataclass(frozen=True)
class Price:
    """A region with its neighbours, as the start graph has it and rewritten: milliseconds in ORT,
    and the share of the whole model's time it saves (its share of the model's cost, by the cost
    model, times the part of its own time the rewrite saves). Sums price groups of regions."""

    before_ms: float
    after_ms: float
    saved_share: float

    def __add__(self, other: Price) -> Price:
        return Price(self.before_ms + other.before_ms, self.after_ms + other.after_ms,
                     self.saved_share + other.saved_share)

    @property
    def speedup(self) -> float:
        """The whole model's, when this is saved."""
        return 1 / (1 - self.saved_share) if self.saved_share < 1 else float("inf")


NOTHING = Price(0.0, 0.0, 0.0)


class ContextTimings:
    """Prices regions in context, with `threads` ORT threads, reading and filling the disk cache."""

    def __init__(self, threads: int, origin: OnnxOrigin, cost: CostModel, path: Path | None = None,
                 budget: float = BUDGET_SECONDS) -> None:
        self.threads = threads
        self.budget = budget  # seconds of timing; regions left over stay unpriced
        self.origin = origin
        self.cost = cost
        self.path = path or cache_root() / f"context-{machine_key(threads)}.json"
        self.times = read_records(self.path, lambda doc: {str(k): [float(v[0]), float(v[1])] for k, v in doc.items()})
        self.seconds = 0.0  # spent timing in this process
        self._whole: tuple[Graph, float] | None = None  # the last start graph and its cost
        self.timed = 0  # pairs timed here (the rest came from the cache)
        self._dirty = False

    def region(self, start: Graph, rewritten: Graph, region: Region) -> Price | None:
        """The region applied alone to `start`, priced; None when it cannot be (it forms a cycle alone,
        it cannot be cut out or run, or the time budget is spent)."""
        if not region.nodes:  # an output pointed at a tensor computed anyway: what it saves is not cut out
            return None
        try:
            pair, share = self.pair(start, rewritten, region)
        except (TasoError, ZeroDivisionError):
            return None
        key = self.key(*pair)
        if key not in self.times:
            if self.seconds >= self.budget:
                return None
            began = time.perf_counter()
            try:
                before, after = (to_onnx(OnnxModel(g, self.origin)) for g in pair)
                seconds = MIN_SECONDS if share <= WHOLE_SHARE else WHOLE_SECONDS
                timed = latency(before, after, random_feeds(pair[0]), self.threads, 10, seconds)
            except Exception:  # ORT's own errors derive from Exception itself; a price is optional
                return None
            finally:
                self.seconds += time.perf_counter() - began
            self.times[key] = [timed.original_ms, timed.optimized_ms]
            self.timed += 1
            self._dirty = True
        before_ms, after_ms = self.times[key]
        return Price(before_ms, after_ms, share * (1 - after_ms / before_ms) if before_ms > 0 else 0.0)

    def pair(self, start: Graph, rewritten: Graph, region: Region) -> tuple[tuple[Graph, Graph], float]:
        """The two graphs `region` is timed as, and the share of `start`'s cost they stand for: its
        context (`graph.regions.in_context`), or the whole model with and without it (share 1.0) when
        the context is more than `WHOLE_SHARE` of it. Raises `TasoError` when the region cannot be
        applied alone or cut out."""
        after = apply(start, rewritten, [region])
        pair = in_context(start, after, region, HOPS)
        share = min(graph_cost(pair[0], self.cost) / self._whole_cost(start), 1.0)
        if share <= WHOLE_SHARE:
            return pair, share
        return (without_unused(start), without_unused(after)), 1.0

    def _whole_cost(self, start: Graph) -> float:
        if self._whole is None or self._whole[0] is not start:
            self._whole = (start, graph_cost(without_unused(start), self.cost))
        return self._whole[1]

    def save(self) -> None:
        if self._dirty:
            write_json(self.path, self.times)
            self._dirty = False

    def key(self, before: Graph, after: Graph) -> str:
        """The cache key of a pair: the two structures and the opsets they are exported at."""
        opsets = sorted(self.origin.opsets.items())
        text = f"{structure_hash(before)}|{structure_hash(after)}|{opsets}"
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
