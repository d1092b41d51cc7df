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

Merges: egglog pairs the siblings; an operator a merge made is not merged again by the same rule
in egglog (every subset of the siblings would follow) but here, one sibling at a time along one
chain per group (`_Saturation._chain`), so that an n-way merge, which may pay where no pair does (a
pair adds a split costing as much as the operator it saves), is in the e-graph of the first round.
A chain's last merge (the whole group) may then be merged by the other merge rules: NasRNN's inputs
batched over time, one matmul per weight, then the weights merged into one matmul.

Saturation stops when an iteration adds nothing, or at the node, iteration or time bound; then
`search.extract` picks the cheapest graph the e-graph represents under the same cost model as the
α-search, greedily and as an integer program, and keeps the better of the two. That is one round;
when asked for more (`EqsatSettings.rounds`), the next saturates the graph it extracted, while rounds
gain and time is left, so that merged operators can merge again there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from taso_py import ops
from taso_py.cost.model import CostModel, graph_cost
from taso_py.errors import AttrError, ShapeError
from taso_py.graph.ir import Graph, Ref
from taso_py.graph.regions import Region
from taso_py.library.instances import Instance, Undefined, attributes, holds
from taso_py.library.terms import Apply, Pick, Rule, Term, Var, walk
from taso_py.match.matcher import bind_attributes
from taso_py.search.backtracking import Outcome
from taso_py.search.egraph import EGraph, ENode, Snapshot
from taso_py.search.extract import Extraction, constant_classes, extract
from taso_py.search.settings import EqsatSettings, pays
from taso_py.types import TensorType


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
    first: int = 0  # columns[:first] are the first source term's
    # the tensors the first source shares with the others: a chain keeps a sibling's match only where
    # the merged operator reads the same classes (its class may hold other e-nodes, over others)
    shared: list[str] = field(default_factory=list)

    @property
    def merge(self) -> bool:
        """A multi-output rule's source: egglog joins its terms, and `_Saturation._chain` grows its merges."""
        return len(self.roots) > 1

    @property
    def root_columns(self) -> list[int]:
        return [self.columns.index(r) for r in self.roots]

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
    p.roots = [p.term(rule.src[0])]
    p.first = len(p.columns)
    p.roots += [p.term(t) for t in rule.src[1:]]
    p.shared = [f"v_{t.name}" for t in walk(rule.src[0]) if isinstance(t, Var)
                if any(t in walk(other) for other in rule.src[1:])]
    return p


def bind(t: Term, handle: int, eg: EGraph, cls: Callable[[int], int]) -> dict[str, int] | None:
    """The columns `compile_rule` gives a source term, bound by matching it against the e-node
    `handle` was made as and its descendants (`cls` of their handles for tensors, attribute ids for
    attributes), or None where it does not match: how a merge's fresh node is matched before
    egglog has it."""
    out: dict[str, int] = {}
    count = [0]  # apps so far, numbered as `_Pattern.term` numbers them

    def term(t: Term, h: int) -> bool:
        if isinstance(t, Var):
            return out.setdefault(f"v_{t.name}", cls(h)) == cls(h)
        k = count[0]
        if isinstance(t, Pick):
            d = eg.defs.get(h)
            if d is None or d.op != "P" or d.index != t.index:
                return False
            out[f"c{k}"] = cls(h)
            return apply(t.term, d.children[0], f"c{k}t")  # type: ignore[arg-type]
        return apply(t, h, f"c{k}")

    def apply(t: Apply, h: int, column: str) -> bool:
        k = count[0]
        count[0] += 1
        d = eg.defs.get(h)
        if d is None or d.op != t.op or len(d.children) != len(t.args):
            return False
        out[column], out[f"s{k}"] = cls(h), d.attr
        return all(term(a, c) for a, c in zip(t.args, d.children))

    return out if term(t, handle) else None


Judge = Callable[[Graph, Graph], list[Region]]  # (round's graph, extracted graph) -> its regions that do not pay


