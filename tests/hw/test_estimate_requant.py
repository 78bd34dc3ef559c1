"""The resource estimate of ALU_REQUANT: its LUTs per ALU lane (fitted on the small configuration with
and without it, scripts/calibrate_estimate.py), nothing else."""

import pytest

from vtakit.hw.config import VTAConfig
from vtakit.hw.estimate import _ECP5_LUT4_PER_LUT, _XILINX7, estimate


@pytest.mark.parametrize("config", [VTAConfig.small(), VTAConfig(), VTAConfig.small(log_batch=1)],
                         ids=["small", "default", "batch2"])
@pytest.mark.parametrize("part", ["xc7z020", "ecp5-85k"])
def test_requant_costs_luts_per_lane(config, part):
    off, on = estimate(config, part), estimate(config.replace(alu_requant=True), part)
    lanes = config.batch * config.block_out
    scale = 1.0 if part == "xc7z020" else _ECP5_LUT4_PER_LUT     # ECP5 scales the Xilinx logic LUTs
    per_lane = _XILINX7["lut"]["requant_lanes"]
    assert 100 <= per_lane <= 400          # an adder, a barrel shifter, the clip's compares and mux (32 bits)
    assert on.lut.used - off.lut.used == pytest.approx(per_lane * lanes * scale)
    assert (on.ff.used, on.dsp.used, on.bram.used) == (off.ff.used, off.dsp.used, off.bram.used)
