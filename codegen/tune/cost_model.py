"""A learned cost model: gradient-boosted trees (xgboost) from loop features to run time.

Measuring a candidate costs a compile and several runs; the model costs microseconds, so
the tuner measures only the candidates the model ranks best (AutoTVM's XGBTuner). It
regresses log run time: speeds span orders of magnitude and only the ranking matters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


class CostModel:
    """Predicts a score per feature vector: lower is faster (the model's log seconds)."""

    def __init__(self, rounds: int = 60, seed: int = 0) -> None:
        self.rounds = rounds
        self.seed = seed
        self.booster = None
        self.trained_on = 0

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def fit(self, features: Sequence[np.ndarray], seconds: Sequence[float]) -> None:
        """Train on measured candidates (at least two, or the model stays untrained)."""
        import xgboost as xgb
        if len(features) < 2:
            return
        x = np.vstack(features)
        y = np.log(np.asarray(seconds, dtype=np.float64))
        params = {"max_depth": 4, "eta": 0.2, "subsample": 1.0, "min_child_weight": 1.0, "lambda": 1.0,
                  "objective": "reg:squarederror", "seed": self.seed, "nthread": 1, "verbosity": 0}
        self.booster = xgb.train(params, xgb.DMatrix(x, label=y), num_boost_round=self.rounds)
        self.trained_on = len(features)

    def predict(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Predicted log seconds; all zeros before training (every candidate alike)."""
        if self.booster is None or not len(features):
            return np.zeros(len(features))
        return self.booster.inplace_predict(np.vstack(features))  # no DMatrix: ~1000x faster for a few rows


def rank_correlation(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (how well a model orders candidates), ties broken by position."""
    ra = np.argsort(np.argsort(np.asarray(a)))
    rb = np.argsort(np.argsort(np.asarray(b)))
    n = len(ra)
    if n < 2:
        return math.nan
    return float(1.0 - 6.0 * np.sum((ra - rb) ** 2) / (n * (n * n - 1)))
