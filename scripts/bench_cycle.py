"""Speed of the cycle model: against the RTL simulation, and simulated cycles per second.

1. The same programs on ``rtl`` and on ``cycle`` (corpus programs and random programs, small and
   default configuration): wall-clock seconds of each run, whether cycles and every retire cycle
   agree, and the speed ratio rtl / cycle (per program and over the whole set). The RTL is warmed up
   per configuration first (elaboration is not counted).
   The functional simulator's time on the same programs is reported too (the cycle model computes
   its data with fsim's code, so fsim's time is a floor for short programs).
   Wall-clock seconds are of whole ``tests.programs.run_program`` calls, which also encode the
   instruction stream and build the DRAM image (harness work shared by all backends). Reported
   alongside, labelled ``sim_``: each backend's own ``RunStats.sim_seconds`` (measured inside its
   ``execute``) and their ratio.
2. Simulated cycles per second of the cycle model on long GEMMs on the default configuration: the
   blocked, double-buffered GEMM of ``vtakit bench gemm`` (data computed too), and one GEMM
   instruction of 2**20 micro-ops (timing alone dominates).

Usage: ``python scripts/bench_cycle.py [--json] [--quick]`` (``--quick``: fewer RTL programs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.programs import CASES, run_program  # noqa: E402
from tests.programs.runner import insn_address  # noqa: E402
from vtakit.hw.config import VTAConfig  # noqa: E402
from vtakit.hw.isa import FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop  # noqa: E402
from vtakit.runtime.blocked_gemm import bench_gemm, gemm_program  # noqa: E402
from vtakit.runtime.random_program import random_program  # noqa: E402
from vtakit.sim.backend import Launch  # noqa: E402
from vtakit.sim.cycle import simulate  # noqa: E402
from vtakit.sim.program import Program  # noqa: E402

SMALL = VTAConfig.small()
DEFAULT = VTAConfig()


def _programs(quick: bool) -> list[tuple[str, Program]]:
    names_small = ("blocked_gemm_vt1", "blocked_gemm_vt2", "gemm_epilogue", "token_burst", "pad_acc_1232")
    names_default = ("blocked_gemm_vt2", "gemm_epilogue", "acc_roundtrip")
    seeds = range(3) if quick else range(8)
    out = [(f"small/{n}", CASES[n](SMALL).program) for n in names_small]
    out += [(f"small/random{s}", random_program(SMALL, s)) for s in seeds]
    out += [(f"default/{n}", CASES[n](DEFAULT).program) for n in (names_default[:1] if quick else names_default)]
    out += [(f"default/random{s}", random_program(DEFAULT, s)) for s in seeds[:2 if quick else 4]]
    if not quick:   # a longer run (about 50k cycles), where the per-run overheads matter less
        out.append(("default/gemm_128x256x256_vt2", gemm_program(DEFAULT, 128, 256, 256, vthreads=2)))
    return out


def _timed(program: Program, backend: str):
    began = time.perf_counter()
    _, stats = run_program(program, backend)
    return time.perf_counter() - began, stats


def rtl_versus_cycle(quick: bool) -> dict:
    for config in (SMALL, DEFAULT):   # elaborate the RTL once per configuration, outside the timings
        run_program(Program(config, [FinishInsn()]), "rtl")
    rows = []
    for name, program in _programs(quick):
        rtl_s, rtl = _timed(program, "rtl")
        cyc_runs = [_timed(program, "cycle") for _ in range(3)]
        cyc_s, cyc = min(cyc_runs, key=lambda r: r[0])
        cyc_sim = min(r[1].sim_seconds for r in cyc_runs)
        fsim_s = min(_timed(program, "fsim")[0] for _ in range(3))
        rows.append({"program": name, "insns": len(program.insns), "cycles": rtl.cycles,
                     "exact": rtl.cycles == cyc.cycles and rtl.retire_cycles == cyc.retire_cycles,
                     "rtl_seconds": rtl_s, "cycle_seconds": cyc_s, "fsim_seconds": fsim_s, "speedup": rtl_s / cyc_s,
                     "rtl_cycles_per_second": rtl.cycles / rtl_s, "cycle_cycles_per_second": cyc.cycles / cyc_s,
                     "sim_rtl_seconds": rtl.sim_seconds, "sim_cycle_seconds": cyc_sim,
                     "sim_speedup": rtl.sim_seconds / cyc_sim})
    total_rtl = sum(r["rtl_seconds"] for r in rows)
    total_cyc = sum(r["cycle_seconds"] for r in rows)
    return {"programs": rows, "all_exact": all(r["exact"] for r in rows),
            "cycle_over_fsim_time": total_cyc / sum(r["fsim_seconds"] for r in rows),
            "rtl_seconds": total_rtl, "cycle_seconds": total_cyc, "speedup_total": total_rtl / total_cyc,
            "speedup_min": min(r["speedup"] for r in rows),
            "speedup_median": float(np.median([r["speedup"] for r in rows])),
            "sim_speedup_total": sum(r["sim_rtl_seconds"] for r in rows) / sum(r["sim_cycle_seconds"] for r in rows),
            "sim_speedup_min": min(r["sim_speedup"] for r in rows),
            "sim_speedup_median": float(np.median([r["sim_speedup"] for r in rows]))}


def _single_gemm_launch(uops_log2: int) -> Launch:
    cfg = DEFAULT
    n = 1 << min(uops_log2, 10)
    iters = 1 << (uops_log2 - min(uops_log2, 10))
    uops = [Uop(i % 8, i % 16, i % 32) for i in range(n)]
    insns = [MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, dram_base=0x100 // 4, y_size=1, x_size=n,
                     x_stride=n),
             GemmInsn(reset_reg=True, uop_bgn=0, uop_end=n, iter_out=iters, iter_in=1, dst_factor_out=0),
             FinishInsn()]
    program = Program(cfg, insns, uops, uop_addr=0x100, dram_size=1 << 16)
    addr = insn_address(program)
    encoded = program.encoded_insns()
    dram = program.initial_dram(addr + len(encoded))
    dram[addr:addr + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    return Launch(cfg, insns, dram, addr)


def cycles_per_second() -> dict:
    gemms = []
    for m, n, k in ((256, 256, 256), (512, 512, 512), (1024, 1024, 1024)):
        best = min((bench_gemm(m, n, k, backend="cycle", vthreads=2) for _ in range(2)), key=lambda r: r.sim_seconds)
        assert best.correct, (m, n, k)
        gemms.append({"shape": [m, n, k], "cycles": best.cycles, "utilization": best.utilization,
                      "seconds": best.sim_seconds, "cycles_per_second": best.cycles / best.sim_seconds})
    launch = _single_gemm_launch(20)
    began = time.perf_counter()
    run = simulate(launch)
    seconds = time.perf_counter() - began
    single = {"micro_ops": 1 << 20, "cycles": run.stats.cycles, "events": run.events, "seconds": seconds,
              "cycles_per_second": run.stats.cycles / seconds}
    return {"blocked_gemm_default": gemms, "single_gemm_insn_default": single}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="fewer RTL programs")
    args = parser.parse_args()
    result = {"rtl_vs_cycle": rtl_versus_cycle(args.quick), "throughput": cycles_per_second()}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    vs = result["rtl_vs_cycle"]
    print(f"{'program':28} {'insns':>5} {'cycles':>8} {'exact':>5} {'rtl s':>8} {'cycle s':>8} {'speedup':>8} "
          f"{'sim_speedup':>11}")
    for r in vs["programs"]:
        print(f"{r['program']:28} {r['insns']:5} {r['cycles']:8} {str(r['exact']):>5} {r['rtl_seconds']:8.2f} "
              f"{r['cycle_seconds']:8.4f} {r['speedup']:8.0f}x {r['sim_speedup']:10.0f}x")
    print(f"total: rtl {vs['rtl_seconds']:.1f} s, cycle {vs['cycle_seconds']:.3f} s, speedup {vs['speedup_total']:.0f}x "
          f"(median {vs['speedup_median']:.0f}x, min {vs['speedup_min']:.0f}x); all exact: {vs['all_exact']}; "
          f"cycle takes {vs['cycle_over_fsim_time']:.2f}x the time of fsim")
    print(f"backends' own simulation time (RunStats.sim_seconds, no harness): speedup {vs['sim_speedup_total']:.0f}x "
          f"(median {vs['sim_speedup_median']:.0f}x, min {vs['sim_speedup_min']:.0f}x)")
    for g in result["throughput"]["blocked_gemm_default"]:
        print(f"blocked GEMM {g['shape']}: {g['cycles']} cycles in {g['seconds']:.3f} s = "
              f"{g['cycles_per_second']:,.0f} cycles/s")
    s = result["throughput"]["single_gemm_insn_default"]
    print(f"one GEMM of {s['micro_ops']} micro-ops: {s['cycles']} cycles, {s['events']} events, "
          f"{s['cycles_per_second']:,.0f} cycles/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
