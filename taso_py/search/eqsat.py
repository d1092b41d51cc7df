"""Equality saturation over the proved rules (Tensat's search), on egglog.

The graph goes into an e-graph (`search.egraph`). Each directed rule's source side becomes an
egglog rule whose body is the pattern, with a variable for every matched class and attribute id,
and whose head records the match in a relation; a multi-output rule's source terms are one body,
so egglog joins them on their shared variables, as Tensat matches every source output. Egglog
finds the matches; here, as in the α-search's matcher, the attributes are checked against what the
pattern computes from the matched shapes (`match.matcher.bind_attributes`), the `where` clause is
evaluated, and the destination is built with inferred types (a destination that does not type or
changes a root's type is no rewrite). Its nodes are added and unioned with the roots; a merge adds
the merged term and its projections. Commutative operators get their swap as an egglog rewrite.

Saturation stops when an iteration adds nothing, or at the node, iteration or time bound; then
`search.extract` picks the cheapest graph the e-graph represents under the same cost model as the
α-search, greedily and as an integer program, and keeps the better of the two. That is one round;
the next saturates the graph it extracted, while rounds gain and time is left, so that merges
merge again there (pairs of pairs) rather than inside one e-graph (every subset of the siblings).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from taso_py import ops
from taso_py.cost.model import CostModel, graph_cost
from taso_py.errors import AttrError, ShapeError
from taso_py.graph.ir import Graph, Ref
from taso_py.library.instances import Instance, Undefined, attributes, holds
from taso_py.library.terms import Apply, Pick, Rule, Term, Var, walk
from taso_py.match.matcher import bind_attributes
from taso_py.search.backtracking import Outcome
from taso_py.search.egraph import EGraph, Snapshot
from taso_py.search.extract import constant_classes, extract
from taso_py.search.settings import EqsatSettings


@dataclass
class _Pattern:
    """One directed rule's source side as an egglog rule body, and where each column's value goes."""

    rule: int
    name: str
    columns: list[str] = field(default_factory=list)
    sorts: list[str] = field(default_factory=list)
    atoms: list[str] = field(default_factory=list)
    apps: list[tuple[Apply, str, str, list[str]]] = field(default_factory=list)  # term, class, attr id, children
    roots: list[str] = field(default_factory=list)

    def column(self, name: str, sort: str) -> str:
        if name not in self.columns:
            self.columns.append(name)
            self.sorts.append(sort)
        return name

    def term(self, t: Term) -> str:
        if isinstance(t, Var):
            return self.column(f"v_{t.name}", "T")
        k = len(self.apps)
        c = self.column(f"c{k}", "T")
        if isinstance(t, Pick):
            tup = self._apply(t.term)  # type: ignore[arg-type]
            self.atoms.append(f"(= {c} (P {tup} {t.index}))")
            return c
        return self._apply(t, c)

    def _apply(self, t: Apply, c: str | None = None) -> str:
        k = len(self.apps)
        c = c or self.column(f"c{k}t", "T")
        attr = self.column(f"s{k}", "i64")
        self.apps.append((t, c, attr, []))
        children = [self.term(a) for a in t.args]
        self.apps[k] = (t, c, attr, children)
        self.atoms.append(f'(= {c} (A{len(t.args)} "{t.op}" {attr}{"".join(" " + x for x in children)}))')
        return c


def compile_rule(i: int, rule: Rule) -> _Pattern:
    p = _Pattern(i, f"M{i}")
    p.roots = [p.term(t) for t in rule.src]
    return p


MIN_ILP_SECONDS = 1.0


def search(graph: Graph, rules: Sequence[Rule], model: CostModel, settings: EqsatSettings | None = None,
           progress: Callable[[int, float], None] | None = None) -> Outcome:
    """Saturate and extract in rounds, each on the graph the last one extracted, while a round gains
    and the time left of `settings.timeout` is at least what the last round took (a round cut short
    overruns the bound by its extraction and extracts from a half-grown e-graph); report like the
    α-search (`applied` lists the rules whose nodes the extracted graphs use). A round never merges
    an operator a merge made (`_Saturation.snapshot`), so it merges siblings in pairs and the next round
    merges the pairs: on NasRNN, e-graphs of about 5,000 to 15,000 e-nodes a round, where merging
    merged operators inside one e-graph made 32,000 (every subset of the siblings) and the exact
    extraction found nothing in its time."""
    settings = settings or EqsatSettings()
    started = time.perf_counter()
    cost0 = graph_cost(graph, model)
    out = Outcome(graph, cost0, cost0, [])
    out.stopped, sizes = "saturated", []
    last = 0.0  # seconds the last round took
    for _ in range(settings.rounds):
        if time.perf_counter() - started + last > settings.timeout:
            out.stopped = "timeout"
            break
        round_started = time.perf_counter()
        r = _round(out.graph, out.cost, rules, model, settings, started, progress)
        last = time.perf_counter() - round_started
        sizes.append(r.generated)
        out.expanded, out.matches = out.expanded + r.expanded, out.matches + r.matches
        out.history.append((time.perf_counter() - started, min(r.cost, out.cost)))
        out.stopped = r.stopped
        if r.cost >= out.cost * (1 - 1e-9):  # no gain beyond float rounding: keep the graph as it was
            break
        out.graph, out.cost, out.applied = r.graph, r.cost, out.applied + r.applied
    out.generated = max(sizes, default=0)
    out.seconds = time.perf_counter() - started
    return out


def _round(graph: Graph, cost0: float, rules: Sequence[Rule], model: CostModel, settings: EqsatSettings,
           started: float, progress: Callable[[int, float], None] | None) -> Outcome:
    """One saturation of `graph` (of cost `cost0`) and its extraction (`expanded`: its iterations,
    `generated`: its e-nodes)."""
    arity = max([len(n.inputs) for n in graph.nodes.values()] + [len(t.args) for r in rules
                                                                   for t in _applies(r)] + [2])
    eg = EGraph(arity)
    try:
        loaded, tensors = _load(eg, graph)
        # a bare variable as a source matches every class (the matcher skips such rules too)
        patterns = [compile_rule(i, r) for i, r in enumerate(rules) if not any(isinstance(t, Var) for t in r.src)]
        for p in patterns:
            eg.add_query(p.name, p.columns, p.sorts, p.atoms, merge=len(rules[p.rule].src) > 1)
        for op in ops.OPS.values():
            if op.commutative and op.algebra:
                eg.add_commutative(op.name)
        saturation = _Saturation(eg, rules, patterns)
        stopped = "saturated"
        iterations = 0
        while True:
            eg.flush()
            eg.match(merges=iterations < settings.merge_iterations)
            snap = saturation.snapshot()
            if progress is not None:
                progress(iterations, float(snap.size))
            if time.perf_counter() - started > settings.timeout:
                stopped = "timeout"
                break
            if snap.size >= settings.node_limit:
                stopped = "node limit"
                break
            if iterations >= settings.iterations:
                stopped = "iterations"
                break
            if not saturation.step(snap, settings.node_limit):
                break
            iterations += 1
        # the integer program gets the time left, but at least MIN_ILP_SECONDS: a first round that
        # saturated to the bound still extracts exactly
        left = settings.timeout - (time.perf_counter() - started)
        best, cost, used = extract(graph, eg, snap, loaded, tensors, model,
                                   min(settings.ilp_timeout, max(left, MIN_ILP_SECONDS)))
    finally:
        eg.close()
    return Outcome(best, cost, cost0, [saturation.origin[h] for h in used if h in saturation.origin],
                   expanded=iterations, generated=snap.size, stopped=stopped, matches=saturation.matches)


def _applies(rule: Rule) -> list[Apply]:
    return [t for side in (rule.src, rule.dst) for term in side for t in walk(term) if isinstance(t, Apply)]


def _load(eg: EGraph, graph: Graph) -> tuple[dict[int, int], dict[Ref, int]]:
    """Every node of the graph as an e-node (outputs of a multi-output node picked from it): the
    handle of each node's e-node, by node id, and of each tensor."""
    loaded: dict[int, int] = {}
    tensor: dict[Ref, int] = {}
    for node in graph.topo_order():
        children = [tensor[r] for r in node.inputs]
        if node.op.algebra:
            op, attr = node.op.name, eg.intern(node.op.name, node.attrs)
        else:  # inputs, weights, opaque nodes: each its own, never matched (no rule names "opaque:...")
            op = node.op.name if node.op.name in ("input", "weight") else f"opaque:{node.op.name}"
            attr = eg.unique(node)
        k = loaded[node.id] = eg.node(op, attr, children, node.types, weight=node.op.name == "weight")
        if len(node.types) == 1:
            tensor[Ref(node.id, 0)] = k
        else:
            for i in range(len(node.types)):
                tensor[Ref(node.id, i)] = eg.pick(k, i)
    return loaded, tensor


