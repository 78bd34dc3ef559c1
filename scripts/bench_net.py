#!/usr/bin/env python3
"""Benchmark a whole network on the CPU: ResNet-18 fp32, batch 1, ``vtakit.graph`` (target llvm) vs
onnxruntime in the same process.

For each thread count (1 and 2 by default) a child process is started with the thread pools of
both runtimes set to that count (vtakit's pool size is fixed when it starts: ``VTAKIT_NUM_THREADS``;
onnxruntime's ``intra_op_num_threads``). The child builds the model (from the warm kernel cache),
checks both agree, then alternates rounds -- vtakit, onnxruntime, vtakit, ... -- each round timing
``--calls`` back-to-back calls, and reports the median of the rounds' per-call medians, so
both see the same machine load. Compile times are measured in fresh processes: cold (empty
kernel cache) and warm (the cache the cold build filled; nothing is compiled). The planner's
peak activation memory is the arena size, compared with the liveness lower bound.

    python scripts/bench_net.py            # table
    python scripts/bench_net.py --json     # one JSON object
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
    p.add_argument("--child", choices=("compile", "latency"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        if args.child == "latency":
            args.threads = args.threads[0]
        print(json.dumps(child_compile(args) if args.child == "compile" else child_latency(args)))
        return 0
    threads = args.threads or [1, 2]
    try:
        with tempfile.TemporaryDirectory(prefix="vtakit-bench-net-") as cache, \
                progress("bench_net", total=2 + len(threads), unit="phase", delay=0) as bar:
            env = dict(os.environ, VTAKIT_CACHE_DIR=cache, VTAKIT_PROGRESS="0")
            bar.step("cold compile")
            cold = _spawn("compile", args, env)
            bar.advance()
            bar.step("warm compile")
            warm = _spawn("compile", args, env)
            bar.advance()
            latency = []
            for t in threads:
                bar.step(f"latency at {t} thread{'s' * (t > 1)}")
                latency.append(_spawn("latency", args, dict(env, VTAKIT_NUM_THREADS=str(t)), t))
                bar.advance()
    except KeyboardInterrupt:
        print("bench_net: interrupted", file=sys.stderr)
        return 130
    two = next((r for r in latency if r["threads"] == 2), latency[-1])
    report = {
        "model": f"resnet18 fp32 1x3x{args.image}x{args.image}", "target": "llvm",
        "cpu": _cpu_name(), "latency": latency,
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
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{report['model']} on {report['cpu']}")
    print(f"{'threads':>7}  {'vtakit ms':>10}  {'onnxruntime ms':>14}  {'ratio':>6}  {'max rel err':>11}")
    for r in latency:
        print(f"{r['threads']:>7}  {r['vtakit_ms']:>10.3f}  {r['onnxruntime_ms']:>14.3f}  {r['ratio']:>6.2f}  "
              f"{r['max_rel_error']:>11.2e}")
    print(f"compile: cold {report['cold_compile_seconds']:.2f} s, warm {report['warm_compile_seconds']:.2f} s "
          f"({report['warm_compiled_kernels']} kernels compiled warm); {report['kernels']} kernels, "
          f"{report['unique_kernels']} unique")
    print(f"peak activation memory {report['peak_activation_bytes'] / 2**20:.2f} MiB, liveness lower bound "
          f"{report['lower_bound_bytes'] / 2**20:.2f} MiB ({report['peak_vs_lower_bound']:.2f}x)")
    for goal, (value, met) in report["goals"].items():
        print(f"goal {goal}: {value:.3g} (<= {GOALS[goal]}) {'met' if met else 'NOT met'}")
    return 0


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
