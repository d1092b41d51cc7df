"""Enumerate every graph of up to N operators over a world's inputs, with its fingerprints.

A graph is a set of operator applications (nodes); its outputs are the tensors no node of the
graph consumes. The search is a depth-first walk that adds one node at a time, deduplicated
by the set of nodes, so each graph is visited once however many orders build it.

Sharding: a *source* node is one whose arguments are all inputs (or none, for constants).
Every graph has at least one, and shard `r` records exactly the graphs whose smallest source
node is source number `r` (it starts from it and only adds larger sources). Shards are
therefore disjoint and independent: any process or cluster worker can run any of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from taso_py import ops
from taso_py.errors import AttrError, ShapeError
from taso_py.generator import fingerprint
from taso_py.generator.concolic import CONCOLIC, CDim, Lin, simplify
from taso_py.generator.world import GEN_OPS, ArgView, AttrChoice, World
from taso_py.library.terms import Apply, Dim, Expr, Lit, Pick, Seq, Term, Var, walk_expr

MAX_OUTPUTS = 2


@dataclass(eq=False)
class Tensor:
    id: int
    term: Term
    shape: tuple[CDim, ...]
    value: np.ndarray
    fp: int
    weight: bool  # computed from weights and constants only
    leaves: frozenset[str]  # input variables it is computed from
    refs: frozenset[str]  # input variables its attributes name through dim(...)


@dataclass(eq=False)
class Node:
    id: int
    term: Apply
    args: tuple[int, ...]  # tensor ids
    outputs: tuple[Tensor, ...]
    source: int | None  # its rank among the world's source nodes; None if it consumes an operator's output


@dataclass(frozen=True)
class Graph:
    """One enumerated graph: output terms with their fingerprints (sorted by fingerprint)."""

    world: str
    outputs: tuple[Term, ...]
    prints: tuple[int, ...]
    variables: tuple[str, ...]
    size: int


def to_expr(value: Any) -> Expr:
    """An attribute choice as it is written in the rule (CDims as their dim expressions)."""
    if isinstance(value, CDim):
        return value.expr()
    if isinstance(value, tuple):
        return Seq(tuple(to_expr(v) for v in value))
    return Lit(value)


def _concrete(value: Any) -> Any:
    if isinstance(value, CDim):
        return value.value
    if isinstance(value, tuple):
        return tuple(_concrete(v) for v in value)
    return value


class Context:
    """One world being enumerated: its input tensors and every application tried so far."""

    def __init__(self, world: World, seed: int) -> None:
        self.world = world
        rng = np.random.default_rng(seed)
        self.tensors: list[Tensor] = []
        self.inputs: list[Tensor] = []
        for i in world.inputs:
            value = fingerprint.random_input(i.shape, rng)
            shape = tuple(CDim.of(i.name, k, n) for k, n in enumerate(i.shape))
            self.inputs.append(self._tensor(Var(i.name), shape, value, i.weight, frozenset({i.name})))
        self._cache: dict[tuple, Node | None] = {}
        self._nodes: list[Node] = []
        self.gen_ops = [GEN_OPS[name] for name in world.ops]
        self.sources = self._sources()

    def _tensor(self, term: Term, shape: tuple[CDim, ...], value: np.ndarray, weight: bool,
                leaves: frozenset[str], refs: frozenset[str] = frozenset()) -> Tensor:
        t = Tensor(len(self.tensors), term, shape, value, fingerprint.digest(value), weight, leaves, refs)
        self.tensors.append(t)
        return t

    def _sources(self) -> list[Node]:
        """The source nodes in a fixed order; node.source is the rank used for sharding."""
        found = list(self.applications(self.inputs))
        for rank, node in enumerate(found):
            node.source = rank
        return found

    def applications(self, available: Sequence[Tensor]) -> Iterator[Node]:
        """Every well-shaped application of the world's operators to the available tensors."""
        for gop in self.gen_ops:
            combos = itertools.chain.from_iterable(
                itertools.combinations_with_replacement(available, n) if gop.commutative
                else itertools.product(available, repeat=n) for n in gop.arities)
            for args in combos:
                if not _roles_fit(gop.needs, args) or (args and not self.world.may_apply(
                        gop.name, all(a.weight for a in args))):
                    continue
                views = [ArgView(a.shape, a.weight, _producer(a.term), a.leaves) for a in args]
                for k, choice in enumerate(gop.choices(views, self.world)):
                    key = (gop.name, tuple(a.id for a in args), k)
                    if key not in self._cache:
                        self._cache[key] = self._apply(gop.name, args, choice)
                    node = self._cache[key]
                    if node is not None:
                        yield node

    def _apply(self, name: str, args: Sequence[Tensor], choice: AttrChoice) -> Node | None:
        op = ops.get(name)
        try:
            attrs = op.make_attrs(**_concrete(choice))
        except AttrError:
            return None
        # the shape rule over CDims: concrete answers, symbolic sizes kept for the rule's attributes
        sym_attrs = SimpleNamespace(**{**vars_of(attrs), **choice})
        result = op.sym_shape([a.shape for a in args], sym_attrs, CONCOLIC)
        if result is None:
            return None
        outs, conds = result
        if not all(conds) or any(int(d) < 1 for out in outs for d in out):
            return None
        try:
            values = fingerprint.run(name, [a.value for a in args], attrs)
        except ShapeError:
            return None
        term = Apply(name, tuple(a.term for a in args), tuple((k, to_expr(v)) for k, v in choice.items()))
        weight = all(a.weight for a in args)
        leaves = frozenset().union(*(a.leaves for a in args))
        refs = frozenset().union(*(a.refs for a in args), *(_dim_vars(e) for _, e in term.attrs))
        multi = len(outs) > 1
        tensors = tuple(
            self._tensor(Pick(term, i) if multi else term, tuple(as_cdim(d) for d in shape), value, weight, leaves,
                         refs)
            for i, (shape, value) in enumerate(zip(outs, values)))
        source = 0 if all(isinstance(a.term, Var) for a in args) else None  # ranked in _sources
        node = Node(len(self._nodes), term, tuple(a.id for a in args), tensors, source)
        self._nodes.append(node)
        return node


