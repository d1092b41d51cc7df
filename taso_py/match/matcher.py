"""Occurrences of a rule's source side in a graph.

A source term is matched top-down from a root node: operators and arity must agree (both
argument orders are tried for commutative operators), a tensor variable binds one graph tensor
(the same at every use), and once the structure fits, the attributes are checked by building the
pattern's attribute object on the matched shapes (`dim(b, 1)` evaluated, `?s` bound from the
node) and comparing it with the node's. The rule's `where` clause is checked last.

Multi-output rules match each source term on its own and join the results on their shared
variables. Of a match and its mirror image (the same roots and tensors, the roles swapped, as in
merging `x @ w1` with `x @ w2` or `x @ w2` with `x @ w1`) only the first is kept: they make the same
graph up to the order of what is stacked, at the same cost.

Matches at a node are cached by the node objects they read: nodes are immutable and a rewrite
replaces only the nodes it touches, so the search re-matches only around its edits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from taso_py.graph.ir import Graph, Node, Ref
from taso_py.library.instances import Instance, Undefined, attributes, holds
from taso_py.library.terms import Apply, AttrVar, Pick, Rule, Seq, Term, Var


@dataclass(frozen=True)
class Match:
    """Rule `rule`'s source side found in a graph: `roots[i]` is the tensor of source output i."""

    rule: int
    roots: tuple[Ref, ...]
    tensors: Mapping[str, Ref]
    attrs: Mapping[str, Any]
    nodes: frozenset[int]  # the nodes the source side covers


@dataclass(frozen=True)
class _Partial:
    """One source term matched at one root."""

    root: Ref
    tensors: dict[str, Ref]
    attrs: dict[str, Any]
    nodes: frozenset[int]


