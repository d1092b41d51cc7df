"""Bounds of equality saturation (`search.eqsat`), importable without egglog, and the least gain
either search takes."""

from __future__ import annotations

from dataclasses import dataclass

# a graph must cost this fraction less than the search's start to be taken: ORT's timings of a whole
# model move by about 1% from run to run, so a smaller gain is noise the judge and the acceptance
# would time for nothing (VGG-19: three bias adds with their operands swapped, predicted 2.6e-7
# faster, were timed in context for 18 s, and `taso optimize` took 175 s in all)
MIN_GAIN = 1e-3


def pays(cost: float, start: float, min_gain: float) -> bool:
    """Whether a graph of `cost` is at least the fraction `min_gain` cheaper than one of `start`."""
    return cost <= start * (1 - min_gain)


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
    # saturations, each of the graph the last one extracted (see `search.eqsat.search`), where merged
    # operators merge again. One: a second round gained on none of the 8 suite models and 48 corpus
    # exports (analytical costs; measured ones on the suite and corpus too), since a chain's last merge
    # merges again inside the first; and it took the time left: NasRNN's search 4.3 s instead of 2.3 s
    rounds: int = 1
    # of `timeout`, what saturation may take: an iteration starts only if it should end within it
    # (the merge iterations' matches are applied if they should end within `timeout` itself).
    # NasRNN saturates in 1.8 s, and its exact extraction needs 1.5 s to find its merges; a 70-node
    # LSTM cell took 3.6 s to saturate, its last iteration 1.75 s (the one before 0.4 s), and 10 s in all
    saturation_share: float = 0.5
    ilp_timeout: float = 5.0  # seconds of an extraction at most (less when the search's time is short)
    refinements: int = 2  # extractions again without the rewrites a judge found slower in context, per round
    min_gain: float = MIN_GAIN  # of a round's graph against the round's start
