"""fsim's default stepping (``drain``: each module as far as it can go, one instruction per pass)
takes exactly the actions of the general one-action-at-a-time ``advance`` with an unlimited budget:
same data, counters, stall records, and the same errors for rejected programs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.programs import CASES
from vtakit.errors import VtakitError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import FinishInsn, GemmInsn, MemId, MemInsn, Opcode
from vtakit.runtime.random_program import random_program
from vtakit.sim import fsim

SMALL = VTAConfig.small()
SHALLOW = VTAConfig.small(token_queue_depth=1, cmd_queue_depth=1)


def _by_advance(self, unit):
    return self.advance(unit, 1 << 62) > 0


def _outcome(config, insns, dram):
    try:
        run = fsim.simulate(config, insns, dram)
    except VtakitError as exc:
        return type(exc).__name__, str(exc), dram
    return run.stats.counters, run.fetch_stalls, run.push_stalls, dram, run.machine.acc, run.machine.written["out"]


def _programs():
    for config in (SMALL, SHALLOW):
        for seed in range(6):
            program = random_program(config, seed)
            yield f"random{seed}-{config.cmd_queue_depth}", config, program.insns, program.initial_dram()
    for name in ("blocked_gemm_vt2", "token_burst", "gemm_epilogue"):
        program = CASES[name](SHALLOW).program
        yield name, SHALLOW, program.insns, program.initial_dram()
    # rejected: a deadlock, and a read of an entry no instruction wrote
    deadlock = [GemmInsn(reset_reg=True, pop_next=True),
                MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, pop_prev=True, push_prev=True),
                GemmInsn(reset_reg=True, push_next=True), FinishInsn()]
    yield "deadlock", SMALL, deadlock, np.zeros(256, np.uint8)
    uninitialised = [GemmInsn(uop_end=1), FinishInsn()]   # the micro-op cache is empty
    yield "uninitialised", SMALL, uninitialised, np.zeros(256, np.uint8)


@pytest.mark.parametrize("name, config, insns, dram", list(_programs()), ids=lambda v: v if isinstance(v, str) else "")
def test_drain_takes_the_actions_of_advance(name, config, insns, dram, monkeypatch):
    fast = _outcome(config, insns, dram.copy())
    monkeypatch.setattr(fsim._Simulator, "drain", _by_advance)
    general = _outcome(config, insns, dram.copy())
    assert len(fast) == len(general)
    for a, b in zip(fast, general):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b
    if name == "deadlock":
        assert fast[0] == "DeadlockError"
    if name == "uninitialised":
        assert fast[0] == "MemoryAccessError"
    if name.startswith("random") and config is SHALLOW:
        assert any(fast[1].values()) or any(fast[2].values())   # the shallow queues did fill up
