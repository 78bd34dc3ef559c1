#!/usr/bin/env python3
"""Does the cost model beat random search, and does tuning pay? (issue 13's acceptance lines)

- CPU GEMM (``llvm.dense``, 1024^3 by default): trials XGB and random search need to reach 95% of
  the best config any run found (median over ``--seeds``), the space's size, and the tuned best
  against today's hand schedule (``ops.cpu.schedule_dense``), both built and timed in this
  process, round after round, alternating (``--ratio-rounds``): the ratio tuned / hand.
- CPU conv2d (``llvm.conv2d``, ResNet-18 C5's shape in fp32 by default): the space measured
  whole (or ``--cpu-conv-trials`` XGB trials where it is bigger), and the best against the hand
  schedule the graph compiler runs (``ops.cpu.schedule_conv2d_nchw_packed`` on a pre-packed
  weight), timed the same way.
- Accelerator: on ResNet-18 layers (C5, C9 by default), best-so-far after ``--trials`` trials of
  XGB against the median of random search, against the exhaustive optimum with ``--exhaustive``
  (every config the space's filter accepts, in index order; or ``--exhaustive-layers C9``), the
  default tiling's cycles, and the trials that were errors.
- Transfer: XGB on the last layer, warm-started (``load_history``) from the other layers' records
  (``--history-layers``: tuned here, XGB seed 0, ``--history-trials`` each; or ``--history LOG``)
  against cold, median over seeds. The target layer is measured exhaustively, and the trials to
  reach three marks are counted: 95% of the exhaustive optimum (cost <= optimum / 0.95: the
  issue's mark), the exhaustive top 1% (cost <= the ceil(1%)-th best valid cost) and the optimum
  itself. Both with the tuner's default behaviour (the template's fallback, the default tiling,
  measured first: where the default is already within 95% of the optimum, every run reaches the
  first two marks at trial 1 and only the optimum tells runs apart) and with
  ``fallback_first=False`` (the search has to find good configs itself: what the model's warm
  start is for).

Measurements are memoised per (task, config) in this process: every seed and tuner that proposes
a config measured before gets the first measurement again, not a new one (the JSON's ``memo``
says how many trials were answered so). On the CPU this makes every tuner see the same value for
a config (the noise of a loaded host is not re-drawn per tuner), and it bounds the wall time by
the configs measured, not the trials; on the accelerator the cycle model is deterministic, so it
changes nothing but the time. ``--memo LOG ...`` answers the configs that earlier runs' logs hold
from them (the first record per task and config; a record of another VTAConfig is another task),
so comparing tuner variants measures only the configs no earlier run did; ``--remeasure LOG ...``
first measures such a table again in one sitting (the fastest logged first) so that a ``--memo``
table does not mix hours of a loaded host. Every run still writes
its own log under ``--out``. The curves
(best-so-far per trial) go to ``curves.json`` and, with matplotlib, ``curves.png``. ``--json``
prints the summary. The figures depend on the machine (and for the CPU on its load); the script
reports, it asserts nothing.

    python scripts/bench_tune.py --json                                   # the full issue-13 run (hours)
    python scripts/bench_tune.py --cpu 256 --cpu-conv '' --layers C5 --trials 32 --seeds 2 --json   # short
    VTAKIT_NUM_THREADS=1 python scripts/bench_tune.py --cpu 1024 --cpu-trials 64 --plan-size 16 --number 1 \
        --repeat 3 --timer process --timeout 10 --ratio-rounds 9 --layers '' --parallel 2 --json  # the CPU lines
    VTAKIT_NUM_THREADS=1 python scripts/bench_tune.py --cpu 1024 --cpu-trials 192 --cpu-stop-at-mark --seeds 10 \
        --plan-size 8 --xgb-diversity 4 --xgb-local-picks 4 --number 1 --repeat 3 --timer process --timeout 10 \
        --cpu-conv '' --layers '' --parallel 2 --memo TABLE.log --json   # the GEMM line uncapped, on a table
    python scripts/bench_tune.py --cpu 0 --cpu-conv '' --layers C9 --trials 64 --seeds 5 --plan-size 16 \
        --exhaustive-layers C9 --history-layers C2,C3,C4,C5,C6,C7,C8,C10,C11 --json   # C9 and transfer
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable

import numpy as np

from vtakit import autotune
from vtakit.compiler import te
from vtakit.compiler.autotune.measure import TIMERS, LocalBuilder, LocalRunner, process_times, run_trial
from vtakit.compiler.autotune.record import TuningRecord, load_records
from vtakit.compiler.autotune.report import plot_curves
from vtakit.compiler.backend.llvm_runtime import host_target, num_threads
from vtakit.compiler.build import build
from vtakit.compiler.ops import cpu, nn
from vtakit.compiler.ops.layout import pack_conv2d_kernel
from vtakit.errors import TuningError

PLAN_SIZE = [64]   # XGB's plan size (AutoTVM's default; --plan-size for short runs)
XGB_OPTIONS: dict[str, Any] = {}   # more XGBTuner arguments (--xgb-diversity, --xgb-local-picks)
TUNERS: dict[str, Callable[..., autotune.Tuner]] = {
    "xgb": lambda task, seed, **kw: autotune.XGBTuner(task, plan_size=PLAN_SIZE[0], seed=seed,
                                                      **{**XGB_OPTIONS, **kw}),
    "random": lambda task, seed, **kw: autotune.RandomTuner(task, seed=seed),
    # XGB without the template's fallback as its first trial: the search has to find good configs itself
    "xgb_no_default": lambda task, seed, **kw: autotune.XGBTuner(task, plan_size=PLAN_SIZE[0], seed=seed,
                                                                 fallback_first=False, **XGB_OPTIONS)}
VTA_TUNERS = ("xgb", "random")

ERRORS: dict[str, list[int]] = {}   # log name -> [trials, errors]


class MemoExecutor(Executor):
    """Measures each (task, config) once: a trial of a config already submitted gets the first
    trial's future (its result), so every tuner and seed of this process shares one measurement
    per config."""

    def __init__(self, inner: Executor) -> None:
        super().__init__()
        self.inner = inner
        self.cache: dict[tuple[str, int], Future] = {}
        self.submitted = 0
        self.preloaded = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        task, index = args[0], args[1]
        self.submitted += 1
        key = (task.key(), index)
        if key not in self.cache or self.cache[key].cancelled():   # a tuner that stopped early cancels
            self.cache[key] = self.inner.submit(fn, *args, **kwargs)
        return self.cache[key]

    def preload(self, records: list[TuningRecord]) -> int:
        """Answer the configs of ``records`` (an earlier run's logs: ``--memo``) from them: the first
        record of each (task, config) is its measurement. Returns how many configs it added."""
        added = 0
        for r in records:
            key = (r.task_key, r.index)
            if key not in self.cache:
                fut: Future = Future()
                fut.set_result(r.result)
                self.cache[key] = fut
                self.preloaded += 1
                added += 1
        return added

    def measured(self, task: autotune.Task | None = None) -> int:
        return sum(1 for k in self.cache if task is None or k[0] == task.key())

    def result(self, task: autotune.Task, index: int) -> autotune.MeasureResult:
        """The (memoised) measurement of config ``index``."""
        return self.submit(run_trial, task, index, OPTION[0].builder, OPTION[0].runner).result()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.inner.shutdown(wait=wait, cancel_futures=cancel_futures)

    def stats(self) -> dict[str, int]:
        return {"trials_submitted": self.submitted, "configs_measured": len(self.cache) - self.preloaded,
                "configs_preloaded": self.preloaded,
                "trials_answered_from_memo": self.submitted - len(self.cache) + self.preloaded}


OPTION: list[autotune.MeasureOption] = []
MEMO: list[MemoExecutor] = []


def _curve(log: Path) -> list[float]:
    best, out = float("inf"), []
    records = load_records(log)
    for r in records:
        best = min(best, r.result.cost)
        out.append(best)
    ERRORS[log.name] = [len(records), sum(not r.result.ok for r in records)]
    return out


def _tune(task: autotune.Task, tuner: str, trials: int, seed: int, out: Path,
          history: list[TuningRecord] | None = None, tag: str = "", stop_at: float | None = None,
          **kwargs: Any) -> list[float]:
    """One run's best-so-far curve; with ``stop_at``, the run stops proposing configs once its best
    cost is at or under it (the trials already in flight still finish)."""
    log = out / f"{task.name}-{'_'.join(map(str, task.args))}-{tuner}{tag}-s{seed}.log"
    log.unlink(missing_ok=True)
    t = TUNERS[tuner](task, seed, **kwargs)
    if history:
        t.load_history(history)
    if stop_at is not None:
        has_next = t.has_next
        t.has_next = lambda: has_next() and t.best_cost > stop_at   # type: ignore[method-assign]
    t.tune(trials, OPTION[0], log_file=log)
    return _curve(log)


def _trials_to(curve: list[float], target: float) -> int | None:
    return next((i + 1 for i, c in enumerate(curve) if c <= target), None)


def _median(values: list[int | None], cap: int) -> float:
    """Median trials to a mark; a run that never reached it counts as ``cap + 1``."""
    return float(statistics.median(v if v is not None else cap + 1 for v in values))


# ---------------------------------------------------------------------------- CPU
def _alternate(modules: dict[str, Any], args: list[np.ndarray], rounds: int, number: int,
               repeat: int) -> dict[str, Any]:
    """Time each module ``rounds`` times, alternating (so load changes hit all alike): the median
    per module and the median of the per-round ratios to the first module."""
    times: dict[str, list[float]] = {name: [] for name in modules}
    fastest: dict[str, float] = {name: float("inf") for name in modules}
    for mod in modules.values():   # a discarded round: first calls, thread pool start
        mod.time_evaluator(number, 1)(*args)
    for _ in range(rounds):
        for name, mod in modules.items():
            if OPTION[0].runner.timer == "process":   # as the trials were timed
                results = process_times(mod, args, number, repeat)
            else:
                results = tuple(mod.time_evaluator(number, repeat)(*args).results)
            times[name].append(statistics.median(results))
            fastest[name] = min(fastest[name], *results)
    base = next(iter(modules))
    out: dict[str, Any] = {f"{name}_seconds_median": statistics.median(t) for name, t in times.items()}
    out.update({f"{name}_seconds_min": t for name, t in fastest.items()})
    for name in list(modules)[1:]:
        out[f"{name}_over_{base}_per_round"] = [a / b for a, b in zip(times[name], times[base])]
        out[f"{name}_over_{base}_median"] = statistics.median(out[f"{name}_over_{base}_per_round"])
        out[f"{name}_over_{base}_min"] = fastest[name] / fastest[base]   # the least disturbed calls
    return out


def bench_ratio_only(logs: Path, rounds: int) -> dict:
    """Tuned vs hand again, for the best CPU configs the logs under ``logs`` hold (a quieter moment)."""
    best: dict[str, TuningRecord] = {}
    for path in sorted(logs.glob("llvm.*.log")):
        for r in load_records(path):
            if r.result.ok and (r.task_key not in best or r.result.cost < best[r.task_key].result.cost):
                best[r.task_key] = r
    out = {}
    runner = OPTION[0].runner
    for r in best.values():
        task = autotune.create_task(r.task_name, tuple(r.args), target="llvm")
        index = task.config_space.entity_from_json(r.entity).index
        inputs, expected = task.reference(0)
        args = [*inputs, np.zeros_like(expected)]
        hand = _hand_gemm(task.args[0]) if r.task_name == "llvm.dense" else _hand_conv(task.args)[0]
        out[f"{r.task_name} {list(task.args)}"] = {
            "best_config": task.config_space.get(index).knob_values(), "logged_seconds": r.result.cost,
            "rounds": rounds, **_alternate({"hand": hand, "tuned": _tuned(task, index)}, args, rounds,
                                           runner.number, runner.repeat)}
    return out


class _ListTuner(autotune.GridSearchTuner):
    """The configs of a list, in its order (re-measuring a table: ``--remeasure``)."""

    name = "remeasure"

    def __init__(self, task: autotune.Task, order: list[int]) -> None:
        self._list = np.array(order, dtype=np.int64)
        super().__init__(task)

    def _make_order(self) -> np.ndarray:
        return self._list


def bench_remeasure(paths: list[str], out: Path) -> dict:
    """Measure again, in this process, every config of the CPU tasks the logs ``paths`` hold (each
    once: the first record per task and config names it), the fastest logged first, into
    ``out/<task>-remeasure.log``: a table measured in one sitting, for ``--memo``. A run given the
    same ``--out`` resumes (the configs its log holds are not measured again)."""
    by_task: dict[str, tuple[TuningRecord, dict[int, float]]] = {}
    for r in (r for path in paths for r in load_records(path)):
        if r.target != "llvm":
            continue
        first, seen = by_task.setdefault(r.task_key, (r, {}))
        seen.setdefault(r.index, r.result.cost if r.result.ok else math.inf)
    result = {}
    for first, seen in by_task.values():
        task = autotune.create_task(first.task_name, tuple(first.args), target="llvm")
        order = sorted(seen, key=lambda i: (seen[i], i))
        log = out / f"{task.name}-{'_'.join(map(str, task.args))}-remeasure.log"
        start, load = time.perf_counter(), os.getloadavg()
        _ListTuner(task, order).tune(len(order), OPTION[0], log_file=log)
        recs = load_records(log)
        result[f"{task.name} {list(task.args)}"] = {
            "log": str(log), "configs": len(order), "records": len(recs),
            "errors": sum(not r.result.ok for r in recs), "seconds": time.perf_counter() - start,
            "load_average_at_start": load, "load_average_at_end": os.getloadavg()}
    return result


def _hand_gemm(n: int) -> Any:
    data = te.placeholder((n, n), "float32", name="data")
    weight = te.placeholder((n, n), "float32", name="weight")
    out = nn.dense(data, weight, pack_block=cpu.dense_pack_block("float32", out_features=n))
    return build(cpu.schedule_dense(out), [data, weight, out], target="llvm")


def _tuned(task: autotune.Task, index: int) -> Any:
    s, tensors = task.instantiate(task.config_space.get(index))
    return build(s, tensors, target="llvm")


def _best_index(task: autotune.Task) -> tuple[int, float]:
    best = min((f.result().cost, k[1]) for k, f in MEMO[0].cache.items()
               if k[0] == task.key() and f.done() and not f.cancelled() and f.exception() is None)
    return best[1], best[0]


def _memo_best(task: autotune.Task) -> float:
    """The best cost of ``task`` among the ``--memo`` tables' records (inf without one)."""
    costs = [f.result().cost for k, f in MEMO[0].cache.items() if k[0] == task.key() and f.done()
             and not f.cancelled() and f.exception() is None and f.result().ok]
    return min(costs, default=float("inf"))


def bench_cpu(n: int, trials: int, seeds: int, out: Path, curves: dict, rounds: int,
              tuners: list[str] | None = None, stop_at_mark: bool = False) -> dict:
    """``stop_at_mark``: the best of the ``--memo`` table known before the runs sets the mark (95%
    of it) and each run stops once it reaches it, so a long cap costs only the trials a run needs;
    the mark reported is still 95% of the best of the table and the runs (a run that stopped at the
    table's mark and then falls short of a lower final one counts as not reaching it)."""
    task = autotune.create_task("llvm.dense", (n, n, n), target="llvm")
    start = time.perf_counter()
    table_best = _memo_best(task)
    if stop_at_mark and not math.isfinite(table_best):
        raise TuningError("--cpu-stop-at-mark needs a --memo table of the GEMM's configs")
    stop = table_best / 0.95 if stop_at_mark else None
    names = tuners or list(TUNERS)
    runs = {name: [_tune(task, name, trials, s, out, stop_at=stop) for s in range(seeds)] for name in names}
    best = min(min(min(c) for cs in runs.values() for c in cs), table_best if stop_at_mark else float("inf"))
    for name, cs in runs.items():
        for s, c in enumerate(cs):
            curves[f"llvm.dense {n}^3 / {name} seed {s}"] = c
    reach = {name: [_trials_to(c, best / 0.95) for c in cs] for name, cs in runs.items()}
    med = {name: _median(v, trials) for name, v in reach.items()}
    best_index, _ = _best_index(task)
    rank = sorted(f.result().cost for k, f in MEMO[0].cache.items() if k[0] == task.key() and f.done()
                  and f.exception() is None and f.result().ok)
    space = task.config_space
    fallback = MEMO[0].result(task, space.fallback.index)
    runner = OPTION[0].runner
    inputs, _ = task.reference(0)
    args = [*inputs, np.zeros((n, n), np.float32)]
    ratio = _alternate({"hand": _hand_gemm(n), "tuned": _tuned(task, best_index)}, args, rounds,
                       runner.number, runner.repeat)
    return {"workload": [n, n, n], "space": len(space), "space_valid": space.valid_count(), "trials": trials,
            "seeds": seeds, "seconds": time.perf_counter() - start, "configs_measured": MEMO[0].measured(task),
            "best_seconds": best, "best_gflops": 2 * n ** 3 / best / 1e9,
            "best_config": space.get(best_index).knob_values(), "fallback_is_hand_schedule": True,
            "fallback_seconds": fallback.cost, "fallback_config": space.fallback.knob_values(),
            "trials_to_95pct_of_best": reach, "median_trials_to_95pct_of_best": med,
            "median_trials_to_95pct_of_best_per_5_seeds": {
                name: {f"seeds {g}-{min(g + 5, seeds) - 1}": _median(v[g:g + 5], trials) for g in range(0, seeds, 5)}
                for name, v in reach.items()},
            **{f"{name}_within_a_third_of_random": med[name] * 3 <= med["random"]
               for name in names if name != "random" and "random" in med},
            "stop_at_mark": {"table_best_seconds": table_best, "stop_at_seconds": stop,
                             "runs_stopped_short_of_final_mark": sum(
                                 stop is not None and c[-1] <= stop and c[-1] > best / 0.95
                                 for cs in runs.values() for c in cs)} if stop_at_mark else None,
            "measured_configs_within_95pct_of_best": sum(c <= best / 0.95 for c in rank),
            "measured_configs_ok": len(rank),
            "fallback_within_95pct_of_best": fallback.cost <= best / 0.95,
            "trial_errors_per_run": {k: v[1] for k, v in ERRORS.items() if k.startswith(f"llvm.dense-{n}_")},
            "best_after_trials": {name: [c[-1] for c in cs] for name, cs in runs.items()},
            "tuned_vs_hand_same_process": {"rounds": rounds, **ratio}}


def _hand_conv(wl: tuple[int, ...]) -> Any:
    h, w, ci, co, k, pad, stride = wl
    block = cpu.conv2d_channel_block(co, "float32")
    data = te.placeholder((1, ci, h, w), "float32", name="data")
    kernel = te.placeholder((co // block, ci, k, k, block), "float32", name="kernel")
    out = nn.conv2d_nchw_packed(data, kernel, stride, pad)
    return build(cpu.schedule_conv2d_nchw_packed(out), [data, kernel, out], target="llvm"), block


def bench_cpu_conv(wl: tuple[int, ...], trials: int, out: Path, curves: dict, rounds: int) -> dict:
    task = autotune.create_task("llvm.conv2d", wl, target="llvm")
    space = task.config_space
    start = time.perf_counter()
    exhaustive = space.valid_count() <= trials
    if exhaustive:
        tuner_name, curve = "grid", None
        log = out / f"llvm.conv2d-{'_'.join(map(str, wl))}-grid.log"
        log.unlink(missing_ok=True)
        autotune.GridSearchTuner(task).tune(len(space), OPTION[0], log_file=log)
        curve = _curve(log)
    else:
        tuner_name, curve = "xgb", _tune(task, "xgb", trials, 0, out)
    curves[f"llvm.conv2d {wl} / {tuner_name}"] = curve
    best_index, best = _best_index(task)
    hand, block = _hand_conv(wl)
    inputs, _ = task.reference(0)
    h, w, ci, co, k, pad, stride = wl
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    args = [inputs[0], inputs[1], np.zeros((1, co, oh, ow), np.float32)]
    if inputs[1].ndim == 4:   # the plain template (no packing): the hand schedule reads the packed weight
        raise TuningError(f"conv2d {wl}: the graph compiler does not pack this weight; no packed hand schedule")
    assert inputs[1].shape[-1] == block
    ratio = _alternate({"hand": hand, "tuned": _tuned(task, best_index)}, args, rounds,
                       OPTION[0].runner.number, OPTION[0].runner.repeat)
    return {"workload": list(wl), "space": len(space), "space_valid": space.valid_count(), "search": tuner_name,
            "trials": len(curve), "seconds": time.perf_counter() - start, "best_seconds": best,
            "best_config": space.get(best_index).knob_values(),
            "fallback_seconds": MEMO[0].result(task, space.fallback.index).cost,
            "fallback_config": space.fallback.knob_values(), "fallback_is_hand_schedule": True,
            "tuned_vs_hand_same_process": {"rounds": rounds, **ratio}}


# ---------------------------------------------------------------------------- accelerator
def _exhaustive(task: autotune.Task, out: Path, name: str) -> list[TuningRecord]:
    log = out / f"{name}-exhaustive.log"
    log.unlink(missing_ok=True)
    autotune.GridSearchTuner(task).tune(len(task.config_space), OPTION[0], log_file=log)
    return load_records(log)


def bench_vta(layers: list[str], trials: int, seeds: int, exhaustive: bool | list[str], out: Path,
              curves: dict) -> dict:
    """``exhaustive``: every layer (True) or the layers named; it measures every config the space's
    filter accepts (``space_valid``), in index order."""
    result = {}
    for layer in layers:
        task = autotune.create_task("vta.conv2d", f"resnet18.{layer}")
        default = MEMO[0].result(task, task.config_space.fallback.index)
        recs = _exhaustive(task, out, layer) if exhaustive is True or (exhaustive and layer in exhaustive) else None
        runs = {name: [_tune(task, name, trials, s, out) for s in range(seeds)] for name in VTA_TUNERS}
        for name, cs in runs.items():
            for s, c in enumerate(cs):
                curves[f"{layer} / {name} seed {s}"] = c
        space = task.config_space
        entry: dict[str, Any] = {"space": len(space), "space_valid": space.valid_count(),
                                 "default_cycles": default.cost, "xgb_best": [c[-1] for c in runs["xgb"]],
                                 "random_best": [c[-1] for c in runs["random"]]}
        random_median = statistics.median(entry["random_best"])
        entry["random_median"] = random_median
        entry["xgb_never_worse_than_random_median"] = all(c <= random_median for c in entry["xgb_best"])
        entry["tuned_best_cycles"] = min(entry["xgb_best"] + entry["random_best"])
        counts = [v for k, v in ERRORS.items() if k.startswith(f"{task.name}-{'_'.join(map(str, task.args))}-")
                  and "-cold" not in k and "-warm" not in k]
        entry["trials_measured"], entry["trial_errors"] = sum(c[0] for c in counts), sum(c[1] for c in counts)
        if recs is not None:   # measured first: the tuners' trials then come from the memo
            best = min((r for r in recs if r.result.ok), key=lambda r: r.result.cost)
            entry["exhaustive_measured"] = len(recs)
            entry["exhaustive_errors"] = sum(not r.result.ok for r in recs)
            entry["exhaustive_best_cycles"] = best.result.cost
            entry["exhaustive_best_config"] = space.entity_from_json(best.entity).knob_values()
        result[layer] = entry
    return result


def _history(target: str, layers: list[str], paths: list[str], trials: int, out: Path) -> tuple[list, dict]:
    """Records of other layers: from ``paths`` if given, else XGB (seed 0) on each of ``layers``."""
    target_args = autotune.create_task("vta.conv2d", f"resnet18.{target}").args
    if paths:
        recs = [r for p in paths for r in load_records(p)]
        source = {"logs": paths}
    else:
        recs = []
        for layer in layers:
            task = autotune.create_task("vta.conv2d", f"resnet18.{layer}")
            log = out / f"history-{layer}.log"
            log.unlink(missing_ok=True)
            autotune.XGBTuner(task, plan_size=PLAN_SIZE[0], seed=0).tune(trials, OPTION[0], log_file=log)
            recs += load_records(log)
        source = {"layers": layers, "tuner": "xgb", "seed": 0, "trials_each": trials}
    recs = [r for r in recs if r.task_name == "vta.conv2d" and tuple(r.args) != tuple(target_args)]
    return recs, source


def bench_transfer(target: str, history: list[TuningRecord], source: dict, trials: int, seeds: int, out: Path,
                   curves: dict) -> dict:
    task = autotune.create_task("vta.conv2d", f"resnet18.{target}")
    exhaustive = out / f"{target}-exhaustive.log"
    recs = load_records(exhaustive) if exhaustive.exists() else _exhaustive(task, out, target)
    costs = sorted(r.result.cost for r in recs if r.result.ok)
    top = math.ceil(0.01 * len(costs))
    marks = {"95pct_of_optimum": costs[0] / 0.95, "top_1pct": costs[top - 1], "optimum": costs[0]}
    default = MEMO[0].result(task, task.config_space.fallback.index).cost
    result: dict[str, Any] = {
        "layer": target, "history_records": len(history), "history_from": source, "trials": trials, "seeds": seeds,
        "exhaustive_valid_configs": len(costs), "default_cycles": default,
        "default_rank": 1 + sum(c < default for c in costs),
        "marks": {**marks, "top_1pct_configs": top}}
    for mode, first in (("default_first", True), ("search_only", False)):
        runs = {}
        for kind in ("cold", "warm"):
            runs[kind] = [_tune(task, "xgb", trials, s, out, history if kind == "warm" else None,
                                tag=f"-{kind}-{mode}", fallback_first=first) for s in range(seeds)]
            for s, c in enumerate(runs[kind]):
                curves[f"{target} transfer {mode} / {kind} seed {s}"] = c
        entry: dict[str, Any] = {}
        for mark, value in marks.items():
            reach = {kind: [_trials_to(c, value) for c in cs] for kind, cs in runs.items()}
            med = {kind: _median(v, trials) for kind, v in reach.items()}
            entry[mark] = {"trials": reach, "median": med, "warm_fewer": med["warm"] < med["cold"]}
        entry["best_after_trials"] = {kind: [c[-1] for c in cs] for kind, cs in runs.items()}
        result[mode] = entry
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", type=int, default=1024, metavar="N", help="GEMM size N^3 (0: skip the CPU GEMM)")
    p.add_argument("--cpu-trials", type=int, default=200, help="trials per GEMM run (the cap)")
    p.add_argument("--cpu-tuners", default=",".join(TUNERS), help=f"GEMM tuners, comma-separated (of {', '.join(TUNERS)})")
    p.add_argument("--cpu-stop-at-mark", action="store_true", help="GEMM: stop each run once it reaches 95%% of "
                   "the --memo table's best (the mark), so that a long --cpu-trials cap costs only the trials "
                   "a run needs to reach it")
    p.add_argument("--cpu-conv", default="28,28,128,128,3,1,1", help="fp32 conv2d H,W,CI,CO,K,PAD,STRIDE "
                   "('' : skip); default ResNet-18 C5's shape")
    p.add_argument("--cpu-conv-trials", type=int, default=200, help="measure the whole conv space if it is "
                   "no bigger, else this many XGB trials")
    p.add_argument("--ratio-rounds", type=int, default=7, help="alternating rounds of tuned vs hand timing")
    p.add_argument("--ratio-only", type=Path, default=None, metavar="DIR", help="only time tuned vs hand again, "
                   "for the best CPU configs of the logs in DIR (an earlier --out)")
    p.add_argument("--number", type=int, default=3, help="CPU: calls per repeat")
    p.add_argument("--repeat", type=int, default=5, help="CPU: repeats (the cost is their median)")
    p.add_argument("--timer", choices=TIMERS, default="wall", help="CPU: wall time, or the process's CPU "
                   "time ('process': with VTAKIT_NUM_THREADS=1, robust to other load on a shared host)")
    p.add_argument("--timeout", type=float, default=120, help="seconds a trial's build or run may take "
                   "(a slower one is a timeout record, as in AutoTVM)")
    p.add_argument("--layers", default="C5,C9", help="ResNet-18 layers, comma-separated ('' : skip)")
    p.add_argument("--trials", type=int, default=64, help="accelerator trials per run")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--exhaustive", action="store_true", help="also measure every config of each layer")
    p.add_argument("--exhaustive-layers", default="", help="measure every config of only these layers "
                   "(comma-separated)")
    p.add_argument("--no-transfer", action="store_true")
    p.add_argument("--history-layers", default="", help="transfer: tune these layers (XGB, seed 0) for the "
                   "history (default: the other --layers' runs)")
    p.add_argument("--history-trials", type=int, default=64)
    p.add_argument("--history", nargs="*", default=[], help="transfer: take the history from these logs")
    p.add_argument("--parallel", type=int, default=None, help="trials in flight (default: the CPUs)")
    p.add_argument("--plan-size", type=int, default=64, help="XGB's plan size (default 64, AutoTVM's)")
    p.add_argument("--xgb-diversity", type=float, default=None, metavar="R", help="XGB's diversity_filter_ratio "
                   "(AutoTVM's: each plan the most diverse plan_size of the model's top R x plan_size)")
    p.add_argument("--xgb-local-picks", type=int, default=0, metavar="L", help="XGB's local_picks (each plan "
                   "starts with the model's L best one-knob neighbours of the best measured config; the first, "
                   "random plan mutates the best so far every third pick)")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "vtakit-bench-tune",
                   help="where the logs, curves.json and curves.png go")
    p.add_argument("--memo", nargs="*", default=[], metavar="LOG", help="answer the configs these logs hold "
                   "(an earlier run's, e.g. its exhaustive log) from them instead of measuring them again; "
                   "for the deterministic cycle model, or CPU timings of the same build and host")
    p.add_argument("--remeasure", nargs="*", default=[], metavar="LOG", help="only measure again every CPU "
                   "config these logs hold (the fastest logged first), into OUT/<task>-remeasure.log: a table "
                   "measured in one sitting, for --memo")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    PLAN_SIZE[0] = args.plan_size
    if args.xgb_diversity:
        XGB_OPTIONS["diversity_filter_ratio"] = args.xgb_diversity
    if args.xgb_local_picks:
        XGB_OPTIONS["local_picks"] = args.xgb_local_picks
    builder = LocalBuilder(timeout=max(120.0, args.timeout), n_parallel=args.parallel)
    runner = LocalRunner(timeout=args.timeout, number=args.number, repeat=args.repeat, timer=args.timer)
    OPTION.append(autotune.measure_option(builder, runner))
    MEMO.append(MemoExecutor(ProcessPoolExecutor(OPTION[0].n_parallel, mp_context=get_context("fork"))))
    OPTION[0].executor = MEMO[0]
    preloaded = MEMO[0].preload([r for path in args.memo for r in load_records(path)])
    curves: dict[str, list[float]] = {}
    start = time.perf_counter()
    report: dict[str, Any] = {"machine": {"llvm_cpu": host_target().cpu, "vector_bits": host_target().vector_width,
                                          "cores": os.cpu_count(), "kernel_threads": num_threads(),
                                          "load_average_at_start": os.getloadavg()},
                              "measurement": {"number": args.number, "repeat": args.repeat, "run_timeout": args.timeout,
                                              "timer": args.timer,
                                              "trials_in_flight": OPTION[0].n_parallel, "plan_size": args.plan_size,
                                              "xgb_diversity_filter_ratio": args.xgb_diversity,
                                              "xgb_local_picks": args.xgb_local_picks,
                                              "memo_logs": args.memo, "configs_preloaded": preloaded}}
    layers = [x for x in args.layers.split(",") if x]
    try:
        if args.remeasure:
            report["remeasure"] = bench_remeasure(args.remeasure, args.out)
            args.cpu, args.cpu_conv, layers, args.ratio_only = 0, "", [], None
        if args.ratio_only:
            report["ratio_only"] = bench_ratio_only(args.ratio_only, args.ratio_rounds)
            args.cpu, args.cpu_conv, layers = 0, "", []
        if args.cpu:
            report["cpu_gemm"] = bench_cpu(args.cpu, args.cpu_trials, args.seeds, args.out, curves, args.ratio_rounds,
                                           [x for x in args.cpu_tuners.split(",") if x], args.cpu_stop_at_mark)
        if args.cpu_conv:
            wl = tuple(int(x) for x in args.cpu_conv.split(","))
            report["cpu_conv2d"] = bench_cpu_conv(wl, args.cpu_conv_trials, args.out, curves, args.ratio_rounds)
        if layers:
            exhaustive = True if args.exhaustive else [x for x in args.exhaustive_layers.split(",") if x]
            report["vta"] = bench_vta(layers, args.trials, args.seeds, exhaustive, args.out, curves)
            if len(layers) > 1 and not args.no_transfer or args.history or args.history_layers:
                target = layers[-1]
                history_layers = [x for x in args.history_layers.split(",") if x]
                if args.history or history_layers:
                    history, source = _history(target, history_layers, args.history, args.history_trials, args.out)
                else:
                    history = [r for p in args.out.glob("vta.conv2d-*.log") if "-warm" not in p.name
                               and "-cold" not in p.name for r in load_records(p)]
                    history = [r for r in history if tuple(r.args) != autotune.create_task(
                        "vta.conv2d", f"resnet18.{target}").args]
                    source = {"layers": layers[:-1], "runs": "this run's xgb and random logs"}
                report["transfer"] = bench_transfer(target, history, source, args.trials, args.seeds, args.out,
                                                    curves)
    finally:
        MEMO[0].shutdown(wait=False, cancel_futures=True)
    report["memo"] = MEMO[0].stats()
    report["seconds"] = time.perf_counter() - start
    report["load_average_at_end"] = os.getloadavg()
    (args.out / "curves.json").write_text(json.dumps(curves))
    try:
        plot_curves({(name.split(" / ")[0], name.split(" / ")[1]): c for name, c in curves.items()},
                    args.out / "curves.png")
        report["plot"] = str(args.out / "curves.png")
    except TuningError as exc:   # no matplotlib
        print(f"bench_tune: no plot: {exc}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        for section, body in report.items():
            print(f"{section}: {json.dumps(body, default=str)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
