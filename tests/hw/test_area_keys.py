"""The area keys away from their defaults: off (VTA's structure: one DSP per product, ACC stored
twice with single-cycle tensor ALU micro-ops) and GEMM_LUT_LANES on (LUT multipliers for part of
the GEMM array). The differential corpus runs on them too: rtl == fsim (DRAM) and cycle == rtl
(every retire cycle, busy cycles, DRAM). The default configuration has packing and one ACC read
port on and no LUT lanes, so the rest of the suite covers that side.

A few programs that exercise the GEMM core and the tensor ALU run by default; the whole corpus
and random programs are a slow campaign (``-m slow``).
"""

import numpy as np
import pytest

from tests.hw.rtl_cache import rtl_run
from tests.programs import CASES, Unsupported, run_program
from tests.sim.test_cycle import first_divergence
from vtakit.hw.config import VTAConfig
from vtakit.runtime.random_program import random_program

#: Each area key off alone, both (VTA's structure), and one LUT lane (channel 3: the others are a
#: packed pair and one unpaired DSP channel, so all three multiplier kinds), on the small configuration.
CONFIGS = {
    "unpacked": VTAConfig.small(gemm_dsp_packing=False),
    "acc_ports2": VTAConfig.small(acc_read_ports=2),
    "vta": VTAConfig.small(gemm_dsp_packing=False, acc_read_ports=2),
    "lut_lane": VTAConfig.small(gemm_lut_lanes=1),
}
QUICK = ("gemm_epilogue", "alu_add_tensor", "alu_shr_tensor", "relu_clip", "blocked_gemm_vt2")


def _program(name, config):
    try:
        return CASES[name](config).program
    except Unsupported as exc:
        pytest.skip(str(exc))


def _check(program, rtl_cache_dir):
    expected, _ = run_program(program, "fsim")
    result = rtl_run(program, rtl_cache_dir)
    assert np.array_equal(result.dram, expected), program.name
    assert first_divergence(program, rtl_cache_dir) is None


@pytest.mark.parametrize("name", QUICK)
@pytest.mark.parametrize("config_name", CONFIGS)
def test_corpus_programs_with_area_keys_off(config_name, name, rtl_cache_dir):
    _check(_program(name, CONFIGS[config_name]), rtl_cache_dir)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CASES if n not in QUICK])
@pytest.mark.parametrize("config_name", CONFIGS)
def test_whole_corpus_with_area_keys_off(config_name, name, rtl_cache_dir):
    _check(_program(name, CONFIGS[config_name]), rtl_cache_dir)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("config_name", CONFIGS)
def test_random_programs_with_area_keys_off(config_name, seed, rtl_cache_dir):
    _check(random_program(CONFIGS[config_name], 2000 + seed), rtl_cache_dir)
