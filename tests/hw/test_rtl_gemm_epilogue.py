"""GEMM's epilogue bit on the RTL (BIAS_PRELOAD, GEMM_OUT_REQUANT): random programs with bias resets,
requantising write-backs and requant register sets give fsim's DRAM bytes and the cycle model's
retire cycles (neither feature changes timing), and the hand-written program of every control
field matches the reference."""

import numpy as np
import pytest

from tests.hw.rtl_cache import rtl_run, session_cache_dir
from tests.sim.test_cycle import first_divergence
from tests.sim.test_gemm_epilogue import BOTH, _epilogue_program
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.runtime.random_program import coverage, random_program

CONFIGS = {"both": BOTH, "bias_ports2": VTAConfig.small(bias_preload=True, acc_read_ports=2),
           "out_only": VTAConfig.small(alu_requant=True, gemm_out_requant=True)}


@pytest.fixture(scope="session")
def rtl_cache_dir(tmp_path_factory, worker_id):
    return session_cache_dir(tmp_path_factory, worker_id)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", CONFIGS)
def test_random_programs_match_fsim_and_the_cycle_model(name, seed, rtl_cache_dir):
    config = CONFIGS[name]
    program = random_program(config, 2000 + seed)
    assert first_divergence(program, rtl_cache_dir) is None


def test_the_random_programs_use_the_features():
    features = set().union(*(coverage(random_program(c, 2000 + s)) for c in CONFIGS.values() for s in range(4)))
    assert {"gemm.bias", "gemm.requant_out", "alu.REQUANT.set"} <= features


@pytest.mark.parametrize("control", [isa.requant_imm(0), isa.requant_imm(9, True, True),
                                     isa.requant_imm(31, False, True)], ids=str)
def test_epilogue_program_matches_the_reference(control, rtl_cache_dir):
    program, out, expected = _epilogue_program(control)
    result = rtl_run(program, rtl_cache_dir)
    got = result.dram[out:out + expected.size].view(np.int8).reshape(expected.shape)
    np.testing.assert_array_equal(got, expected)
    assert first_divergence(program, rtl_cache_dir) is None


@pytest.mark.parametrize("distance", [1, 2, 3])
def test_bias_reset_chains_read_what_the_micro_op_before_wrote(distance, rtl_cache_dir):
    """acc[k + d] = acc[k] for k = 0, 1, ...: each micro-op reads the entry written d micro-ops
    earlier (forwarded in the pipeline at distance 1, transparent or in the SRAM after), so every
    entry ends as one of the d loaded rows, as fsim's strict micro-op order says."""
    from vtakit.hw.isa import MemId, Stage, Uop
    from vtakit.runtime import ProgramBuilder

    config = CONFIGS["both"]
    rng = np.random.default_rng(distance)
    rows = rng.integers(-(1 << 31), 1 << 31, (distance, config.batch, config.block_out)).astype(np.int32)
    b = ProgramBuilder(config)
    acc = b.array(rows, name="rows")
    out = b.empty((8, config.batch, config.block_out), np.int8, name="out")
    b.load_2d(MemId.ACC, 0, acc, 1, distance)
    b.gemm([Uop(k + distance, k) for k in range(8)], reset=True, epilogue=True)
    b.dep_push(Stage.COMPUTE, Stage.STORE)
    b.dep_pop(Stage.COMPUTE, Stage.STORE)
    b.store_2d(distance, out, 1, 8)   # (LOAD ACC writes no OUT: the reset entries only)
    program = b.finish()
    expected = np.concatenate([rows[k % distance][None] for k in range(8)]).astype(np.int8)
    result = rtl_run(program, rtl_cache_dir)
    got = result.dram[out.phys_addr:out.phys_addr + expected.size].view(np.int8).reshape(expected.shape)
    np.testing.assert_array_equal(got, expected)
    assert first_divergence(program, rtl_cache_dir) is None
