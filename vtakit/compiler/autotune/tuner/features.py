"""Features of a config for the cost model (AutoTVM's ``feature.py`` / touch extractor).

- ``knob``: the config's flattened knob values (:meth:`ConfigEntity.get_flatten_feature`).
  Cheapest; only comparable within one template.
- ``itervar``: statistics of the loop nest the config lowers to, with every loop kept (the
  schedule's phase-1 loop IR, before any target pass). For each loop, outermost first: log2 of
  its extent, its nesting depth, log2 of the iteration product down to it, a one-hot of its kind
  (serial, parallel, vectorized, unrolled, thread-bound: vthread/cthread) and log2 counts of the
  buffer stores and loads below it. A fixed number of loop slots (:data:`MAX_LOOPS`) keeps the
  vector the same length for every config and every task (AutoTVM's varied in length, issue
  #2097), so records of one task can warm-start the model of another. Two more, at fixed places,
  say what the loop slots only imply, relative to the target (:func:`tile_stats`; 0 for the
  accelerator): the vector width of the hottest vectorized loop in the CPU's vector registers, and
  the largest ``local`` (register) tile in vector registers over the CPU's register count (log2
  both), so that a 16-wide tile is one AVX-512 register wherever its loop sits and a register tile
  that cannot stay in registers is one feature, not a product of two.
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
from typing import Any, Callable

import numpy as np

from vtakit.compiler import ir
from vtakit.compiler.autotune.space import ConfigEntity
from vtakit.compiler.autotune.task import Task
from vtakit.compiler.lower.schedule_ops import schedule_to_primfunc
from vtakit.errors import TuningError

__all__ = ["FEATURE_TYPES", "MAX_LOOPS", "feature_length", "config_features", "loop_stats", "shared_features",
           "tile_stats"]

FEATURE_TYPES = ("itervar", "knob", "curve")
MAX_LOOPS = 24
_KINDS = (ir.ForKind.SERIAL, ir.ForKind.PARALLEL, ir.ForKind.VECTORIZED, ir.ForKind.UNROLLED,
          ir.ForKind.THREAD_BINDING)
_PER_LOOP = 5 + len(_KINDS)
_HIST_BINS = 12
_TILE = 2   # tile_stats' features after the loop slots
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


def tile_stats(func: ir.PrimFunc, lanes: Callable[[str], int], registers: int) -> tuple[float, float]:
    """``(log2 vector width, log2 register tile)`` of a CPU loop nest: the extent of the vectorized
    loop with the most iterations (the hot loop's vector) in vectors of its element type
    (``lanes(dtype)`` elements), and the largest ``local``-scope allocation in vectors over
    ``registers``; 0 for a nest without vectorized loops / local allocations."""
    hot = [0.0, 0.0]   # iteration product, width in vectors
    tile = 0.0

    def visit(node: Any, product: float) -> None:
        nonlocal tile
        if isinstance(node, ir.Allocate) and node.buffer.scope == "local":
            size = math.prod(d.value if isinstance(d, ir.IntImm) else 1 for d in node.buffer.shape)
            tile = max(tile, size / lanes(node.buffer.dtype) / registers)
        if isinstance(node, ir.For):
            extent = node.extent.value if isinstance(node.extent, ir.IntImm) else 1
            product *= max(1, extent)
            if node.kind == ir.ForKind.VECTORIZED and product >= hot[0]:
                hot[0], hot[1] = product, extent / lanes(_store_dtype(node.body))
        for child in ir.children(node):
            visit(child, product)

    visit(func.body, 1.0)
    return (math.log2(hot[1]) if hot[1] else 0.0, math.log2(tile) if tile else 0.0)


def _store_dtype(node: Any) -> str:
    """The element type of the first buffer store in ``node``."""
    if isinstance(node, ir.BufferStore):
        return node.buffer.dtype
    for child in ir.children(node):
        found = _store_dtype(child)
        if found:
            return found
    return ""


def _itervar(stats: list[tuple[float, ...]], tile: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
    vec = np.zeros(MAX_LOOPS * _PER_LOOP + 2 + _TILE, dtype=np.float32)
    for i, (ext, depth, prod, kind, stores, loads) in enumerate(stats[:MAX_LOOPS]):
        row = vec[i * _PER_LOOP:(i + 1) * _PER_LOOP]
        row[0], row[1], row[2], row[3], row[4] = ext, depth, prod, stores, loads
        row[5 + int(kind)] = 1.0
    vec[-2 - _TILE] = len(stats)
    vec[-1 - _TILE] = max((s[2] for s in stats), default=0.0)
    vec[-_TILE:] = tile
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
        return MAX_LOOPS * _PER_LOOP + 2 + _TILE
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
        func = schedule_to_primfunc(s, tensors, "features")
        stats = loop_stats(func)
    except Exception:   # noqa: BLE001 -- an invalid config: the measurement will say why
        return np.zeros(feature_length(feature_type, task), dtype=np.float32)
    if feature_type == "curve":
        return _curve(stats)
    tile = (0.0, 0.0)
    if task.target == "llvm":
        from vtakit.compiler.ops import cpu   # the host's vector width and register count
        tile = tile_stats(func, lambda dtype: cpu.vector_lanes(dtype or "float32"),
                          cpu.default_target().vector_registers)
    return _itervar(stats, tile)
