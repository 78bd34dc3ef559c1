"""The statistical cost model (AutoTVM's ``XGBoostCostModel``): gradient-boosted trees on config
features (:mod:`.features`), trained to rank configs (``rank``: pairwise ranking loss, AutoTVM's
default) or to regress their normalised throughput (``reg``). Labels are throughput (flop per
cost unit) divided by the best seen, 0 for failed trials.

Transfer learning: :meth:`fit_base` trains a base model on other tasks' records (each labelled
within its own task); its prediction is added as a margin to the model trained on this task's own
records, scaled by ``2 ** (-n / 64)`` for ``n`` own records, and dropped once that is below 0.05.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import xgboost as xgb

from vtakit.compiler.autotune.task import Task
from vtakit.compiler.autotune.tuner.features import config_features, shared_features
from vtakit.errors import TuningError

__all__ = ["XGBoostCostModel", "LOSS_TYPES"]

LOSS_TYPES = ("rank", "reg")
_ROUNDS = 120
_BASE_ROUNDS = 200


class XGBoostCostModel:
    def __init__(self, task: Task, feature_type: str = "itervar", loss_type: str = "rank",
                 num_threads: int | None = None, seed: int | None = None) -> None:
        if loss_type not in LOSS_TYPES:
            raise TuningError(f"unknown loss_type {loss_type!r}; expected one of {LOSS_TYPES}")
        self.task = task
        self.feature_type = feature_type
        self.params = {"max_depth": 3, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0, "eta": 0.3,
                       "lambda": 1.0, "alpha": 0.0, "verbosity": 0, "seed": seed or 0,
                       "objective": "rank:pairwise" if loss_type == "rank" else "reg:squarederror"}
        # one thread by default: the cores are busy measuring, and xgboost's thread pool on a busy
        # machine makes even a small DMatrix cost tens of milliseconds
        self.nthread = num_threads or 1
        self.params["nthread"] = self.nthread
        self._cache: dict[int, np.ndarray] = {}
        self.bst: xgb.Booster | None = None
        self.base: xgb.Booster | None = None
        self._base_scale = 0.0

    def features(self, indices: Sequence[int]) -> np.ndarray:
        space = self.task.config_space
        shared = shared_features(self.task, self.feature_type)
        rows = []
        for i in indices:
            i = int(i)
            if i not in self._cache:
                if i not in shared:
                    shared[i] = config_features(self.task, space.get(i), self.feature_type)
                self._cache[i] = shared[i]
            rows.append(self._cache[i])
        return np.stack(rows) if rows else np.zeros((0, 1), np.float32)

    def cached(self) -> int:
        """How many configs this model has rated (its feature budget counts these, whether or not
        another model of the same task computed them first, so a tuner behaves the same either way)."""
        return len(self._cache)

    def fit(self, indices: Sequence[int], scores: Sequence[float]) -> None:
        """Train on this task's measured configs and their throughputs (0 for errors)."""
        x = self.features(indices)
        y = np.asarray(scores, dtype=np.float64)
        y = y / max(float(y.max()), 1e-12)
        dtrain = xgb.DMatrix(x, label=y, nthread=self.nthread)
        self._base_scale = 2.0 ** (-len(indices) / 64) if self.base is not None else 0.0
        if self._base_scale < 0.05:
            self._base_scale = 0.0
        if self._base_scale:
            dtrain.set_base_margin(self._base_scale * self.base.predict(xgb.DMatrix(x, nthread=self.nthread), output_margin=True))
        self.bst = xgb.train(self.params, dtrain, num_boost_round=_ROUNDS)

    def fit_base(self, groups: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Train the transfer base model on other tasks' ``(features, throughputs)`` groups."""
        xs, ys = [], []
        for x, y in groups:
            xs.append(x)
            ys.append(np.asarray(y, dtype=np.float64) / max(float(np.max(y)), 1e-12))
        dtrain = xgb.DMatrix(np.concatenate(xs), label=np.concatenate(ys), nthread=self.nthread)
        if self.params["objective"].startswith("rank"):
            dtrain.set_group([len(y) for y in ys])
        self.base = xgb.train(self.params, dtrain, num_boost_round=_BASE_ROUNDS)
        self._base_scale = 1.0

    @property
    def trained(self) -> bool:
        return self.bst is not None or self.base is not None

    def predict(self, indices: Sequence[int]) -> np.ndarray:
        x = xgb.DMatrix(self.features(indices), nthread=self.nthread)
        if self.bst is None:
            return self.base.predict(x, output_margin=True)
        if self._base_scale:
            x.set_base_margin(self._base_scale * self.base.predict(x, output_margin=True))
        return self.bst.predict(x, output_margin=True)
