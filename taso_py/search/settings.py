"""Bounds of equality saturation (`search.eqsat`), importable without egglog."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EqsatSettings:
    node_limit: int = 20000  # e-nodes
    iterations: int = 8
    # multi-output rules (merges) only in the first iterations, as Tensat does: a merged operator
    # merges again with every sibling, and the e-graph grows combinatorially
    merge_iterations: int = 2
    timeout: float = 5.0  # seconds of saturation; extraction has its own limit
    ilp_timeout: float = 5.0  # seconds for the integer program
