"""Measure the GEMM epilogue keys (BIAS_PRELOAD, GEMM_OUT_REQUANT) alone and together, in one run.

On the cycle model, ResNet-18 C2-C11 with their default tilings (``scripts/bench_vta.py``'s layers,
2 virtual threads, every output checked bit for bit against numpy): cycles and utilisation (sum of
ideal cycles / sum of cycles) per layer and in total, for each configuration of ``--variants``, all
on the default array (1x16x16) and otherwise VTA's configuration:

* ``base``: VTA's default; ``bias``: BIAS_PRELOAD;
* ``requant``: ALU_REQUANT; ``requant+bias``, ``requant+out`` (GEMM_OUT_REQUANT),
  ``requant+bias+out``: both keys on top of ALU_REQUANT.

``--network`` also builds the int8 ResNet-18 (as ``scripts/bench_requant.py`` does) and reports the
offloaded region's cycles and bit-exactness against the CPU build.

    python scripts/bench_gemm_epilogue.py --json
    python scripts/bench_gemm_epilogue.py --variants requant requant+bias+out --layers C4 C7
"""

from __future__ import annotations

import argparse
import json
import sys
import time

VARIANTS = {
    "base": {}, "bias": {"bias_preload": True},
    "requant": {"alu_requant": True},
    "requant+bias": {"alu_requant": True, "bias_preload": True},
    "requant+out": {"alu_requant": True, "gemm_out_requant": True},
    "requant+bias+out": {"alu_requant": True, "bias_preload": True, "gemm_out_requant": True},
}


def layers(config, names: list[str], vthreads: int = 2) -> dict:
    """``names`` with default tilings on ``config``: per-layer and total cycles and utilisation."""
    from vtakit.compiler.topi_vta import RESNET18
    from vtakit.compiler.topi_vta.bench import run_conv2d

    rows = {name: run_conv2d(RESNET18[name], config, "cycle", vthreads) for name in names}
    cycles = sum(r.cycles for r in rows.values())
    ideal = sum(r.ideal_cycles for r in rows.values())
    return {"cycles": cycles, "ideal_cycles": ideal, "utilization": ideal / cycles,
            "correct": all(r.correct for r in rows.values()),
            "layers": {n: {"cycles": r.cycles, "ideal_cycles": r.ideal_cycles, "utilization": r.utilization,
                           "knobs": str(r.knobs)} for n, r in rows.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--layers", nargs="*", default=[f"C{k}" for k in range(2, 12)])
    ap.add_argument("--network", action="store_true", help="also the whole int8 ResNet-18 (minutes each)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    from vtakit.hw.config import VTAConfig

    report: dict = {}
    for name in args.variants:
        config = VTAConfig(**VARIANTS[name])
        start = time.perf_counter()
        print(f"{name}: {' '.join(args.layers)} ...", file=sys.stderr, flush=True)
        report[name] = {"keys": VARIANTS[name], "c2_c11": layers(config, args.layers)}
        if args.network:
            sys.path.insert(0, __file__.rsplit("/", 1)[0])
            from bench_requant import network  # noqa: PLC0415

            print(f"{name}: ResNet-18 ...", file=sys.stderr, flush=True)
            report[name]["resnet18"] = network(config)
        report[name]["seconds"] = time.perf_counter() - start
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    for name, r in report.items():
        t = r["c2_c11"]
        per = "  ".join(f"{n} {v['utilization']:.3f}" for n, v in t["layers"].items())
        print(f"{name:17s} cycles {t['cycles']:>10,}  utilization {t['utilization']:.1%}  correct={t['correct']}  {per}")
        if "resnet18" in r:
            print(f"{'':17s} ResNet-18 offloaded {r['resnet18']['cycles']:,} cycles, bit-exact {r['resnet18']['bit_exact']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
