"""Long randomised campaigns (``pytest -m slow tests/sim``): the quick tests' properties, many more examples."""

import random

import numpy as np
import pytest
from hypothesis import given, settings

from tests.sim.test_fsim_schedule import check_outcome_is_independent_of_stepping_order, token_programs
from tests.sim.test_fsim_semantics import ALU_ARGS, GEMM_ARGS, check_alu, check_gemm
from vtakit.hw.config import VTAConfig
from vtakit.sim.fsim import simulate

pytestmark = pytest.mark.slow
MANY = settings(max_examples=3000, deadline=None, derandomize=True)

test_gemm_campaign = MANY(given(**GEMM_ARGS)(check_gemm))
test_alu_campaign = MANY(given(**ALU_ARGS)(check_alu))
test_schedule_campaign = MANY(given(insns=token_programs())(check_outcome_is_independent_of_stepping_order))


@pytest.mark.parametrize("config", [VTAConfig.small(), VTAConfig.small(token_queue_depth=2, cmd_queue_depth=2)],
                         ids=["small", "shallow_queues"])
def test_random_program_campaign(config):
    """200 of the runtime's random valid programs: accepted, and identical under random stepping orders."""
    from vtakit.runtime import random_program

    for seed in range(200):
        program = random_program(config, seed)
        reference = program.initial_dram()
        simulate(program.config, program.insns, reference)
        dram = program.initial_dram()
        simulate(program.config, program.insns, dram, rng=random.Random(seed))
        assert np.array_equal(dram, reference), f"seed {seed}"
