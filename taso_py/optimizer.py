"""`taso optimize` as a function: imported model → search with the proved rules → foldable model.

Every proved rule of the library is used in both directions where the direction binds all of
its variables (`a` on the left of `split(concat(a, b))[0] == a` cannot be invented going right to
left). Only PROVED rules are ever used. Batch norms and activations after convolutions are fused into
them first, as ONNX Runtime would (`graph.normalize`). Weight-only subgraphs that rewrites create (stacked
kernels, concatenated matrices) are folded into weights before the model is written.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from taso_py.cost.analytical import Roofline
from taso_py.cost.measured import Measured
from taso_py.cost.model import CostModel, costs_by_op, prepare_graph
from taso_py.graph.fold import fold_constants
from taso_py.graph.ir import Graph
from taso_py.graph.normalize import fold_batchnorm, fuse_activations
from taso_py.graph.regions import Region
from taso_py.library.store import Library
from taso_py.library.terms import Apply, Rule, Term, Var, term_names, walk
from taso_py.onnx_io import OnnxModel
from taso_py.onnx_io.names import avoid_names
from taso_py.search import backtracking
from taso_py.search.backtracking import Outcome, Settings
from taso_py.search.settings import EqsatSettings


@dataclass(frozen=True)
class Directed:
    """One direction of a library rule."""

    entry_id: str
    text: str
    rule: Rule
    reversed: bool


def directed_rules(library: Library) -> list[Directed]:
    out = []
    for e in library:
        if not e.proof.proved:
            continue
        for rule, rev in ((e.rule, False), (Rule(e.rule.dst, e.rule.src, e.rule.where), True)):
            if any(isinstance(t, Var) for t in rule.src):
                continue
            have = {n for t in rule.src for n in term_names(t)}
            if {n for t in rule.dst for n in term_names(t)} <= have:
                out.append(Directed(e.id, e.text, rule, rev))
    return out


def relevant(rules: list[Directed], graph: Graph) -> list[Directed]:
    """The rules that can ever match while `graph` is searched: those whose source operators all
    occur in it or in what such rules write (to a fixed point). A library over every operator
    family then gives a CNN's search the rules of its operators only: equality saturation declares
    each rule to egglog (about a millisecond apiece; the shipped library's 454 directions become
    about 210 on ResNet-50, the `--max-ops 4` library's 7,372 about 1,670), and the α-search tries
    each at every expansion. The others could never match."""
    have = {n.op.name for n in graph.nodes.values()}
    sides = [(_operators(d.rule.src), _operators(d.rule.dst)) for d in rules]
    grown = True
    while grown:
        grown = False
        for src, dst in sides:
            if src <= have and not dst <= have:
                have |= dst
                grown = True
    return [d for d, (src, _) in zip(rules, sides) if src <= have]


def _operators(terms: tuple[Term, ...]) -> set[str]:
    return {t.op for term in terms for t in walk(term) if isinstance(t, Apply)}


def cost_model(name: str, threads: int, opset: int) -> CostModel:
    return Measured(threads, opset) if name == "measured" else Roofline()


@dataclass
class Optimized:
    model: OnnxModel
    start: Graph  # the graph the search started from (normal forms applied): `graph.regions` diffs against it
    outcome: Outcome
    rules: list[Directed]
    before: dict[str, tuple[int, float]]  # operator -> (count, cost) of the graph the search started from
    after: dict[str, tuple[int, float]]
    batchnorms_folded: int
    activations_fused: int

    def rejected(self, count: int = 5) -> list[dict[str, Any]]:
        """The cheapest rewrites of the input graph that would not pay, one per rule: why a model
        that gains nothing gains nothing."""
        out: dict[str, dict[str, Any]] = {}
        for price, i in self.outcome.rejected:
            d = self.rules[i]
            if d.entry_id not in out and len(out) < count:
                out[d.entry_id] = {"id": d.entry_id, "cost_added": price, "text": d.text,
                                   "direction": "right-to-left" if d.reversed else "left-to-right"}
        return list(out.values())

    def applied(self) -> list[dict[str, Any]]:
        """The rules on the way to the best graph, with how often each was applied."""
        counts = Counter(self.outcome.applied)
        return [{"id": self.rules[i].entry_id, "direction": "right-to-left" if self.rules[i].reversed
                 else "left-to-right", "count": n, "text": self.rules[i].text} for i, n in counts.most_common()]


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a search runs. A search makes hundreds of
    thousands of small tuples (e-nodes, match keys) that reference counting frees, and the collector
    walked the live ones again every 700 allocations: 0.45-0.6 s of NasRNN's 3.1-4.6 s equality
    saturation (Zen 1). The few cycles made meanwhile (mutually recursive closures) are collected
    once it is back on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def optimize(model: OnnxModel, library: Library, model_cost: CostModel, settings: Settings | EqsatSettings,
             progress: Callable[[int, float], None] | None = None,
             judge: Callable[[Graph, Graph], list[Region]] | None = None) -> Optimized:
    """The search is the α-search for `Settings`, equality saturation for `EqsatSettings`; `progress`
    gets (graphs expanded, best cost) from the first, (iteration, e-nodes) from the second. `judge`
    (equality saturation only, `search.eqsat.Judge`) names the rewrites of an extracted graph that do
    not pay where they sit, for the search to extract again without them."""
    graph = model.graph.copy()
    # every node made from here on (normal forms, rewrites, folds) gets a name the model does not use
    avoid_names(graph, model.origin.names | set(graph.output_names))
    folded = fold_batchnorm(graph)
    fused = fuse_activations(graph)
    prepare_graph(graph, model_cost)
    rules = relevant(directed_rules(library), graph)
    with _collector_paused():
        if isinstance(settings, EqsatSettings):
            from taso_py.search import eqsat  # egglog is loaded only when asked for
            outcome = eqsat.search(graph, [d.rule for d in rules], model_cost, settings, progress, judge)
        else:
            outcome = backtracking.search(graph, [d.rule for d in rules], model_cost, settings, progress)
    best = outcome.graph.copy()
    fold_constants(best)
    best.remove_unused()
    if isinstance(model_cost, Measured):
        model_cost.save()
    return Optimized(OnnxModel(best, model.origin, model.source, model.notes), graph, outcome, rules,
                     costs_by_op(graph, model_cost), costs_by_op(best, model_cost), folded, fused)
