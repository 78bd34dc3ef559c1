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


def _stored_counts(config: VTAConfig) -> dict:
    """Yosys' counts of ``config`` as scripts/calibrate_estimate.py stored them (no synthesis here)."""
    import importlib.util
    import json
    from pathlib import Path

    from vtakit.hw.synth import count_resources

    path = Path(__file__).resolve().parents[2] / "scripts" / "calibrate_estimate.py"
    spec = importlib.util.spec_from_file_location("calibrate_estimate_for_epilogue", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    stored = json.loads(script.DATA.read_text())
    return count_resources(stored[script._key(config)]["cells"], "xilinx7")


def test_small_configuration_matches_its_synthesis():
    """GEMM_OUT_REQUANT on VTAConfig.small(alu_requant=True): the estimate's extra LUTs and FFs
    against the stored synthesis of both (a04aac6: 8,139 -> 8,495 LUT, +356; 4,578 -> 4,587 FF, +9);
    BIAS_PRELOAD adds flip-flops only (+23, measured at c375cfc)."""
    base = VTAConfig.small(alu_requant=True)
    assert estimate(base.replace(bias_preload=True)).ff.used - estimate(base).ff.used == 23
    out = base.replace(gemm_out_requant=True)
    measured_base, measured_out = _stored_counts(base), _stored_counts(out)
    lut_delta = measured_out["lut"] - measured_base["lut"]
    assert estimate(out).lut.used - estimate(base).lut.used == pytest.approx(lut_delta, rel=0.1)
    assert estimate(out).ff.used - estimate(base).ff.used == pytest.approx(measured_out["ff"] - measured_base["ff"], abs=1)