def search(graph: Graph, rules: Sequence[Rule], model: CostModel, settings: EqsatSettings | None = None,
           progress: Callable[[int, float], None] | None = None, judge: Judge | None = None) -> Outcome:
    """Saturate and extract in rounds, each on the graph the last one extracted, while a round gains
    and the time left of `settings.timeout` is at least what the last round took (a round cut short
    overruns the bound by its extraction and extracts from a half-grown e-graph); report like the
    α-search (`applied` lists the rules whose nodes the extracted graphs use). Egglog merges an
    operator a merge made only where a chain of `_Saturation._chain` made it and another rule merges
    it (`_Saturation.snapshot`); the next round merges what the last one's merges made: on NasRNN,
    about 15,000 e-nodes in the first round, where letting egglog merge merged operators made 32,000
    (every subset of the siblings) and the exact extraction found nothing in its time.

    `judge` prices an extracted graph's rewrites where they sit (`acceptance.InContext`: in ONNX
    Runtime, with their neighbours) and returns the regions (`graph.regions`) that do not pay; the
    e-graph is then extracted again, up to `settings.refinements` times a round, so that what a
    rewrite does in context corrects the cost model's per-operator prices while the alternatives are
    still at hand. The first time a place is found slower, the e-nodes its region was built from are
    left out (the 2-way merge may pay where the 3-way one does not); the second time, what the region
    replaced is kept as it was (its classes take the graph's own e-nodes: another rewrite of the
    place comes back otherwise, as a merge in the other order of its operands did before `_ordered`).
    The judge's time (timing small models, cached) moves the time bound on, as timing operators does
    for the extraction; `seconds` includes it."""
    settings = settings or EqsatSettings()
    began = started = time.perf_counter()  # `started` moves on by the judge's time, the bound's origin
    cost0 = graph_cost(graph, model)
    out = Outcome(graph, cost0, cost0, [])
    out.stopped, sizes = "saturated", []
    last = 0.0  # seconds the last round took
    judging = 0.0  # seconds the judge took in this round

    def timed(start: Graph, rewritten: Graph) -> list[Region]:
        nonlocal judging
        t = time.perf_counter()
        try:
            return judge(start, rewritten)
        finally:
            judging += time.perf_counter() - t

    for _ in range(settings.rounds):
        if time.perf_counter() - started + last > settings.timeout:
            out.stopped = "timeout"
            break
        round_started, judging = time.perf_counter(), 0.0
        r = _round(out.graph, out.cost, rules, model, settings, started, progress, timed if judge else None)
        started += judging
        last = time.perf_counter() - round_started - judging
        sizes.append(r.generated)
        out.expanded, out.matches = out.expanded + r.expanded, out.matches + r.matches
        out.history.append((time.perf_counter() - began, min(r.cost, out.cost)))
        out.stopped = r.stopped
        if not pays(r.cost, out.cost, settings.min_gain):  # no gain timing could see: keep the graph as it was
            break
        out.graph, out.cost, out.applied = r.graph, r.cost, out.applied + r.applied
    out.generated = max(sizes, default=0)
    out.seconds = time.perf_counter() - began
    return out


def _round(graph: Graph, cost0: float, rules: Sequence[Rule], model: CostModel, settings: EqsatSettings,
           started: float, progress: Callable[[int, float], None] | None, judge: Judge | None) -> Outcome:
    """One saturation of `graph` (of cost `cost0`) and its extraction (`expanded`: its iterations,
    `generated`: its e-nodes)."""
    arity = max([len(n.inputs) for n in graph.nodes.values()] + [len(t.args) for r in rules
                                                                   for t in _applies(r)] + [2])
    eg = EGraph(arity)
    try:
        loaded, tensors = _load(eg, graph)
        patterns = declare(eg, rules)
        saturation = _Saturation(eg, rules, patterns)
        stopped = "saturated"
        iterations = 0
        checked = time.perf_counter()
        while True:
            eg.flush(saturation.merged, saturation.finals)
            eg.match(merges=iterations < settings.merge_iterations)
            snap = saturation.snapshot()
            if progress is not None:
                progress(iterations, float(snap.size))
            now = time.perf_counter()
            last, checked = now - checked, now  # the last iteration: its rewrites, matching and snapshot
            # the next, guessed to take twice as long (they grow), must end within saturation's share
            # of the bound, the rest being the extraction's; but the merges matched in the merge
            # iterations are applied while that fits the bound itself: NasRNN's first iteration, 0.8 s
            # here, left it no second under the share on a slower start, and then no merge at all.
            # The first step after the merge iterations applies no merge (no chain grown in Python):
            # guessed at the last's length, not twice it. NasRNN's last merge step took 0.43-0.55 s,
            # the four after it 0.1-0.25 s each; guessed at twice, saturation stopped there whenever
            # it ended past 1.45 s, one matmul left unmerged (1.638x against 1.651x, analytical)
            share = 1.0 if iterations < settings.merge_iterations else settings.saturation_share
            growth = 1 if iterations == settings.merge_iterations else 2
            if now - started + growth * last > settings.timeout * share:
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
        # a bound stopped saturation after the snapshot of a step's merges: their splits nest still
        if stopped != "saturated" and saturation.flatten_splits(snap, settings.node_limit):
            eg.flush(saturation.merged, saturation.finals)
            snap = saturation.snapshot()
        deadline = min(started + settings.timeout, time.perf_counter() + settings.ilp_timeout)
        best = extract(graph, eg, snap, loaded, tensors, model, deadline)
        if not pays(best.cost, cost0, settings.min_gain):
            best = Extraction(graph, cost0, [], {})  # nothing worth pricing in context
        elif judge is not None:
            best = _refine(graph, best, judge, eg, snap, loaded, tensors, model, settings)
    finally:
        eg.close()
    return Outcome(best.graph, best.cost, cost0, [saturation.origin[h] for h in best.handles if h in saturation.origin],
                   expanded=iterations, generated=snap.size, stopped=stopped, matches=saturation.matches)


