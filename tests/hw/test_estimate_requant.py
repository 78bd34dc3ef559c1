"""The resource estimate of ALU_REQUANT: its measured LUTs per ALU lane, nothing else."""

import pytest

from vtakit.hw.config import VTAConfig
from vtakit.hw.estimate import _ECP5_LUT4_PER_LUT, estimate


@pytest.mark.parametrize("config", [VTAConfig.small(), VTAConfig(), VTAConfig.small(log_batch=1)],
                         ids=["small", "default", "batch2"])
@pytest.mark.parametrize("part", ["xc7z020", "ecp5-85k"])
def test_requant_costs_luts_per_lane(config, part):
    off, on = estimate(config, part), estimate(config.replace(alu_requant=True), part)
    lanes = config.batch * config.block_out
    scale = 1.0 if part == "xc7z020" else _ECP5_LUT4_PER_LUT     # ECP5 scales the Xilinx logic LUTs
    assert on.lut.used - off.lut.used == pytest.approx(155.75 * lanes * scale)   # measured on the small config
    assert (on.ff.used, on.dsp.used, on.bram.used) == (off.ff.used, off.dsp.used, off.bram.used)