class _Saturation:
    """Applies the matches egglog found: attribute and type checks here, new nodes and unions there."""

    def __init__(self, eg: EGraph, rules: Sequence[Rule], patterns: Sequence[_Pattern]) -> None:
        self.eg, self.rules, self.patterns = eg, rules, patterns
        self.done: set[tuple] = set()
        self.origin: dict[int, int] = {}  # handle of a node a rewrite made -> rule index
        self.merged: set[int] = set()  # handles of the nodes multi-output rules (merges) made
        self.merge_roots = {p.name: [p.columns.index(r) for r in p.roots] for p in patterns
                            if len(rules[p.rule].src) > 1}  # a merge pattern's columns of its roots
        self.matches = 0

    def snapshot(self) -> Snapshot:
        """The e-graph and its new matches, but no merge of an operator a merge made: that is the
        next round's (see `search`); those rows are left out before egglog's values are converted."""
        return self.eg.snapshot(self.merge_roots, self.merged)

    def step(self, snap: Snapshot, node_limit: int) -> bool:
        """Apply every match of `snap` (from `snapshot`) not applied yet, until the e-graph would
        pass `node_limit`."""
        const = constant_classes(self.eg, snap)
        added = self._flatten_splits(snap)
        for p in self.patterns:
            for row in snap.rows.get(p.name, ()):
                if self.eg.handles >= node_limit:
                    return added
                key = (p.rule, row)
                if key in self.done:
                    continue
                self.done.add(key)
                if self._apply(p, dict(zip(p.columns, row)), snap, const):
                    added = True
        return added

    def _flatten_splits(self, snap: Snapshot) -> bool:
        """`split(split(x)[i])` on the same axis is the wider `split(x)` (graph.normalize.flatten_splits,
        as equalities): a chain of two-way merges is then priced as the one split it becomes."""
        eg, op = self.eg, ops.get("split")
        added = False
        for inner_class, nodes in snap.nodes.items():
            for inner in nodes:
                if inner.op != "split":
                    continue
                for pick in snap.nodes.get(inner.children[0], ()):
                    if pick.op != "P" or (inner_class, pick) in self.done:
                        continue
                    for outer in snap.nodes.get(pick.children[0], ()):
                        a, b = eg.attrs[outer.attr], eg.attrs[inner.attr]
                        if outer.op != "split" or a.axis != b.axis:
                            continue
                        self.done.add((inner_class, pick))
                        i, width = pick.index, len(b.sizes)
                        source = snap.handle[outer.children[0]]
                        in_types = [eg.types[source][0]]
                        attrs = op.canonical(op.make_attrs(axis=a.axis, sizes=(*a.sizes[:i], *b.sizes,
                                                                                 *a.sizes[i + 1:])), in_types)
                        flat = eg.node("split", eg.intern("split", attrs), [source], op.infer(in_types, attrs))
                        outer_h, inner_h = snap.handle[pick.children[0]], snap.handle[inner_class]
                        for j in range(len(a.sizes)):
                            if j != i:
                                eg.union(eg.pick(outer_h, j), eg.pick(flat, j if j < i else j + width - 1))
                        for k in range(width):
                            eg.union(eg.pick(inner_h, k), eg.pick(flat, i + k))
                        added = True
                        break
        return added

    def _apply(self, p: _Pattern, row: dict[str, int], snap: Snapshot, const: set[int]) -> bool:
        eg = self.eg

        def types(c: int) -> tuple:
            return eg.types[snap.handle[c]]

        tensors = {col[2:]: c for col, c in row.items() if col.startswith("v_")}
        if len({row[r] for r in p.roots}) < len(p.roots):
            return False
        if not all(types(c)[0].dtype.is_float for c in tensors.values()):
            return False
        shapes = {v: types(c)[0].known_shape for v, c in tensors.items()}
        bound = bind_attributes([(t, eg.attrs[row[a]], [types(row[x])[0].known_shape for x in kids])
                                 for t, _, a, kids in p.apps], shapes)
        rule = self.rules[p.rule]
        if bound is None:
            return False
        inst = Instance(shapes, bound)
        try:
            if not all(holds(c, inst) for c in rule.where):
                return False
            built = _Builder(eg, snap, tensors, inst, const)
            outs = [built.term(t) for t in rule.dst]
        except (Undefined, AttrError, ShapeError, KeyError):
            return False
        for root, out in zip(p.roots, outs):
            if eg.types[out] != types(row[root]):
                return False
        self.matches += 1
        for h in built.made:
            self.origin[h] = p.rule
        if len(rule.src) > 1:
            self.merged.update(built.made)
        for root, out in zip(p.roots, outs):
            eg.union(snap.handle[row[root]], out)
        return True


