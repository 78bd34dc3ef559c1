"""Every backend names the same error for an erroneous program, and the rtl backend's fsim
pre-run leaves the launch's DRAM untouched.

The cycle backend runs modules in cycle order and fsim drains load, compute, store in turn, so for a racy program
the two can meet different errors first (a read of an entry a racing write has not yet written
is uninitialised in one order, a race in the other); the cycle backend reports fsim's error.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.programs import run_program
from tests.programs.runner import insn_address
from vtakit.errors import MemoryAccessError, SimError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, MemId, MemInsn, Opcode, Uop
from vtakit.sim import rtl
from vtakit.sim.backend import Launch
from vtakit.sim.cycle import simulate as cycle_simulate
from vtakit.sim.fsim import simulate as fsim_simulate
from vtakit.sim.program import Program, Segment

SMALL = VTAConfig.small()


def _load(mem, sram, dram, y, x, **kw):
    return MemInsn(opcode=Opcode.LOAD, memory_type=mem, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                   x_stride=kw.pop("stride", x), **kw)


def _store(sram, dram_byte, count, **kw):
    return MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=sram,
                   dram_base=dram_byte // SMALL.out_elem_bytes, y_size=1, x_size=count, x_stride=count, **kw)


def _launch(program: Program) -> Launch:
    addr = insn_address(program)
    encoded = program.encoded_insns()
    dram = program.initial_dram(addr + len(encoded))
    dram[addr:addr + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    return Launch(program.config, list(program.insns), dram, addr)


def _store_reads_ahead_of_compute() -> Program:
    """The store reads OUT entry 0 with no token from the ALU that writes it. In cycle order the
    store runs while compute waits for its ACC load (uninitialised); fsim drains compute before store (race)."""
    insns = [_load(MemId.UOP, 0, 0x100 // 4, 1, 1),
             _load(MemId.ACC, 0, 0x1000 // SMALL.acc_elem_bytes, 1, 4),
             AluInsn(uop_bgn=0, uop_end=1, alu_opcode=AluOp.ADD, use_imm=True, imm=1, iter_out=1),
             _store(0, 0x3000, 1, push_prev=True),
             FinishInsn(pop_next=True)]
    return Program(SMALL, insns, [Uop(0, 0, 0)], uop_addr=0x100,
                   segments=[Segment(0x1000, bytes(range(256)), "data")], dram_size=0x4000)


def _outcome(program: Program, run) -> tuple[str, str]:
    with pytest.raises(SimError) as info:
        run(program)
    return type(info.value).__name__, str(info.value)


BACKENDS = {
    "fsim": lambda p: run_program(p, "fsim"),
    "cycle": lambda p: run_program(p, "cycle"),
    "cycle-stepping": lambda p: cycle_simulate(_launch(p), stepping=True),
    "rtl": lambda p: run_program(p, "rtl"),
}


def test_the_orders_meet_different_errors():
    """The premise: the stepping model, left to itself, reads the entry before the ALU writes it."""
    from vtakit.sim.cycle import _Core
    with pytest.raises(MemoryAccessError, match="uninitialised"):
        _Core(_launch(_store_reads_ahead_of_compute())).run()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_backend_reports_fsims_race(backend):
    program = _store_reads_ahead_of_compute()
    expected = _outcome(program, BACKENDS["fsim"])
    assert expected[0] == "RaceError" and "data race on OUT entry 0" in expected[1]
    assert _outcome(program, BACKENDS[backend]) == expected


def _stores_program() -> Program:
    """GEMM-free: two loads through ACC, ALU, and three stores (one strided, two overlapping)."""
    insns = [_load(MemId.UOP, 0, 0x100 // 4, 1, 1),
             _load(MemId.ACC, 0, 0x1000 // SMALL.acc_elem_bytes, 1, 8),
             AluInsn(uop_bgn=0, uop_end=1, alu_opcode=AluOp.ADD, use_imm=True, imm=3, iter_out=8,
                     dst_factor_out=1, src_factor_out=1, push_next=True),
             MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=0, dram_base=0x2000 // SMALL.out_elem_bytes,
                     y_size=2, x_size=2, x_stride=5, pop_prev=True),
             _store(4, 0x3000, 4),
             _store(2, 0x3008, 2, push_prev=True),
             FinishInsn(pop_next=True)]
    return Program(SMALL, insns, [Uop(0, 0, 0)], uop_addr=0x100,
                   segments=[Segment(0x1000, bytes(range(256)), "data")], dram_size=0x4000)


def test_rtl_prerun_leaves_dram_untouched_and_results_match():
    program = _stores_program()
    launch = _launch(program)
    before = launch.dram.copy()
    rtl.validate(launch)
    assert np.array_equal(launch.dram, before)
    fsim_dram, _ = run_program(program, "fsim")
    assert not np.array_equal(fsim_dram, before)            # the stores do write
    rtl_dram, _ = run_program(program, "rtl")
    assert np.array_equal(rtl_dram, fsim_dram)


def test_rtl_prerun_restores_dram_when_it_raises():
    """A store writes DRAM, then the next store reads an OUT entry nothing wrote: fsim raises after
    the write, and the pre-run still puts the DRAM back."""
    insns = [_load(MemId.UOP, 0, 0x100 // 4, 1, 1),
             _load(MemId.ACC, 0, 0x1000 // SMALL.acc_elem_bytes, 1, 4),
             AluInsn(uop_bgn=0, uop_end=1, alu_opcode=AluOp.ADD, use_imm=True, imm=1, iter_out=1, push_next=True),
             _store(0, 0x3000, 1, pop_prev=True),
             _store(1, 0x3010, 1, push_prev=True),      # OUT entry 1: never written
             FinishInsn(pop_next=True)]
    program = Program(SMALL, insns, [Uop(0, 0, 0)], uop_addr=0x100,
                      segments=[Segment(0x1000, bytes(range(1, 256)), "data")], dram_size=0x4000)
    launch = _launch(program)
    before = launch.dram.copy()
    scratch = launch.dram.copy()
    with pytest.raises(MemoryAccessError, match="OUT entry 1"):
        fsim_simulate(SMALL, launch.insns, scratch)
    assert not np.array_equal(scratch, before)               # the first store did write
    with pytest.raises(MemoryAccessError, match="OUT entry 1"):
        rtl.validate(launch)
    assert np.array_equal(launch.dram, before)


def test_store_spans_merge_and_clip():
    e = SMALL.out_elem_bytes
    insns = [MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, dram_base=0, y_size=2, x_size=1, x_stride=4),
             MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, dram_base=4, y_size=1, x_size=2, x_stride=2),
             MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, dram_base=100, y_size=0, x_size=2, x_stride=2),
             MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, dram_base=30, y_size=1, x_size=4, x_stride=4),
             _load(MemId.INP, 0, 40, 1, 4), FinishInsn()]
    assert rtl._store_spans(insns, SMALL, 32 * e) == [(0, 6 * e), (30 * e, 32 * e)]
