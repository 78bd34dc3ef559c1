"""The resource estimate of the GEMM epilogue keys: GEMM_OUT_REQUANT's measured LUTs per lane and its
register, BIAS_PRELOAD's flip-flops, nothing else; both against the synthesis they were measured on."""

import pytest

from vtakit.hw.config import VTAConfig
from vtakit.hw.estimate import _ECP5_FF_PER_FF, _ECP5_LUT4_PER_LUT, estimate
from vtakit.hw.pipeline import gemm_product_latency

CONFIGS = [VTAConfig.small(alu_requant=True), VTAConfig(alu_requant=True), VTAConfig.small(alu_requant=True, log_batch=1)]


@pytest.mark.parametrize("config", CONFIGS, ids=["small", "default", "batch2"])
@pytest.mark.parametrize("part", ["xc7z020", "ecp5-85k"])
def test_out_requant_costs_luts_per_lane_and_a_register(config, part):
    off, on = estimate(config, part), estimate(config.replace(gemm_out_requant=True), part)
    lanes = config.batch * config.block_out
    lut_scale, ff_scale = (1.0, 1.0) if part == "xc7z020" else (_ECP5_LUT4_PER_LUT, _ECP5_FF_PER_FF)
    assert on.lut.used - off.lut.used == pytest.approx(52.75 * lanes * lut_scale)   # measured on the small config
    assert on.ff.used - off.ff.used == pytest.approx(9 * ff_scale, abs=1)
    assert (on.dsp.used, on.bram.used) == (off.dsp.used, off.bram.used)


@pytest.mark.parametrize("config", CONFIGS, ids=["small", "default", "batch2"])
def test_bias_preload_costs_flip_flops_only(config):
    off, on = estimate(config), estimate(config.replace(bias_preload=True))
    assert on.ff.used - off.ff.used == pytest.approx(config.log_acc_depth * gemm_product_latency(config) + 2)
    assert (on.lut.used, on.dsp.used, on.bram.used) == (off.lut.used, off.dsp.used, off.bram.used)


def test_small_configuration_matches_its_synthesis():
    """vtakit synth of VTAConfig.small(alu_requant=True): +23 FFs with BIAS_PRELOAD (7,960 -> 7,961 LUTs,
    3,771 -> 3,794 FFs), +211 LUTs and +9 FFs with GEMM_OUT_REQUANT (8,171 LUTs, 3,780 FFs)."""
    base = VTAConfig.small(alu_requant=True)
    assert estimate(base.replace(bias_preload=True)).ff.used - estimate(base).ff.used == 23
    assert estimate(base.replace(gemm_out_requant=True)).lut.used - estimate(base).lut.used == pytest.approx(211)
