"""Applying a match: the destination side built next to the source, uses moved, dead nodes gone.

`plan` works out the whole rewrite without touching the graph: the new nodes with their
inferred types (an attribute or shape the destination cannot take, or an output type that
differs from the source's, is no rewrite), the existing nodes it can reuse instead (equal op,
inputs and attributes), and the source nodes that die once their readers move. The search
prices a plan from that before paying for a copy of the graph; `apply` then builds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from taso_py import ops
from taso_py.errors import AttrError, ShapeError
from taso_py.graph.ir import Graph, Node, Ref
from taso_py.library.instances import Instance, Undefined, attributes
from taso_py.library.terms import Apply, Pick, Rule, Term, Var
from taso_py.match.matcher import Match
from taso_py.ops.schema import OpDef
from taso_py.types import TensorType

# A tensor of the rewritten graph: an existing one, or output `index` of new node `k`.
Source = Ref | tuple[int, int]


@dataclass(frozen=True)
class NewNode:
    op: OpDef
    inputs: tuple[Source, ...]
    attrs: Any
    types: tuple[TensorType, ...]


@dataclass(frozen=True)
class Plan:
    match: Match
    new: tuple[NewNode, ...]
    outputs: tuple[Source, ...]  # what replaces each source root
    dead: frozenset[int]
    read: frozenset[int]  # existing nodes the destination reads


def plan(graph: Graph, rule: Rule, match: Match, users: Mapping[int, list[Node]]) -> Plan | None:
    builder = _Builder(graph, match, users)
    try:
        outputs = tuple(builder.term(t) for t in rule.dst)
    except (Undefined, AttrError, ShapeError, KeyError):
        return None
    for root, out in zip(match.roots, outputs):
        if builder.type(out) != graph.type(root):
            return None
    if creates_cycle(graph, match, builder.read):
        return None
    return Plan(match, tuple(builder.new), outputs, _dead(graph, match, users, builder.read),
                frozenset(builder.read))


class _Builder:
    """Destination terms as new nodes; structurally equal ones (here or in the graph) shared."""

    def __init__(self, graph: Graph, match: Match, users: Mapping[int, list[Node]]) -> None:
        self.graph, self.match, self.users = graph, match, users
        self.inst = Instance({v: graph.type(r).known_shape for v, r in match.tensors.items()}, dict(match.attrs))
        self.new: list[NewNode] = []
        self.read: set[int] = set()  # existing nodes the destination reads
        self._memo: dict[tuple, int | Ref] = {}
        self._outputs: dict[Term, tuple[Source, ...]] = {}
        self._constant: dict[int, bool] = {}  # existing node id -> computed from weights only

    def type(self, s: Source) -> TensorType:
        return self.graph.type(s) if isinstance(s, Ref) else self.new[s[0]].types[s[1]]

    def term(self, t: Term) -> Source:
        if isinstance(t, Var):
            ref = self.match.tensors[t.name]
            self.read.add(ref.node)
            return ref
        if isinstance(t, Pick):
            return self._outputs_of(t.term)[t.index]  # type: ignore[arg-type]
        outs = self._outputs_of(t)
        if len(outs) != 1:
            raise Undefined(f"{t.op} has {len(outs)} outputs")
        return outs[0]

    def _outputs_of(self, t: Apply) -> tuple[Source, ...]:
        if t not in self._outputs:
            op = ops.get(t.op)
            inputs = tuple(self.term(a) for a in t.args)
            if op.weights_only and not all(self.constant(s) for s in inputs):
                raise Undefined(f"{op.name} of run-time data")
            in_types = [self.type(s) for s in inputs]
            attrs = op.canonical(attributes(t, self.inst, [ty.known_shape for ty in in_types]), in_types)
            types = op.infer(in_types, attrs)
            existing = self._existing(op, inputs, attrs)
            if existing is not None:
                self.read.add(existing.id)
                self._outputs[t] = existing.outputs
            else:
                self.new.append(NewNode(op, inputs, attrs, tuple(types)))
                self._outputs[t] = tuple((len(self.new) - 1, i) for i in range(len(types)))
        return self._outputs[t]

    def constant(self, s: Source) -> bool:
        """Whether a tensor is computed from weights only (a weight, or algebra over weights)."""
        if not isinstance(s, Ref):
            new = self.new[s[0]]
            return new.op.algebra and bool(new.inputs) and all(self.constant(i) for i in new.inputs)
        stack = [s.node]
        while stack:  # depth first, without recursion: a data tensor's ancestry may be long
            node = self.graph.nodes[stack[-1]]
            if node.id in self._constant:
                stack.pop()
                continue
            if not node.op.algebra or not node.inputs:  # weights, graph inputs, opaque nodes
                self._constant[node.id] = node.op.name == "weight"
            else:
                known = [self._constant.get(r.node) for r in node.inputs]
                if None in known and False not in known:
                    stack.extend(r.node for r, k in zip(node.inputs, known) if k is None)
                    continue
                self._constant[node.id] = False not in known
            stack.pop()
        return self._constant[s.node]

    def _existing(self, op: OpDef, inputs: tuple[Source, ...], attrs: Any) -> Node | None:
        """A live node computing the same thing (not one the rewrite is about to remove)."""
        if not inputs or not all(isinstance(s, Ref) for s in inputs):
            return None
        for user in self.users.get(inputs[0].node, ()):  # type: ignore[union-attr]
            if (user.op is op and user.inputs == inputs and user.attrs == attrs
                    and not set(user.outputs) & set(self.match.roots)):
                return user
        return None


def _dead(graph: Graph, match: Match, users: Mapping[int, list[Node]], read: set[int]) -> frozenset[int]:
    """Source nodes nothing reads once the roots' readers read the destination instead."""
    roots = set(match.roots)
    outputs = {r for r in graph.outputs if r not in roots}
    dead: set[int] = set()
    changed = True
    while changed:
        changed = False
        for n in match.nodes - dead - read:
            node = graph.nodes[n]
            if any(r in outputs for r in node.outputs):
                continue
            if all(u.id in dead or all(r in roots for r in u.inputs if r.node == n) for u in users.get(n, ())):
                dead.add(n)
                changed = True
    return frozenset(dead)


def creates_cycle(graph: Graph, match: Match, read: Iterable[int]) -> bool:
    """Whether a tensor the destination reads depends on a source root (possible with several
    source terms only: one term's variable may be computed from another term's output)."""
    if len(match.roots) < 2:
        return False
    roots = {r.node for r in match.roots}
    seen: set[int] = set()
    stack = list(read)
    while stack:
        n = stack.pop()
        if n in roots:
            return True
        if n in seen:
            continue
        seen.add(n)
        stack.extend(r.node for r in graph.nodes[n].inputs)
    return False


def apply(graph: Graph, p: Plan) -> Graph:
    """A copy of `graph` with the plan carried out."""
    g = graph.copy()
    made: list[tuple[Ref, ...]] = []

    def ref(s: Source) -> Ref:
        return s if isinstance(s, Ref) else made[s[0]][s[1]]

    for n in p.new:
        made.append(g.add(n.op, [ref(s) for s in n.inputs], n.attrs))
    for root, out in zip(p.match.roots, p.outputs):
        g.replace_uses(root, ref(out))
    for n in sorted(p.dead, reverse=True):
        g.remove(n)
    return g
