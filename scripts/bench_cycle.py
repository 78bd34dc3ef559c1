"""Speed of the cycle model: against the RTL simulation, and simulated cycles per second.

1. The same programs on ``rtl``, ``cycle`` and ``fsim``, in two groups reported apart:

   * ``rtl_vs_cycle``: short test programs (corpus programs and random programs, small and
     default configuration; 5-115 instructions, 200-16k cycles), where per-run overheads dominate;
   * ``rtl_vs_cycle_workloads``: what users run on ``VTAConfig.small()``: programs the compiler
     produces (``topi_vta`` packed conv2d and dense layers) and the blocked, double-buffered GEMM
     of ``vtakit bench gemm`` (a few thousand to ~40k cycles; the full run adds a 50k-cycle GEMM on
     the default configuration).

   Per program: whether cycles, every retire cycle and the final DRAM image agree between ``rtl``
   and ``cycle`` (and the DRAM with ``fsim``; workloads are also checked against numpy), and the
   speed ratio rtl / cycle, per program, per program class and over each group. The RTL is warmed
   up per configuration first (elaboration is not counted).
   Two ratios: ``speedup`` uses wall-clock seconds of whole ``tests.programs.run_program`` calls,
   each on a fresh copy of the program (new instruction objects), so every run pays what a first
   run pays: encoding the instruction stream, building the DRAM image (harness work shared by all
   backends), the legality checks; ``sim_speedup`` uses each backend's own ``RunStats.sim_seconds``
   (measured inside its ``execute``). ``cycle_warm_seconds`` is the cycle backend re-running the
   same program object (whatever is remembered per program reused), as a user re-running a layer
   does; ``speedup_warm_total`` is its ratio. ``cpu_speedup`` is the ratio of the runs' CPU
   seconds (``time.process_time``), which other processes on a shared machine disturb less. The functional simulator's time is reported too: the cycle model
   computes its data with fsim's code, so fsim's time is a floor for short programs.
   With ``--repeat R`` every program runs R rounds (rounds outermost; cycle and fsim 10 times a
   round, half before and half after the RTL run); every figure is the median over the runs.
2. Simulated cycles per second of the cycle model on long GEMMs on the default configuration: the
   blocked, double-buffered GEMM of ``vtakit bench gemm`` (data computed too), and one GEMM
   instruction of 2**20 micro-ops (timing alone dominates).

Usage: ``python scripts/bench_cycle.py [--json] [--quick] [--repeat R]``. ``--quick``: fewer and
shorter RTL programs, one round (about 1-1.5 minutes); the full run (2 rounds) takes about 5 minutes
on an idle machine (RTL runs are most of it: ~2,000 cycles/s on the small configuration).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vtakit  # noqa: E402
from tests.programs import CASES, run_program  # noqa: E402
from tests.programs.runner import insn_address  # noqa: E402
from vtakit.compiler.topi_vta.bench import CLIP, conv2d_data, dense_data, range_shift  # noqa: E402
from vtakit.compiler.topi_vta.conv2d import conv2d  # noqa: E402
from vtakit.compiler.topi_vta.dense import dense  # noqa: E402
from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles, choose_dense_tiles  # noqa: E402
from vtakit.compiler.topi_vta.workloads import Conv2dWorkload  # noqa: E402
from vtakit.compiler.vta.env import get_env  # noqa: E402
from vtakit.hw.config import VTAConfig  # noqa: E402
from vtakit.hw.isa import FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop  # noqa: E402
from vtakit.runtime import Device  # noqa: E402
from vtakit.runtime.blocked_gemm import bench_gemm, gemm_program, reference_gemm, requant_shift  # noqa: E402
from vtakit.runtime.packing import unpack_matrix  # noqa: E402
from vtakit.runtime.random_program import random_program  # noqa: E402
from vtakit.sim.backend import Launch  # noqa: E402
from vtakit.sim import native  # noqa: E402
from vtakit.sim.cycle import simulate  # noqa: E402
from vtakit.sim.program import Program  # noqa: E402

SMALL = VTAConfig.small()
DEFAULT = VTAConfig()
FAST_RUNS_PER_ROUND = 10     # cycle and fsim runs per round (each takes milliseconds)


@dataclass
class Bench:
    """One benchmark program: its class (for per-class ratios) and, for workloads, a numpy check."""

    name: str
    kind: str                 # program class: corpus, random, conv2d, dense, gemm
    program: Program
    check: Callable[[np.ndarray], bool] | None = None   # final DRAM -> result equals numpy's


# ---------------------------------------------------------------------------- programs
def short_programs(quick: bool) -> list[Bench]:
    names_small = ("blocked_gemm_vt1", "blocked_gemm_vt2", "gemm_epilogue", "token_burst", "pad_acc_1232")
    names_default = ("blocked_gemm_vt2", "gemm_epilogue", "acc_roundtrip")
    seeds = range(3) if quick else range(8)
    out = [Bench(f"small/{n}", "small/corpus", CASES[n](SMALL).program) for n in names_small]
    out += [Bench(f"small/random{s}", "small/random", random_program(SMALL, s)) for s in seeds]
    out += [Bench(f"default/{n}", "default/corpus", CASES[n](DEFAULT).program)
            for n in (names_default[:1] if quick else names_default)]
    out += [Bench(f"default/random{s}", "default/random", random_program(DEFAULT, s)) for s in seeds[:2 if quick else 4]]
    return out


def _compiled(kind: str, config: VTAConfig, shape: tuple[int, ...], vthreads: int = 2) -> Bench:
    """A ``topi_vta`` layer compiled for ``config``, as the self-contained program ``VTAModule`` runs."""
    env = get_env(config)
    if kind == "conv2d":
        wl = Conv2dWorkload(*shape)
        data = conv2d_data(env, wl)
        shift = range_shift(data.acc, data.addend, CLIP)    # as the op benchmarks: no output saturates
        s, tensors = conv2d(env, wl, choose_conv2d_tiles(env, wl, vthreads), shift=shift, clip=CLIP)
        label = "conv2d_{}x{}_ci{}_co{}_k{}".format(*shape[:5])
    else:
        data = dense_data(env, *shape)
        shift = range_shift(data.acc, data.addend, CLIP)
        s, tensors = dense(env, *shape, choose_dense_tiles(env, *shape, vthreads), shift=shift, clip=CLIP)
        label = "dense_{}x{}x{}".format(*shape)
    host, expect = data.host, data.expect(shift, CLIP)
    module = vtakit.build(s, tensors, target="vta", config=config)
    device = Device(config, dram_size=(1 << 20) + 4 * sum(h.nbytes for h in host) + 2 * expect.nbytes)
    arrays = [device.array(h) for h in host] + [device.empty(expect.shape, np.int8)]
    program = module.program_for(*arrays)   # segments: the arrays' contents; micro-ops at their DRAM block
    at, nbytes = arrays[-1].phys_addr, expect.nbytes

    def check(dram: np.ndarray) -> bool:
        return bool(np.array_equal(dram[at:at + nbytes].view(np.int8).reshape(expect.shape), expect))

    return Bench(f"{'small' if config == SMALL else 'default'}/{label}_vt{vthreads}", kind, program, check)


def _blocked_gemm(config: VTAConfig, m: int, n: int, k: int, vthreads: int = 2) -> Bench:
    """The ``vtakit bench gemm`` program (same builder), with its inputs as segments."""
    program = gemm_program(config, m, n, k, vthreads=vthreads)
    rng = np.random.default_rng(0)          # gemm_program's inputs, drawn again for the reference
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    w = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    expect = reference_gemm(a, w, requant_shift(k))
    out = next(seg for seg in program.segments if seg.name == "C")
    shape = (m // config.batch, n // config.block_out, config.batch, config.block_out)

    def check(dram: np.ndarray) -> bool:
        got = dram[out.addr:out.addr + len(out.data)].view(np.int8).reshape(shape)
        return bool(np.array_equal(unpack_matrix(got), expect))

    tag = "small" if config == SMALL else "default"
    return Bench(f"{tag}/gemm_{m}x{n}x{k}_vt{vthreads}", "gemm" if config == SMALL else "default/gemm",
                 program, check)


def workload_programs(quick: bool) -> list[Bench]:
    out = [_compiled("conv2d", SMALL, (8, 8, 16, 16, 3, 1, 1)),       # ~12k cycles
           _compiled("dense", SMALL, (16, 32, 64)),                   # ~3.6k cycles
           _blocked_gemm(SMALL, 32, 32, 64)]                          # ~5.8k cycles
    if not quick:
        out += [_compiled("conv2d", SMALL, (14, 14, 16, 16, 3, 1, 1)),   # ~35k cycles
                _compiled("dense", SMALL, (32, 64, 64)),                # ~14k cycles
                _blocked_gemm(SMALL, 64, 64, 64),                       # ~22k cycles
                _blocked_gemm(DEFAULT, 128, 256, 256)]                  # ~50k cycles, default configuration
    return out


# ---------------------------------------------------------------------------- measurement
def _timed(program: Program, backend: str, cpu: list[float] | None = None):
    """Wall-clock seconds of one run (and its final DRAM and stats); its CPU seconds appended to ``cpu``."""
    began, began_cpu = time.perf_counter(), time.process_time()
    dram, stats = run_program(program, backend)
    wall = time.perf_counter() - began
    if cpu is not None:
        cpu.append(time.process_time() - began_cpu)
    return wall, dram, stats


def _fresh(program: Program) -> Program:
    """The program made anew: new instruction, micro-op and segment objects, as a freshly built
    program has. Nothing any layer remembers by object identity (the program's encoding, the
    simulators' legality checks) applies, so the run costs what a program's first run costs."""
    return dataclasses.replace(program, insns=[copy.copy(i) for i in program.insns],
                               uops=[copy.copy(u) for u in program.uops],
                               segments=[dataclasses.replace(seg) for seg in program.segments])


def _fast_runs(program: Program, s: dict[str, list[float]]):
    """One cold and one warm cycle run and one fsim run, recorded in ``s``; the final DRAMs and stats."""
    cyc_s, cyc_dram, cyc = _timed(_fresh(program), "cycle", s["cycle_cpu"])
    s["cycle"].append(cyc_s)
    s["cycle_sim"].append(cyc.sim_seconds)
    s["cycle_warm"].append(_timed(program, "cycle")[0])
    fsim_s, fsim_dram, fsim = _timed(_fresh(program), "fsim")
    s["fsim"].append(fsim_s)
    s["fsim_sim"].append(fsim.sim_seconds)
    return cyc_dram, cyc, fsim_dram


def _measure(benches: list[Bench], repeat: int) -> list[dict]:
    samples = {b.name: {k: [] for k in ("rtl", "rtl_sim", "rtl_cpu", "cycle", "cycle_sim", "cycle_cpu", "cycle_warm",
                                        "fsim", "fsim_sim")}
               for b in benches}
    first: dict[str, dict] = {}
    for _ in range(repeat):                       # rounds outermost: noise is spread over every program
        for b in benches:
            s = samples[b.name]
            # cycle and fsim run half before and half after the RTL run, so that their samples
            # (milliseconds each) are spread over seconds, not caught together by one load burst
            fast = [_fast_runs(b.program, s) for _ in range(FAST_RUNS_PER_ROUND // 2)]
            rtl_s, rtl_dram, rtl = _timed(_fresh(b.program), "rtl", s["rtl_cpu"])
            s["rtl"].append(rtl_s)
            s["rtl_sim"].append(rtl.sim_seconds)
            fast += [_fast_runs(b.program, s) for _ in range(FAST_RUNS_PER_ROUND - FAST_RUNS_PER_ROUND // 2)]
            cyc_dram, cyc, fsim_dram = fast[-1]
            if b.name not in first:               # agreement is checked on the first round
                first[b.name] = {
                    "cycles": rtl.cycles,
                    "exact": rtl.cycles == cyc.cycles and rtl.retire_cycles == cyc.retire_cycles,
                    "dram_equal": bool(np.array_equal(rtl_dram, cyc_dram) and np.array_equal(rtl_dram, fsim_dram)),
                    "correct": None if b.check is None else all(b.check(d) for d in (rtl_dram, cyc_dram, fsim_dram)),
                }
    rows = []
    for b in benches:
        m = {k: statistics.median(v) for k, v in samples[b.name].items()}
        f = first[b.name]
        rows.append({"program": b.name, "class": b.kind, "insns": len(b.program.insns), "cycles": f["cycles"],
                     "exact": f["exact"], "dram_equal": f["dram_equal"], "correct": f["correct"],
                     "rtl_seconds": m["rtl"], "cycle_seconds": m["cycle"], "fsim_seconds": m["fsim"],
                     "cycle_warm_seconds": m["cycle_warm"], "speedup": m["rtl"] / m["cycle"],
                     "rtl_cycles_per_second": f["cycles"] / m["rtl"],
                     "cycle_cycles_per_second": f["cycles"] / m["cycle"],
                     "sim_rtl_seconds": m["rtl_sim"], "sim_cycle_seconds": m["cycle_sim"],
                     "sim_fsim_seconds": m["fsim_sim"], "sim_speedup": m["rtl_sim"] / m["cycle_sim"],
                     "cpu_rtl_seconds": m["rtl_cpu"], "cpu_cycle_seconds": m["cycle_cpu"],
                     "cpu_speedup": m["rtl_cpu"] / m["cycle_cpu"],
                     "runs": {"rtl": repeat, "cycle": repeat * FAST_RUNS_PER_ROUND,
                              "fsim": repeat * FAST_RUNS_PER_ROUND}})
    return rows


def _ratios(rows: list[dict]) -> dict:
    """Totals and spread of both ratios over ``rows``."""
    total = lambda key: sum(r[key] for r in rows)  # noqa: E731
    return {"programs": len(rows), "cycles": total("cycles"),
            "rtl_seconds": total("rtl_seconds"), "cycle_seconds": total("cycle_seconds"),
            "speedup_total": total("rtl_seconds") / total("cycle_seconds"),
            "speedup_min": min(r["speedup"] for r in rows),
            "speedup_median": float(np.median([r["speedup"] for r in rows])),
            "speedup_warm_total": total("rtl_seconds") / total("cycle_warm_seconds"),
            "sim_speedup_total": total("sim_rtl_seconds") / total("sim_cycle_seconds"),
            "sim_speedup_min": min(r["sim_speedup"] for r in rows),
            "sim_speedup_median": float(np.median([r["sim_speedup"] for r in rows])),
            "cpu_speedup_total": total("cpu_rtl_seconds") / total("cpu_cycle_seconds"),
            "cycle_over_fsim_time": total("cycle_seconds") / total("fsim_seconds"),
            # the share of the cycle backend's wall time spent outside its own timer (harness, setup)
            "cycle_outside_sim_share": 1 - total("sim_cycle_seconds") / total("cycle_seconds")}


def rtl_versus_cycle(benches: list[Bench], repeat: int) -> dict:
    rows = _measure(benches, repeat)
    classes = {}
    for kind in dict.fromkeys(r["class"] for r in rows):
        classes[kind] = _ratios([r for r in rows if r["class"] == kind])
    configs = {}                                  # per configuration: small and default differ most
    for tag in dict.fromkeys(r["program"].split("/")[0] for r in rows):
        configs[tag] = _ratios([r for r in rows if r["program"].split("/")[0] == tag])
    summary = _ratios(rows)
    del summary["programs"], summary["cycles"]
    return {"programs": rows, "all_exact": all(r["exact"] for r in rows),
            "all_dram_equal": all(r["dram_equal"] for r in rows),
            "all_correct": all(r["correct"] is not False for r in rows), **summary, "classes": classes,
            "configs": configs}


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


# ---------------------------------------------------------------------------- report
def _print_group(title: str, vs: dict) -> None:
    print(title)
    print(f"{'program':34} {'insns':>5} {'cycles':>7} {'exact':>5} {'rtl s':>7} {'cycle ms':>8} {'fsim ms':>7} "
          f"{'speedup':>8} {'sim_speedup':>11}")
    for r in vs["programs"]:
        ok = r["exact"] and r["dram_equal"] and r["correct"] is not False
        print(f"{r['program']:34} {r['insns']:5} {r['cycles']:7} {str(ok):>5} {r['rtl_seconds']:7.2f} "
              f"{r['cycle_seconds'] * 1e3:8.2f} {r['fsim_seconds'] * 1e3:7.2f} {r['speedup']:7.0f}x "
              f"{r['sim_speedup']:10.0f}x")
    for kind, c in [*vs["classes"].items(), *((f"all {tag}", c) for tag, c in vs["configs"].items())]:
        print(f"  {kind:22} {c['programs']:2} programs, {c['cycles']:7} cycles: speedup {c['speedup_total']:6.0f}x "
              f"(median {c['speedup_median']:.0f}x, min {c['speedup_min']:.0f}x), sim_speedup "
              f"{c['sim_speedup_total']:.0f}x")
    print(f"  total: rtl {vs['rtl_seconds']:.1f} s, cycle {vs['cycle_seconds']:.3f} s, speedup "
          f"{vs['speedup_total']:.0f}x (median {vs['speedup_median']:.0f}x, min {vs['speedup_min']:.0f}x; re-running "
          f"the same program object {vs['speedup_warm_total']:.0f}x); cycles, retire cycles, DRAM "
          f"{'all agree' if vs['all_exact'] and vs['all_dram_equal'] else 'DISAGREE'}; results vs numpy "
          f"{'correct' if vs['all_correct'] else 'WRONG'}; cycle takes {vs['cycle_over_fsim_time']:.2f}x fsim's time, "
          f"{100 * vs['cycle_outside_sim_share']:.0f}% of it outside its own timer")
    print(f"  backends' own simulation time (RunStats.sim_seconds, no harness): speedup "
          f"{vs['sim_speedup_total']:.0f}x (median {vs['sim_speedup_median']:.0f}x, min {vs['sim_speedup_min']:.0f}x); "
          f"CPU time of whole runs (less sensitive to other load): speedup {vs['cpu_speedup_total']:.0f}x")


_CORES = ("_timing_core", "_fsim_core")


def missing_cores() -> list[str]:
    """The compiled simulator cores this run cannot use (not built, or ``VTAKIT_NATIVE=0``)."""
    return [name for name in _CORES if native.core(name) is None]


def warn_missing_cores(missing: list[str]) -> None:
    """Say on stderr, so that it cannot be missed, that the figures are not the compiled cores'."""
    if missing:
        reason = "VTAKIT_NATIVE=0" if not native.enabled() else "not built (reinstall with a C compiler: pip install -e .)"
        bar = "!" * 100
        print(f"{bar}\nWARNING: the compiled simulator cores {', '.join(missing)} are missing ({reason}).\n"
              "The cycle model and fsim run their Python engines, 10-1000x slower: these figures do not measure "
              f"vtakit's cycle backend.\n{bar}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="fewer and shorter RTL programs, one round by default (about 1-1.5 minutes)")
    parser.add_argument("--repeat", type=int, default=None, metavar="R",
                        help="rounds per program (RTL runs R times, cycle and fsim 10R); medians "
                             "(default 2, with --quick 1)")
    args = parser.parse_args()
    if args.repeat is None:
        args.repeat = 1 if args.quick else 2
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    missing = missing_cores()
    warn_missing_cores(missing)
    began = time.perf_counter()
    for config in (SMALL, DEFAULT):   # elaborate the RTL once per configuration, outside the timings
        run_program(Program(config, [FinishInsn()]), "rtl")
    result = {"repeat": args.repeat, "quick": args.quick,
              "rtl_vs_cycle": rtl_versus_cycle(short_programs(args.quick), args.repeat),
              "rtl_vs_cycle_workloads": rtl_versus_cycle(workload_programs(args.quick), args.repeat),
              "throughput": cycles_per_second(),
              # the compiled simulator cores this run used (vtakit/sim/native.py; VTAKIT_NATIVE=0 turns them off)
              "native_cores": {name: name not in missing for name in _CORES}}
    result["bench_seconds"] = time.perf_counter() - began
    if args.json:
        print(json.dumps(result, indent=1))
        warn_missing_cores(missing)   # again after the figures: the first warning has scrolled away
        return 0
    _print_group("short test programs (corpus, random):", result["rtl_vs_cycle"])
    _print_group("workloads (compiled conv2d / dense, blocked GEMM):", result["rtl_vs_cycle_workloads"])
    for g in result["throughput"]["blocked_gemm_default"]:
        print(f"blocked GEMM {g['shape']}: {g['cycles']} cycles in {g['seconds']:.3f} s = "
              f"{g['cycles_per_second']:,.0f} cycles/s")
    s = result["throughput"]["single_gemm_insn_default"]
    print(f"one GEMM of {s['micro_ops']} micro-ops: {s['cycles']} cycles, {s['events']} events, "
          f"{s['cycles_per_second']:,.0f} cycles/s")
    print(f"(medians of {args.repeat} rounds; benchmark took {result['bench_seconds']:.0f} s; compiled cores: "
          f"{', '.join(name for name, used in result['native_cores'].items() if used) or 'none'})")
    warn_missing_cores(missing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
