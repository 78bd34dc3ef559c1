"""Every corpus program on fsim equals its numpy expectation, whatever order the modules step in."""

import random

import numpy as np
import pytest

from tests.programs import CASES, Unsupported, run_program
from tests.programs.runner import insn_address
from vtakit.hw.config import VTAConfig
from vtakit.sim.fsim import simulate

CONFIGS = {
    "small": VTAConfig.small(),
    "default": VTAConfig(),
    "batch2_block8": VTAConfig(log_batch=1, log_block_in=3, log_block_out=3, log_uop_buff_size=12,
                               log_inp_buff_size=13, log_wgt_buff_size=14, log_acc_buff_size=14),
    "in4_out8": VTAConfig.small(log_batch=1, log_block_out=3, log_acc_buff_size=12, log_wgt_buff_size=11),
    "shallow_queues": VTAConfig.small(token_queue_depth=1, cmd_queue_depth=1),
}


def _case(name, config_name):
    try:
        return CASES[name](CONFIGS[config_name])
    except Unsupported as exc:
        pytest.skip(str(exc))


def _check(dram, case):
    for expected in case.expected:
        got = dram[expected.addr:expected.addr + expected.data.size]
        assert np.array_equal(got, expected.data), (
            f"{case.program.name}: {expected.name} differs at bytes {np.flatnonzero(got != expected.data)[:8]}")


@pytest.mark.parametrize("config_name", CONFIGS)
@pytest.mark.parametrize("name", CASES)
def test_corpus_program_matches_numpy(name, config_name):
    case = _case(name, config_name)
    dram, stats = run_program(case.program, "fsim")
    _check(dram, case)
    assert stats.backend == "fsim" and stats.cycles is None and stats.sim_seconds > 0
    # nothing outside the expected outputs and the program's own image changed
    untouched = case.program.initial_dram(len(dram))
    insn_addr = insn_address(case.program)
    untouched[insn_addr:] = dram[insn_addr:]
    for expected in case.expected:
        untouched[expected.addr:expected.addr + expected.data.size] = expected.data
    assert np.array_equal(dram, untouched)


@pytest.mark.parametrize("name", CASES)
def test_corpus_result_is_independent_of_module_order(name):
    """A bounded Kahn network: random stepping orders give byte-identical DRAM."""
    case = _case(name, "small")
    program = case.program
    reference = program.initial_dram()
    simulate(program.config, program.insns, reference)
    for seed in range(3):
        dram = program.initial_dram()
        simulate(program.config, program.insns, dram, rng=random.Random(seed))
        assert np.array_equal(dram, reference), f"seed {seed}"


def test_corpus_covers_every_config_it_claims():
    """The pad-15-on-all-sides cases need the default configuration's deeper SRAMs; all else fits small."""
    skipped = []
    for name, make in CASES.items():
        try:
            make(VTAConfig.small())
        except Unsupported:
            skipped.append(name)
    assert skipped == ["pad_inp_all15", "pad_acc_all15"]
    for make in CASES.values():
        make(VTAConfig())


@pytest.mark.parametrize("config_name", ["small", "shallow_queues"])
def test_token_burst_stalls_on_a_full_token_queue_and_completes(config_name):
    case = CASES["token_burst"](CONFIGS[config_name])
    dram = case.program.initial_dram()
    run = simulate(case.program.config, case.program.insns, dram)
    _check(dram, case)
    assert run.push_stalls["load->compute"] >= 1


@pytest.mark.parametrize("config_name", ["small", "shallow_queues"])
def test_fetch_burst_stalls_fetch_on_a_full_command_queue_and_completes(config_name):
    case = CASES["fetch_burst"](CONFIGS[config_name])
    dram = case.program.initial_dram()
    run = simulate(case.program.config, case.program.insns, dram)
    _check(dram, case)
    assert run.fetch_stalls["store"] >= 1


def test_blocked_gemm_counters_follow_vta_profiler():
    config = VTAConfig.small()
    for vt in (1, 2):
        program = CASES[f"blocked_gemm_vt{vt}"](config).program
        _, stats = run_program(program)
        insns = program.insns
        expect = dict.fromkeys(stats.counters, 0)
        names = {"INP": "inp_load_nbytes", "WGT": "wgt_load_nbytes", "ACC": "acc_load_nbytes",
                 "UOP": "uop_load_nbytes", "OUT": "out_store_nbytes"}
        sizes = {"INP": config.inp_elem_bytes, "WGT": config.wgt_elem_bytes, "ACC": config.acc_elem_bytes,
                 "UOP": 4, "OUT": config.out_elem_bytes}
        for insn in insns:
            if hasattr(insn, "memory_type"):
                expect[names[insn.memory_type.name]] += insn.x_size * insn.y_size * sizes[insn.memory_type.name]
            elif hasattr(insn, "wgt_factor_in") and not insn.reset_reg:
                expect["gemm_counter"] += insn.iter_out * insn.iter_in * (insn.uop_end - insn.uop_bgn)
        assert stats.counters == expect
        assert stats.counters["gemm_counter"] > 0 and stats.counters["out_store_nbytes"] > 0


@pytest.mark.parametrize("seed", range(8))
def test_random_programs_are_independent_of_module_order(seed):
    """The runtime's random valid programs (all pairs, loops, vthreads, token storms) under random stepping."""
    from vtakit.runtime import random_program

    program = random_program(VTAConfig.small(), seed)
    reference = program.initial_dram()
    first = simulate(program.config, program.insns, reference)
    for order_seed in range(2):
        dram = program.initial_dram()
        run = simulate(program.config, program.insns, dram, rng=random.Random(order_seed))
        assert np.array_equal(dram, reference)
        assert run.stats.counters == first.stats.counters
