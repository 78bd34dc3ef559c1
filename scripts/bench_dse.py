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
- **Features** (``--features``): ResNet-18 C2-C11 on the cycle model (2 virtual threads, every run checked
  against numpy) on ``VTAConfig()`` with each hardware feature on and off, the configuration otherwise the
  same: cycles per layer, their sum and utilisation (sum of ideal cycles / sum of cycles, as
  ``scripts/bench_vta.py`` reports it).

``--json`` prints the report (also written to ``--out``/report.json); the search's Pareto table,
plot and best configuration go to ``--out``/headline/. The figures depend on the machine's load
only in seconds; cycles are deterministic.

    python scripts/bench_dse.py --json                                    # ResNet-18, 40 x 5 x 2 (hours)
    python scripts/bench_dse.py --network digits --trials 16 --seeds 2 --schedule-trials 0 --json   # a minute
    python scripts/bench_dse.py --features --json                          # the features table only
"""

from __future__ import annotations

import argparse
import itertools
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
from vtakit.hw.config import VTAConfig


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
                        measure_cpu=args.cpu_part, verify=args.verify)
    result.write(out)
    d = result.to_dict()
    report = {k: d[k] for k in ("best_model", "best", "best_cycles", "default_cycles", "speedup",
                                "best_task_cycles", "default_task_cycles", "cycles_of",
                                "best_utilization", "default_utilization", "fmax_mhz", "resources", "default",
                                "cpu_seconds", "schedule_trials", "verification")}
    report["pareto"] = [{k: p[k] for k in ("model", "latency_ms", "cycles", "tuned_cycles", "utilization",
                                           "largest_fraction", "binding")} for p in d["pareto"]]
    report["table"] = result.table()
    best = result.best_evaluation
    report["goal"] = args.goal
    if (result.speedup or 0.0) < args.goal:
        report["binding"] = _what_binds(best, args.part)
    return report


def _what_binds(best: Evaluation, part: str) -> dict:
    """The best configuration's binding resource, and what doubling its array would need of the part:
    for each doubling, the area keys' choice (every combination of their values, SRAM depths kept) whose
    largest resource share is smallest, whether it fits, and what binds by how much."""
    space = dse.DesignSpace(part)
    area = [k for k in space.knobs if k.name in AREA_KEYS]
    config = best.config
    out = {"binding": best.binding, "binding_fraction": best.resources[best.binding]["fraction"], "doubled": []}
    for key in ("log_block_out", "log_block_in", "log_batch"):
        tried = []
        for values in itertools.product(*(k.values for k in area)):
            choice = {k.name: v for k, v in zip(area, values)}
            try:
                bigger = space.clocked(config.replace(**{key: getattr(config, key) + 1}, **choice))
            except VtakitError as exc:   # unencodable: the doubling's answer if no choice encodes
                tried.append((float("inf"), {"key": key.upper(), "error": str(exc)}))
                continue
            fit = space.fit(bigger)
            tried.append((max(fit.shares.values()), {
                "key": key.upper(), "model": bigger.model, "macs": bigger.macs_per_cycle, "area_keys": choice,
                "fits": fit.fits, "binding": fit.binding, "over": fit.describe(), "resources": fit.resources()}))
        out["doubled"].append(min(tried, key=lambda t: t[0])[1])
    return out


#: The hardware features the ``--features`` table turns on one at a time (each with what it needs).
FEATURES = {"alu_requant": {"alu_requant": True},
            "acc_read_ports=2": {"acc_read_ports": 2},
            "bias_preload": {"bias_preload": True},
            "gemm_out_requant": {"gemm_out_requant": True, "alu_requant": True},
            "bias_preload+gemm_out_requant": {"bias_preload": True, "gemm_out_requant": True, "alu_requant": True},
            "alu_mul": {"alu_mul": True}}


def features(base: VTAConfig, vthreads: int = 2) -> dict:
    """C2-C11 cycles and utilisation on ``base`` and on ``base`` with each of :data:`FEATURES` on (the
    keys this VTAConfig has); ``against``: what each is compared with (``base``, or ``alu_requant`` for a
    feature that needs it)."""
    from vtakit.compiler.topi_vta.bench import run_conv2d  # noqa: PLC0415
    from vtakit.compiler.topi_vta.workloads import RESNET18  # noqa: PLC0415

    def run(config: VTAConfig) -> dict:
        layers = {}
        for name, wl in RESNET18.items():
            r = run_conv2d(wl, config, "cycle", vthreads)
            if not r.correct:
                raise SystemExit(f"bench_dse: {name} on {config.model} differs from numpy")
            layers[name] = {"cycles": r.cycles, "ideal_cycles": r.ideal_cycles}
        cycles, ideal = sum(v["cycles"] for v in layers.values()), sum(v["ideal_cycles"] for v in layers.values())
        return {"cycles": cycles, "ideal_cycles": ideal, "utilization": round(ideal / cycles, 4), "layers": layers}

    rows = {"base": {"keys": {}, **run(base)}}
    print(f"bench_dse: features: base {rows['base']['cycles']:,} cycles", file=sys.stderr, flush=True)
    for name, keys in FEATURES.items():
        if not all(hasattr(base, k) for k in keys):
            continue
        row = run(base.replace(**keys))
        against = "alu_requant" if "alu_requant" in keys and name != "alu_requant" else "base"
        row.update(keys=keys, against=against, speedup=round(rows[against]["cycles"] / row["cycles"], 4))
        rows[name] = row
        print(f"bench_dse: features: {name} {row['cycles']:,} cycles ({row['speedup']}x vs {against})",
              file=sys.stderr, flush=True)
    return {"config": base.model, "vthreads": vthreads, "rows": rows}


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
    p.add_argument("--verify", choices=("full", "sim"), help="check the headline's best (docs/dse.md §7)")
    p.add_argument("--parallel", type=int, default=None)
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "vtakit-bench-dse")
    p.add_argument("--features", action="store_true",
                   help="only the features table: C2-C11 with each hardware feature on and off (--config's base)")
    p.add_argument("--config", type=Path, help="the features table's base configuration (default VTAConfig())")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "search.jsonl"
    start = time.perf_counter()
    if args.features:
        base = VTAConfig.from_json(args.config) if args.config else VTAConfig()
        report = {"features": features(base), "seconds": time.perf_counter() - start}
        (args.out / "features.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report, indent=1))
        return 0
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
