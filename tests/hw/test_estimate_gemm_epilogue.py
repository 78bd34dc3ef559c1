"""The resource estimate of the GEMM epilogue keys: GEMM_OUT_REQUANT's fitted LUTs per lane and its
register, BIAS_PRELOAD's flip-flops, nothing else; both against the synthesis they were measured on."""

import pytest

from vtakit.hw.config import VTAConfig
from vtakit.hw.estimate import _ECP5_FF_PER_FF, _ECP5_LUT4_PER_LUT, _XILINX7, estimate
from vtakit.hw.pipeline import gemm_product_latency

CONFIGS = [VTAConfig.small(alu_requant=True), VTAConfig(alu_requant=True), VTAConfig.small(alu_requant=True, log_batch=1)]


@pytest.mark.parametrize("config", CONFIGS, ids=["small", "default", "batch2"])
@pytest.mark.parametrize("part", ["xc7z020", "ecp5-85k"])
def test_out_requant_costs_luts_per_lane_and_a_register(config, part):
    off, on = estimate(config, part), estimate(config.replace(gemm_out_requant=True), part)
    lanes = config.batch * config.block_out
    lut_scale, ff_scale = (1.0, 1.0) if part == "xc7z020" else (_ECP5_LUT4_PER_LUT, _ECP5_FF_PER_FF)
    assert on.lut.used - off.lut.used == pytest.approx(_XILINX7["lut"]["out_requant_lanes"] * lanes * lut_scale)
    assert on.ff.used - off.ff.used == pytest.approx(9 * ff_scale, abs=1)
    assert (on.dsp.used, on.bram.used) == (off.dsp.used, off.bram.used)


@pytest.mark.parametrize("config", CONFIGS, ids=["small", "default", "batch2"])
def test_bias_preload_costs_flip_flops_only(config):
    off, on = estimate(config), estimate(config.replace(bias_preload=True))
    assert on.ff.used - off.ff.used == pytest.approx(config.log_acc_depth * gemm_product_latency(config) + 2)
    assert (on.lut.used, on.dsp.used, on.bram.used) == (off.lut.used, off.dsp.used, off.bram.used)


def test_small_configuration_matches_its_synthesis():
    """Yosys' flattened synth_xilinx of VTAConfig.small(alu_requant=True) at 4ed3966
    (scripts/calibrate_estimate.json): 8,375 LUT, 4,695 FF; with GEMM_OUT_REQUANT 8,414 LUT (+39),
    4,704 FF (+9); with BIAS_PRELOAD as well 8,366 LUT, 4,726 FF (+22; at c375cfc +23 alone)."""
    base = VTAConfig.small(alu_requant=True)
    assert estimate(base.replace(bias_preload=True)).ff.used - estimate(base).ff.used == 23
    out = base.replace(gemm_out_requant=True)
    assert estimate(out).lut.used - estimate(base).lut.used == pytest.approx(39, abs=5)
    assert estimate(out).ff.used - estimate(base).ff.used == pytest.approx(9)
