"""Benchmark the accelerator backend: ResNet-18 C2-C11 (and optionally a dense GEMM) with 1 and
2 virtual threads on a device backend (default: the cycle simulator).

Every run is checked bit for bit against numpy, with a requantisation shift chosen from the
accumulator's range so that the outputs are not clipped (``unsaturated`` is their share). Prints a
table and, with --json, a JSON object: per layer and thread count ``correct, cycles, ideal_cycles,
utilization, sim_seconds, compile_seconds, instructions, knobs, shift, unsaturated``, plus the
totals (sum of ideal cycles / sum of cycles) per thread count, and ``compile``: the seconds that
scheduling and building take (no run; wall clock and CPU time of the process, which a shared
machine disturbs less) for every layer and for the dense GEMMs of --compile-dense (default 1024^3
and 4096^3), with their instruction counts.

    python scripts/bench_vta.py                     # C2-C11, 1 and 2 threads, cycle backend
    python scripts/bench_vta.py --backend fsim --layers C2 C5 --json
    python scripts/bench_vta.py --layers --compile-dense 4096 --json   # compile times only
    python scripts/bench_vta.py --set alu_requant=1 bias_preload=1 gemm_out_requant=1 --vthreads 2 \
        --compile-dense --json                     # C2-C11 with the hardware features on
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from vtakit.compiler.topi_vta.bench import compile_conv2d, compile_dense, run_conv2d, run_dense
from vtakit.compiler.topi_vta.workloads import RESNET18
from vtakit.hw.config import VTAConfig


def _compile_times(config: VTAConfig, layers: list[str], dense_sizes: list[int], vthreads: list[int],
                   quiet: bool) -> dict:
    """Seconds to schedule and build each layer and dense size per thread count, and instructions."""
    jobs = [(name, lambda vt, name=name: compile_conv2d(RESNET18[name], config, vt)) for name in layers]
    jobs += [(f"dense{n}", lambda vt, n=n: compile_dense(n, n, n, config, vt)) for n in dense_sizes]
    times: dict = {}
    for name, compile_op in jobs:
        times[name] = {}
        for vt in vthreads:
            c = compile_op(vt)
            times[name][vt] = {"compile_seconds": c.seconds, "compile_cpu_seconds": c.cpu_seconds,
                               "instructions": len(c.module.template.insns), "vthreads": c.threads}
            if not quiet:
                print(f"compile {name:9s} vthreads={vt}  {c.seconds:7.3f} s ({c.cpu_seconds:.3f} s CPU)  "
                      f"{len(c.module.template.insns)} instructions", flush=True)
    return times


def _changes(ap: argparse.ArgumentParser, pairs: list[str]) -> dict:
    """``KEY=VALUE`` pairs as configuration changes: ``true``/``false`` (or 1/0 for a boolean key) and
    integers; the configuration validates names and values."""
    bools = {f.name for f in dataclasses.fields(VTAConfig) if f.type in (bool, "bool")}
    changes = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        name = key.lower()
        if not sep or not key:
            ap.error(f"--set {pair!r}: expected KEY=VALUE")
        if value.lower() in ("true", "false"):
            changes[key] = value.lower() == "true"
            continue
        try:
            number = int(value)
        except ValueError:
            ap.error(f"--set {pair!r}: expected an integer or true/false")
        changes[key] = bool(number) if name in bools and number in (0, 1) else number
    return changes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="cycle", choices=["fsim", "cycle", "rtl"])
    ap.add_argument("--layers", nargs="*", default=list(RESNET18), help="ResNet-18 layer names (C2 .. C11)")
    ap.add_argument("--vthreads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--dense", type=int, default=0, metavar="N", help="also run an N x N x N dense GEMM")
    ap.add_argument("--compile-dense", nargs="*", type=int, default=[1024, 4096], metavar="N",
                    help="time the compilation (no run) of N x N x N dense GEMMs (default 1024 4096)")
    ap.add_argument("--config", help="VTA config JSON (default: VTAConfig())")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="change configuration keys (snake_case or JSON names; integers, 1/0 for booleans), "
                         "e.g. --set alu_requant=1 bias_preload=1 gemm_out_requant=1")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    config = VTAConfig.from_json(args.config) if args.config else VTAConfig()
    if args.set:
        config = config.replace(**_changes(ap, args.set))
    results: dict = {"backend": args.backend, "config": config.model, "keys": config.to_dict(), "layers": {},
                     "total": {},
                     "compile": _compile_times(config, args.layers, args.compile_dense, args.vthreads, args.json)}
    for name in args.layers:
        results["layers"][name] = {}
        for vt in args.vthreads:
            r = run_conv2d(RESNET18[name], config, args.backend, vt)
            results["layers"][name][vt] = r.to_dict()
            if not args.json:
                util = f"{r.utilization:.3f}" if r.utilization is not None else "-"
                print(f"{name:4s} vthreads={vt}  correct={r.correct}  cycles={r.cycles}  ideal={r.ideal_cycles}  "
                      f"utilization={util}  knobs={r.knobs}", flush=True)
    for vt in args.vthreads:
        rows = [results["layers"][n][vt] for n in args.layers]
        cycles = [r["cycles"] for r in rows]
        ideal = sum(r["ideal_cycles"] for r in rows)
        total = sum(cycles) if all(c is not None for c in cycles) else None
        results["total"][vt] = {"cycles": total, "ideal_cycles": ideal,
                                "utilization": ideal / total if total else None,
                                "correct": all(r["correct"] for r in rows)}
    if args.dense:
        n = args.dense
        results["dense"] = {vt: run_dense(n, n, n, config, args.backend, vt).to_dict() for vt in args.vthreads}
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for vt, t in results["total"].items():
            util = f"{t['utilization']:.3f}" if t["utilization"] is not None else "-"
            print(f"total vthreads={vt}: cycles={t['cycles']} ideal={t['ideal_cycles']} utilization={util} "
                  f"correct={t['correct']}")
        for vt, r in results.get("dense", {}).items():
            print(f"dense {args.dense}^3 vthreads={vt}: correct={r['correct']} cycles={r['cycles']} "
                  f"utilization={r['utilization']}")
    ok = all(t["correct"] for t in results["total"].values()) and all(
        r["correct"] for r in results.get("dense", {}).values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
