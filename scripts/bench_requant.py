"""Measure the fused requantisation opcode (ALU_REQUANT) on and off, in one run.

Two measurements on the cycle model, each with the key off and on and the configuration otherwise
the same (``--acc-read-ports`` chooses ACC_READ_PORTS where the installed VTAConfig has it):

* ResNet-18 int8 (the onnx.helper model of ``vtakit.compiler.graph.zoo``, quantised with
  ``vtakit.graph.quantize`` from 4 seeded calibration images, as ``scripts/bench_net.py`` does): the
  offloaded region's accelerator cycles (``profile.total_cycles``), ideal cycles and utilisation,
  and whether the accelerator's output equals the integer CPU build (``target="llvm"``) bit for bit;
* ResNet-18 C2-C11 with their default tilings (``scripts/bench_vta.py``'s layers, 2 virtual
  threads): cycles and utilisation (sum of ideal cycles / sum of cycles).

    python scripts/bench_requant.py                 # table
    python scripts/bench_requant.py --json --layers-only
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time


def _config(requant: bool, ports: int | None):
    from vtakit.hw.config import VTAConfig

    keys = {"alu_requant": requant}
    if ports is not None and "acc_read_ports" in {f.name for f in dataclasses.fields(VTAConfig)}:
        keys["acc_read_ports"] = ports
    return VTAConfig(**keys)


def network(config, seed: int = 0, image: int = 224) -> dict:
    """ResNet-18's offloaded region on ``config``: cycles, utilisation, bit-exactness against llvm."""
    import numpy as np

    import vtakit.graph as vg
    from vtakit.compiler.graph.zoo import resnet18

    rng = np.random.default_rng(seed)
    g = vg.from_onnx(resnet18(seed, image=image))
    shape = g.type_of(g.inputs[0]).shape
    calibration = rng.standard_normal((4, *shape[1:])).astype(np.float32)
    x = {g.inputs[0]: rng.standard_normal(shape).astype(np.float32)}
    q = vg.quantize(g, calibration)
    module = vg.build(q, "vta", config=config)
    profile = module.profile(x, backend="cycle")
    got = module.run(x, backend="cycle")
    want = vg.build(q, "llvm").run(x)
    return {"cycles": profile.total_cycles, "ideal_cycles": profile.ideal_cycles,
            "utilization": profile.utilization,
            "bit_exact": all(np.array_equal(a, b) for a, b in zip(got, want))}


def layers(config, vthreads: int = 2) -> dict:
    """C2-C11 with default tilings on ``config``: per-layer and total cycles and utilisation."""
    from vtakit.compiler.topi_vta import RESNET18
    from vtakit.compiler.topi_vta.bench import run_conv2d

    rows = {name: run_conv2d(wl, config, "cycle", vthreads) for name, wl in RESNET18.items() if name != "C1"}
    cycles = sum(r.cycles for r in rows.values())
    ideal = sum(r.ideal_cycles for r in rows.values())
    return {"cycles": cycles, "ideal_cycles": ideal, "utilization": ideal / cycles,
            "correct": all(r.correct for r in rows.values()),
            "layers": {n: {"cycles": r.cycles, "utilization": r.utilization} for n, r in rows.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--acc-read-ports", type=int, choices=(1, 2), help="ACC_READ_PORTS of both configurations")
    ap.add_argument("--layers-only", action="store_true", help="skip the whole network (minutes)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    report: dict = {}
    for requant in (False, True):
        config = _config(requant, args.acc_read_ports)
        key = "on" if requant else "off"
        start = time.perf_counter()
        print(f"ALU_REQUANT {key}: C2-C11 ...", file=sys.stderr, flush=True)
        report[key] = {"config": config.to_dict(), "c2_c11": layers(config)}
        if not args.layers_only:
            print(f"ALU_REQUANT {key}: ResNet-18 ...", file=sys.stderr, flush=True)
            report[key]["resnet18"] = network(config)
        report[key]["seconds"] = time.perf_counter() - start
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    for what in ("resnet18", "c2_c11"):
        if what not in report["off"]:
            continue
        off, on = report["off"][what], report["on"][what]
        print(f"{what:9s} cycles {off['cycles']:>10,} -> {on['cycles']:>10,} ({on['cycles'] / off['cycles'] - 1:+.2%})  "
              f"utilization {off['utilization']:.1%} -> {on['utilization']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
