"""The e-graph of equality saturation, held by egglog.

One sort `T` holds every e-class: a tensor, or the tuple of outputs of a multi-output operator.
Its e-nodes are `(A<n> op attrs child_1 .. child_n)` (the operator's name, an integer that
stands for its attribute object, n children) and `(P tuple index)`, an output of a tuple. Each
e-class also holds one or more handles `(H k)`: the integers through which this module names
classes to egglog, since egglog values cannot be written back into commands.

Python adds facts in bulk: rows of the relations `E<n>` (a new node k = op(attrs, children)),
`EP` (k = output i of a tuple), `Same` (two handles are equal) and `ShutH` (whether k's class is
closed to merge queries: `EGraph.flush`), written as tab-separated
files and read with egglog's `input` (a command per fact costs egglog a rule compilation each;
this is thousands of times faster), then the `load` ruleset turns them into e-nodes and unions.
Egglog does the rest: hash-consing, congruence closure, and the relational e-matching of the
rule patterns (`eqsat` registers them as rules that fill match relations). Types, attribute
objects and which classes are computed from weights only stay here, keyed by handle.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any, NamedTuple

from egglog import bindings

from taso_py.types import TensorType


class ENode(NamedTuple):
    """An e-node of a snapshot: `op` over `children` (classes), or output `index` of a tuple (op "P").
    A named tuple, not a dataclass: extraction keys its dicts by (class, e-node), and a tuple's hash
    is computed in C, a frozen dataclass's in Python (NasRNN's greedy extraction: 0.20 s, 0.09 s so)."""

    op: str
    attr: int
    children: tuple[int, ...]
    index: int = -1


@dataclass
class Snapshot:
    """The e-graph as read back from egglog: classes (small ints) and their e-nodes."""

    class_of: dict[int, int]  # handle -> class
    handle: dict[int, int]  # class -> its smallest handle
    nodes: dict[int, list[ENode]] = field(default_factory=dict)  # class -> e-nodes
    rows: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)  # match relation -> rows

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.nodes.values())


@dataclass(frozen=True)
class _Query:
    """A match query's id in its relation (a row's first value), and where each of its columns is in
    the relation's rows."""

    id: int
    columns: tuple[int, ...]


