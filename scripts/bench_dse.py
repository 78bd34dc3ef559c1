#!/usr/bin/env python3
"""Does the co-design search work, and what does it buy? (the co-design issue's acceptance lines)

- **Model vs random:** ``--seeds`` searches of ``--trials`` configurations with the XGBoost model
  and as many with random sampling, on ``--network`` and ``--part`` with default tilings; per run,
  the best accelerator latency among its own evaluations, and the medians. Every run appends to
  one shared search log (``--out``/search.jsonl): a configuration another run already measured is
  taken from it (evaluations are deterministic), so the runs together cost fewer evaluations.
- **Headline:** the XGB search of seed 0, its ``--top-k`` fastest configurations and ``VTAConfig()``
  tuned with ``--schedule-trials`` each: best against default accelerator cycles (both tuned with the
  same budget), utilization, resources; when the speedup is below ``--goal``, which resource binds
  and by how much (the estimate of the best configuration with its array doubled).
- **Coverage:** which values each knob took over every logged evaluation.

``--json`` prints the report (also written to ``--out``/report.json); the search's Pareto table,
plot and best configuration go to ``--out``/headline/. The figures depend on the machine's load
only in seconds; cycles are deterministic.

    python scripts/bench_dse.py --json                                    # ResNet-18, 40 x 5 x 2 (hours)
    python scripts/bench_dse.py --network digits --trials 16 --seeds 2 --schedule-trials 0 --json   # a minute
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from vtakit import dse
from vtakit.dse.evaluate import Evaluation
from vtakit.dse.log import SearchLog
from vtakit.dse.space import AREA_KEYS
from vtakit.errors import VtakitError


def _best(evaluations: list[Evaluation]) -> float:
    return min((e.latency_s for e in evaluations if e.ok and e.fits), default=float("inf"))


def model_vs_random(args: argparse.Namespace, log: Path) -> dict:
    runs: dict[str, list[float]] = {"xgb": [], "random": []}
    seconds: dict[str, list[float]] = {"xgb": [], "random": []}
    for seed in range(args.seeds):
        for strategy in ("xgb", "random"):
            start = time.perf_counter()
            result = dse.search(args.network, args.part, trials=args.trials, strategy=strategy, seed=seed,
                                batch_size=args.batch_size, log=log, n_parallel=args.parallel, image=args.image)
            own = result.evaluations[:args.trials]           # this run's proposals (the log's others follow)
            runs[strategy].append(_best(own) * 1e3)
            seconds[strategy].append(time.perf_counter() - start)
            print(f"bench_dse: {strategy} seed {seed}: best {runs[strategy][-1]:.4f} ms "
                  f"({seconds[strategy][-1]:.0f} s)", file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {"trials": args.trials, "seeds": args.seeds, "best_latency_ms": runs, "median_best_latency_ms": med,
            "xgb_median_at_least_random_median": med["xgb"] <= med["random"],
            "xgb_runs_at_least_random_median": sum(v <= med["random"] for v in runs["xgb"]),
            "seconds": seconds}


def headline(args: argparse.Namespace, log: Path, out: Path) -> dict:
    result = dse.search(args.network, args.part, trials=args.trials, strategy="xgb", seed=0,
                        batch_size=args.batch_size, log=log, n_parallel=args.parallel,
                        schedule_trials=args.schedule_trials, top_k=args.top_k, image=args.image,
                        measure_cpu=args.cpu_part)
    result.write(out)
    d = result.to_dict()
    report = {k: d[k] for k in ("best_model", "best", "best_cycles", "default_cycles", "speedup",
                                "best_utilization", "default_utilization", "fmax_mhz", "resources", "default",
                                "cpu_seconds", "schedule_trials")}
    report["pareto"] = [{k: p[k] for k in ("model", "latency_ms", "cycles", "tuned_cycles", "utilization",
                                           "largest_fraction", "binding")} for p in d["pareto"]]
    report["table"] = result.table()
    best = result.best_evaluation
    report["goal"] = args.goal
    if (result.speedup or 0.0) < args.goal:
        report["binding"] = _what_binds(best, args.part)
    return report


def _what_binds(best: Evaluation, part: str) -> dict:
    """The best configuration's binding resource, and what doubling its array (with every area key at
    its smallest-area choice) would need of the part."""
    space = dse.DesignSpace(part)
    smallest_area = {k.name: k.values[0] for k in space.knobs if k.name in AREA_KEYS}
    config = best.config
    out = {"binding": best.binding, "binding_fraction": best.resources[best.binding]["fraction"], "doubled": []}
    for key in ("log_block_out", "log_block_in", "log_batch"):
        try:
            bigger = space.clocked(config.replace(**{key: getattr(config, key) + 1}, **smallest_area))
        except VtakitError as exc:   # an unencodable doubling is itself the answer
            out["doubled"].append({"key": key.upper(), "error": str(exc)})
            continue
        fit = space.fit(bigger)
        out["doubled"].append({"key": key.upper(), "model": bigger.model, "macs": bigger.macs_per_cycle,
                               "fits": fit.fits, "binding": fit.binding, "resources": fit.resources()})
    return out


def coverage(log: Path, network: str, part: str) -> dict:
    space = dse.DesignSpace(part)
    contents = SearchLog(log, network, part, space.budget).load()
    values: dict[str, set] = {k.name: set() for k in space.knobs}
    for ev in contents.evaluations.values():
        for name in values:
            values[name].add(getattr(ev.config, name))
    return {"evaluations": len(contents.evaluations),
            "statuses": {s: sum(e.status == s for e in contents.evaluations.values()) for s in ("ok", "rejected",
                                                                                                 "error")},
            "values": {k: sorted(v) for k, v in values.items()},
            "all_varied": all(len(values[k.name]) > 1 for k in space.knobs if len(k.values) > 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--network", default="resnet18", help="resnet18, digits or an int8 .onnx model")
    p.add_argument("--image", type=int, default=224, help="ResNet-18's input size (default 224)")
    p.add_argument("--part", default="xc7z020")
    p.add_argument("--trials", type=int, default=40, help="configurations per search (default 40)")
    p.add_argument("--seeds", type=int, default=5, help="searches per strategy (default 5; 0: headline only)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--schedule-trials", type=int, default=176,
                   help="schedule trials of each tuned configuration (default 176: 16 per ResNet-18 task)")
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--goal", type=float, default=1.5, help="the headline's speedup goal (default 1.5)")
    p.add_argument("--cpu-part", action="store_true", help="also profile the CPU part of best and default")
    p.add_argument("--parallel", type=int, default=None)
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "vtakit-bench-dse")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "search.jsonl"
    start = time.perf_counter()
    report: dict = {"network": args.network, "part": args.part}
    if args.seeds:
        report["model_vs_random"] = model_vs_random(args, log)
    report["headline"] = headline(args, log, args.out / "headline")
    network = dse.load_network(args.network, image=args.image).name
    report["coverage"] = coverage(log, network, args.part)
    report["seconds"] = time.perf_counter() - start
    (args.out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        print(report["headline"].pop("table"))
        print(json.dumps({k: v for k, v in report.items() if k != "headline"}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
