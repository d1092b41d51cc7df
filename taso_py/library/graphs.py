"""A rule side as a graph (nodes with op, attributes and inputs; variables; outputs) and back.

The library stores both forms: the text is what people read and diff, the graph is what tools
(the matcher, `rules show --format dot`) consume without parsing. Loading rebuilds the graph
from the text and insists they agree, so neither can silently drift.
"""

from __future__ import annotations

from typing import Any

from taso_py.library.syntax import format_expr
from taso_py.library.terms import Apply, Pick, Term, Var


def to_graph(terms: tuple[Term, ...]) -> dict[str, Any]:
    """`{"inputs": [...], "nodes": [{"id", "op", "attrs", "inputs"}], "outputs": [...]}`.

    A node input or graph output is a variable name or `nK` / `nK:i` (output i of node K);
    equal subterms are one node, so shared subexpressions show as shared nodes."""
    ids: dict[Apply, str] = {}
    nodes: list[dict[str, Any]] = []
    inputs: list[str] = []

    def ref(term: Term) -> str:
        if isinstance(term, Var):
            if term.name not in inputs:
                inputs.append(term.name)
            return term.name
        if isinstance(term, Pick):
            return f"{node(term.term)}:{term.index}"
        return node(term)

    def node(term: Term) -> str:
        assert isinstance(term, Apply)
        if term not in ids:
            args = [ref(a) for a in term.args]
            ids[term] = f"n{len(nodes)}"
            nodes.append({"id": ids[term], "op": term.op, "inputs": args,
                          "attrs": {k: format_expr(v) for k, v in term.attrs}})
        return ids[term]

    outputs = [ref(t) for t in terms]
    return {"inputs": inputs, "nodes": nodes, "outputs": outputs}
