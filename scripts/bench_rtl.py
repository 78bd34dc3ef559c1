"""RTL simulation speed: simulated cycles per second of the Amaranth core (``rtl``) and of its
Verilog compiled by Verilator (``verilator``), on the same programs.

Blocked int8 GEMMs built by the runtime (``vtakit.runtime.blocked_gemm.gemm_program``) run on the
small (1x4x4) and default (1x16x16) configurations; each run is checked byte for byte against
fsim, and the verilator run against rtl in cycles and every retire cycle. ``sim_seconds`` is the
simulation itself (RunStats); ``wall_seconds`` adds building the simulator (Python code generation
for the Amaranth design, which a second run of the same configuration in one process pays again;
for verilator, loading the cached library). The cold Verilator build (Verilog generation plus
Verilator and the C++ compiler, into an empty cache) is timed once per configuration.

A compiled ResNet-18 layer (C2 by default: about 524 000 cycles, 2 virtual threads, the default
configuration) runs on verilator in a fresh process with the simulator already in the build cache
(the warm case): ``warm_build_seconds`` is what finding and loading the cached simulator costs in a
new process, ``run_wall_seconds`` the whole ``Device.run`` (fsim's pre-run and the simulation) and
``wall_seconds`` the two together. The run must equal the cycle backend (retire-exact to rtl,
tests/sim/test_cycle.py) in every retire cycle, the counters, the DRAM bytes moved and the final
DRAM, and numpy's result. rtl itself takes about ten minutes on C2, so it runs only with
``--layer-rtl``.

    python scripts/bench_rtl.py [--quick] [--json] [--no-verilator] [--no-cold]
                                [--layer C2] [--no-layer] [--layer-rtl]
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


_EXACT_FIELDS = ("cycles", "retire_cycles", "busy_cycles", "counters", "dram_read_bytes", "dram_write_bytes")


def layer_worker(name: str, with_rtl: bool) -> dict:
    """Compile ResNet-18 layer ``name`` (default configuration, 2 virtual threads) and run it on
    verilator (timed from a fresh process's first build lookup), the cycle backend and optionally
    rtl; the row of :func:`layer_row`."""
    from vtakit.compiler.topi_vta.bench import CLIP, compile_conv2d, conv2d_data, range_shift
    from vtakit.compiler.topi_vta.workloads import RESNET18
    from vtakit.compiler.vta.env import get_env
    from vtakit.runtime import Device
    from vtakit.sim import verilator

    config = VTAConfig()
    data = conv2d_data(get_env(config), RESNET18[name])
    shift = range_shift(data.acc, data.addend, CLIP)
    compiled = compile_conv2d(RESNET18[name], config, vthreads=2, shift=shift, clip=CLIP)
    expect = data.expect(shift, CLIP)
    device = Device(config, backend="cycle")
    arrays = [device.array(h) for h in data.host] + [device.empty(expect.shape, np.int8)]
    out = arrays[-1]
    program = compiled.module.program_for(*arrays)
    cstats, cdram = run_fresh(program, "cycle")
    began = time.perf_counter()
    verilator.build(config)                     # warm: generated and built before this process
    warm_build = time.perf_counter() - began
    vstats, vdram, run_wall = _timed(program, "verilator")
    result = vdram[out.phys_addr:out.phys_addr + out.nbytes].view(np.int8).reshape(expect.shape)
    same = all(getattr(vstats, f) == getattr(cstats, f) for f in _EXACT_FIELDS) and np.array_equal(vdram, cdram)
    row = {"config": "default", "model": config.model, "workload": f"resnet18 {name} vt{compiled.threads}",
           "instructions": len(program.insns), "cycles": vstats.cycles, "gemm_uops": vstats.counters["gemm_counter"],
           "utilization": vstats.utilization, "verilator_sim_seconds": vstats.sim_seconds,
           "verilator_cycles_per_second": vstats.cycles / vstats.sim_seconds,
           "warm_build_seconds": warm_build, "run_wall_seconds": run_wall, "wall_seconds": warm_build + run_wall,
           "cycle_sim_seconds": cstats.sim_seconds, "verilator_equal_cycle": bool(same),
           "correct": bool(same and np.array_equal(result, expect))}
    if with_rtl:
        stats, dram, wall = _timed(program, "rtl")
        same_rtl = all(getattr(vstats, f) == getattr(stats, f) for f in _EXACT_FIELDS) and np.array_equal(vdram, dram)
        row.update(sim_seconds=stats.sim_seconds, rtl_wall_seconds=wall, cycles_per_second=stats.cycles / stats.sim_seconds,
                   speedup=stats.sim_seconds / vstats.sim_seconds, verilator_equal_rtl=bool(same_rtl))
        row["correct"] = row["correct"] and same_rtl
    return row


def layer_row(name: str, with_rtl: bool) -> dict:
    """:func:`layer_worker` in a fresh process, after making sure the default configuration's
    simulator is in the build cache, so that the timed run finds it there (the warm case)."""
    from vtakit.sim import verilator

    verilator.build(VTAConfig())
    cmd = [sys.executable, os.path.abspath(__file__), "--layer-worker", name] + (["--layer-rtl"] if with_rtl else [])
    out = subprocess.run(cmd, env={**os.environ, "VTAKIT_PROGRESS": "0"}, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"layer worker failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cold_build_seconds(config_name: str) -> dict[str, float]:
    """Seconds to build the simulator of a configuration in an empty cache, in a fresh process:
    ``verilog`` (Amaranth and Yosys write the Verilog), ``compile`` (Verilator and the C++
    compiler) and ``total``."""
    config_json = WORKLOADS[config_name][0].to_json()
    code = ("import json, sys, time; from vtakit.hw.config import VTAConfig; from vtakit.sim import verilator; "
            "config = VTAConfig.from_json(sys.argv[1]); t = time.perf_counter(); "
            "verilator.generate_core_verilog(config); v = time.perf_counter(); verilator.build(config); "
            "e = time.perf_counter(); print(json.dumps({'verilog': v - t, 'compile': e - v, 'total': e - t}))")
    with tempfile.TemporaryDirectory() as cache:
        path = os.path.join(cache, "vta_config.json")
        with open(path, "w") as f:
            f.write(config_json)
        env = {**os.environ, "VTAKIT_CACHE_DIR": cache, "VTAKIT_PROGRESS": "0"}
        out = subprocess.run([sys.executable, "-c", code, path], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one workload per configuration")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-verilator", action="store_true", help="the Amaranth simulation only")
    parser.add_argument("--no-cold", action="store_true", help="skip timing the cold Verilator builds")
    parser.add_argument("--layer", default="C2", help="the ResNet-18 layer run on verilator (default C2)")
    parser.add_argument("--no-layer", action="store_true", help="skip the ResNet-18 layer")
    parser.add_argument("--layer-rtl", action="store_true", help="also run the layer on rtl (C2: ~10 minutes)")
    parser.add_argument("--layer-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.layer_worker:
        print(json.dumps(layer_worker(args.layer_worker, args.layer_rtl)))
        return 0
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
    layer = layer_row(args.layer, args.layer_rtl) if with_verilator and not args.no_layer else None
    cold = {name: cold_build_seconds(name) for name in WORKLOADS} if with_verilator and not args.no_cold else {}
    if args.json:
        print(json.dumps({"runs": results, "cycles_per_second": summary,
                          "verilator_cycles_per_second": verilator_summary, "layer": layer,
                          "verilator_cold_build_seconds": cold}, indent=2))
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
                text += (f", cold Verilator build {cold[name]['total']:.1f} s (Verilog {cold[name]['verilog']:.1f} s, "
                         f"Verilator and C++ {cold[name]['compile']:.1f} s)")
            print(text)
        if layer is not None:
            text = (f"{layer['workload']} ({layer['cycles']} cycles, {layer['instructions']} instructions) on verilator: "
                    f"{layer['wall_seconds']:.2f} s with a warm build ({layer['warm_build_seconds']:.2f} s finding "
                    f"and loading it, {layer['run_wall_seconds']:.2f} s Device.run, {layer['verilator_sim_seconds']:.2f}"
                    f" s simulating: {layer['verilator_cycles_per_second']:.0f} cycles/s); equals cycle: "
                    f"{'yes' if layer['verilator_equal_cycle'] else 'NO'}; numpy: {'yes' if layer['correct'] else 'NO'}")
            if "speedup" in layer:
                text += f"; rtl {layer['cycles_per_second']:.0f} cycles/s ({layer['speedup']:.0f}x)"
            print(text)
    ok = all(r["correct"] for r in results) and (layer is None or layer["correct"])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
