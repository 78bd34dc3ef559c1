"""Dispatch: the compiler's only link to the tuner (AutoTVM's ``ApplyHistoryBest``).

``with autotune.apply_history_best("tune.log"):`` makes the best valid record of each task in the
log the config that :func:`lookup` returns for it; a build that compiles a workload asks
``lookup(template, args, target, config)`` and applies the config it gets. Outside every context,
or for a workload the log does not hold, ``lookup`` returns the template's fallback (its
hand-chosen default), marked ``is_fallback``. Contexts nest; the innermost that holds the
workload wins. A ``vta.conv2d`` workload is matched in its 13-int form
(:attr:`Conv2dWorkload.key`): a record written with the older 7 ints (``resnet18.C5``,
``conv2d:...`` specs, earlier logs) applies to the network layer of the same convolution.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Iterable

from vtakit.compiler.autotune.record import TuningRecord, best_by_task, load_records
from vtakit.compiler.autotune.space import ConfigEntity
from vtakit.compiler.autotune.task import create_task
from vtakit.compiler.topi_vta.workloads import Conv2dWorkload
from vtakit.hw.config import VTAConfig

__all__ = ["ApplyHistoryBest", "apply_history_best", "canonical_key", "lookup", "current_contexts"]

_local = threading.local()


def current_contexts() -> list["ApplyHistoryBest"]:
    """The active contexts, outermost first (per thread)."""
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class ApplyHistoryBest:
    """The best record per task of a log (or of records), as a context manager."""

    def __init__(self, records: str | Path | Iterable[TuningRecord]) -> None:
        if isinstance(records, (str, Path)):
            records = load_records(records)
        self.best: dict[str, TuningRecord] = {}
        for rec in best_by_task(records).values():   # two forms of one workload: the cheaper record
            key = canonical_key(rec.task_key)
            if key not in self.best or rec.result.cost < self.best[key].result.cost:
                self.best[key] = rec

    def record(self, key: str) -> TuningRecord | None:
        return self.best.get(canonical_key(key))

    def __len__(self) -> int:
        return len(self.best)

    def __enter__(self) -> "ApplyHistoryBest":
        current_contexts().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        current_contexts().remove(self)


def canonical_key(key: str) -> str:
    """A task key (:meth:`Task.key`, :attr:`TuningRecord.task_key`) with a ``vta.conv2d`` workload
    in its 13-int form; any other key unchanged."""
    name, args, target, config = json.loads(key)
    if name != "vta.conv2d" or len(args) == 13:
        return key
    return json.dumps([name, list(Conv2dWorkload.from_key(args).key), target, config], sort_keys=True)


def apply_history_best(path: str | Path) -> ApplyHistoryBest:
    """``with apply_history_best(log):`` -- builds inside use the log's best config per workload."""
    return ApplyHistoryBest(path)


def lookup(template_name: str, args: Iterable[int], target: str | None = None,
           config: VTAConfig | None = None) -> ConfigEntity:
    """The config to compile ``template_name`` on workload ``args`` with: the innermost active
    context's best record for the task, else the template's fallback (``cfg.is_fallback``)."""
    task = create_task(template_name, tuple(args), target=target, config=config)
    key = task.key()
    for ctx in reversed(current_contexts()):
        rec = ctx.record(key)
        if rec is not None:
            return task.config_space.entity_from_json(rec.entity)
    return task.config_space.fallback
