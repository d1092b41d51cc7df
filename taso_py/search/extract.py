"""Extraction: the cheapest graph an e-graph represents, under the α-search's cost model.

Two extractors, as in Tensat. Greedy: each class's cheapest e-node by tree cost (the node's cost
plus its children's), settled cheapest first as in Dijkstra's algorithm, so the choice is acyclic;
it counts a shared subgraph once per use and so never sees that a merge pays (both projections
of a merged convolution carry its whole cost). It runs twice, over the whole e-graph and over the
classes the outputs reach once cycles are broken: tree costs tie often (a sum reassociated), which
of the tied e-nodes a graph shares decides its cost, and the two break ties in different orders.
Exact: an integer program (HiGHS, through its own `highspy`)
over one binary per e-node, the cost of each chosen node counted once, every chosen node's
children chosen; under a time limit, solved in the neighbourhood of its LP relaxation, and whole
only where that has no answer (`_Program.solve`). It runs on the e-graph with
its cycles broken first (`break_cycles`, Tensat's cycle filtering done at extraction), so any
answer is a graph: order variables that forbid cycles inside the program made it too hard for
HiGHS on NasRNN's e-graph (no solution in 5 s), and cuts added per cycle found converged too
slowly (the program finds another cycle of the same merge each time). The three graphs are built,
their nested splits flattened, and priced whole; the cheapest is returned.

A node costs nothing when its inputs are all computed from weights (it is folded before the model
is written), as in `cost.model`; inputs, weights and opaque nodes cost nothing here because every
graph has them alike.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

import highspy  # here, not in the timed search
import numpy as np

from taso_py import ops
from taso_py.cost.model import CostModel, OpCall, graph_cost
from taso_py.graph.ir import Graph, Ref
from taso_py.graph.normalize import flatten_splits
from taso_py.search.egraph import EGraph, ENode, Snapshot

Choice = dict[int, ENode]  # class -> the e-node chosen for it


MIN_ILP_SECONDS = 1.0
ILP_MARGIN_SECONDS = 0.1  # HiGHS ends a little past its time limit, and its answer is still to be read


@dataclass
class Extraction:
    graph: Graph
    cost: float
    handles: list[int]  # of the e-nodes rewrites made that the graph uses
    made: dict[int, tuple[int, ENode]]  # node id -> the (class, e-node) a rewrite made that it was built from


def extract(graph: Graph, eg: EGraph, snap: Snapshot, loaded: Mapping[int, int], tensors: Mapping[Ref, int],
            model: CostModel, deadline: float, banned: AbstractSet[tuple[int, ENode]] = frozenset()) -> Extraction:
    """The cheaper of the greedy and the exact extraction, without the `banned` e-nodes (those of
    rewrites found slower where they sit: `search.eqsat`). `loaded` maps each node id of `graph` to its e-node's handle,
    `tensors` each tensor to its class's. The integer program gets the time left before `deadline`
    (a `time.perf_counter()` value, moved on by the time the cost model spent timing new operators
    while pricing the e-nodes, its `seconds`: with measured costs and a cold
    cache, NasRNN's new operators take 8 s to time, which left the program nothing; the rest of the
    pricing, 0.13 s of arithmetic on NasRNN, is the extraction's)
    less what building the greedy graph took, since its own graph is built after it, and
    ILP_MARGIN_SECONDS, but at least MIN_ILP_SECONDS: a search whose saturation took all its time
    still extracts exactly."""
    if banned:
        snap = Snapshot(snap.class_of, snap.handle, {c: [n for n in ns if (c, n) not in banned]
                                                     for c, ns in snap.nodes.items()}, snap.rows)
    const = constant_classes(eg, snap)
    timing = model.seconds
    cost = _node_costs(eg, snap, const, model)
    deadline += model.seconds - timing
    outputs = [snap.class_of[tensors[r]] for r in graph.outputs]
    original = set(loaded.values())
    origin = {eg.enode(h, snap): node_id for node_id, h in loaded.items()}  # the graph's own e-nodes
    age = ages(eg, snap)
    made = {key: h for key, h in age.items() if h not in original}
    best: Extraction | None = None

    def consider(choice: Choice | None) -> None:
        nonlocal best
        if choice is None or not all(c in choice for c in outputs):
            return
        prefer_originals(snap, choice, cost, origin.keys(), outputs)
        g, used = _build(graph, eg, origin, choice, outputs)
        flatten_splits(g)
        c = graph_cost(g, model)
        if best is None or c < best.cost:
            best = Extraction(g, c, [made[key] for key in used.values() if key in made], used)

    started = time.perf_counter()
    consider(greedy(snap.nodes, cost))
    building = time.perf_counter() - started
    acyclic = break_cycles(snap.nodes, outputs, age)
    reached = {c: acyclic[c] for c in _reachable(acyclic, outputs)}  # what a graph of the outputs may use
    # greedy again over these, which breaks ties in another order (a BERT export: 0.2136 against
    # 0.2276, the original 0.2235)
    first = greedy(reached, cost)
    consider(dict(first))  # `consider` may move its choice off `reached` (`prefer_originals`)
    left = deadline - time.perf_counter() - building - ILP_MARGIN_SECONDS
    consider(ilp(reached, cost, outputs, max(left, MIN_ILP_SECONDS), first))
    if best is None:
        return Extraction(graph, graph_cost(graph, model), [], {})
    return best


def prefer_originals(snap: Snapshot, choice: Choice, cost: Mapping[tuple[int, ENode], float],
                     originals: AbstractSet[tuple[int, ENode]], outputs: list[int]) -> None:
    """Where the choice took a rewrite's e-node and the graph's own e-node of that class costs no more
    and reads only classes the graph computes anyway (without reading the class itself), take the
    graph's own: ties (`add(a, b)` against its commuted copy) then leave the graph as it was, and
    `graph.regions` finds no rewrite where none pays."""
    edges = {c: [n] for c, n in choice.items()}
    live = set(_reachable(edges, outputs))
    for c in list(live):
        n = choice[c]
        if (c, n) in originals or c not in live:
            continue
        for m in snap.nodes[c]:
            if ((c, m) in originals and cost[(c, m)] <= cost[(c, n)] and live.issuperset(m.children)
                    and c not in _reachable(edges, list(m.children))):
                choice[c] = m
                edges[c] = [m]
                live = set(_reachable(edges, outputs))
                break


def constant_classes(eg: EGraph, snap: Snapshot) -> set[int]:
    """Classes computed from weights only: a weight, or an operator of the algebra over such classes."""
    const = {snap.class_of[h] for h in eg.weights}
    readers: dict[int, list[tuple[int, ENode]]] = {}  # a class -> the e-nodes that may fold and read it
    for c, nodes in snap.nodes.items():
        for n in nodes:
            op = ops.OPS.get(n.op)
            if n.children and (n.op == "P" or (op is not None and op.algebra)):
                for x in set(n.children):
                    readers.setdefault(x, []).append((c, n))
    work = list(const)
    while work:  # a class joins when some e-node of it reads only constant classes
        x = work.pop()
        for c, n in readers.get(x, ()):
            if c not in const and all(y in const for y in n.children):
                const.add(c)
                work.append(c)
    return const


def _node_costs(eg: EGraph, snap: Snapshot, const: set[int], model: CostModel) -> dict[tuple[int, ENode], float]:
    """Each e-node's cost, asked of `model` once per distinct call: an attribute id stands for its
    operator and attributes, and NasRNN's 10,500 e-nodes make a few hundred calls (0.2 s of the
    analytical model's arithmetic, Zen 1, when each was priced)."""
    out: dict[tuple[int, ENode], float] = {}
    priced: dict[tuple, float] = {}
    for c, nodes in snap.nodes.items():
        for n in nodes:
            op = ops.OPS.get(n.op)
            constant = tuple(x in const for x in n.children)
            if op is None or not op.algebra or n.op == "P" or (constant and all(constant)):
                out[(c, n)] = 0.0
                continue
            ins = tuple(eg.types[snap.handle[x]][0] for x in n.children)
            key = (n.attr, ins, constant)
            if key not in priced:
                priced[key] = model.cost(OpCall(op, eg.attrs[n.attr], ins, eg.types[snap.handle[c]], constant))
            out[(c, n)] = priced[key]
    return out


def greedy(nodes: Mapping[int, list[ENode]], cost: Mapping[tuple[int, ENode], float]) -> Choice:
    """Each class's cheapest e-node by tree cost, settled in increasing cost (acyclic by construction)."""
    waiting: dict[int, list[tuple[int, ENode]]] = {}  # class -> nodes that read it
    missing: dict[tuple[int, ENode], int] = {}
    heap: list[tuple[float, int, int, ENode]] = []
    tie = 0
    for c, members in nodes.items():
        for n in members:
            kids = set(n.children)
            if c in kids:
                continue  # a node that reads its own class is never part of a graph
            missing[(c, n)] = len(kids)
            for x in kids:
                waiting.setdefault(x, []).append((c, n))
            if not kids:
                heap.append((cost[(c, n)], tie, c, n))
                tie += 1
    heapq.heapify(heap)
    settled: dict[int, float] = {}
    choice: Choice = {}
    while heap:
        total, _, c, n = heapq.heappop(heap)
        if c in settled:
            continue
        settled[c], choice[c] = total, n
        for parent in waiting.get(c, ()):
            missing[parent] -= 1
            if missing[parent] == 0 and parent[0] not in settled:
                pc, pn = parent
                tie += 1
                heapq.heappush(heap, (cost[parent] + sum(settled[x] for x in set(pn.children)), tie, pc, pn))
    return choice


def ages(eg: EGraph, snap: Snapshot) -> dict[tuple[int, ENode], int]:
    """Each e-node Python made with the first handle it was made as (the input graph's come first);
    not those made after the snapshot (a rewrite whose destination turned out not to type)."""
    return {eg.enode(h, snap): h for h in sorted(eg.defs, reverse=True) if h in snap.class_of}


def break_cycles(nodes: Mapping[int, list[ENode]], roots: list[int], age: Mapping[tuple[int, ENode], int]
                 ) -> dict[int, list[ENode]]:
    """The e-nodes by class with the newest e-node of each cycle reachable from `roots` dropped (from a
    class that has another), until there is none (`age`: the handle an e-node was first made as;
    e-nodes egglog made itself, the commutative swaps, count as newest). The input graph is acyclic,
    so a cycle always has a node a rewrite made, and dropping the newest keeps what was there
    before: in NasRNN's merge cycle `m = concat(a, b)`, `a = split(m)[0]`, the concat (unioned into
    the merged matmul's class later) goes and the merge stays.

    One depth-first search from the roots: at a cycle it drops that e-node and goes on from the class
    it was dropped from (the classes after it on the path are left unfinished, the finished ones
    stay finished, since dropping e-nodes never makes a cycle)."""
    dropped: set[tuple[int, ENode]] = set()
    alive = {c: len(ns) for c, ns in nodes.items()}  # e-nodes of each class not dropped
    finished: set[int] = set()

    def edges(c: int) -> Iterator[tuple[ENode, int]]:
        for n in nodes.get(c, ()):
            for x in dict.fromkeys(n.children):
                if (c, n) in dropped:  # dropped while its children were being walked: skip the rest
                    break
                yield n, x

    for root in roots:
        if root in finished:
            continue
        path: list[tuple[int, ENode | None]] = [(root, None)]  # each class with the e-node that reads it
        on_path = {root: 0}
        pending = [edges(root)]
        while pending:
            step = next(pending[-1], None)
            if step is None:
                c, _ = path.pop()
                del on_path[c]
                finished.add(c)
                pending.pop()
                continue
            n, x = step
            if x in on_path:
                start = on_path[x]
                cycle = [(path[i][0], path[i + 1][1], i) for i in range(start, len(path) - 1)]
                cycle.append((path[-1][0], n, len(path) - 1))
                # the newest e-node of a class that keeps another (never empty a class: it may be needed)
                c, drop, i = max(cycle, key=lambda cn: (alive[cn[0]] > 1, age.get(cn[:2], math.inf)))
                dropped.add((c, drop))
                alive[c] -= 1
                for d, _ in path[i + 1:]:
                    del on_path[d]
                # the walk goes on in class c after the dropped e-node (the ones before it are done)
                del path[i + 1:], pending[i + 1:]
            elif x not in finished:
                on_path[x] = len(path)
                path.append((x, n))
                pending.append(edges(x))
    kept = dict(nodes)  # only the classes that lost e-nodes are copied
    for c in {c for c, _ in dropped}:
        kept[c] = [n for n in nodes[c] if (c, n) not in dropped]
    return kept


def ilp(nodes: Mapping[int, list[ENode]], cost: Mapping[tuple[int, ENode], float], roots: list[int],
        timeout: float, start: Choice | None = None) -> Choice | None:
    """The exact extraction as an integer program over an acyclic e-graph (`break_cycles`): None when
    HiGHS finds no solution in time. `start` (a choice over `nodes`, the greedy one) is HiGHS's first
    incumbent. (With scipy's HiGHS, the greedy solution's cost as a cut on the objective made it
    slower, not faster: 3.2 s instead of 1.7 s on NasRNN.)"""
    deadline = time.perf_counter() + timeout
    first = None  # the e-nodes of `start` the roots reach
    if start is not None and all(c in start for c in roots):
        first = {(c, start[c]) for c in _reachable({c: [n] for c, n in start.items()}, roots)}
    return covering(nodes, cost, roots).solve(deadline, first)


def covering(nodes: Mapping[int, list[ENode]], cost: Mapping[tuple[int, ENode], float], roots: list[int]
             ) -> _Program:
    """The program: a binary per e-node of the classes the roots reach, some e-node of each root
    chosen, and for each class and child class x, the class's e-nodes that read x together at most
    x's e-nodes. So a chosen node's children are chosen; and a class split between two readers of x
    (`add(a, b)` and its commuted copy at half each) does not halve what x must hold, as one row per
    e-node let it: the LP bound of NasRNN's program rose from 0.05 to 0.37 (the optimum about 2.0),
    and HiGHS found a graph of cost 2.00 in 0.5 s where the per-e-node rows had 2.50 after 4 s (on
    the e-graph of six iterations; on 9 other programs of suite and corpus models, equal or better at
    1 s but NASNet-A's, 0.16% dearer)."""
    classes = _reachable(nodes, roots)
    program = _Program([(c, n) for c in classes for n in nodes[c]], cost)
    for c in set(roots):
        program.add([(i, 1.0) for i in program.by_class.get(c, [])], 1.0, math.inf)
    for c in classes:
        readers: dict[int, list[int]] = {}
        for i in program.by_class.get(c, ()):
            for x in set(program.nodes[i][1].children):
                readers.setdefault(x, []).append(i)
        for x, ids in readers.items():
            program.add([(i, 1.0) for i in ids] + [(j, -1.0) for j in program.by_class.get(x, [])], -math.inf, 0.0)
    return program


class _Program:
    """The integer program of an extraction: a binary per e-node, sparse constraints, solved by
    HiGHS under a deadline. Through `highspy` (HiGHS 1.16), not scipy's `milp` (HiGHS 1.12 inside
    scipy 1.17): on NasRNN's program (4,744 e-nodes) the newer one found a graph of cost 2.13 in
    0.5 s where the older had the input graph's 4.13 after 2 s and 2.02 only after 4 s."""

    def __init__(self, nodes: list[tuple[int, ENode]], cost: Mapping[tuple[int, ENode], float]) -> None:
        self.nodes, self.objective = nodes, [cost[key] for key in nodes]
        self.by_class: dict[int, list[int]] = {}
        for i, (c, _) in enumerate(nodes):
            self.by_class.setdefault(c, []).append(i)
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, terms: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(self.lo)
        for col, v in terms:
            self.rows.append(r)
            self.cols.append(col)
            self.vals.append(v)
        self.lo.append(low)
        self.hi.append(high)

    def solve(self, deadline: float, start: AbstractSet[tuple[int, ENode]] | None = None) -> Choice | None:
        """The chosen e-nodes by class, None when HiGHS has no solution by `deadline`; `start`, the
        e-nodes of a feasible choice, is its first incumbent.

        A neighbourhood of the LP relaxation (RENS, as HiGHS runs it after its root cuts): the
        operators that compute (not injective: matmuls, convolutions, reductions) only where the
        relaxation or `start` uses them, the injective ones and the picks free, as how a merge's
        outputs are cut apart (nested or flat splits) is what the relaxation gets wrong. Its answer
        is taken; the whole program runs only when it finds none, with all the time left. Run after
        it with its answer as the first incumbent, the whole program never improved on it: not on
        40 programs of the torch corpus given 1 or 4 s more, nor on the 8 suite models' 9 programs
        given as long again as the neighbourhood took (0.3 s of NasRNN's 2.9 s search). On NasRNN's
        program of an e-graph with its merges both ways round (5,981 e-nodes), the relaxation took
        0.25 s and the neighbourhood (4,925) 0.7 s to the best graph (cost 2.270); the whole program
        alone found it after 3.3 s, and with the relaxation's support alone (1,244 e-nodes) the best
        was 2.295, the same matmuls cut apart by 15 splits, not 10. On 4477129's (4,213 e-nodes),
        0.16 s and 0.65 s to the same graph. On NASNet-A's, the neighbourhood's graph is 0.12%
        cheaper than the whole program's first within its gap. (Zen 1.)"""
        incumbent = None if start is None else np.array([float(key in start) for key in self.nodes])
        final = None
        relaxed = self._run(deadline, integer=False)
        if relaxed is not None:
            upper = (relaxed > 1e-6) | np.array([n.op == "P" or (n.op in ops.OPS and ops.OPS[n.op].fusion
                                                                 is ops.Fusion.INJECTIVE) for _, n in self.nodes])
            final = self._run(deadline, integer=True, upper=upper if incumbent is None else upper | (incumbent > 0),
                              start=incumbent)
        if final is None:  # the whole program's answer, else `start`'s when it has no time left
            final = self._run(deadline, integer=True, start=incumbent)
        if final is None:
            final = incumbent
        if final is None:
            return None
        choice: Choice = {}
        for c, members in self.by_class.items():
            picked = max(members, key=lambda i: final[i])
            if final[picked] > 0.5:
                choice[c] = self.nodes[picked][1]
        return choice

    def _run(self, deadline: float, integer: bool, upper: np.ndarray | None = None,
             start: np.ndarray | None = None) -> np.ndarray | None:
        """The program's columns' values as HiGHS leaves them by `deadline` (its relaxation unless
        `integer`, with columns' upper bounds `upper`), None without a feasible answer."""
        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        n = len(self.nodes)
        # the core solver: `highspy.Highs()` prints HiGHS's banner to the C stdout before any option
        # can turn it off, and `taso optimize --json` owns stdout
        h = highspy._Highs()
        for option, value in (("output_flag", False), ("time_limit", left), ("mip_rel_gap", 1e-3)):
            h.setOptionValue(option, value)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, len(self.lo)
        lp.col_cost_ = np.asarray(self.objective, float)
        lp.col_lower_, lp.col_upper_ = np.zeros(n), np.ones(n) if upper is None else upper.astype(float)
        lp.row_lower_, lp.row_upper_ = np.asarray(self.lo, float), np.asarray(self.hi, float)
        # row-wise, as `add` appends them: each row's entries start where its index first appears
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.searchsorted(np.asarray(self.rows, dtype=np.int64), np.arange(len(self.lo) + 1))
        lp.a_matrix_.index_ = np.asarray(self.cols, dtype=np.int64)
        lp.a_matrix_.value_ = np.asarray(self.vals, float)
        if integer:
            lp.integrality_ = [highspy.HighsVarType.kInteger] * n
        h.passModel(lp)
        if start is not None:
            first = highspy.HighsSolution()
            first.col_value = list(start)
            first.value_valid = True
            h.setSolution(first)
        h.run()
        if h.getInfo().primal_solution_status != highspy.SolutionStatus.kSolutionStatusFeasible:
            return None
        return np.asarray(h.getSolution().col_value)


def _reachable(nodes: Mapping[int, list[ENode]], roots: list[int]) -> list[int]:
    seen: dict[int, None] = {}
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen[c] = None
        stack.extend(x for n in nodes.get(c, ()) for x in n.children)
    return list(seen)


def _build(graph: Graph, eg: EGraph, origin: Mapping[tuple[int, ENode], int], choice: Choice,
           outputs: list[int]) -> tuple[Graph, dict[int, tuple[int, ENode]]]:
    """The chosen e-nodes as a graph: the original's nodes kept where chosen (a new version of the
    node where its inputs change), new nodes for the rest, the outputs pointed at their classes'
    choices, the unused removed. Also returns the chosen (class, e-node) pairs it made new nodes of,
    by node id. `origin` maps the graph's own (class, e-node) pairs to their node ids."""
    g = graph.copy()
    made: dict[int, tuple[Ref, ...]] = {}
    used: dict[int, tuple[int, ENode]] = {}

    def tensors(c: int) -> tuple[Ref, ...]:
        if c in made:
            return made[c]
        n = choice[c]
        if n.op == "P":
            made[c] = (tensors(n.children[0])[n.index],)
            return made[c]
        inputs = [tensors(x)[0] for x in n.children]
        node_id = origin.get((c, n))
        if node_id is not None:
            node = graph.nodes[node_id]
            if list(node.inputs) != inputs:
                # a new version under the same id, as the α-search makes: its readers keep reading it,
                # so `graph.regions` sees the rewrite where it is, not in everything downstream
                g.nodes[node_id] = replace(node, inputs=tuple(inputs))
            made[c] = node.outputs
            return made[c]
        made[c] = g.add(ops.get(n.op), inputs, eg.attrs[n.attr])
        used[made[c][0].node] = (c, n)
        return made[c]

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(choice) + 1000))  # one frame per chosen class on a path
    try:
        refs = [tensors(c)[0] for c in outputs]
    finally:
        sys.setrecursionlimit(limit)
    g.set_outputs(refs, g.output_names)
    g.remove_unused()
    return g, used
