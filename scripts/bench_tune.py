#!/usr/bin/env python3
"""Does the cost model beat random search, and does tuning pay? (issue 13's acceptance lines)

- CPU: on an fp32 GEMM (1024^3 by default), trials XGB and random search need to reach 95% of the
  best config any run found (median over ``--seeds``), the space's size, and the tuned best
  against today's hand schedule (``ops.cpu.schedule_dense``) timed the same way.
- Accelerator: on ResNet-18 layers (C5, C9 by default), best-so-far after ``--trials`` trials of
  XGB against the median of random search, against the exhaustive optimum with ``--exhaustive``
  (every config the space's filter accepts measured: hundreds to thousands of trials; or
  ``--exhaustive-layers C9`` for some layers only), the default tiling's cycles, and the trials
  that were errors.
- Transfer: XGB on the last layer warm-started (``load_history``) from the other layers' records
  against cold, trials to reach 95% of the best found (median over seeds).

Every run tunes from scratch into its own log under ``--out``; XGB measures the template's fallback
(the default schedule) first, so its best is never worse than the default; the curves (best-so-far per trial)
go to ``curves.json`` and, with matplotlib, ``curves.png``. ``--json`` prints the summary. The
figures depend on the machine (and for the CPU on its load); the script reports, it asserts nothing.

    python scripts/bench_tune.py --json                                   # the full issue-13 run (hours)
    python scripts/bench_tune.py --cpu 256 --layers C5 --trials 32 --seeds 2 --json   # a short run
    python scripts/bench_tune.py --cpu 0 --layers C5,C9 --trials 64 --seeds 5 --plan-size 16 \
        --exhaustive-layers C9 --json      # docs/tuning.md's accelerator figures (about half an hour)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vtakit import autotune
from vtakit.compiler import te
from vtakit.compiler.autotune.measure import LocalBuilder, LocalRunner, run_trial
from vtakit.compiler.autotune.record import load_records
from vtakit.compiler.autotune.report import plot_curves
from vtakit.compiler.build import build
from vtakit.compiler.ops import cpu, nn
from vtakit.errors import TuningError

PLAN_SIZE = [64]   # XGB's plan size (AutoTVM's default; --plan-size for short runs)
TUNERS = {"xgb": lambda task, seed: autotune.XGBTuner(task, plan_size=PLAN_SIZE[0], seed=seed),
          "random": lambda task, seed: autotune.RandomTuner(task, seed=seed)}


ERRORS: dict[str, list[int]] = {}   # log name -> [trials, errors]


def _curve(log: Path) -> list[float]:
    best, out = float("inf"), []
    records = load_records(log)
    for r in records:
        best = min(best, r.result.cost)
        out.append(best)
    ERRORS[log.name] = [len(records), sum(not r.result.ok for r in records)]
    return out


def _tune(task, tuner: str, trials: int, seed: int, option, out: Path, history=None, tag: str = "") -> list[float]:
    log = out / f"{task.name}-{'_'.join(map(str, task.args))}-{tuner}{tag}-s{seed}.log"
    log.unlink(missing_ok=True)
    t = TUNERS[tuner](task, seed)
    if history:
        t.load_history(history)
    t.tune(trials, option, log_file=log)
    return _curve(log)


def _trials_to(curve: list[float], target: float) -> int | None:
    return next((i + 1 for i, c in enumerate(curve) if c <= target), None)


def _median(values: list[int | None], cap: int) -> float:
    return float(statistics.median(v if v is not None else cap + 1 for v in values))


def hand_gemm_seconds(n: int, runner: LocalRunner) -> float:
    """Today's hand schedule on the same GEMM, timed like a trial (median of repeats)."""
    task = autotune.create_task("llvm.dense", (n, n, n), target="llvm")
    block = task.config_space.fallback["tile_x"].size[-1]
    data = te.placeholder((n, n), "float32", name="data")
    weight = te.placeholder((n, n), "float32", name="weight")
    out = nn.dense(data, weight, pack_block=block)
    mod = build(cpu.schedule_dense(out), [data, weight, out], target="llvm")
    inputs, expected = task.reference(0)
    args = [*inputs, np.zeros_like(expected)]
    return mod.time_evaluator(runner.number, runner.repeat)(*args).median


def bench_cpu(n: int, trials: int, seeds: int, option, out: Path, curves: dict) -> dict:
    task = autotune.create_task("llvm.dense", (n, n, n), target="llvm")
    runs = {name: [_tune(task, name, trials, s, option, out) for s in range(seeds)] for name in TUNERS}
    best = min(min(c) for cs in runs.values() for c in cs)
    for name, cs in runs.items():
        for s, c in enumerate(cs):
            curves[f"llvm.dense {n}^3 / {name} seed {s}"] = c
    reach = {name: [_trials_to(c, best / 0.95) for c in cs] for name, cs in runs.items()}
    med = {name: _median(v, trials) for name, v in reach.items()}
    fallback = run_trial(task, task.config_space.fallback.index, option.builder, option.runner)
    hand = hand_gemm_seconds(n, option.runner)
    return {"workload": [n, n, n], "space": len(task.config_space), "trials": trials, "seeds": seeds,
            "best_seconds": best, "trials_to_95pct": reach, "median_trials_to_95pct": med,
            "xgb_within_a_third_of_random": med["xgb"] * 3 <= med["random"],
            "fallback_seconds": fallback.cost, "hand_schedule_seconds": hand, "hand_over_tuned": hand / best}


