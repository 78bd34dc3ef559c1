"""Tuners that walk config indices in a fixed order: :class:`GridSearchTuner` (in index order)
and :class:`RandomTuner` (a permutation drawn from ``seed``). The order depends on nothing but
the seed, so a run that resumes from a log measures exactly the configs an uninterrupted run
would have: the first ``n_trial`` of the order."""

from __future__ import annotations

import numpy as np

from vtakit.compiler.autotune.space import ConfigEntity
from vtakit.compiler.autotune.task import Task
from vtakit.compiler.autotune.tuner.base import Tuner

__all__ = ["GridSearchTuner", "RandomTuner"]


class _IndexTuner(Tuner):
    def __init__(self, task: Task, seed: int | None = None) -> None:
        super().__init__(task, seed)
        self._order = self._make_order()
        self._pos = 0

    def _make_order(self) -> np.ndarray:
        raise NotImplementedError

    def next_batch(self, n: int) -> list[ConfigEntity]:
        out = []
        while len(out) < n and self._pos < len(self._order):
            index = int(self._order[self._pos])
            self._pos += 1
            if index not in self.visited:
                self.visited.add(index)
                out.append(self.space.get(index))
        return out

    def has_next(self) -> bool:
        return self._pos < len(self._order) and super().has_next()


class GridSearchTuner(_IndexTuner):
    """Every config, in index order."""

    name = "grid"

    def _make_order(self) -> np.ndarray:
        return np.arange(len(self.space))


class RandomTuner(_IndexTuner):
    """Configs in a random order without repeats, drawn from ``seed``."""

    name = "random"

    def _make_order(self) -> np.ndarray:
        return self.rng.permutation(len(self.space))
