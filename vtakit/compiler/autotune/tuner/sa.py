"""Simulated annealing over the cost model (AutoTVM's ``SimulatedAnnealingOptimizer``): parallel
chains random-walk the knob space (one knob changed per step), accept a move with probability
``exp(min((new - old) / (t + 1e-5), 1))`` as the temperature cools linearly, and keep the best
unvisited points they pass. Chains persist between calls, so each plan starts where the last
one ended.

The chains stay on configs the template's filter accepts: they start on valid configs and a step
that would land on a filtered one tries another move instead (up to :data:`_MOVE_TRIES`), so on a
space that is mostly filtered (ResNet-18 C9's: 95%) the model's ratings are spent on configs that
can be measured, not on ones no tuner may propose.

Features of the loop IR cost milliseconds per config (the template is instantiated and lowered),
so ``max_new_features`` bounds how many configs one call may rate for the first time; the chains
stop early when it is spent (``None``: no bound)."""

from __future__ import annotations

import heapq
from typing import Any, Sequence

import numpy as np

from vtakit.compiler.autotune.space import ConfigSpace

__all__ = ["SimulatedAnnealingOptimizer"]

_MOVE_TRIES = 8


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
        self._invalid = space.invalid_indices()
        self._dims = space.dims
        self._movable = [j for j, d in enumerate(self._dims) if d > 1]

    def _valid_points(self, n: int) -> np.ndarray:
        """``n`` distinct valid configs at random (fewer if the space has fewer)."""
        size = len(self.space)
        n = min(n, size - len(self._invalid))
        out: list[int] = []
        seen: set[int] = set()
        while len(out) < n:
            for i in self.rng.integers(size, size=4 * n):
                i = int(i)
                if i not in self._invalid and i not in seen:
                    seen.add(i)
                    out.append(i)
                    if len(out) == n:
                        break
            if len(seen) + len(self._invalid) >= size:
                break
        return np.array(out, dtype=np.int64)

    def _walk(self, index: int) -> int:
        """A random neighbour of ``index`` (one knob changed) that the filter accepts, else ``index``."""
        if not self._movable:
            return index
        dims = self._dims
        for _ in range(_MOVE_TRIES):
            point = self.space.index_to_point(index)
            j = self._movable[int(self.rng.integers(len(self._movable)))]
            point[j] = (point[j] + 1 + int(self.rng.integers(dims[j] - 1))) % dims[j]
            new = self.space.point_to_index(point)
            if new not in self._invalid:
                return new
        return index

    def find_maximums(self, model: Any, num: int, exclusive: set[int], starts: Sequence[int] = ()) -> list[int]:
        """Up to ``num`` config indices outside ``exclusive`` with the highest predicted score.
        ``starts`` (the best measured configs) take the place of as many chains: their neighbours
        are where good configs are likeliest."""
        if self.points is None or not self.persistent:
            self.points = self._valid_points(self.parallel_size)
        points = np.array(self.points)
        starts = [int(i) for i in starts if int(i) not in self._invalid][:len(points)]
        if starts:
            rest = [int(p) for p in points if int(p) not in set(starts)]
            points = np.array(starts + rest[:len(points) - len(starts)], dtype=np.int64)
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
