"""RTL simulation speed: simulated cycles per second of the Amaranth core (``rtl``) and of its
Verilog compiled by Verilator (``verilator``), on the same programs.

Blocked int8 GEMMs built by the runtime (``vtakit.runtime.blocked_gemm.gemm_program``) run on the
small (1x4x4) and default (1x16x16) configurations; each run is checked byte for byte against
fsim, and the verilator run against rtl in cycles and every retire cycle. ``sim_seconds`` is the
simulation itself (RunStats); ``wall_seconds`` adds building the simulator (Python code generation
for the Amaranth design, which a second run of the same configuration in one process pays again;
for verilator, loading the cached library). The cold Verilator build (Verilog generation plus
Verilator and the C++ compiler, into an empty cache) is timed once per configuration.

    python scripts/bench_rtl.py [--quick] [--json] [--no-verilator] [--no-cold]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from vtakit.hw.config import VTAConfig
from vtakit.runtime.blocked_gemm import gemm_program
from vtakit.runtime.replay import run_fresh

WORKLOADS = {
    "small": (VTAConfig.small(), [(32, 32, 32, 1), (32, 32, 32, 2)]),
    "default": (VTAConfig(), [(32, 64, 64, 1), (32, 64, 64, 2)]),
}


def _timed(program, backend: str):
    began = time.perf_counter()
    stats, dram = run_fresh(program, backend)
    return stats, dram, time.perf_counter() - began


def run(config_name: str, m: int, n: int, k: int, vthreads: int, with_verilator: bool) -> dict:
    config, _ = WORKLOADS[config_name]
    program = gemm_program(config, m, n, k, vthreads=vthreads)
    _, reference = run_fresh(program, "fsim")
    stats, dram, wall = _timed(program, "rtl")
    row = {"config": config_name, "model": config.model, "workload": f"gemm {m}x{n}x{k} vt{vthreads}",
           "instructions": len(program.insns), "cycles": stats.cycles, "gemm_uops": stats.counters["gemm_counter"],
           "utilization": stats.utilization, "sim_seconds": stats.sim_seconds, "wall_seconds": wall,
           "cycles_per_second": stats.cycles / stats.sim_seconds, "correct": bool(np.array_equal(dram, reference))}
    if with_verilator:
        vstats, vdram, vwall = _timed(program, "verilator")
        same = (vstats.cycles == stats.cycles and vstats.retire_cycles == stats.retire_cycles
                and vstats.busy_cycles == stats.busy_cycles and vstats.counters == stats.counters)
        row.update(verilator_sim_seconds=vstats.sim_seconds, verilator_wall_seconds=vwall,
                   verilator_cycles_per_second=vstats.cycles / vstats.sim_seconds,
                   speedup=stats.sim_seconds / vstats.sim_seconds, verilator_equal_rtl=same)
        row["correct"] = row["correct"] and same and bool(np.array_equal(vdram, reference))
    return row


def cold_build_seconds(config_name: str) -> float:
    """Seconds to generate the Verilog and build the simulator of a configuration in an empty cache."""
    config_json = WORKLOADS[config_name][0].to_json()
    code = ("import sys, time; from vtakit.hw.config import VTAConfig; from vtakit.sim import verilator; "
            "config = VTAConfig.from_json(sys.argv[1]); t = time.perf_counter(); verilator.build(config); "
            "print(time.perf_counter() - t)")
    with tempfile.TemporaryDirectory() as cache:
        path = os.path.join(cache, "vta_config.json")
        with open(path, "w") as f:
            f.write(config_json)
        env = {**os.environ, "VTAKIT_CACHE_DIR": cache, "VTAKIT_PROGRESS": "0"}
        out = subprocess.run([sys.executable, "-c", code, path], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one workload per configuration")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-verilator", action="store_true", help="the Amaranth simulation only")
    parser.add_argument("--no-cold", action="store_true", help="skip timing the cold Verilator builds")
    args = parser.parse_args()
    with_verilator = not args.no_verilator
    if with_verilator:
        from vtakit.sim.verilator import available
        reason = available()
        if reason is not None:
            print(f"verilator backend unavailable ({reason}); timing rtl only", file=sys.stderr)
            with_verilator = False
    results = []
    for name, (_, workloads) in WORKLOADS.items():
        for m, n, k, vt in workloads[:1] if args.quick else workloads:
            results.append(run(name, m, n, k, vt, with_verilator))

    def rate(name: str, key: str) -> float:
        rows = [r for r in results if r["config"] == name]
        return sum(r["cycles"] for r in rows) / sum(r[key] for r in rows)

    summary = {name: rate(name, "sim_seconds") for name in WORKLOADS}
    verilator_summary = {name: rate(name, "verilator_sim_seconds") for name in WORKLOADS} if with_verilator else {}
    cold = {name: cold_build_seconds(name) for name in WORKLOADS} if with_verilator and not args.no_cold else {}
    if args.json:
        print(json.dumps({"runs": results, "cycles_per_second": summary,
                          "verilator_cycles_per_second": verilator_summary, "verilator_cold_build_seconds": cold},
                         indent=2))
    else:
        head = f"{'config':8} {'workload':22} {'insns':>6} {'cycles':>8} {'util':>6} {'sim s':>8} {'cycles/s':>9}"
        if with_verilator:
            head += f" {'vl sim s':>9} {'vl cycles/s':>12} {'speedup':>8}"
        print(head + " ok")
        for r in results:
            line = (f"{r['config']:8} {r['workload']:22} {r['instructions']:6d} {r['cycles']:8d} "
                    f"{r['utilization']:6.3f} {r['sim_seconds']:8.2f} {r['cycles_per_second']:9.0f}")
            if with_verilator:
                line += (f" {r['verilator_sim_seconds']:9.4f} {r['verilator_cycles_per_second']:12.0f}"
                         f" {r['speedup']:7.0f}x")
            print(line + f" {'yes' if r['correct'] else 'NO'}")
        for name, rate_ in summary.items():
            text = f"{name}: rtl {rate_:.0f} simulated cycles/s"
            if with_verilator:
                text += (f", verilator {verilator_summary[name]:.0f} ({verilator_summary[name] / rate_:.0f}x)")
            if name in cold:
                text += f", cold Verilator build {cold[name]:.1f} s"
            print(text)
    return 0 if all(r["correct"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