def as_cdim(d: Any) -> CDim:
    return simplify(d) if isinstance(d, CDim) else CDim(int(d), Lin((), int(d)))


def _dim_vars(e: Expr) -> set[str]:
    """Variables an attribute names through dim(...): `const_imm(n=dim(a, 1))` depends on `a`."""
    return {d.var for d in walk_expr(e) if isinstance(d, Dim)}


def _producer(term: Term) -> str | None:
    if isinstance(term, Pick):
        term = term.term
    return term.op if isinstance(term, Apply) else None


def vars_of(attrs: Any) -> dict[str, Any]:
    return {k: getattr(attrs, k) for k in attrs.__dataclass_fields__}


def _roles_fit(needs: Sequence[str | None], args: Sequence[Tensor]) -> bool:
    """Convolution kernels are weight-only tensors, convolution and pooling inputs are not."""
    return all(need is None or (need == "weight") == a.weight for need, a in zip(needs, args))


def shard_count(world: World, seed: int) -> int:
    return len(Context(world, seed).sources)


def enumerate_shard(world: World, root: int, max_ops: int, seed: int) -> list[Graph]:
    """The graphs whose smallest source node is source `root` (see the module docstring)."""
    ctx = Context(world, seed)
    first = ctx.sources[root]
    seen: set[frozenset[int]] = set()
    graphs: list[Graph] = []

    def visit(nodes: tuple[Node, ...]) -> None:
        key = frozenset(n.id for n in nodes)
        if key in seen:
            return
        seen.add(key)
        graph = _record(world, nodes)
        if graph is not None:
            graphs.append(graph)
        if len(nodes) == max_ops:
            return
        narrow = world.narrow(len(nodes) + 1)
        if narrow and any(n.term.op not in world.narrow_ops for n in nodes):
            return  # a larger graph may only use the narrow operators
        available = list(ctx.inputs) + [t for n in nodes for t in n.outputs]
        for node in ctx.applications(available):
            if node.id in key or (node.source is not None and node.source <= root):
                continue
            if narrow and node.term.op not in world.narrow_ops:
                continue
            visit((*nodes, node))

    visit((first,))
    return graphs


def _record(world: World, nodes: tuple[Node, ...]) -> Graph | None:
    consumed = {i for n in nodes for i in n.args}
    outputs = [t for n in nodes for t in n.outputs if t.id not in consumed]
    if not 1 <= len(outputs) <= MAX_OUTPUTS or any(t.weight for t in outputs):
        return None  # a result computed from weights only is folded before the model runs: no rule pays
    if len(outputs) == 2 and not outputs[0].leaves & outputs[1].leaves:
        return None  # two unrelated computations: only ever a product of smaller rules
    outputs.sort(key=lambda t: t.fp)
    variables = frozenset().union(*(t.leaves for t in outputs))
    if frozenset().union(*(t.refs for t in outputs)) - variables:
        return None  # const_imm(n=dim(a, 1)) without `a` itself: no match could bind `a`
    return Graph(world.name, tuple(t.term for t in outputs), tuple(t.fp for t in outputs),
                 tuple(sorted(variables)), len(nodes))


def trivial_graphs(world: World, seed: int) -> list[Graph]:
    """Graphs of no operators: one input, or two (the right-hand side of `split(concat(a, b))`)."""
    ctx = Context(world, seed)
    out = []
    for k in (1, 2):
        for group in itertools.combinations([t for t in ctx.inputs if not t.weight], k):
            ordered = sorted(group, key=lambda t: t.fp)
            out.append(Graph(world.name, tuple(t.term for t in ordered), tuple(t.fp for t in ordered),
                             tuple(sorted(t.term.name for t in group)), 0))  # type: ignore[union-attr]
    return out