def declare(eg: EGraph, rules: Sequence[Rule]) -> list[_Pattern]:
    """Each rule's source as an egglog query of `eg`, and the commutative operators' swaps; the patterns."""
    # a bare variable as a source matches every class (the matcher skips such rules too)
    patterns = [compile_rule(i, r) for i, r in enumerate(rules) if not any(isinstance(t, Var) for t in r.src)]
    for p in patterns:  # a merge of operators merges made is skipped (`_Saturation.snapshot`)
        eg.add_query(p.name, p.columns, p.sorts, p.atoms, p.merge, p.root_columns if p.merge else [])
    for op in ops.OPS.values():
        if op.commutative and op.algebra:
            eg.add_commutative(op.name)
    return patterns


def _refine(graph: Graph, best: Extraction, judge: Judge, eg: EGraph, snap: Snapshot, loaded: dict[int, int],
            tensors: dict[Ref, int], model: CostModel, settings: EqsatSettings) -> Extraction:
    """Extractions again without what `judge` finds slower in context (see `search`)."""
    own = {eg.enode(h, snap) for h in (*loaded.values(), *tensors.values())}
    banned: set[tuple[int, ENode]] = set()
    found: set[int] = set()  # node ids of `graph` some region found slower replaced
    for _ in range(settings.refinements):
        slower = judge(graph, best.graph)
        replaced = {n.id for region in slower for n in region.removed}
        again = {snap.class_of[h] for i in replaced & found if i in loaded
                 for h in (loaded[i], *(tensors[r] for r in graph.nodes[i].outputs))}
        more = {best.made[n.id] for region in slower for n in region.nodes if n.id in best.made}
        more |= {(c, n) for c in again for n in snap.nodes[c] if (c, n) not in own}
        if more <= banned:
            break
        banned |= more
        found |= replaced
        best = extract(graph, eg, snap, loaded, tensors, model, time.perf_counter() + settings.ilp_timeout, banned)
    return best


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
        self.finals: dict[int, str] = {}  # handles of a chain's last merge -> the query that made it
        self.matches = 0
        # a match's key (rule, what decides its destination: see `_apply`) -> a small int standing for
        # the key (cheaper to hash in `_typed`'s keys) and its instance, None where it does not hold;
        # (key's int, destination term) -> the operator's attributes and types (`_Builder`)
        self._bound: dict[tuple, tuple[int, Instance | None]] = {}
        self._typed: dict[tuple, tuple[Any, tuple[TensorType, ...]] | None] = {}

    def snapshot(self) -> Snapshot:
        """The e-graph and its new matches, but no merge of an operator a merge made, except a chain's
        last merge by the other merge rules: `_chain` grows merges, and the next round merges what
        they made (see `search`); those rows are left out before egglog's values are converted."""
        return self.eg.snapshot(self.merged, self.finals)

    def step(self, snap: Snapshot, node_limit: int) -> bool:
        """Apply every match of `snap` (from `snapshot`) not applied yet, until the e-graph would
        pass `node_limit`."""
        const = constant_classes(self.eg, snap)
        added = self.flatten_splits(snap, node_limit)
        for p in self.patterns:
            pairs: list[tuple[tuple[int, ...], _Builder]] = []
            for row in self._ordered(p, snap):
                if self.eg.handles >= node_limit:
                    return added
                key = (p.rule, row)
                if key in self.done:
                    continue
                self.done.add(key)
                built = self._apply(p, dict(zip(p.columns, row)), snap, const)
                if built is not None:
                    added = True
                    pairs.append((row, built))
            if pairs and p.merge:
                added = self._chain(p, pairs, snap, const, node_limit) or added
        return added

    def _ordered(self, p: _Pattern, snap: Snapshot) -> list[tuple[int, ...]]:
        """`p`'s rows, but of a merge matched both ways round (`x, y` and `y, x`) only the way of the
        older first: the other makes the same operators with their parts the other way round, and
        an extraction that took one way for one group and the other for the next (the cost is the
        same) left two merges no later rule merges, `matmul(a, concat(w0, w1))` beside
        `matmul(b, concat(w1, w0))`."""
        rows = snap.rows.get(p.name, [])
        if not p.merge:
            return rows
        first, second = p.root_columns
        rank = snap.handle
        both = {(row[first], row[second]) for row in rows}
        return [row for row in rows if rank[row[first]] < rank[row[second]] or (row[second], row[first]) not in both]

    def _chain(self, p: _Pattern, pairs: list[tuple[tuple[int, ...], _Builder]], snap: Snapshot,
               const: set[int], node_limit: int) -> bool:
        """Grow each group of siblings a merge rule paired into one merge of them all, a sibling at a
        time: the rule again on the operator the last merge made and the next sibling (in the order
        of their first handles), matched here (`bind`) rather than by egglog in a later iteration.
        A group is the partners of its first sibling in this snapshot's merges; the n-way merge costs
        n - 1 applications, where merging merged operators in the e-graph made every subset. The
        group's merge is recorded in `finals`, for the other merge rules to merge in later iterations."""
        first, second = p.root_columns
        rank = snap.handle
        oldest: dict[int, int] = {}  # each first source's oldest partner in all the rows, either way round
        for row in snap.rows.get(p.name, []):
            x, y = row[first], row[second]
            oldest[x] = min(oldest.get(x, rank[y]), rank[y])
        partners: dict[int, list[tuple[tuple[int, ...], _Builder]]] = {}
        for row, built in pairs:
            partners.setdefault(row[first], []).append((row, built))
        view = Snapshot(dict(snap.class_of), dict(snap.handle), snap.nodes, snap.rows)
        const = set(const)

        def cls(h: int) -> int:  # a fresh node's class, made up until egglog has it
            if h not in view.class_of:
                view.class_of[h] = c = -1 - h
                view.handle[c] = h
            return view.class_of[h]

        src, head = self.rules[p.rule].src[0], p.columns[:p.first]
        added = False
        for x, group in partners.items():
            ys = sorted(group, key=lambda pair: rank[pair[0][second]])
            if oldest[x] < rank[x]:
                continue  # not the group's first sibling: that one's chain covers this one
            last = ys[0][1]
            for row, _ in ys[1:]:
                if self.eg.handles >= node_limit:
                    return added
                sibling = dict(zip(p.columns, row))
                for h in last.made:
                    bound = bind(src, h, self.eg, cls)
                    if bound is None or set(bound) != set(head):
                        continue
                    if any(bound[c] != sibling[c] for c in p.shared):
                        break
                    const.update(cls(k) for k in last.const_made)
                    merged = sibling | bound
                    key = (p.rule, tuple(merged[c] for c in p.columns))
                    if key in self.done:
                        break
                    self.done.add(key)
                    built = self._apply(p, merged, view, const)
                    if built is not None:
                        last, added = built, True
                    break
                else:
                    break  # the last merge made nothing the rule matches again
            if len(ys) > 1:
                for h in last.made:
                    self.finals[h] = p.name
        return added

    def flatten_splits(self, snap: Snapshot, node_limit: int) -> bool:
        """`split(split(x)[i])` on the same axis is the wider `split(x)` (graph.normalize.flatten_splits,
        as equalities): each split is made equal to its finest flat form, each output replaced by the
        finest split on the axis that reads it, all the way down (`_Finest`). So a chain of n
        two-way merges, n - 1 splits deep, is priced as the one split it becomes, and makes one flat
        split per merge. Flattening a level at a time to a fixpoint made every partial form as well:
        an LSTM cell's merge chains made 790 splits, each timed in ORT on a cold cache (9 s), and its
        gate splits, flattened with every subset of the others, 430,000 picks in 115 s of one pass
        before the pass was bounded. A pass still stops after `node_limit` handles."""
        eg, op = self.eg, ops.get("split")
        split: dict[int, tuple[Any, int]] = {}  # a split's tuple handle -> (its attributes, the class it reads)
        picks: list[tuple[int, ENode]] = []
        for c, nodes in snap.nodes.items():
            for n in nodes:
                if n.op == "split":
                    split.setdefault(snap.handle[c], (eg.attrs[n.attr], n.children[0]))
                elif n.op == "P":
                    picks.append((c, n))
        readers: dict[int, list[int]] = {}  # a class -> the splits that read it
        for h, (_, source) in split.items():
            readers.setdefault(source, []).append(h)
        # (a split's tuple handle, index) -> that output's class
        output = {(snap.handle[n.children[0]], n.index): c for c, n in picks if snap.handle[n.children[0]] in split}
        finest = _Finest(split, readers, output)
        added, first = False, eg.handles
        for h in sorted(split):
            places = finest.places(h)
            attrs, source = split[h]
            if len(places) == len(attrs.sizes):
                continue  # no output is split further on its axis
            sizes = tuple(split[s][0].sizes[i] for s, i in places)
            below = snap.handle[source]
            key = ("flat", below, attrs.axis, sizes)
            if key in self.done:
                continue
            if eg.handles >= first + node_limit:
                return added
            self.done.add(key)
            in_types = [eg.types[below][0]]
            flat_attrs = op.canonical(op.make_attrs(axis=attrs.axis, sizes=sizes), in_types)
            flat = eg.node("split", eg.intern("split", flat_attrs), [below], op.infer(in_types, flat_attrs))
            for j, (s, i) in enumerate(places):
                eg.union(eg.pick(s, i), eg.pick(flat, j))
            added = True
        return added

    def _apply(self, p: _Pattern, row: dict[str, int], snap: Snapshot, const: set[int]) -> _Builder | None:
        """The rewrite of one match, its nodes added and its roots unioned with theirs; the builder
        of its destination, or None where the match does not hold or the destination does not type.

        Whether a match holds and its destination's attributes and types follow from the matched
        classes' types, the attribute ids and which variables are computed from weights only: a
        match equal to an earlier one in these reads them from `_bound` and `_typed`. NasRNN's
        matmuls all have one shape: its two merge steps took 0.46 and 0.98 s binding and typing
        every match, 0.24 and 0.53 s so (analytical costs, Zen 1)."""
        eg = self.eg

        def types(c: int) -> tuple:
            return eg.types[snap.handle[c]]

        tensors = {col[2:]: c for col, c in row.items() if col.startswith("v_")}
        if len({row[r] for r in p.roots}) < len(p.roots):
            return None
        key = (p.rule, tuple(types(row[c]) if sort == "T" else row[c] for c, sort in zip(p.columns, p.sorts)),
               tuple(c in const for c in tensors.values()))
        if key not in self._bound:
            self._bound[key] = (len(self._bound), self._bind(p, row, tensors, types))
        number, inst = self._bound[key]
        if inst is None:
            return None
        rule = self.rules[p.rule]
        built = _Builder(eg, snap, tensors, inst, const, self._typed, number)
        try:
            outs = [built.term(t) for t in rule.dst]
        except (Undefined, AttrError, ShapeError, KeyError):
            return None
        for root, out in zip(p.roots, outs):
            if eg.types[out] != types(row[root]):
                return None
        self.matches += 1
        for h in built.made:
            self.origin[h] = p.rule
        if len(rule.src) > 1:
            self.merged.update(built.made)
        for root, out in zip(p.roots, outs):
            eg.union(snap.handle[row[root]], out)
        return built

    def _bind(self, p: _Pattern, row: dict[str, int], tensors: dict[str, int],
              types: Callable[[int], tuple]) -> Instance | None:
        """A match's instance: its shapes and attribute variables, bound and checked, with the `where`
        clause holding; None where any of it fails."""
        if not all(types(c)[0].dtype.is_float for c in tensors.values()):
            return None
        shapes = {v: types(c)[0].known_shape for v, c in tensors.items()}
        bound = bind_attributes([(t, self.eg.attrs[row[a]], [types(row[x])[0].known_shape for x in kids])
                                 for t, _, a, kids in p.apps], shapes)
        if bound is None:
            return None
        inst = Instance(shapes, bound)
        try:
            return inst if all(holds(c, inst) for c in self.rules[p.rule].where) else None
        except (Undefined, KeyError):
            return None


