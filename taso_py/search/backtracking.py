"""TASO's cost-based backtracking search with α relaxation.

A priority queue of graphs ordered by cost starts with the input graph. The cheapest graph is
taken out, every rule match in it is priced, and each rewrite whose cost stays below α × the
best cost so far (α > 1 lets the search pass through slightly worse graphs to reach better ones)
is queued. Graphs are deduplicated by the multiset of their operator applications
(`_signature`). It stops when the queue is empty, `budget` graphs have been expanded, or
`timeout` seconds have passed. Every built graph has its nested
splits flattened (`graph.normalize`), so a chain of two-way merges is priced as the one wide
split it will be.

Three things make it fast enough for whole models. A rewrite is priced, and its graph's
signature computed, from its plan (the nodes it adds less the nodes it kills) without building
it. The queue holds (parent, plan) pairs, and a child graph is built only when it is taken out:
most queued rewrites never are. And
the matcher caches matches by the node objects they read, so a child graph, which shares all but
a few nodes with its parent, is re-matched only around the edit.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from taso_py.cost.model import CostModel, OpCall, call_of, constant_nodes, graph_cost
from taso_py.graph.ir import Graph, Node
from taso_py.graph.normalize import flatten_splits
from taso_py.library.terms import Rule
from taso_py.match.matcher import Matcher
from taso_py.match.rewrite import Plan, apply, creates_cycle, plan
from taso_py.search.settings import MIN_GAIN, pays


@dataclass
class Settings:
    alpha: float = 1.05
    budget: int = 1000  # graphs expanded
    timeout: float = 30.0  # seconds
    seed: int = 0  # order among equally cheap rewrites
    min_gain: float = MIN_GAIN  # the input graph is returned unless the best is this fraction cheaper


@dataclass
class Outcome:
    graph: Graph
    cost: float
    original_cost: float
    applied: list[int]  # rule indices, in the order applied on the way to the best graph
    expanded: int = 0
    generated: int = 0  # distinct graphs queued
    seconds: float = 0.0
    stopped: str = "exhausted"  # exhausted | budget | timeout
    matches: int = 0
    history: list[tuple[float, float]] = field(default_factory=list)  # (seconds, best cost)
    # the input graph's rewrites that do not pay, cheapest first: (cost added, rule index)
    rejected: list[tuple[float, int]] = field(default_factory=list)


def search(graph: Graph, rules: Sequence[Rule], model: CostModel, settings: Settings | None = None,
           progress: Callable[[int, float], None] | None = None) -> Outcome:
    settings = settings or Settings()
    started = time.perf_counter()
    rng = random.Random(settings.seed)
    planner = _Planner(Matcher(rules))
    cost0 = graph_cost(graph, model)
    best = Outcome(graph, cost0, cost0, [])
    tie = itertools.count()
    # (cost, tie-break, order, signature, parent graph, plan or None, path): a child is built when
    # it is taken out
    sig0 = _signature(graph)
    queue: list[tuple[float, float, int, int, Graph, Plan | None, tuple[int, ...]]] = [
        (cost0, 0.0, next(tie), sig0, graph, None, ())]
    seen = {sig0}
    while queue:
        if best.expanded >= settings.budget:
            best.stopped = "budget"
            break
        if time.perf_counter() - started > settings.timeout:
            best.stopped = "timeout"
            break
        cost, _, _, sig, g, p, path = heapq.heappop(queue)
        if p is not None and cost >= settings.alpha * best.cost:
            continue  # queued before a better graph was found (the input graph is always expanded: α may be 1)
        if p is not None:
            g = apply(g, p)
            if flatten_splits(g):
                cost = graph_cost(g, model)  # the plan's price did not know of the merged splits
        best.expanded += 1
        if cost < best.cost:
            best.graph, best.cost, best.applied = g, cost, list(path)
            best.history.append((time.perf_counter() - started, cost))
        users = g.users()
        const = constant_nodes(g)
        for child in planner.plans(g, users):
            best.matches += 1
            price, change = _delta(g, child, model, const, users)
            if p is None and price >= 0:
                best.rejected.append((price, child.match.rule))
            new_cost, new_sig = cost + price, (sig + change) & _MASK
            if new_cost < settings.alpha * best.cost and new_sig not in seen:
                seen.add(new_sig)
                best.generated += 1
                heapq.heappush(queue, (new_cost, rng.random(), next(tie), new_sig, g, child,
                                       (*path, child.match.rule)))
        if progress is not None:
            progress(best.expanded, best.cost)
    if not pays(best.cost, cost0, settings.min_gain):
        best.graph, best.cost, best.applied = graph, cost0, []
    best.seconds = time.perf_counter() - started
    best.rejected = sorted(set(best.rejected))
    return best


_MASK = (1 << 64) - 1


def _signature(g: Graph) -> int:
    """What deduplicates graphs: the multiset of their operator applications (op, attributes,
    types, which inputs are constant), as a sum of hashes so that a rewrite updates it from what it
    adds and kills. Isomorphic graphs share it, and so do graphs that differ only in the order
    things were merged (`concat(w1, w2)` or `concat(w2, w1)`) or in which of two identical blocks
    was rewritten first: exploring one of those is enough, and skipping the rest, before they are
    even built, keeps merges of many operators from drowning the search in permutations."""
    const = constant_nodes(g)
    return sum(hash(call_of(g, n, const)) for n in g.nodes.values()
               if n.op.algebra and n.id not in const) & _MASK


class _Planner:
    """Plans for every match of a graph, reusing those of earlier graphs where nothing they depend
    on changed: the matched nodes, their readers and which of their tensors are graph outputs
    (all three decide what dies: an earlier rewrite may have made a matched tensor a graph
    output), and the existing nodes the destination reads; a merge's acyclicity is checked again,
    since it depends on all their ancestors. (A plan reused this way may miss an
    equal node that appeared since, and build a duplicate: a worse rewrite, never a wrong one.)"""

    def __init__(self, matcher: Matcher) -> None:
        self.matcher = matcher
        self._cache: dict[tuple, tuple[tuple[Node, ...], Plan | None]] = {}

    def plans(self, g: Graph, users: dict[int, list[Node]]) -> list[Plan]:
        out = []
        graph_outputs = sorted(set(g.outputs))
        for m in self.matcher.matches(g):
            readers = tuple(len(users[n]) for n in sorted(m.nodes))  # a new reader may keep a node alive
            kept = tuple(r for r in graph_outputs if r.node in m.nodes)  # and so may a graph output
            key = (m.rule, m.roots, tuple(m.tensors.items()), tuple(m.attrs.items()), readers, kept)
            hit = self._cache.get(key)
            if hit is not None and all(g.nodes.get(n.id) is n for n in hit[0]):
                p = hit[1]
                # the nodes it reads are unchanged, but what they are computed from may not be: a
                # merge whose input came to depend on one of its roots would close a cycle (fuzz 144101)
                if p is not None and creates_cycle(g, m, p.read):
                    continue
            else:
                p = plan(g, self.matcher.rules[m.rule], m, users)
                read = p.read if p is not None else {r.node for r in m.tensors.values()}
                deps = (*(g.nodes[n] for n in (*m.nodes, *read)), *(u for n in m.nodes for u in users[n]))
                self._cache[key] = (deps, p)
            if p is not None:
                out.append(p)
        return out


def _delta(g: Graph, p: Plan, model: CostModel, const: set[int], users: dict[int, list[Node]]
           ) -> tuple[float, int]:
    """What the rewrite adds minus what it kills (constants cost nothing), in cost and in signature."""
    price, change = 0.0, 0
    for n in p.dead:
        if n not in const and g.nodes[n].op.algebra:
            call = call_of(g, g.nodes[n], const)
            price -= model.cost(call)
            change -= hash(call)
    new_const: list[bool] = []
    for n in p.new:
        inputs_const = tuple(s.node in const if not isinstance(s, tuple) else new_const[s[0]] for s in n.inputs)
        is_const = bool(n.inputs) and all(inputs_const)
        new_const.append(is_const)
        if not is_const:
            ins = tuple(g.type(s) if not isinstance(s, tuple) else p.new[s[0]].types[s[1]] for s in n.inputs)
            call = OpCall(n.op, n.attrs, ins, n.types, inputs_const)
            price += model.cost(call)
            change += hash(call)
    return price - _flattened(g, p, model, const, users), change


def _flattened(g: Graph, p: Plan, model: CostModel, const: set[int], users: dict[int, list[Node]]) -> float:
    """What `flatten_splits` will save after the rewrite: a split reading a root that a new split
    replaces, on the same axis, merges into it (the wider split costs about what the new one does)."""
    saved = 0.0
    for root, out in zip(p.match.roots, p.outputs):
        if not isinstance(out, tuple) or p.new[out[0]].op.name != "split":
            continue
        readers = [u for u in users.get(root.node, ()) if root in u.inputs]
        if (len(readers) == 1 and readers[0].op.name == "split" and root not in g.outputs
                and readers[0].attrs.axis == p.new[out[0]].attrs.axis):
            saved += model.cost(call_of(g, readers[0], const))
    return saved