def bench_vta(layers: list[str], trials: int, seeds: int, exhaustive: bool | list[str], option, out: Path,
              curves: dict) -> dict:
    """``exhaustive``: every layer (True) or the layers named; it measures every config the space's
    filter accepts (``space_valid``), in index order."""
    result = {}
    for layer in layers:
        task = autotune.create_task("vta.conv2d", f"resnet18.{layer}")
        default = run_trial(task, task.config_space.fallback.index, option.builder, option.runner)
        runs = {name: [_tune(task, name, trials, s, option, out) for s in range(seeds)] for name in TUNERS}
        for name, cs in runs.items():
            for s, c in enumerate(cs):
                curves[f"{layer} / {name} seed {s}"] = c
        space = task.config_space
        entry = {"space": len(space), "space_valid": space.valid_count(), "default_cycles": default.cost,
                 "xgb_best": [c[-1] for c in runs["xgb"]], "random_best": [c[-1] for c in runs["random"]]}
        random_median = statistics.median(entry["random_best"])
        entry["random_median"] = random_median
        entry["xgb_never_worse_than_random_median"] = all(c <= random_median for c in entry["xgb_best"])
        entry["tuned_best_cycles"] = min(entry["xgb_best"] + entry["random_best"])
        counts = [v for k, v in ERRORS.items() if k.startswith(f"{task.name}-{'_'.join(map(str, task.args))}-")]
        entry["trials_measured"], entry["trial_errors"] = sum(c[0] for c in counts), sum(c[1] for c in counts)
        if exhaustive is True or (exhaustive and layer in exhaustive):
            log = out / f"{layer}-exhaustive.log"
            log.unlink(missing_ok=True)
            autotune.GridSearchTuner(task).tune(len(space), option, log_file=log)
            recs = load_records(log)
            best = min((r for r in recs if r.result.ok), key=lambda r: r.result.cost)
            entry["exhaustive_measured"] = len(recs)
            entry["exhaustive_errors"] = sum(not r.result.ok for r in recs)
            entry["exhaustive_best_cycles"] = best.result.cost
            entry["exhaustive_best_config"] = space.entity_from_json(best.entity).knob_values()
        result[layer] = entry
    return result


def bench_transfer(layers: list[str], trials: int, seeds: int, option, out: Path, curves: dict) -> dict:
    *others, target = layers
    history = [r for p in out.glob("*.log") if "-warm-" not in p.name and "-cold-" not in p.name
               for r in load_records(p) if r.task_name == "vta.conv2d"
               and tuple(r.args) != autotune.parse_workload(f"resnet18.{target}")[1]]
    task = autotune.create_task("vta.conv2d", f"resnet18.{target}")
    cold = [_tune(task, "xgb", trials, s, option, out, tag="-cold") for s in range(seeds)]
    warm = [_tune(task, "xgb", trials, s, option, out, history, tag="-warm") for s in range(seeds)]
    for s, (c, w) in enumerate(zip(cold, warm)):
        curves[f"{target} transfer / cold seed {s}"] = c
        curves[f"{target} transfer / warm seed {s}"] = w
    best = min(min(c) for c in cold + warm)
    reach = {"cold": [_trials_to(c, best / 0.95) for c in cold], "warm": [_trials_to(c, best / 0.95) for c in warm]}
    return {"layer": target, "history_records": len(history), "from_layers": others, "trials_to_95pct": reach,
            "median_trials_to_95pct": {k: _median(v, trials) for k, v in reach.items()}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", type=int, default=1024, metavar="N", help="GEMM size N^3 (0: skip the CPU)")
    p.add_argument("--cpu-trials", type=int, default=200)
    p.add_argument("--layers", default="C5,C9", help="ResNet-18 layers, comma-separated ('' : skip)")
    p.add_argument("--trials", type=int, default=64, help="accelerator trials per run")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--exhaustive", action="store_true", help="also measure every config of each layer")
    p.add_argument("--exhaustive-layers", default="", help="measure every config of only these layers "
                   "(comma-separated)")
    p.add_argument("--no-transfer", action="store_true")
    p.add_argument("--parallel", type=int, default=None)
    p.add_argument("--plan-size", type=int, default=64, help="XGB's plan size (default 64, AutoTVM's)")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "vtakit-bench-tune",
                   help="where the logs, curves.json and curves.png go")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    PLAN_SIZE[0] = args.plan_size
    option = autotune.measure_option(LocalBuilder(timeout=60, n_parallel=args.parallel),
                                     LocalRunner(timeout=60, number=2, repeat=3))
    curves: dict[str, list[float]] = {}
    start = time.perf_counter()
    report: dict = {}
    layers = [x for x in args.layers.split(",") if x]
    if args.cpu:
        report["cpu"] = bench_cpu(args.cpu, args.cpu_trials, args.seeds, option, args.out, curves)
    if layers:
        exhaustive = True if args.exhaustive else [x for x in args.exhaustive_layers.split(",") if x]
        report["vta"] = bench_vta(layers, args.trials, args.seeds, exhaustive, option, args.out, curves)
        if len(layers) > 1 and not args.no_transfer:
            report["transfer"] = bench_transfer(layers, args.trials, args.seeds, option, args.out, curves)
    report["seconds"] = time.perf_counter() - start
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