class _Finest:
    """The finest flat form of each split of a snapshot (`_Saturation.flatten_splits`): its outputs
    in order, each replaced by the places of the finest split on the same axis that reads it (the one
    with most outputs in the end, the oldest of equals), recursively."""

    def __init__(self, split: Mapping[int, tuple[Any, int]], readers: Mapping[int, list[int]],
                 output: Mapping[tuple[int, int], int]) -> None:
        self.split, self.readers, self.output = split, readers, output
        self._memo: dict[int, list[tuple[int, int]]] = {}
        self._open: set[int] = set()  # splits being flattened: a split of its own output is not nested

    def places(self, h: int) -> list[tuple[int, int]]:
        """The (split, index) outputs that split `h` is cut into at its finest."""
        if h in self._memo:
            return self._memo[h]
        self._open.add(h)
        attrs = self.split[h][0]
        places: list[tuple[int, int]] = []
        for i in range(len(attrs.sizes)):
            inner = [s for s in self.readers.get(self.output.get((h, i), -1), ())
                     if s not in self._open and self.split[s][0].axis == attrs.axis]
            if inner:
                places += max((self.places(s) for s in sorted(inner)), key=len)
            else:
                places.append((h, i))
        self._open.discard(h)
        self._memo[h] = places
        return places


class _Builder:
    """A destination side as new e-nodes over the matched classes. Each operator's attributes and
    types are computed once per match key (`_Saturation._apply`) and term, in `typed`; None there
    for an operator that is not defined on them, which fails the match where it is built, after
    its children, as the first time."""

    def __init__(self, eg: EGraph, snap: Snapshot, tensors: dict[str, int], inst: Instance, const: set[int],
                 typed: dict[tuple, tuple[Any, tuple[TensorType, ...]] | None], key: int) -> None:
        self.eg, self.snap, self.tensors, self.inst, self.const = eg, snap, tensors, inst, const
        self.typed, self.key = typed, key
        self.made: list[int] = []
        self._memo: dict[Term, int] = {}
        self.const_made: set[int] = set()

    def term(self, t: Term) -> int:
        if isinstance(t, Var):
            return self.snap.handle[self.tensors[t.name]]
        if t not in self._memo:
            if isinstance(t, Pick):
                self._memo[t] = self.eg.pick(self.term(t.term), t.index)
                if self._memo[t.term] in self.const_made:
                    self.const_made.add(self._memo[t])
            else:
                self._memo[t] = self._apply(t)
        return self._memo[t]

    def _apply(self, t: Apply) -> int:
        op = ops.get(t.op)
        children = [self.term(a) for a in t.args]
        is_const = [h in self.const_made or self.snap.class_of.get(h, -1) in self.const for h in children]
        key = (self.key, t)
        if key not in self.typed:
            self.typed[key] = self._typed(op, t, children, all(is_const))
        typed = self.typed[key]
        if typed is None:
            raise Undefined(f"{op.name} is not defined here")
        attrs, types = typed
        k = self.eg.node(op.name, self.eg.intern(op.name, attrs), children, types)
        self.made.append(k)
        if children and all(is_const):
            self.const_made.add(k)
        return k

    def _typed(self, op: ops.OpDef, t: Apply, children: list[int],
               const: bool) -> tuple[Any, tuple[TensorType, ...]] | None:
        if op.weights_only and not const:
            return None  # computed from run-time data
        in_types = [self.eg.types[h][0] for h in children]
        try:
            attrs = op.canonical(attributes(t, self.inst, [ty.known_shape for ty in in_types]), in_types)
            return attrs, tuple(op.infer(in_types, attrs))
        except (Undefined, AttrError, ShapeError, KeyError):
            return None
