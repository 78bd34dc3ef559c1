"""fsim's shortcuts give what the general paths give.

* The default stepping (``drain``: each module as far as it can go, one instruction per pass) takes
  exactly the actions of the general one-action-at-a-time ``advance`` with an unlimited budget:
  same data, counters, stall records, and the same errors for rejected programs.
* ``check_program`` remembers programs that passed, by the identity of their (frozen) instruction
  objects and configuration; anything else is checked again, and errors are never remembered.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.programs import CASES
from vtakit.errors import ProgramError, VtakitError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode
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


def test_check_program_remembers_only_the_very_same_program(monkeypatch):
    program = random_program(SMALL, 3)
    insns = list(program.insns)
    first = fsim.check_program(insns, SMALL)
    calls = []
    real = fsim.checked_stage
    monkeypatch.setattr(fsim, "checked_stage", lambda *args: calls.append(args) or real(*args))
    again = fsim.check_program(list(insns), SMALL)          # a new list of the same objects: remembered
    assert again == first and again is not first and not calls
    again.clear()                                           # callers own the list they get
    assert fsim.check_program(insns, SMALL) == first
    copies = [dataclasses.replace(insn) for insn in insns]   # equal, but other objects: checked again
    assert fsim.check_program(copies, SMALL) == first and len(calls) == len(insns)
    assert fsim.check_program(insns, VTAConfig.small()) == first   # an equal config, another object
    assert len(calls) == 2 * len(insns)


def test_check_program_checks_changed_programs_and_configs_again():
    mul = AluInsn(alu_opcode=AluOp.MUL, uop_end=1)
    insns = [mul, FinishInsn()]
    with_mul = VTAConfig.small(alu_mul=True)
    assert len(fsim.check_program(insns, with_mul)) == 2
    for _ in range(2):   # the same instructions on a config without MUL, and errors are not remembered
        with pytest.raises(ProgramError, match="ALU MUL needs"):
            fsim.check_program(insns, VTAConfig.small())
    insns[0] = GemmInsn(push_prev=True)                       # the same list, one instruction replaced
    with pytest.raises(ProgramError, match="unbalanced dependency tokens"):
        fsim.check_program(insns, with_mul)