class _Builder:
    """A destination side as new e-nodes over the matched classes."""

    def __init__(self, eg: EGraph, snap: Snapshot, tensors: dict[str, int], inst: Instance, const: set[int]) -> None:
        self.eg, self.snap, self.tensors, self.inst, self.const = eg, snap, tensors, inst, const
        self.made: list[int] = []
        self._memo: dict[Term, int] = {}
        self._const_made: set[int] = set()

    def term(self, t: Term) -> int:
        if isinstance(t, Var):
            return self.snap.handle[self.tensors[t.name]]
        if t not in self._memo:
            if isinstance(t, Pick):
                self._memo[t] = self.eg.pick(self.term(t.term), t.index)
                if self._memo[t.term] in self._const_made:
                    self._const_made.add(self._memo[t])
            else:
                self._memo[t] = self._apply(t)
        return self._memo[t]

    def _apply(self, t: Apply) -> int:
        op = ops.get(t.op)
        children = [self.term(a) for a in t.args]
        is_const = [h in self._const_made or self.snap.class_of.get(h, -1) in self.const for h in children]
        if op.weights_only and not all(is_const):
            raise Undefined(f"{op.name} of run-time data")
        in_types = [self.eg.types[h][0] for h in children]
        attrs = op.canonical(attributes(t, self.inst, [ty.known_shape for ty in in_types]), in_types)
        k = self.eg.node(op.name, self.eg.intern(op.name, attrs), children, op.infer(in_types, attrs))
        self.made.append(k)
        if children and all(is_const):
            self._const_made.add(k)
        return k
