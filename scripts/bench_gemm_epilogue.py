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

``--tuned`` runs each layer with the knobs of :data:`TUNED` instead of the default tiler's: what
``--search`` found for ``requant+bias+out`` (a greedy descent from the default tiling over the
``vta.conv2d`` knobs, one knob at a time plus channel or row tiles together with their thread
count, each candidate compiled, run on the cycle model and checked against numpy; deterministic,
about a minute per layer on a quiet machine).

    python scripts/bench_gemm_epilogue.py --json
    python scripts/bench_gemm_epilogue.py --variants requant requant+bias+out --layers C4 C7
    python scripts/bench_gemm_epilogue.py --variants requant+bias+out --tuned --json
    python scripts/bench_gemm_epilogue.py --variants requant+bias+out --search --json
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

#: Knobs ``--search`` found for ``requant+bias+out`` at commit 0cddc72 (C4 to C8 and C10: the default
#: tiling was best), with the cycles before and after. Fields of ``Conv2dKnobs``; the ones left out
#: take their defaults.
TUNED = {
    "C2": dict(tile_h=7, tile_w=28, tile_co=2, tile_ci=1, oc_nthread=2, h_nthread=2),         # 473,684 -> 472,389
    "C3": dict(tile_h=7, tile_w=14, tile_co=4, tile_ci=1, oc_nthread=2, h_nthread=2),         # 243,307 -> 242,393
    "C9": dict(tile_h=7, tile_w=7, tile_co=8, tile_ci=1, oc_nthread=2),                       # 234,751 -> 234,526
    "C11": dict(tile_h=7, tile_w=7, tile_co=16, tile_ci=1, oc_nthread=2, load_at="dy"),       # 460,580 -> 458,454
}


def _knobs(spec: dict | None):
    from vtakit.compiler.topi_vta.knobs import Conv2dKnobs

    return None if spec is None else Conv2dKnobs(**spec)


def search(config, name: str, vthreads: int = 2, log=None) -> tuple[dict, int, int]:
    """Greedy descent over ``vta.conv2d``'s knobs from the default tiling of layer ``name``: each round
    tries every single-knob change and every (channel tile, channel threads) and (row tile, row
    threads) pair, in a fixed order, and moves to the first candidate that lowers the cycles (checked
    against numpy); it stops when none does. Returns the knobs, the default's and the best cycles."""
    import dataclasses

    from vtakit.compiler.topi_vta import RESNET18
    from vtakit.compiler.topi_vta.bench import run_conv2d
    from vtakit.compiler.topi_vta.knobs import CONV2D_EPILOGUE_AT, CONV2D_LOAD_AT, CONV2D_THREADS, \
        CONV2D_TILE_ORDERS, conv2d_blocks
    from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles
    from vtakit.compiler.vta.env import get_env

    env, wl = get_env(config), RESNET18[name]
    _, ci_blocks, co_blocks = conv2d_blocks(env, wl)
    divisors = lambda n: [d for d in range(1, n + 1) if n % d == 0]  # noqa: E731
    threads = [t for t in CONV2D_THREADS if t <= config.token_queue_depth]
    seen: dict = {}

    def cost(k) -> int | None:
        if k not in seen:
            seen[k] = None
            if k.static_error(wl, env) is None:
                try:
                    r = run_conv2d(wl, config, "cycle", vthreads, k)
                    seen[k] = r.cycles if r.correct else None
                except Exception:  # noqa: BLE001 -- a config the filter lets through may still fail to build
                    seen[k] = None
        return seen[k]

    best = choose_conv2d_tiles(env, wl, vthreads)
    start = best_cost = cost(best)
    moved = True
    while moved:
        moved = False
        single = {"oc_nthread": threads, "h_nthread": threads, "load_at": CONV2D_LOAD_AT,
                  "epilogue_at": CONV2D_EPILOGUE_AT, "tile_order": CONV2D_TILE_ORDERS,
                  "tile_co": divisors(co_blocks), "tile_h": divisors(wl.oh), "tile_w": divisors(wl.ow),
                  "tile_ci": divisors(ci_blocks)}
        cands = [dataclasses.replace(best, **{f: v}) for f, vs in single.items() for v in vs if getattr(best, f) != v]
        cands += [dataclasses.replace(best, tile_co=c, oc_nthread=t) for c in divisors(co_blocks) for t in threads]
        cands += [dataclasses.replace(best, tile_h=h, h_nthread=t) for h in divisors(wl.oh) for t in threads]
        for k in cands:
            c = cost(k)
            if c is not None and c < best_cost:
                best, best_cost, moved = k, c, True
                if log:
                    log(f"{name}: {c:,} cycles with {dataclasses.asdict(k)}")
    return dataclasses.asdict(best), start, best_cost


def layers(config, names: list[str], vthreads: int = 2, knobs: dict | None = None) -> dict:
    """``names`` on ``config`` with default tilings, or ``knobs[name]`` where given: per-layer and total
    cycles and utilisation."""
    from vtakit.compiler.topi_vta import RESNET18
    from vtakit.compiler.topi_vta.bench import run_conv2d

    knobs = knobs or {}
    rows = {name: run_conv2d(RESNET18[name], config, "cycle", vthreads, _knobs(knobs.get(name))) for name in names}
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
    ap.add_argument("--tuned", action="store_true", help="the layers with the knobs of TUNED (default tilings else)")
    ap.add_argument("--search", action="store_true",
                    help="search each layer's knobs from its default tiling (greedy descent, see the docstring)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    from vtakit.hw.config import VTAConfig

    report: dict = {}
    for name in args.variants:
        config = VTAConfig(**VARIANTS[name])
        start = time.perf_counter()
        print(f"{name}: {' '.join(args.layers)} ...", file=sys.stderr, flush=True)
        knobs = TUNED if args.tuned else None
        if args.search:
            found = {}
            for layer in args.layers:
                spec, default, best = search(config, layer, log=lambda m: print(m, file=sys.stderr, flush=True))
                found[layer] = spec
                print(f"{name}: {layer} {default:,} -> {best:,} cycles", file=sys.stderr, flush=True)
            knobs = found
        which = "searched" if args.search else "tuned" if args.tuned else "default"
        report[name] = {"keys": VARIANTS[name], "knobs": which, "c2_c11": layers(config, args.layers, knobs=knobs)}
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
