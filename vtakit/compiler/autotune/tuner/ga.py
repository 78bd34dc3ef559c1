"""Genetic search (AutoTVM's ``GATuner``): a population of knob vectors, fitness-proportional
selection, single-point crossover and per-knob mutation; the elite survive unchanged and no
config is measured twice."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from vtakit.compiler.autotune.measure import MeasureInput, MeasureResult
from vtakit.compiler.autotune.space import ConfigEntity
from vtakit.compiler.autotune.task import Task
from vtakit.compiler.autotune.tuner.base import Tuner

__all__ = ["GATuner"]


class GATuner(Tuner):
    name = "ga"

    def __init__(self, task: Task, pop_size: int = 100, elite_num: int = 3, mutation_prob: float = 0.1,
                 seed: int | None = None) -> None:
        super().__init__(task, seed)
        self.pop_size = min(pop_size, len(self.space))
        self.elite_num = min(elite_num, self.pop_size)
        self.mutation_prob = mutation_prob
        self.dims = self.space.dims
        self.scores: dict[int, float] = {}
        self.genes: list[int] = [int(i) for i in self.rng.choice(len(self.space), self.pop_size, replace=False)]
        self._pos = 0

    def next_batch(self, n: int) -> list[ConfigEntity]:
        out: list[ConfigEntity] = []
        while len(out) < n and self.has_next():
            if self._pos >= len(self.genes):
                self._evolve()
            index = self.genes[self._pos]
            self._pos += 1
            if index not in self.visited:
                self.visited.add(index)
                out.append(self.space.get(index))
        return out

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        super().update(inputs, results)
        for inp, res in zip(inputs, results):
            self.scores[inp.config.index] = 1.0 / res.cost if res.ok and res.cost > 0 else 0.0

    def _evolve(self) -> None:
        genes = self.genes
        scores = np.array([self.scores.get(g, 0.0) for g in genes])
        elite = [genes[i] for i in np.argsort(-scores)[:self.elite_num]]
        probs = scores / scores.sum() if scores.sum() > 0 else np.full(len(genes), 1 / len(genes))
        new: list[int] = []
        tries = 0
        while len(new) < self.pop_size and tries < 50 * self.pop_size:
            tries += 1
            a, b = self.rng.choice(len(genes), 2, p=probs)
            pa, pb = self.space.index_to_point(genes[a]), self.space.index_to_point(genes[b])
            cut = int(self.rng.integers(len(pa))) if len(pa) > 1 else 0
            child = pa[:cut] + pb[cut:]
            for j, d in enumerate(self.dims):
                if self.rng.random() < self.mutation_prob:
                    child[j] = int(self.rng.integers(d))
            index = self.space.point_to_index(child)
            if index not in self.visited and index not in new:
                new.append(index)
        if len(new) < self.pop_size:   # the neighbourhood is exhausted: fresh blood
            taken = set(new)
            fresh = (int(i) for i in self.rng.permutation(len(self.space)) if int(i) not in self.visited
                     and int(i) not in taken)
            new.extend(i for _, i in zip(range(self.pop_size - len(new)), fresh))
        self.genes = elite + new
        self._pos = len(elite) if all(e in self.visited for e in elite) else 0
