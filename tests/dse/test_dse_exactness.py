"""Exactness of the design space: random configurations the search may propose (small arrays, so the
Amaranth RTL simulation is affordable) run random programs that use their features, and fsim ==
cycle == rtl: the final DRAM byte for byte (fsim, cycle, rtl), every retire cycle and busy cycle
(cycle == rtl). Two configurations by default; a larger sample is slow."""

from __future__ import annotations

import numpy as np
import pytest

from tests.hw.rtl_cache import rtl_run, session_cache_dir
from tests.programs import run_program
from tests.sim.test_cycle import first_divergence
from vtakit.dse import DesignSpace, Knob
from vtakit.hw.config import VTAConfig
from vtakit.runtime.random_program import coverage, random_program

#: The array and SRAMs bounded (at most 2x8x8 MACs, small SRAMs); every other knob as the search varies it.
SMALL = {"log_batch": (0, 1), "log_block_in": (2, 3), "log_block_out": (2, 3), "log_uop_depth": (10,),
         "log_inp_depth": (8, 9), "log_wgt_depth": (6, 7), "log_acc_depth": (8, 9)}
#: Features turned on in every sampled configuration, so that the random programs use them (the RTL
#: implements every one).
FEATURES = {"alu_mul": True, "alu_requant": True, "bias_preload": True, "gemm_out_requant": True}
#: What the programs of a configuration with FEATURES must exercise (random_program's coverage names):
#: one of each group.
USED = ({"alu.REQUANT.imm", "alu.REQUANT.tensor"}, {"alu.MUL.imm", "alu.MUL.tensor"}, {"gemm.bias"},
        {"gemm.requant_out"})


@pytest.fixture(scope="session")
def rtl_cache_dir(tmp_path_factory, worker_id):
    return session_cache_dir(tmp_path_factory, worker_id)


def sample_configs(n: int, seed: int) -> list[VTAConfig]:
    """``n`` distinct valid, fitting configurations of the xc7z020's space with small arrays, FEATURES on."""
    full = DesignSpace("xc7z020", max_batch=2)
    knobs = [Knob(k.name, SMALL.get(k.name, k.values)) for k in full.knobs]
    space = DesignSpace("xc7z020", max_batch=2, knobs=knobs)
    out = []
    for config in space.sample(np.random.default_rng(seed), 4 * n):
        config = config.replace(**FEATURES)
        if config not in out and space.fit(config).fits:
            out.append(config)
    return out[:n]


def feature_programs(config: VTAConfig, n: int, first_seed: int) -> list:
    """The first ``n`` random programs from ``first_seed`` on that use one instruction of every USED group."""
    out = []
    for seed in range(first_seed, first_seed + 50):
        program = random_program(config, seed)
        if all(group & coverage(program) for group in USED):
            out.append(program)
            if len(out) == n:
                return out
    raise AssertionError(f"{config.model}: fewer than {n} of 50 random programs use {USED}")


def _check(config: VTAConfig, n: int, first_seed: int, rtl_cache_dir) -> None:
    for program in feature_programs(config, n, first_seed):
        name = program.name
        fsim, _ = run_program(program, "fsim")
        cycle, _ = run_program(program, "cycle")
        rtl = rtl_run(program, rtl_cache_dir)
        assert np.array_equal(fsim, rtl.dram), f"{config.model} {name}: rtl's DRAM differs from fsim's"
        assert np.array_equal(fsim, cycle), f"{config.model} {name}: the cycle model's DRAM differs from fsim's"
        assert first_divergence(program, rtl_cache_dir) is None


def test_the_sample_is_small_varied_and_uses_the_features():
    configs = sample_configs(6, 0)
    assert len(configs) == 6
    for c in configs:
        assert c.macs_per_cycle <= 128 and c.inp_depth <= 512 and all(getattr(c, k) == v for k, v in FEATURES.items())
        VTAConfig.from_dict(c.to_dict())                                 # validates
    assert len({c.model for c in configs}) > 1                        # not one shape


@pytest.mark.parametrize("index", range(2))
def test_random_configurations_fsim_cycle_rtl(index, rtl_cache_dir):
    config = sample_configs(2, 0)[index]
    _check(config, 2, 0, rtl_cache_dir)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(8))
def test_random_configurations_fsim_cycle_rtl_campaign(index, rtl_cache_dir):
    config = sample_configs(8, 1)[index]
    _check(config, 4, 100, rtl_cache_dir)
