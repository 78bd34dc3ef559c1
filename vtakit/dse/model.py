"""The model over configurations that chooses what the search evaluates next.

Gradient-boosted trees (XGBoost, as the schedule tuner's cost model) regress the log of a
configuration's accelerator latency (the search gives latency x MACs, so that the array's size
enters the rating analytically) on its features (:meth:`DesignSpace.features`: every knob,
the MACs, the largest resource share). Each round, the search ranks a pool of candidates (random
valid, fitting configurations plus the one-knob neighbours of the best so far) by the prediction
and evaluates the best-rated; a few random picks keep the model honest (epsilon-greedy). One
thread and a fixed seed make a fit deterministic, so the same results give the same choices.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import xgboost as xgb

from vtakit.errors import DSEError

__all__ = ["LatencyModel"]

_ROUNDS = 80
#: What a failed configuration counts as: this many times the slowest one measured.
_FAILED_PENALTY = 4.0


class LatencyModel:
    """XGBoost regression of log latency on configuration features."""

    def __init__(self, seed: int = 0) -> None:
        self.params = {"max_depth": 4, "eta": 0.2, "subsample": 1.0, "min_child_weight": 1, "lambda": 1.0,
                       "objective": "reg:squarederror", "nthread": 1, "seed": seed, "verbosity": 0}
        self.booster: xgb.Booster | None = None

    def fit(self, features: np.ndarray, latencies: Sequence[float]) -> None:
        """Train on ``features`` (one row per configuration) and their latencies (inf: failed)."""
        y = np.asarray(latencies, dtype=np.float64)
        finite = np.isfinite(y)
        if not finite.any():
            self.booster = None
            return
        y = np.where(finite, y, y[finite].max() * _FAILED_PENALTY)
        data = xgb.DMatrix(np.asarray(features, dtype=np.float64), label=np.log(y), nthread=1)
        self.booster = xgb.train(self.params, data, num_boost_round=_ROUNDS)

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Predicted log latency of each row (lower is better)."""
        if self.booster is None:
            raise DSEError("the latency model is not trained yet: call fit() first")
        return self.booster.predict(xgb.DMatrix(np.asarray(features, dtype=np.float64), nthread=1))
