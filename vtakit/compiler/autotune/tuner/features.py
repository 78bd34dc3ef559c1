"""Features of a config for the cost model (AutoTVM's ``feature.py`` / touch extractor).

- ``knob``: the config's flattened knob values (:meth:`ConfigEntity.get_flatten_feature`).
  Cheapest; only comparable within one template.
- ``itervar``: statistics of the loop nest the config lowers to, with every loop kept (the
  schedule's phase-1 loop IR, before any target pass). For each loop, outermost first: log2 of
  its extent, its nesting depth, log2 of the iteration product down to it, a one-hot of its kind
  (serial, parallel, vectorized, unrolled, thread-bound: vthread/cthread) and log2 counts of the
  buffer stores and loads below it. A fixed number of loop slots (:data:`MAX_LOOPS`) keeps the
  vector the same length for every config and every task (AutoTVM's varied in length, issue
  #2097), so records of one task can warm-start the model of another.
- ``curve``: the same loop statistics summarised as fixed histograms per loop kind (extent, depth,
  iteration product): coarser, and independent of the order loops appear in.

A config the template cannot instantiate gets a zero vector (it will be measured as an error).
A config's features depend only on the task and the config, so they are computed once per process
(:func:`shared_features`, the last :data:`_SHARED_TASKS` tasks): tuners of the same task (seeds,
a resumed run, a benchmark's repeats) do not lower the same config again.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import numpy as np

from vtakit.compiler import ir
from vtakit.compiler.autotune.space import ConfigEntity
from vtakit.compiler.autotune.task import Task
from vtakit.compiler.lower.schedule_ops import schedule_to_primfunc
from vtakit.errors import TuningError

__all__ = ["FEATURE_TYPES", "MAX_LOOPS", "feature_length", "config_features", "loop_stats", "shared_features"]

FEATURE_TYPES = ("itervar", "knob", "curve")
MAX_LOOPS = 24
_KINDS = (ir.ForKind.SERIAL, ir.ForKind.PARALLEL, ir.ForKind.VECTORIZED, ir.ForKind.UNROLLED,
          ir.ForKind.THREAD_BINDING)
_PER_LOOP = 5 + len(_KINDS)
_HIST_BINS = 12
_SHARED_TASKS = 16
_SHARED: "OrderedDict[tuple[str, str], dict[int, np.ndarray]]" = OrderedDict()


def shared_features(task: Task, feature_type: str) -> dict[int, np.ndarray]:
    """This process's cache of ``task``'s ``feature_type`` vectors, by config index."""
    key = (task.key(), feature_type)
    if key not in _SHARED:
        _SHARED[key] = {}
        while len(_SHARED) > _SHARED_TASKS:
            _SHARED.popitem(last=False)
    _SHARED.move_to_end(key)
    return _SHARED[key]


def loop_stats(func: ir.PrimFunc) -> list[tuple[float, ...]]:
    """``(log2 extent, depth, log2 product, kind index, log2 stores, log2 loads)`` per loop, pre-order."""
    out: list[tuple[float, ...]] = []

    def visit(node: Any, depth: int, product: float) -> tuple[int, int]:
        if isinstance(node, ir.For):
            extent = node.extent.value if isinstance(node.extent, ir.IntImm) else 1
            slot = len(out)
            out.append(())
            inner = product * max(1, extent)
            stores, loads = visit(node.body, depth + 1, inner)
            out[slot] = (math.log2(max(1, extent)), float(depth), math.log2(inner), float(_KINDS.index(node.kind)),
                         math.log2(1 + stores), math.log2(1 + loads))
            return stores, loads
        stores = int(isinstance(node, ir.BufferStore))
        loads = int(isinstance(node, (ir.BufferLoad, ir.ProducerLoad)))
        for child in ir.children(node):
            s, l = visit(child, depth, product)
            stores, loads = stores + s, loads + l
        return stores, loads

    visit(func.body, 0, 1.0)
    return out


def _itervar(stats: list[tuple[float, ...]]) -> np.ndarray:
    vec = np.zeros(MAX_LOOPS * _PER_LOOP + 2, dtype=np.float32)
    for i, (ext, depth, prod, kind, stores, loads) in enumerate(stats[:MAX_LOOPS]):
        row = vec[i * _PER_LOOP:(i + 1) * _PER_LOOP]
        row[0], row[1], row[2], row[3], row[4] = ext, depth, prod, stores, loads
        row[5 + int(kind)] = 1.0
    vec[-2] = len(stats)
    vec[-1] = max((s[2] for s in stats), default=0.0)
    return vec


def _curve(stats: list[tuple[float, ...]]) -> np.ndarray:
    parts = []
    for k in range(len(_KINDS)):
        mine = [s for s in stats if int(s[3]) == k]
        for col, top in ((0, 12.0), (1, 12.0), (2, 30.0)):
            hist, _ = np.histogram([s[col] for s in mine], bins=_HIST_BINS, range=(0.0, top))
            parts.append(hist.astype(np.float32))
    return np.concatenate(parts)


def feature_length(feature_type: str, task: Task) -> int:
    if feature_type == "itervar":
        return MAX_LOOPS * _PER_LOOP + 2
    if feature_type == "curve":
        return len(_KINDS) * 3 * _HIST_BINS
    return len(task.config_space.get(0).get_flatten_feature())


def config_features(task: Task, cfg: ConfigEntity, feature_type: str) -> np.ndarray:
    """The ``feature_type`` vector of ``cfg`` (zeros if the template rejects the config)."""
    if feature_type not in FEATURE_TYPES:
        raise TuningError(f"unknown feature_type {feature_type!r}; expected one of {FEATURE_TYPES}")
    if feature_type == "knob":
        return np.asarray(cfg.get_flatten_feature(), dtype=np.float32)
    try:
        s, tensors = task.instantiate(cfg)
        stats = loop_stats(schedule_to_primfunc(s, tensors, "features"))
    except Exception:   # noqa: BLE001 -- an invalid config: the measurement will say why
        return np.zeros(feature_length(feature_type, task), dtype=np.float32)
    return _itervar(stats) if feature_type == "itervar" else _curve(stats)