class Matcher:
    """Every match of a list of rules in a graph, with a cache shared by all graphs of a search."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = list(rules)
        self._by_op: dict[str, list[tuple[int, int]]] = defaultdict(list)  # root op -> (rule, term)
        for i, rule in enumerate(self.rules):
            for k, term in enumerate(rule.src):
                if isinstance(term, Var):
                    continue  # a bare variable matches everything: no rule of the library has one
                self._by_op[_root(term).op].append((i, k))
        self._cache: dict[tuple[int, int, Node], tuple[tuple[Node, ...], list[_Partial]]] = {}

    def matches(self, graph: Graph) -> list[Match]:
        partials: dict[tuple[int, int], list[_Partial]] = defaultdict(list)
        for node in graph.nodes.values():
            for i, k in self._by_op.get(node.op.name, ()):
                partials[(i, k)] += self._at(graph, i, k, node)
        out = []
        for i, rule in enumerate(self.rules):
            if all(partials.get((i, k)) for k in range(len(rule.src))):
                mirrors = set()
                for m in _join(i, [partials[(i, k)] for k in range(len(rule.src))]):
                    mirror = (frozenset(m.roots), frozenset(m.tensors.values()), tuple(sorted(m.attrs.items())))
                    if mirror not in mirrors and _where(rule, graph, m):
                        mirrors.add(mirror)
                        out.append(m)
        return out

    def _at(self, graph: Graph, i: int, k: int, node: Node) -> list[_Partial]:
        key = (i, k, node)
        cached = self._cache.get(key)
        if cached is not None and all(graph.nodes.get(n.id) is n for n in cached[0]):
            return cached[1]
        term = self.rules[i].src[k]
        root = Ref(node.id, term.index if isinstance(term, Pick) else 0)
        visited: list[Node] = []
        found = []
        if root.index < len(node.types):
            for tensors, apps in _term(graph, term, root, {}, [], visited):
                bound = _attributes(graph, tensors, apps)
                if bound is not None:
                    found.append(_Partial(root, tensors, bound, frozenset(n.id for _, n in apps)))
        self._cache[key] = (tuple(dict.fromkeys(visited)), found)
        return found


def _root(term: Term) -> Apply:
    return _root(term.term) if isinstance(term, Pick) else term  # type: ignore[return-value]


Apps = list[tuple[Apply, Node]]


def _term(graph: Graph, term: Term, ref: Ref, tensors: dict[str, Ref], apps: Apps, visited: list[Node]
          ) -> Iterator[tuple[dict[str, Ref], Apps]]:
    """Structural matches of `term` at tensor `ref`: variable bindings and (pattern, node) pairs."""
    if isinstance(term, Var):
        bound = tensors.get(term.name)
        if bound is None and graph.type(ref).dtype.is_float:
            yield {**tensors, term.name: ref}, apps
        elif bound == ref:
            yield tensors, apps
        return
    node = graph.node(ref)
    visited.append(node)
    if isinstance(term, Pick):
        if ref.index == term.index and isinstance(term.term, Apply):
            yield from _apply(graph, term.term, node, tensors, apps, visited)
        return
    assert isinstance(term, Apply)
    if ref.index == 0 and len(node.types) == 1:
        yield from _apply(graph, term, node, tensors, apps, visited)


def _apply(graph: Graph, term: Apply, node: Node, tensors: dict[str, Ref], apps: Apps, visited: list[Node]
           ) -> Iterator[tuple[dict[str, Ref], Apps]]:
    if node.op.name != term.op or len(node.inputs) != len(term.args):
        return
    orders = [node.inputs]
    if node.op.commutative and len(node.inputs) == 2 and node.inputs[0] != node.inputs[1]:
        orders.append(node.inputs[::-1])
    for inputs in orders:
        yield from _args(graph, term.args, inputs, tensors, [*apps, (term, node)], visited)


def _args(graph: Graph, terms: tuple[Term, ...], refs: tuple[Ref, ...], tensors: dict[str, Ref], apps: Apps,
          visited: list[Node]) -> Iterator[tuple[dict[str, Ref], Apps]]:
    if not terms:
        yield tensors, apps
        return
    for t, a in _term(graph, terms[0], refs[0], tensors, apps, visited):
        yield from _args(graph, terms[1:], refs[1:], t, a, visited)


def _attributes(graph: Graph, tensors: Mapping[str, Ref], apps: Apps) -> dict[str, Any] | None:
    """Attribute variables bound from the nodes, or None where an attribute disagrees."""
    return bind_attributes([(term, node.attrs, [graph.type(r).known_shape for r in node.inputs])
                            for term, node in apps], {v: graph.type(r).known_shape for v, r in tensors.items()})


def bind_attributes(apps: Sequence[tuple[Apply, Any, Sequence[tuple[int, ...]]]],
                    shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any] | None:
    """Attribute variables bound from matched operators (pattern, the operator's attributes, its
    input shapes), or None where an attribute disagrees with what the pattern computes from the
    shapes; shared by the matcher over graphs and equality saturation over e-graphs."""
    bound: dict[str, Any] = {}
    for term, have_attrs, _ in apps:
        for name, expr in term.attrs:
            have = getattr(have_attrs, name)
            items = expr.items if isinstance(expr, Seq) else (expr,)
            values = have if isinstance(expr, Seq) else (have,)
            if isinstance(expr, Seq) and (not isinstance(have, tuple) or len(have) != len(items)):
                return None
            for item, v in zip(items, values):
                if isinstance(item, AttrVar) and bound.setdefault(item.name, v) != v:
                    return None
    inst = Instance(shapes, bound)
    for term, have_attrs, in_shapes in apps:
        try:
            want = attributes(term, inst, in_shapes)
        except (Undefined, KeyError):
            return None
        if want != have_attrs:
            return None
    return bound


def _join(rule: int, terms: list[list[_Partial]]) -> Iterator[Match]:
    """Combinations of one partial per source term that agree on shared variables, distinct roots."""
    def extend(k: int, tensors: dict, attrs: dict, roots: tuple[Ref, ...], nodes: frozenset[int]) -> Iterator[Match]:
        if k == len(terms):
            yield Match(rule, roots, tensors, attrs, nodes)
            return
        for p in terms[k]:
            if p.root in roots:
                continue
            if any(tensors.get(v, r) != r for v, r in p.tensors.items()):
                continue
            if any(attrs.get(v, a) != a for v, a in p.attrs.items()):
                continue
            yield from extend(k + 1, {**tensors, **p.tensors}, {**attrs, **p.attrs}, (*roots, p.root),
                              nodes | p.nodes)
    yield from extend(0, {}, {}, (), frozenset())


def _where(rule: Rule, graph: Graph, m: Match) -> bool:
    if not rule.where:
        return True
    inst = Instance({v: graph.type(r).known_shape for v, r in m.tensors.items()}, dict(m.attrs))
    try:
        return all(holds(c, inst) for c in rule.where)
    except (Undefined, KeyError):
        return False
