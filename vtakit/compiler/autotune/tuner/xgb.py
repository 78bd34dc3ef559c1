"""The model-based tuner (AutoTVM's ``XGBTuner`` / ``ModelBasedTuner``).

It measures ``plan_size`` configs at a time: at first the template's fallback (so the result is
never worse than the default schedule; ``fallback_first=False`` leaves it to the search) and
random ones, or after :meth:`XGBTuner.load_history` the base model's favourites; each time
another ``plan_size`` results arrive it refits the cost model and lets simulated annealing pick
the next plan, the ``plan_size`` unvisited configs the model rates best, searched from random
valid configs and from the best ``sa_starts`` measured ones (their one-knob neighbours are where
good configs are likeliest). The last 5% of each plan are random (epsilon-greedy), so the model
keeps seeing configs it would not choose.

``local_picks=L`` exploits the incumbent: each plan after a model fit starts with the ``L``
unvisited one-knob neighbours of the best measured config that the model rates best (the
annealing's plan fills the rest), and before the first fit every third pick of the random first
plan is a random unvisited one-knob neighbour of the best measured so far instead of a random
config (a mutation of the incumbent, as an evolutionary search would take).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from vtakit.compiler.autotune.measure import MeasureInput, MeasureResult
from vtakit.compiler.autotune.record import TuningRecord
from vtakit.compiler.autotune.space import ConfigEntity
from vtakit.compiler.autotune.task import Task, create_task
from vtakit.compiler.autotune.tuner.base import Tuner
from vtakit.compiler.autotune.tuner.cost_model import XGBoostCostModel
from vtakit.compiler.autotune.tuner.features import FEATURE_TYPES, config_features, shared_features
from vtakit.compiler.autotune.tuner.sa import SimulatedAnnealingOptimizer
from vtakit.errors import TuningError, VtakitError
from vtakit.hw.config import VTAConfig

__all__ = ["XGBTuner", "submodular_pick"]

_EPS_GREEDY = 0.05


def submodular_pick(points: Sequence[Sequence[int]], n: int, scores: Sequence[float] | None = None,
                    knob_weight: float = 1.0) -> list[int]:
    """Greedily ``n`` of ``points`` (knob choices) that add the most knob values not yet picked,
    ``knob_weight`` per value, plus their ``scores`` (AutoTVM's ``submodular_pick``); ties go to
    the earlier point."""
    seen: list[set[int]] = [set() for _ in range(len(points[0]))] if points else []
    remain = list(range(len(points)))
    out: list[int] = []
    for _ in range(min(n, len(points))):
        gain = [(scores[x] if scores is not None else 0.0)
                + knob_weight * sum(v not in seen[j] for j, v in enumerate(points[x])) for x in remain]
        x = remain.pop(int(np.argmax(gain)))
        out.append(x)
        for j, v in enumerate(points[x]):
            seen[j].add(v)
    return out


class XGBTuner(Tuner):
    name = "xgb"

    def __init__(self, task: Task, plan_size: int = 64, feature_type: str = "itervar", loss_type: str = "rank",
                 num_threads: int | None = None, seed: int | None = None, sa_iters: int = 500,
                 sa_parallel: int = 128, max_new_features: int | None = None, fallback_first: bool = True,
                 sa_starts: int | None = None, diversity_filter_ratio: float | None = None,
                 local_picks: int = 0) -> None:
        super().__init__(task, seed)
        if not 0 <= local_picks <= plan_size:
            raise TuningError(f"local_picks must be within 0..plan_size ({plan_size}), got {local_picks}")
        self.local_picks = local_picks
        self.diversity_filter_ratio = diversity_filter_ratio
        self.sa_starts = plan_size if sa_starts is None else sa_starts
        self.fallback_first = fallback_first
        if feature_type not in FEATURE_TYPES:
            raise TuningError(f"unknown feature_type {feature_type!r}; expected one of {FEATURE_TYPES}")
        self.plan_size = plan_size
        self.feature_type = feature_type
        self.model = XGBoostCostModel(task, feature_type, loss_type, num_threads, seed)
        if max_new_features is None and feature_type != "knob":
            max_new_features = 8 * plan_size   # loop-IR features cost milliseconds each
        self.optimizer = SimulatedAnnealingOptimizer(self.space, n_iter=sa_iters, parallel_size=sa_parallel,
                                                     rng=self.rng, max_new_features=max_new_features)
        self.xs: list[int] = []
        self.ys: list[float] = []
        # the template's default first, so the result is never worse than it (``fallback_first``)
        self.plan: list[int] = [self.space.fallback.index] if fallback_first else []
        self._eps = 0                                          # random picks at the end of the plan
        self._pos = 0
        self._fits = 0
        self._random_picks = 0                                 # random picks before the first fit

    def next_batch(self, n: int) -> list[ConfigEntity]:
        out: list[ConfigEntity] = []
        while len(out) < n and self.has_next():
            while self._pos < len(self.plan) and self.plan[self._pos] in self.visited:
                self._pos += 1
            greedy = self._pos < len(self.plan) - self._eps
            if greedy:
                index = self.plan[self._pos]
                self._pos += 1
            else:
                index = self._random_pick()
            self.visited.add(index)
            out.append(self.space.get(index))
        return out

    def _random_pick(self) -> int:
        """A random unvisited config; with ``local_picks`` and no model yet, every third one a
        random unvisited one-knob neighbour of the best measured config."""
        if self.local_picks and not self._fits:
            self._random_picks += 1
            if self._random_picks % 3 == 0 and self.ys and max(self.ys) > 0:
                near = self._neighbours(self.xs[int(np.argmax(self.ys))])
                if near:
                    return near[int(self.rng.integers(len(near)))]
        return self._random_unvisited()

    def _neighbours(self, index: int) -> list[int]:
        """The unvisited configs the template's filter accepts that differ from ``index`` in one knob."""
        point = self.space.index_to_point(index)
        out: list[int] = []
        for j, size in enumerate(self.space.dims):
            for v in range(size):
                if v != point[j]:
                    other = self.space.point_to_index([*point[:j], v, *point[j + 1:]])
                    if other not in self.visited:   # the filtered configs are marked visited
                        out.append(other)
        return out

    def _random_unvisited(self) -> int:
        n = len(self.space)
        for _ in range(64):
            index = int(self.rng.integers(n))
            if index not in self.visited:
                return index
        return next(i for i in (int(j) for j in self.rng.permutation(n)) if i not in self.visited)

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        super().update(inputs, results)
        flop = max(self.task.flop, 1)
        for inp, res in zip(inputs, results):
            self.xs.append(inp.config.index)
            self.ys.append(flop / res.cost if res.ok and res.cost > 0 else 0.0)
        if len(self.xs) >= self.plan_size * (self._fits + 1) and max(self.ys) > 0:
            self.model.fit(self.xs, self.ys)
            self._fits += 1
            self._replan()

    def _replan(self) -> None:
        starts: list[int] = []
        if self.sa_starts and self.xs:
            order = np.argsort(-np.asarray(self.ys), kind="stable")[:self.sa_starts]
            starts = [self.xs[int(k)] for k in order if self.ys[int(k)] > 0]
        if self.diversity_filter_ratio:
            # AutoTVM's diversity filter: of the model's top ratio x plan_size, the plan_size that
            # together take the most distinct values of each knob
            candidates = self.optimizer.find_maximums(
                self.model, int(self.plan_size * self.diversity_filter_ratio), self.visited, starts)
            self.plan = [candidates[k] for k in submodular_pick(
                [self.space.index_to_point(i) for i in candidates], self.plan_size)]
        else:
            self.plan = self.optimizer.find_maximums(self.model, self.plan_size, self.visited, starts)
        if self.local_picks and self.ys and max(self.ys) > 0:
            near = self._neighbours(self.xs[int(np.argmax(self.ys))])
            if near:
                rated = self.model.predict(near)
                local = [near[int(k)] for k in np.argsort(-rated, kind="stable")[:self.local_picks]]
                rest = [i for i in self.plan if i not in local]
                self.plan = local + rest[:self.plan_size - len(local)]
        self._eps = int(_EPS_GREEDY * self.plan_size)
        self._pos = 0

    def load_history(self, records: Sequence[TuningRecord], min_seed_records: int = 16) -> None:
        """Warm-start the model from records of other tasks (same kind of template, any workload):
        a base model trained on them rates configs until this task's own records take over."""
        by_task: dict[str, list[TuningRecord]] = defaultdict(list)
        for r in records:
            if r.task_key != self.task.key() and r.task_name == self.task.name:
                by_task[r.task_key].append(r)
        groups = []
        for recs in by_task.values():
            first = recs[0]
            try:
                task = create_task(first.task_name, first.args, target=first.target,
                                   config=VTAConfig.from_dict(first.vta_config) if first.vta_config else None)
            except VtakitError:
                continue
            x, y = [], []
            cache = shared_features(task, self.feature_type)
            for r in recs:
                try:
                    cfg = task.config_space.entity_from_json(r.entity)
                except VtakitError:
                    continue
                if cfg.index not in cache:
                    cache[cfg.index] = config_features(task, cfg, self.feature_type)
                x.append(cache[cfg.index])
                y.append(task.flop / r.result.cost if r.result.ok and r.result.cost > 0 else 0.0)
            if len(x) >= 2 and max(y) > 0 and len({len(v) for v in x}) == 1:
                groups.append((np.stack(x), np.asarray(y)))
        if sum(len(y) for _, y in groups) < min_seed_records:
            return
        if len({g[0].shape[1] for g in groups}) != 1:
            raise TuningError("load_history: the records' features differ in length; use feature_type "
                              "'itervar' or 'curve' to transfer between templates")
        self.model.fit_base(groups)
        self._replan()
        if not self.xs and self.fallback_first:   # nothing measured yet: the default first, as in a cold start
            fallback = self.space.fallback.index
            self.plan = [fallback] + [i for i in self.plan if i != fallback]

