"""Extraction: the cheapest graph an e-graph represents, under the α-search's cost model.

Two extractors, as in Tensat. Greedy: each class's cheapest e-node by tree cost (the node's cost
plus its children's), settled cheapest first as in Dijkstra's algorithm, so the choice is acyclic;
it counts a shared subgraph once per use and so never sees that a merge pays (both projections
of a merged convolution carry its whole cost). Exact: an integer program (scipy's HiGHS `milp`)
over one binary per e-node, the cost of each chosen node counted once, every chosen node's
children chosen, and Tensat's acyclicity constraints (a topological order variable per class);
under a time limit, with the best incumbent kept. Both graphs are built, their nested splits
flattened, and priced whole; the cheaper is returned.

A node costs nothing when its inputs are all computed from weights (it is folded before the model
is written), as in `cost.model`; inputs, weights and opaque nodes cost nothing here because every
graph has them alike.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from collections.abc import Mapping

import numpy as np

from taso_py import ops
from taso_py.cost.model import CostModel, OpCall, graph_cost
from taso_py.graph.ir import Graph, Ref
from taso_py.graph.normalize import flatten_splits
from taso_py.search.egraph import EGraph, ENode, Snapshot

Choice = dict[int, ENode]  # class -> the e-node chosen for it


def extract(graph: Graph, eg: EGraph, snap: Snapshot, loaded: Mapping[int, int], tensors: Mapping[Ref, int],
            model: CostModel, ilp_timeout: float) -> tuple[Graph, float, list[int]]:
    """The cheaper of the greedy and the exact extraction: (graph, its cost, handles of the nodes
    it uses that rewrites made). `loaded` maps each node id of `graph` to its e-node's handle,
    `tensors` each tensor to its class's."""
    const = constant_classes(eg, snap)
    cost = _node_costs(eg, snap, const, model)
    outputs = [snap.class_of[tensors[r]] for r in graph.outputs]
    original = set(loaded.values())
    made = {eg.enode(h, snap): h for h in eg.defs if h not in original}
    best: tuple[Graph, float, list[int]] | None = None
    first = greedy(snap, cost)
    bound = _dag_cost(first, cost, outputs) if all(c in first for c in outputs) else math.inf
    for choice in (first, ilp(snap, cost, outputs, ilp_timeout, bound)):
        if choice is None or not all(c in choice for c in outputs):
            continue
        g, used = _build(graph, eg, snap, loaded, choice, outputs)
        flatten_splits(g)
        c = graph_cost(g, model)
        if best is None or c < best[1]:
            best = (g, c, [made[key] for key in used if key in made])
    if best is None:
        return graph, graph_cost(graph, model), []
    return best


def constant_classes(eg: EGraph, snap: Snapshot) -> set[int]:
    """Classes computed from weights only: a weight, or an operator of the algebra over such classes."""
    const = {snap.class_of[h] for h in eg.weights}
    changed = True
    while changed:
        changed = False
        for c, nodes in snap.nodes.items():
            if c not in const and any(_folds(n, const) for n in nodes):
                const.add(c)
                changed = True
    return const


def _folds(n: ENode, const: set[int]) -> bool:
    op = ops.OPS.get(n.op)
    return (n.op == "P" or (op is not None and op.algebra)) and bool(n.children) and all(x in const for x in n.children)


def _node_costs(eg: EGraph, snap: Snapshot, const: set[int], model: CostModel) -> dict[tuple[int, ENode], float]:
    out: dict[tuple[int, ENode], float] = {}
    for c, nodes in snap.nodes.items():
        for n in nodes:
            op = ops.OPS.get(n.op)
            if op is None or not op.algebra or n.op == "P" or (n.children and all(x in const for x in n.children)):
                out[(c, n)] = 0.0
                continue
            ins = tuple(eg.types[snap.handle[x]][0] for x in n.children)
            call = OpCall(op, eg.attrs[n.attr], ins, eg.types[snap.handle[c]], tuple(x in const for x in n.children))
            out[(c, n)] = model.cost(call)
    return out


def greedy(snap: Snapshot, cost: Mapping[tuple[int, ENode], float]) -> Choice:
    """Each class's cheapest e-node by tree cost, settled in increasing cost (acyclic by construction)."""
    waiting: dict[int, list[tuple[int, ENode]]] = {}  # class -> nodes that read it
    missing: dict[tuple[int, ENode], int] = {}
    heap: list[tuple[float, int, int, ENode]] = []
    tie = 0
    for c, nodes in snap.nodes.items():
        for n in nodes:
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


def _dag_cost(choice: Choice, cost: Mapping[tuple[int, ENode], float], roots: list[int]) -> float:
    """What a choice costs as a graph: each chosen node reachable from the roots counted once."""
    seen: set[int] = set()
    stack = list(roots)
    total = 0.0
    while stack:
        c = stack.pop()
        if c not in seen:
            seen.add(c)
            total += cost[(c, choice[c])]
            stack.extend(choice[c].children)
    return total


