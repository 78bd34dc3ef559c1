#!/usr/bin/env python3
"""Benchmark a whole network: ResNet-18 batch 1, fp32 on the CPU (``vtakit.graph`` target llvm vs
onnxruntime in the same process) and int8 on the accelerator (target vta, cycle model).

For each thread count (1 and 2 by default) a child process is started with the thread pools of
both runtimes set to that count (vtakit's pool size is fixed when it starts: ``VTAKIT_NUM_THREADS``;
onnxruntime's ``intra_op_num_threads``). The child builds the model (from the warm kernel cache),
checks both agree, then alternates rounds -- vtakit, onnxruntime, vtakit, ... -- each round timing
``--calls`` back-to-back calls, and reports the median of the rounds' per-call medians, so
both see the same machine load. Compile times are measured in fresh processes: cold (empty
kernel cache) and warm (the cache the cold build filled; nothing is compiled). The planner's
peak activation memory is the arena size, compared with the liveness lower bound.

The accelerator rows quantise ResNet-18 (power-of-two scales, calibrated on seeded inputs), build
it for the default configuration and profile one image on the cycle backend: the accelerator's
cycles (every conv but the first, the residual adds), their utilization, where the cycles go (per
layer, stalls), the compile time, the wall time of a whole-network simulation and the host's share
of the end-to-end time.

    python scripts/bench_net.py            # table
    python scripts/bench_net.py --json     # one JSON object
    python scripts/bench_net.py --only accel
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vtakit.progress import progress

GOALS = {"latency_vs_onnxruntime_2_threads": 1.0, "warm_compile_seconds": 2.0, "cold_compile_seconds": 10.0,
         "peak_vs_lower_bound": 1.5}
ACCEL_GOALS = {"accel_cycles": 7.3e6, "accel_compile_seconds": 10.0, "accel_simulation_seconds": 5.0}


# Thread pools spin for a while after their last call (onnxruntime's intra-op pool, about 0.1 s);
# each round starts after that, so that neither runtime is timed on cores the other still holds.
SETTLE_SECONDS = 0.3


def _model(args: argparse.Namespace):
    from vtakit.compiler.graph.zoo import resnet18

    return resnet18(args.seed, image=args.image)


def child_compile(args: argparse.Namespace) -> dict:
    """Import and build in this (fresh) process; the kernel cache is ``VTAKIT_CACHE_DIR``."""
    start = time.perf_counter()
    import vtakit.graph as vg

    imported = time.perf_counter()
    model = _model(args)
    made = time.perf_counter()
    module = vg.build(vg.from_onnx(model))
    done = time.perf_counter()
    s = module.stats
    return {"compile_seconds": done - made, "import_seconds": imported - start, "kernels": module.num_kernels,
            "unique_kernels": s.unique_kernels, "compiled": s.compiled, "loaded_from_disk": s.loaded_from_disk,
            "arena_bytes": s.arena_bytes, "lower_bound_bytes": s.lower_bound_bytes, "fused": s.fused_ops}


def child_latency(args: argparse.Namespace) -> dict:
    import numpy as np
    import onnxruntime as ort

    import vtakit.graph as vg

    model = _model(args)
    module = vg.build(vg.from_onnx(model))
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(args.seed).standard_normal((1, 3, args.image, args.image)).astype(np.float32)
    feed = {"data": x}
    ours, theirs = module.run(feed)[0], session.run(None, feed)[0]
    error = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    runners = {"vtakit": lambda: module.run(feed), "onnxruntime": lambda: session.run(None, feed)}
    for run in runners.values():  # warm up
        for _ in range(3):
            run()
    rounds: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(args.rounds):
        for name, run in runners.items():
            time.sleep(SETTLE_SECONDS)  # the other runtime's pool stops spinning on the cores first
            times = []
            for _ in range(args.calls):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            rounds[name].append(statistics.median(times))
    result = {name: statistics.median(r) * 1e3 for name, r in rounds.items()}
    return {"threads": args.threads, "vtakit_ms": result["vtakit"], "onnxruntime_ms": result["onnxruntime"],
            "ratio": result["vtakit"] / result["onnxruntime"], "max_rel_error": error,
            "rounds": args.rounds, "calls_per_round": args.calls}


def child_accel(args: argparse.Namespace) -> dict:
    """ResNet-18 int8 on the default accelerator configuration, cycle backend, in this process."""
    import numpy as np

    import vtakit.graph as vg
    from vtakit.hw.config import VTAConfig

    config = VTAConfig()
    rng = np.random.default_rng(args.seed)
    g = vg.from_onnx(_model(args))
    shape = g.type_of(g.inputs[0]).shape
    calibration = rng.standard_normal((4, *shape[1:])).astype(np.float32)
    image = rng.standard_normal(shape).astype(np.float32)
    start = time.perf_counter()
    qg = vg.quantize(g, calibration)
    quantized = time.perf_counter()
    module = vg.build(qg, "vta", config=config)
    built = time.perf_counter()
    module.run({g.inputs[0]: image}, backend="cycle")          # places the module on its device
    start_run = time.perf_counter()
    module.run({g.inputs[0]: image}, backend="cycle")
    run_seconds = time.perf_counter() - start_run
    profile = module.profile({g.inputs[0]: image}, backend="cycle")
    layers = profile.to_json()["layers"]
    vta = [r for r in layers if r["target"] == "vta"]
    host = sum(r["seconds"] for r in layers if r["target"] != "vta")
    return {"config": config.model, "clock_mhz": config.clock_mhz,
            "quantize_seconds": quantized - start, "compile_seconds": built - quantized,
            "accel_cycles": profile.total_cycles, "ideal_cycles": profile.ideal_cycles,
            "utilization": profile.utilization, "accel_seconds": profile.accel_seconds,
            "simulation_seconds": run_seconds, "host_seconds": host,
            "host_share": host / (host + profile.accel_seconds) if host + profile.accel_seconds else 0.0,
            "vta_layers": len(vta), "cpu_layers": len(layers) - len(vta), "layers": layers}


def _spawn(mode: str, args: argparse.Namespace, env: dict[str, str], threads: int | None = None) -> dict:
    argv = [sys.executable, __file__, "--child", mode, "--seed", str(args.seed), "--image", str(args.image),
            "--rounds", str(args.rounds), "--calls", str(args.calls)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench_net: the {mode} child failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--threads", type=int, action="append", help="thread counts (default 1 and 2)")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds per runtime (default 7)")
    p.add_argument("--calls", type=int, default=5, help="calls per round (default 5)")
    p.add_argument("--image", type=int, default=224, help="input height and width (default 224)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=("cpu", "accel"), help="run only the CPU (fp32) or the accelerator (int8) rows")
    p.add_argument("--child", choices=("compile", "latency", "accel"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        if args.child == "latency":
            args.threads = args.threads[0]
        child = {"compile": child_compile, "latency": child_latency, "accel": child_accel}[args.child]
        print(json.dumps(child(args)))
        return 0
    threads = [] if args.only == "accel" else args.threads or [1, 2]
    phases = (0 if args.only == "accel" else 2 + len(threads)) + (0 if args.only == "cpu" else 1)
    cold = warm = accel = None
    latency = []
    try:
        with tempfile.TemporaryDirectory(prefix="vtakit-bench-net-") as cache, \
                progress("bench_net", total=phases, unit="phase", delay=0) as bar:
            env = dict(os.environ, VTAKIT_CACHE_DIR=cache, VTAKIT_PROGRESS="0")
            if args.only != "accel":
                bar.step("cold compile")
                cold = _spawn("compile", args, env)
                bar.advance()
                bar.step("warm compile")
                warm = _spawn("compile", args, env)
                bar.advance()
                for t in threads:
                    bar.step(f"latency at {t} thread{'s' * (t > 1)}")
                    latency.append(_spawn("latency", args, dict(env, VTAKIT_NUM_THREADS=str(t)), t))
                    bar.advance()
            if args.only != "cpu":
                bar.step("int8 on the accelerator (cycle model)")
                accel = _spawn("accel", args, env)
                bar.advance()
    except KeyboardInterrupt:
        print("bench_net: interrupted", file=sys.stderr)
        return 130
    report: dict = {"model": f"resnet18 1x3x{args.image}x{args.image}", "cpu": _cpu_name()}
    if cold is not None:
        report["llvm"] = _cpu_report(args, cold, warm, latency)
    if accel is not None:
        report["vta"] = _accel_report(accel)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{report['model']} on {report['cpu']}")
    if cold is not None:
        _print_cpu(report["llvm"])
    if accel is not None:
        _print_accel(report["vta"])
    return 0


def _accel_report(accel: dict) -> dict:
    report = dict(accel)
    report["goals"] = {
        "accel_cycles": [accel["accel_cycles"], accel["accel_cycles"] <= ACCEL_GOALS["accel_cycles"]],
        "accel_compile_seconds": [accel["compile_seconds"],
                                  accel["compile_seconds"] <= ACCEL_GOALS["accel_compile_seconds"]],
        "accel_simulation_seconds": [accel["simulation_seconds"],
                                     accel["simulation_seconds"] <= ACCEL_GOALS["accel_simulation_seconds"]],
    }
    return report


def _print_accel(r: dict) -> None:
    print(f"int8 on the {r['config']} accelerator at {r['clock_mhz']} MHz (cycle model):")
    print(f"{'layer':<28} {'ops':<22} {'target':<6} {'cycles':>10} {'util %':>7} {'note'}")
    for row in r["layers"]:
        cycles = "" if row.get("cycles") is None else f"{row['cycles']:,}"
        util = "" if row.get("utilization") is None else f"{100 * row['utilization']:.1f}"
        print(f"{row['name'][:28]:<28} {'+'.join(row['ops'])[:22]:<22} {row['target']:<6} {cycles:>10} {util:>7} "
              f"{row.get('note') or ''}")
    print(f"accelerator: {r['accel_cycles']:,} cycles (ideal {r['ideal_cycles']:,}, utilization "
          f"{100 * r['utilization']:.1f}%), {1e3 * r['accel_seconds']:.2f} ms at the clock; {r['vta_layers']} layers "
          f"on vta, {r['cpu_layers']} on the CPU")
    print(f"quantise {r['quantize_seconds']:.2f} s, compile {r['compile_seconds']:.2f} s, whole-network simulation "
          f"{r['simulation_seconds']:.2f} s; host share of end-to-end time {100 * r['host_share']:.1f}%")
    for goal, (value, met) in r["goals"].items():
        print(f"goal {goal}: {value:.4g} (<= {ACCEL_GOALS[goal]:.4g}) {'met' if met else 'NOT met'}")


def _cpu_report(args: argparse.Namespace, cold: dict, warm: dict, latency: list) -> dict:
    two = next((r for r in latency if r["threads"] == 2), latency[-1])
    report = {
        "model": f"resnet18 fp32 1x3x{args.image}x{args.image}", "target": "llvm", "latency": latency,
        "cold_compile_seconds": cold["compile_seconds"], "warm_compile_seconds": warm["compile_seconds"],
        "warm_compiled_kernels": warm["compiled"], "kernels": cold["kernels"], "unique_kernels": cold["unique_kernels"],
        "peak_activation_bytes": cold["arena_bytes"], "lower_bound_bytes": cold["lower_bound_bytes"],
        "peak_vs_lower_bound": cold["arena_bytes"] / max(1, cold["lower_bound_bytes"]),
        "fused_kernels": cold["fused"],
    }
    report["goals"] = {
        "latency_vs_onnxruntime_2_threads": [two["ratio"], two["ratio"] <= GOALS["latency_vs_onnxruntime_2_threads"]],
        "warm_compile_seconds": [report["warm_compile_seconds"],
                                 report["warm_compile_seconds"] <= GOALS["warm_compile_seconds"]],
        "cold_compile_seconds": [report["cold_compile_seconds"],
                                 report["cold_compile_seconds"] <= GOALS["cold_compile_seconds"]],
        "peak_vs_lower_bound": [report["peak_vs_lower_bound"],
                                report["peak_vs_lower_bound"] <= GOALS["peak_vs_lower_bound"]],
    }
    return report


def _print_cpu(report: dict) -> None:
    print("fp32 on the CPU (target llvm):")
    print(f"{'threads':>7}  {'vtakit ms':>10}  {'onnxruntime ms':>14}  {'ratio':>6}  {'max rel err':>11}")
    for r in report["latency"]:
        print(f"{r['threads']:>7}  {r['vtakit_ms']:>10.3f}  {r['onnxruntime_ms']:>14.3f}  {r['ratio']:>6.2f}  "
              f"{r['max_rel_error']:>11.2e}")
    print(f"compile: cold {report['cold_compile_seconds']:.2f} s, warm {report['warm_compile_seconds']:.2f} s "
          f"({report['warm_compiled_kernels']} kernels compiled warm); {report['kernels']} kernels, "
          f"{report['unique_kernels']} unique")
    print(f"peak activation memory {report['peak_activation_bytes'] / 2**20:.2f} MiB, liveness lower bound "
          f"{report['lower_bound_bytes'] / 2**20:.2f} MiB ({report['peak_vs_lower_bound']:.2f}x)")
    for goal, (value, met) in report["goals"].items():
        print(f"goal {goal}: {value:.3g} (<= {GOALS[goal]}) {'met' if met else 'NOT met'}")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
