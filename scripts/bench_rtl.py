"""RTL simulation speed: simulated cycles per second of the Amaranth core (the ``rtl`` backend).

Blocked int8 GEMMs built by the runtime (``vtakit.runtime.blocked_gemm.gemm_program``) run on the
small (1x4x4) and default (1x16x16) configurations; each run is checked byte for byte against
fsim. ``sim_seconds`` is the simulation itself (RunStats); ``wall_seconds`` adds building the
simulator (Python code generation for the design), which a second run of the same configuration
in one process pays again.

    python scripts/bench_rtl.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from vtakit.hw.config import VTAConfig
from vtakit.runtime.blocked_gemm import gemm_program
from vtakit.runtime.replay import run_fresh

WORKLOADS = {
    "small": (VTAConfig.small(), [(32, 32, 32, 1), (32, 32, 32, 2)]),
    "default": (VTAConfig(), [(32, 64, 64, 1), (32, 64, 64, 2)]),
}


def run(config_name: str, m: int, n: int, k: int, vthreads: int) -> dict:
    config, _ = WORKLOADS[config_name]
    program = gemm_program(config, m, n, k, vthreads=vthreads)
    _, reference = run_fresh(program, "fsim")
    began = time.perf_counter()
    stats, dram = run_fresh(program, "rtl")
    wall = time.perf_counter() - began
    return {"config": config_name, "model": config.model, "workload": f"gemm {m}x{n}x{k} vt{vthreads}",
            "instructions": len(program.insns), "cycles": stats.cycles, "gemm_uops": stats.counters["gemm_counter"],
            "utilization": stats.utilization, "sim_seconds": stats.sim_seconds, "wall_seconds": wall,
            "cycles_per_second": stats.cycles / stats.sim_seconds, "correct": bool(np.array_equal(dram, reference))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one workload per configuration")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    results = []
    for name, (_, workloads) in WORKLOADS.items():
        for m, n, k, vt in workloads[:1] if args.quick else workloads:
            results.append(run(name, m, n, k, vt))
    summary = {name: sum(r["cycles"] for r in results if r["config"] == name)
               / sum(r["sim_seconds"] for r in results if r["config"] == name) for name in WORKLOADS}
    if args.json:
        print(json.dumps({"runs": results, "cycles_per_second": summary}, indent=2))
    else:
        print(f"{'config':8} {'workload':22} {'insns':>6} {'cycles':>8} {'util':>6} {'sim s':>8} {'cycles/s':>9} ok")
        for r in results:
            print(f"{r['config']:8} {r['workload']:22} {r['instructions']:6d} {r['cycles']:8d} "
                  f"{r['utilization']:6.3f} {r['sim_seconds']:8.2f} {r['cycles_per_second']:9.0f} "
                  f"{'yes' if r['correct'] else 'NO'}")
        for name, rate in summary.items():
            print(f"{name}: {rate:.0f} simulated cycles/s")
    return 0 if all(r["correct"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
