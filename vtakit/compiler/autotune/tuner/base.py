"""The tuning loop every tuner shares (AutoTVM's ``Tuner.tune``).

A tuner proposes configs (:meth:`Tuner.next_batch`) and learns from results
(:meth:`Tuner.update`); :meth:`Tuner.tune` keeps up to ``n_parallel`` trials in flight on the
measurement executor, writes each record to the log the moment it arrives (only this process
writes), and calls the callbacks (progress bar, ...). Given a log that already holds records of
the task, it resumes: those configs count towards ``n_trial``, teach the tuner, and are never
measured again. A failed trial is an error record, never an exception out of the loop.
"""

from __future__ import annotations

import time
import warnings
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from vtakit.compiler.autotune.measure import (MeasureErrorNo, MeasureInput, MeasureOption, MeasureResult,
                                              measure_option as default_measure_option, run_trial)
from vtakit.compiler.autotune.record import RecordWriter, TuningRecord, load_records, split_records
from vtakit.compiler.autotune.space import ConfigEntity
from vtakit.compiler.autotune.task import Task
from vtakit.errors import ScheduleError, TuningError

__all__ = ["Tuner", "TuneSummary", "Callback"]

Callback = Callable[["Tuner", Sequence[MeasureInput], Sequence[MeasureResult]], None]


@dataclass
class TuneSummary:
    """What a :meth:`Tuner.tune` call did: trials measured now and resumed from the log, the best."""

    measured: int
    resumed: int
    best_cost: float
    best_config: ConfigEntity | None
    errors: int
    notes: list[str] = field(default_factory=list)

    @property
    def trials(self) -> int:
        return self.measured + self.resumed


class Tuner:
    """Base class: subclasses implement :meth:`next_batch` (and :meth:`update` to learn)."""

    name = "base"

    def __init__(self, task: Task, seed: int | None = None) -> None:
        if not isinstance(task, Task):
            raise TuningError(f"a tuner needs a Task (autotune.create_task), got {type(task).__name__}")
        self.task = task
        self.space = task.config_space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        # configs the template's static checks reject count as visited: no tuner proposes them
        self.visited: set[int] = set(self.space.invalid_indices())
        self.best_cost = float("inf")
        self.best_config: ConfigEntity | None = None
        self.trials = 0

    # ------------------------------------------------------------------ the tuner's interface
    def next_batch(self, n: int) -> list[ConfigEntity]:
        """Up to ``n`` configs not yet visited (each is marked visited)."""
        raise NotImplementedError

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from measured trials (the base class only tracks the best)."""
        for inp, res in zip(inputs, results):
            if res.ok and res.cost < self.best_cost:
                self.best_cost, self.best_config = res.cost, inp.config

    def load_history(self, records: Sequence[TuningRecord], min_seed_records: int = 16) -> None:
        """Transfer learning from records of other tasks: only a model-based tuner learns from them."""
        raise TuningError(f"{type(self).__name__} does not learn from history; use XGBTuner.load_history")

    # ------------------------------------------------------------------ the loop
    def tune(self, n_trial: int, measure_option: MeasureOption | None = None, early_stopping: int | None = None,
             callbacks: Sequence[Callback] = (), log_file: str | Path | None = None) -> TuneSummary:
        """Measure configs until ``n_trial`` trials (resumed ones included) or the space is exhausted,
        or ``early_stopping`` trials pass without a better one."""
        if not isinstance(n_trial, int) or n_trial < 1:
            raise TuningError(f"n_trial must be a positive int, got {n_trial!r}")
        option = measure_option or default_measure_option()
        notes: list[str] = []
        resumed = self._resume(log_file, notes) if log_file is not None and Path(log_file).exists() else 0
        self.trials = resumed
        best_at, errors, measured = self.trials, 0, 0
        writer = RecordWriter(log_file) if log_file is not None else None
        in_flight: dict[Future, tuple[MeasureInput, float]] = {}
        try:
            with option.open_executor() as executor:
                while True:
                    self._fill(executor, option, in_flight, n_trial)
                    if not in_flight:
                        break
                    done, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                    for fut in done:
                        inp, started = in_flight.pop(fut)
                        res = _result_of(fut, started)
                        self.trials += 1
                        measured += 1
                        errors += not res.ok
                        if writer is not None:
                            writer.write(TuningRecord.of(inp, res, started, self.name))
                        if res.ok and res.cost < self.best_cost:
                            best_at = self.trials
                        self.update([inp], [res])
                        for cb in callbacks:
                            cb(self, [inp], [res])
                    if early_stopping is not None and self.trials - best_at >= early_stopping:
                        break
        finally:
            for fut in in_flight:
                fut.cancel()
            if writer is not None:
                writer.close()
        if measured and errors == measured and self.best_config is None:
            notes.append(f"no valid config found for {self.task} in {measured} trials (all were errors)")
        for note in notes:
            warnings.warn(note, stacklevel=2)
        return TuneSummary(measured, resumed, self.best_cost, self.best_config, errors, notes)

    def _fill(self, executor: Any, option: MeasureOption, in_flight: dict, n_trial: int) -> None:
        while len(in_flight) < option.n_parallel and self.trials + len(in_flight) < n_trial and self.has_next():
            batch = self.next_batch(1)
            if not batch:
                return
            cfg = batch[0]
            fut = executor.submit(run_trial, self.task, cfg.index, option.builder, option.runner)
            in_flight[fut] = (MeasureInput(self.task, cfg), time.time())

    def _resume(self, log_file: str | Path, notes: list[str]) -> int:
        mine, ignored = split_records(load_records(log_file), self.task)
        notes.extend(f"{log_file}: {n}" for n in ignored)
        inputs, results = [], []
        for rec in mine:
            try:
                cfg = self.space.entity_from_json(rec.entity)
            except ScheduleError as exc:
                notes.append(f"{log_file}: ignored a record whose config is not in this space ({exc})")
                continue
            if cfg.index in self.visited:
                continue
            self.visited.add(cfg.index)
            inputs.append(MeasureInput(self.task, cfg))
            results.append(rec.result)
        if inputs:
            self.update(inputs, results)
        return len(inputs)


def _result_of(fut: Future, started: float) -> MeasureResult:
    try:
        return fut.result()
    except Exception as exc:   # the executor lost the trial (dask KilledWorker, a broken pool, ...)
        lost = type(exc).__name__ in ("KilledWorker", "BrokenProcessPool", "CancelledError")
        kind = MeasureErrorNo.WORKER_LOST if lost else MeasureErrorNo.UNKNOWN_ERROR
        return MeasureResult((), kind, f"{type(exc).__name__}: {exc}", time.time() - started)
