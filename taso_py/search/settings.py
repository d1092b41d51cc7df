"""Bounds of equality saturation (`search.eqsat`), importable without egglog."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EqsatSettings:
    node_limit: int = 20000  # e-nodes
    iterations: int = 8
    # multi-output rules (merges) only in the first iterations, as Tensat does, and egglog never
    # merges an operator a merge made by the same rule: else a merged operator merges again with
    # every sibling and the e-graph grows with every subset of them (NasRNN: 31,919 e-nodes); the
    # chains of `search.eqsat` grow each group's merge instead. Two iterations, so that a
    # convolution enlarged in the first merges in the second, and a chain's last merge too.
    merge_iterations: int = 2
    timeout: float = 5.0  # seconds of the whole search, saturation and extraction, over all rounds
    rounds: int = 4  # saturations, each of the graph the last one extracted (see `search.eqsat.search`)
    ilp_timeout: float = 5.0  # seconds of an extraction at most (less when the search's time is short)
    refinements: int = 2  # extractions again without the rewrites a judge found slower in context, per round