class EGraph:
    """An egglog e-graph of tensor programs, with the Python side's tables keyed by handle."""

    def __init__(self, max_arity: int) -> None:
        self.max_arity = max_arity
        self.egg = bindings.EGraph()
        self.types: dict[int, tuple[TensorType, ...]] = {}  # handle -> output types
        self.attrs: list[Any] = []  # attribute id -> attribute object
        self._attr_ids: dict[tuple[str, Any], int] = {}
        self.weights: set[int] = set()  # handles of weights
        self.defs: dict[int, ENode] = {}  # handle -> how it was made (children as handles)
        self._pending: dict[str, list[tuple[Any, ...]]] = {}
        self._next = 0
        self._flushed = 0  # handles below this egglog has
        # match relations, shared by the queries whose columns (the skipped first) have the same sorts:
        # (sorts, skipped columns) -> relation, and each relation's queries by name
        self._relations: dict[tuple[tuple[str, ...], int], str] = {}
        self._queries: dict[str, dict[str, _Query]] = {}
        self._tmp = tempfile.TemporaryDirectory(prefix="taso-eqsat-")
        ctors = " ".join(f"(A{n} String i64{' T' * n})" for n in range(max_arity + 1))
        load = "\n".join(
            f"(relation E{n} (i64 String i64{' i64' * n}))\n"
            f"(rule ((E{n} k op a{''.join(f' c{i}' for i in range(n))})) "
            f"((union (H k) (A{n} op a{''.join(f' (H c{i})' for i in range(n))}))) :ruleset load)"
            for n in range(max_arity + 1))
        self._run(f"""(datatype T (H i64) (P T i64) {ctors})
(ruleset load)
(ruleset match)
(ruleset merge)
(ruleset comm)
(ruleset clear)
{load}
(relation EP (i64 i64 i64))
(rule ((EP k t i)) ((union (H k) (P (H t) i))) :ruleset load)
(relation Same (i64 i64))
(rule ((Same a b)) ((union (H a) (H b))) :ruleset load)
(function Shut (T) i64 :merge (max old new))
(relation ShutH (i64 i64))
(rule ((ShutH k v)) ((set (Shut (H k)) v)) :ruleset load)""")

    def _run(self, program: str) -> list[Any]:
        return self.egg.run_program(*self.egg.parse_program(program))

    # ---- facts from Python ----------------------------------------------------------------

    def intern(self, op: str, attrs: Any) -> int:
        """The id of an attribute object (equal objects of one operator share it; unhashable ones don't)."""
        try:
            key = (op, attrs)
            hash(key)
        except TypeError:
            self.attrs.append(attrs)
            return len(self.attrs) - 1
        if key not in self._attr_ids:
            self._attr_ids[key] = len(self.attrs)
            self.attrs.append(attrs)
        return self._attr_ids[key]

    def unique(self, attrs: Any) -> int:
        """An attribute id no other node shares: leaves and opaque nodes are never equal to another."""
        self.attrs.append(attrs)
        return len(self.attrs) - 1

    def node(self, op: str, attr: int, children: Sequence[int], types: Sequence[TensorType],
             weight: bool = False) -> int:
        """A new e-node's handle; with several types it is a tuple, read through `pick`."""
        if len(children) > self.max_arity:
            raise ValueError(f"{op} has {len(children)} inputs, more than this e-graph's {self.max_arity}")
        k = self._handle(tuple(types))
        self._pending.setdefault(f"E{len(children)}", []).append((k, op, attr, *children))
        self.defs[k] = ENode(op, attr, tuple(children))
        if weight:
            self.weights.add(k)
        return k

    def pick(self, parent: int, index: int) -> int:
        k = self._handle((self.types[parent][index],))
        self._pending.setdefault("EP", []).append((k, parent, index))
        self.defs[k] = ENode("P", -1, (parent,), index)
        return k

    def union(self, a: int, b: int) -> None:
        self._pending.setdefault("Same", []).append((a, b))

    def _handle(self, types: tuple[TensorType, ...]) -> int:
        k = self._next
        self._next += 1
        self.types[k] = types
        return k

    def flush(self, closed: Container[int] = frozenset(), opened: Container[int] = frozenset()) -> bool:
        """Hand the pending facts to egglog (one file per relation) and build their e-nodes. A class
        with a new handle `closed` is not matched at the `skip` columns of queries (`add_query`),
        unless it has a handle `opened` too: each handle's class gets the larger of 0, 1 (closed) and
        2 (opened) its handles were given, and a query asks for anything but 1."""
        if not self._pending:
            return False
        self._pending["ShutH"] = [(k, 2 if k in opened else 1 if k in closed else 0)
                                  for k in range(self._flushed, self._next)]
        self._flushed = self._next
        commands = []
        for rel, rows in self._pending.items():
            path = Path(self._tmp.name) / f"{rel}.tsv"
            path.write_text("".join("\t".join(map(str, row)) + "\n" for row in rows))
            commands.append(f'(input {rel} "{path}")')
        self._pending = {}
        self._run("\n".join(commands) + "\n(run load 1)")
        return True

    # ---- rules and matches ----------------------------------------------------------------

    def add_query(self, name: str, columns: Sequence[str], sorts: Sequence[str], atoms: Iterable[str],
                  merge: bool = False, skip: Sequence[int] = ()) -> None:
        """Matches of the rule body `atoms` (egglog patterns), read back as `Snapshot.rows[name]`; `merge`
        puts the rule in the ruleset of multi-output rules, which `match` runs only when asked; `skip`
        names the columns whose classes `snapshot` may leave out, and egglog matches no class closed
        there (`flush`): so it does not make the rows `snapshot` would leave out for every query
        (NasRNN's second iteration: 145,000 of 150,000 merge rows; its snapshot took 0.76 s, 0.28 s
        so, and egglog's matching 0.1 s longer, Zen 1).

        Queries share a relation when their columns, `skip`'s first, have the same sorts; a row's
        first value names its query. Egglog's cost of a command grows with the relations declared: a
        relation each, declaring the 1,997 queries of the `--max-ops 4` library on NasRNN took 2.3 s,
        1.2 ms a query at the end."""
        order = [*skip, *(i for i in range(len(columns)) if i not in skip)]
        key = (tuple(sorts[i] for i in order), len(skip))
        relation = self._relations.get(key)
        declare = ""
        if relation is None:
            relation = self._relations[key] = f"Q{len(self._relations)}"
            self._queries[relation] = {}
            values = " ".join(f"x{i}" for i in range(len(order) + 1))
            declare = (f"(relation {relation} (i64 {' '.join(key[0])}))\n"
                       f"(rule (({relation} {values})) ((delete ({relation} {values}))) :ruleset clear)\n")
        query = _Query(len(self._queries[relation]), tuple(order.index(i) + 1 for i in range(len(order))))
        self._queries[relation][name] = query
        head = f"({relation} {query.id} {' '.join(columns[i] for i in order)})"
        body = " ".join([*atoms, *(f"(!= (Shut {columns[i]}) 1)" for i in skip)])
        self._run(f"{declare}(rule ({body}) ({head}) :ruleset {'merge' if merge else 'match'})")

    def add_commutative(self, op: str) -> None:
        self._run(f'(rewrite (A2 "{op}" s a b) (A2 "{op}" s b a) :ruleset comm)')

    def match(self, merges: bool) -> None:
        self._run("(run comm 1)\n(run match 1)" + ("\n(run merge 1)" if merges else ""))

    @property
    def handles(self) -> int:
        """How many handles (about how many e-nodes) Python has made."""
        return self._next

    def snapshot(self, skipped: Iterable[int] = (), except_for: Mapping[int, str] | None = None) -> Snapshot:
        """The e-graph and the matches found since the last snapshot, with egglog's values renamed to
        small ints. The match relations are emptied once read: egglog's semi-naive evaluation finds
        a match again only when a new fact takes part in it, and reading every earlier match back
        each iteration was most of a snapshot's time (NasRNN: 500,000 rows a snapshot). Rows of
        query `name` whose `skip` columns (`add_query`) hold a class with a handle in `skipped` are
        left out before they are converted, unless `except_for` maps that handle to a query other than
        `name` (egglog makes no row whose class has no open handle: `add_query`)."""
        frozen = self.egg.freeze().functions
        ids: defaultdict[Any, int] = defaultdict(count().__next__)  # egglog value -> class, numbered as met
        cls = ids.__getitem__

        to_int = self.egg.value_to_i64
        handles = {to_int(r.inputs[0]): r.output for r in frozen["H"].rows}
        class_of = {k: cls(v) for k, v in handles.items()}
        excluded = {handles[h] for h in skipped if h in handles}
        maker = {handles[h]: name for h, name in (except_for or {}).items() if h in handles}
        snap = Snapshot(class_of, {})
        for k, c in class_of.items():  # a class's first handle: what it was first made as
            if k < snap.handle.get(c, k + 1):
                snap.handle[c] = k
        names: dict[Any, str] = {}  # operator names by egglog value: a few, read for every e-node
        for n in range(self.max_arity + 1):
            for r in frozen[f"A{n}"].rows:
                op = names.get(r.inputs[0])
                if op is None:
                    op = names[r.inputs[0]] = self.egg.value_to_string(r.inputs[0])
                node = ENode(op, to_int(r.inputs[1]), tuple(map(cls, r.inputs[2:])))
                snap.nodes.setdefault(cls(r.output), []).append(node)
        for r in frozen["P"].rows:
            snap.nodes.setdefault(cls(r.output), []).append(ENode("P", -1, (cls(r.inputs[0]),), to_int(r.inputs[1])))
        exempt = set(maker)
        always = excluded - exempt  # skipped whichever query the row is of
        for (sorts, skips), relation in self._relations.items():
            rows = [r.inputs for r in frozen[relation].rows]
            if skips and always:
                rows = [r for r in rows if always.isdisjoint(r[1:skips + 1])]
            by_query: dict[int, list[list[Any]]] = {}
            for values in rows:
                by_query.setdefault(to_int(values[0]), []).append(values)
            tensor = [False, *(s == "T" for s in sorts)]
            for name, q in self._queries[relation].items():
                mine = by_query.get(q.id, [])
                if skips and excluded & exempt:
                    blocked = excluded.difference(v for v, by in maker.items() if by != name)
                    mine = [r for r in mine if blocked.isdisjoint(r[1:skips + 1])]
                snap.rows[name] = [tuple([cls(r[i]) if tensor[i] else to_int(r[i]) for i in q.columns]) for r in mine]
        self._run("(run clear 1)")
        return snap

    def enode(self, handle: int, snap: Snapshot) -> tuple[int, ENode]:
        """The class and e-node (children as the snapshot's classes) that `handle` was made as."""
        d, class_of = self.defs[handle], snap.class_of
        # `map`, not a generator: `extract.ages` asks for every handle (NasRNN: 20,000)
        return class_of[handle], ENode(d.op, d.attr, tuple(map(class_of.__getitem__, d.children)), d.index)

    def close(self) -> None:
        """Free egglog's e-graph now, not when the collector gets to this object: egglog frees it on
        its thread pool, and a process forked later (a `ProcessPoolExecutor` worker) that collected
        an inherited one waited forever on threads it does not have (the test suite hung so)."""
        self._tmp.cleanup()
        del self.egg