def ilp(snap: Snapshot, cost: Mapping[tuple[int, ENode], float], roots: list[int], timeout: float,
        bound: float = math.inf) -> Choice | None:
    """The exact extraction as an integer program (None when HiGHS finds no solution in time).

    First without acyclicity constraints (a covering problem HiGHS solves fast); if that answer
    has no cycle it is optimal. Otherwise Tensat's constraints are added (an order variable per
    class on a cycle of the class graph; a chosen node's class after its children's) and it is
    solved again in the time left. `bound`, the cost of a known solution (the greedy one), is a
    cut that lets HiGHS prune early."""
    deadline = time.perf_counter() + timeout
    classes = _reachable(snap, roots)
    nodes = [(c, n) for c in classes for n in snap.nodes[c] if c not in n.children]
    program = _Program(nodes, [cost[key] for key in nodes])
    for c in set(roots):
        program.add([(i, 1.0) for i in program.by_class.get(c, [])], 1.0, math.inf)
    for i, (_, n) in enumerate(nodes):
        for x in set(n.children):  # chosen node => some node of each child class chosen
            program.add([(i, 1.0)] + [(j, -1.0) for j in program.by_class.get(x, [])], -math.inf, 0.0)
    if math.isfinite(bound):
        program.add([(i, v) for i, v in enumerate(program.objective) if v], -math.inf, bound * (1 + 1e-9))
    choice = program.solve(deadline)
    if choice is None or _cycle(choice, roots) is None:
        return choice
    scc = _cyclic_components(nodes)
    order = {c: program.variable() for c in classes if c in scc}
    eps, big = 1.0 / (2 * max(len(order), 1)), 2.0
    for i, (c, n) in enumerate(nodes):
        for x in set(n.children):
            if scc.get(c, -1) == scc.get(x, -2):
                program.add([(order[c], 1.0), (order[x], -1.0), (i, -big)], eps - big, math.inf)
    return program.solve(deadline)


class _Program:
    """The integer program of an extraction: a binary per e-node (then continuous order variables),
    sparse constraints, solved by HiGHS (scipy's `milp`) under a deadline."""

    def __init__(self, nodes: list[tuple[int, ENode]], costs: list[float]) -> None:
        self.nodes, self.objective = nodes, costs
        self.by_class: dict[int, list[int]] = {}
        for i, (c, _) in enumerate(nodes):
            self.by_class.setdefault(c, []).append(i)
        self.width = len(nodes)
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def variable(self) -> int:
        self.width += 1
        return self.width - 1

    def add(self, terms: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(self.lo)
        for col, v in terms:
            self.rows.append(r)
            self.cols.append(col)
            self.vals.append(v)
        self.lo.append(low)
        self.hi.append(high)

    def solve(self, deadline: float) -> Choice | None:
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix
        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        n = len(self.nodes)
        objective = np.zeros(self.width)
        objective[:n] = self.objective
        matrix = coo_matrix((self.vals, (self.rows, self.cols)), shape=(len(self.lo), self.width)).tocsr()
        integrality = np.concatenate([np.ones(n), np.zeros(self.width - n)])
        result = milp(objective, constraints=LinearConstraint(matrix, self.lo, self.hi), integrality=integrality,
                      bounds=Bounds(np.zeros(self.width), np.ones(self.width)),
                      options={"time_limit": left, "disp": False, "mip_rel_gap": 1e-3})
        if result.x is None:
            return None
        choice: Choice = {}
        for c, members in self.by_class.items():
            picked = max(members, key=lambda i: result.x[i])
            if result.x[picked] > 0.5:
                choice[c] = self.nodes[picked][1]
        return choice


def _cycle(choice: Choice, roots: list[int]) -> list[tuple[int, ENode]] | None:
    """The chosen nodes of one cycle reachable from the roots, or None (iterative depth-first search)."""
    state: dict[int, int] = {}  # 1 on the path, 2 done
    for root in roots:
        if root in state:
            continue
        path: list[int] = [root]
        state[root] = 1
        pending = [iter(choice[root].children)]
        while pending:
            child = next(pending[-1], None)
            if child is None:
                state[path.pop()] = 2
                pending.pop()
            elif state.get(child) == 1:
                loop = path[path.index(child):]
                return [(c, choice[c]) for c in loop]
            elif child not in state:
                state[child] = 1
                path.append(child)
                pending.append(iter(choice[child].children))
    return None


def _cyclic_components(nodes: list[tuple[int, ENode]]) -> dict[int, int]:
    """Class -> its strongly connected component, for the classes on a cycle of 'a node of this
    class reads that class'."""
    import networkx as nx
    g = nx.DiGraph((c, x) for c, n in nodes for x in n.children)
    return {c: k for k, comp in enumerate(nx.strongly_connected_components(g)) if len(comp) > 1 for c in comp}


def _reachable(snap: Snapshot, roots: list[int]) -> list[int]:
    seen: dict[int, None] = {}
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen[c] = None
        stack.extend(x for n in snap.nodes.get(c, ()) for x in n.children)
    return list(seen)


def _build(graph: Graph, eg: EGraph, snap: Snapshot, loaded: Mapping[int, int], choice: Choice,
           outputs: list[int]) -> tuple[Graph, list[tuple[int, ENode]]]:
    """The chosen e-nodes as a graph: the original's nodes kept where chosen with the same inputs,
    new nodes for the rest (an opaque node re-made over new inputs), the outputs pointed at their
    classes' choices, the unused removed. Also returns the chosen (class, e-node) pairs it made."""
    g = graph.copy()
    origin = {eg.enode(h, snap): node_id for node_id, h in loaded.items()}
    made: dict[int, tuple[Ref, ...]] = {}
    used: list[tuple[int, ENode]] = []

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
            if list(node.inputs) == inputs:
                made[c] = node.outputs
            else:
                made[c] = g.add_node(node.op, inputs, node.attrs, node.types,
                                     [g.fresh_name(node.op.name) for _ in node.types]).outputs
            return made[c]
        used.append((c, n))
        made[c] = g.add(ops.get(n.op), inputs, eg.attrs[n.attr])
        return made[c]

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(snap.nodes) + 1000))  # one frame per class on a path
    try:
        refs = [tensors(c)[0] for c in outputs]
    finally:
        sys.setrecursionlimit(limit)
    g.set_outputs(refs, g.output_names)
    g.remove_unused()
    return g, used
