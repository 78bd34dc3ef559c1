"""The rtl backend rejects what fsim rejects, even where the hardware itself would not notice.

GEMM/ALU indices come from micro-ops loaded at run time and the RTL wraps them; races and
uninitialised reads leave no trace in the hardware at all. The backend therefore runs fsim on a
copy of the launch first (:func:`vtakit.sim.rtl.validate`); :func:`~vtakit.sim.rtl.run_unchecked`
shows what the hardware alone does with the same program. Programs are a few instructions long.
"""

import numpy as np
import pytest

from tests.programs.corpus import alu_map, load, store
from vtakit.errors import DeadlockError, MemoryAccessError, RaceError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId
from vtakit.sim.backend import Launch, get_backend
from vtakit.sim.fsim import simulate
from vtakit.sim.rtl import run_unchecked

SMALL = VTAConfig.small()
INSN_ADDR = 2048  # instructions above the data: DRAM [0, 2048) is zero


def _launch(insns, dram_size=4096):
    dram = np.zeros(dram_size, dtype=np.uint8)
    encoded = isa.encode(insns, SMALL)
    dram[INSN_ADDR:INSN_ADDR + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    return Launch(SMALL, list(insns), dram, INSN_ADDR)


def _uops(n=1):
    """n zero micro-ops (dst = src = wgt = 0) from DRAM address 0."""
    return load(MemId.UOP, 0, 0, 1, n)


def _gemm(*, out_token=True):
    """LOAD WGT/INP -> GEMM -> STORE; without the OUT token the store races with the GEMM."""
    return [_uops(), GemmInsn(reset_reg=True),
            load(MemId.WGT, 0, 0, 1, 1), load(MemId.INP, 0, 0, 1, 1, push_next=True),
            GemmInsn(pop_prev=True, push_next=out_token),
            store(0, 64, 1, 1, pop_prev=out_token, push_prev=True), FinishInsn(pop_next=True)]


CASES = {
    "gemm-dst-out-of-range": (
        [_uops(), GemmInsn(reset_reg=True, iter_out=SMALL.acc_depth + 1, dst_factor_out=1), FinishInsn()],
        MemoryAccessError, rf"dst index reaches {SMALL.acc_depth} .*the ACC buffer has {SMALL.acc_depth} entries"),
    "alu-src-out-of-range": (
        [_uops(), load(MemId.ACC, 0, 0, 1, SMALL.acc_depth), AluInsn(iter_out=3, src_factor_out=SMALL.acc_depth // 2),
         FinishInsn()],
        MemoryAccessError, rf"src index reaches {SMALL.acc_depth} .*the ACC buffer has {SMALL.acc_depth} entries"),
    "uninitialised-inp": (
        [_uops(), GemmInsn(), FinishInsn()],
        MemoryAccessError, r"instruction 1 \(compute: GEMM.*\): reads INP entry 0.*uninitialised"),
    "uninitialised-acc": (
        [_uops(), alu_map(AluOp.MAX, (0, 1), 1, imm=0), FinishInsn()],
        MemoryAccessError, r"instruction 1 \(compute: ALU.*\): reads ACC entry 0"),
    "race-out": (
        _gemm(out_token=False),
        RaceError, r"data race on OUT entry 0: instruction 5 \(store: STORE.*\) reads it, and instruction 4 "
                   r"\(compute: GEMM.*\) writes it"),
}


@pytest.mark.parametrize("name", CASES)
def test_rtl_raises_what_fsim_raises(name):
    insns, error, message = CASES[name]
    with pytest.raises(error, match=message) as fsim_info:
        simulate(SMALL, insns, _launch(insns).dram)
    launch = _launch(insns)
    before = launch.dram.copy()
    with pytest.raises(error, match=message) as rtl_info:
        get_backend("rtl")(launch)
    assert str(rtl_info.value) == str(fsim_info.value)
    assert np.array_equal(launch.dram, before)   # rejected before the hardware ran: DRAM untouched
    stats = run_unchecked(_launch(insns))         # the hardware alone runs it to the end
    assert stats.cycles > 0


def test_well_formed_program_still_runs_and_matches_fsim():
    insns = _gemm()
    fsim_launch, rtl_launch = _launch(insns), _launch(insns)
    get_backend("fsim")(fsim_launch)
    stats = get_backend("rtl")(rtl_launch)
    assert np.array_equal(rtl_launch.dram, fsim_launch.dram) and stats.counters["gemm_counter"] == 1


def test_deadlocks_are_left_to_the_rtl_which_names_the_cycle():
    """fsim's deadlock is not raised by the pre-run: the RTL reports it with the cycle it happens in."""
    insns = [GemmInsn(uop_bgn=0, uop_end=0, pop_next=True, push_next=True),
             store(0, 0, 0, 0, pop_prev=True, push_prev=True), FinishInsn()]
    with pytest.raises(DeadlockError, match=r"deadlock at cycle \d+"):
        get_backend("rtl")(_launch(insns))
