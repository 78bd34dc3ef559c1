"""Simulated annealing over the cost model (AutoTVM's ``SimulatedAnnealingOptimizer``): parallel
chains random-walk the knob space (one knob changed per step), accept a move with probability
``exp(min((new - old) / (t + 1e-5), 1))`` as the temperature cools linearly, and keep the best
unvisited points they pass. Chains persist between calls, so each plan starts where the last
one ended.

Features of the loop IR cost milliseconds per config (the template is instantiated and lowered),
so ``max_new_features`` bounds how many configs one call may rate for the first time; the chains
stop early when it is spent (``None``: no bound)."""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from vtakit.compiler.autotune.space import ConfigSpace

__all__ = ["SimulatedAnnealingOptimizer"]


class SimulatedAnnealingOptimizer:
    def __init__(self, space: ConfigSpace, n_iter: int = 500, temp: tuple[float, float] = (1.0, 0.0),
                 persistent: bool = True, parallel_size: int = 128, early_stop: int = 50,
                 rng: np.random.Generator | None = None, max_new_features: int | None = None) -> None:
        self.space = space
        self.n_iter = n_iter
        self.temp = temp
        self.persistent = persistent
        self.parallel_size = min(parallel_size, len(space))
        self.early_stop = early_stop
        self.rng = rng or np.random.default_rng()
        self.points: np.ndarray | None = None
        self.max_new_features = max_new_features

    def _walk(self, index: int) -> int:
        point = self.space.index_to_point(index)
        dims = self.space.dims
        movable = [j for j, d in enumerate(dims) if d > 1]
        if not movable:
            return index
        j = movable[int(self.rng.integers(len(movable)))]
        point[j] = (point[j] + 1 + int(self.rng.integers(dims[j] - 1))) % dims[j]
        return self.space.point_to_index(point)

    def find_maximums(self, model: Any, num: int, exclusive: set[int]) -> list[int]:
        """Up to ``num`` config indices outside ``exclusive`` with the highest predicted score."""
        if self.points is None or not self.persistent:
            self.points = self.rng.choice(len(self.space), self.parallel_size, replace=False)
        points = np.array(self.points)
        scores = model.predict(points)
        known = getattr(model, "cached", lambda: 0)
        start = known()
        heap: list[tuple[float, int]] = []
        in_heap: set[int] = set()

        def offer(idx: int, score: float) -> bool:
            if idx in exclusive or idx in in_heap:
                return False
            if len(heap) < num:
                heapq.heappush(heap, (score, idx))
            elif score > heap[0][0]:
                in_heap.discard(heapq.heapreplace(heap, (score, idx))[1])
            else:
                return False
            in_heap.add(idx)
            return True

        for p, s in zip(points, scores):
            offer(int(p), float(s))
        t = self.temp[0]
        cool = (self.temp[0] - self.temp[1]) / (self.n_iter + 1)
        last_change = 0
        for k in range(self.n_iter):
            if k - last_change > self.early_stop:
                break
            if self.max_new_features is not None and known() - start >= self.max_new_features:
                break
            new_points = np.array([self._walk(int(p)) for p in points])
            new_scores = model.predict(new_points)
            accept = self.rng.random(len(points)) < np.exp(np.minimum((new_scores - scores) / (t + 1e-5), 1))
            points[accept], scores[accept] = new_points[accept], new_scores[accept]
            for p, s in zip(new_points, new_scores):
                if offer(int(p), float(s)):
                    last_change = k
            t -= cool
        if self.persistent:
            self.points = points
        return [idx for _, idx in sorted(heap, reverse=True)]
