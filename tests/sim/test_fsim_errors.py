"""Every error fsim raises, each from a crafted bad program, with the message naming the culprit."""

import dataclasses
import random

import numpy as np
import pytest

from tests.programs import CASES
from tests.programs.corpus import alu_map, load, nop, store
from vtakit.errors import DeadlockError, MemoryAccessError, ProgramError, RaceError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode
from vtakit.sim.fsim import check_schedule, simulate
from vtakit.sim.machine import Machine

CFG = VTAConfig.small()
L, S = Opcode.LOAD, Opcode.STORE


def run(insns, dram_size=4096, config=CFG, **kwargs):
    dram = np.zeros(dram_size, dtype=np.uint8)
    return simulate(config, insns, dram, **kwargs)


def uop_load(n=1):
    """A LOAD UOP of n micro-ops from DRAM address 0 (zero words: dst = src = wgt = 0)."""
    return load(MemId.UOP, 0, 0, 1, n)


# ---------------------------------------------------------------------------- static program errors
@pytest.mark.parametrize("insn, message", [
    (load(MemId.OUT, 0, 0, 1, 1), r"instruction 0 \(compute: LOAD OUT.*\): LOAD of memory type OUT is illegal"),
    (store(0, 0, 1, 1).__class__(opcode=S, memory_type=MemId.INP, x_size=1),
     r"instruction 0 \(store: STORE INP.*\): STORE of memory type INP is illegal"),
    (load(MemId.INP, 0, 0, 1, 1, push_prev=True), r"instruction 0 \(load: .*\): flag push_prev is illegal on the load"),
    (load(MemId.WGT, 0, 0, 1, 1, pop_prev=True), r"flag pop_prev is illegal on the load module"),
    (store(0, 0, 1, 1, pop_next=True), r"instruction 0 \(store: .*\): flag pop_next is illegal on the store"),
    (store(0, 0, 1, 1, push_next=True), r"flag push_next is illegal on the store module"),
    (nop(S, MemId.OUT, push_next=True), r"flag push_next is illegal on the store module"),
    (MemInsn(opcode=S, memory_type=MemId.OUT, x_size=1, y_pad_1=2),
     r"STORE with padding \(y_pad_0, y_pad_1, x_pad_0, x_pad_1\)=\(0, 2, 0, 0\)"),
    (AluInsn(alu_opcode=AluOp.MUL), r"instruction 0 \(compute: ALU MUL.*\): ALU MUL needs .*ALU_MUL=false"),
])
def test_illegal_instruction_is_a_program_error(insn, message):
    with pytest.raises(ProgramError, match=message):
        run([insn, FinishInsn()])


def test_token_only_noop_may_name_any_memory_type():
    result = run([nop(L, MemId.OUT), nop(S, MemId.INP, push_prev=True), FinishInsn(pop_next=True)])
    assert not any(result.stats.counters.values())   # no-ops move no data


def test_finish_missing_duplicated_or_not_last():
    with pytest.raises(ProgramError, match="has no FINISH"):
        run([uop_load()])
    with pytest.raises(ProgramError, match="has no FINISH"):
        run([])
    with pytest.raises(ProgramError, match=r"2 FINISH instructions \(at \[0, 2\]\)"):
        run([FinishInsn(), uop_load(), FinishInsn()])
    with pytest.raises(ProgramError, match="FINISH is instruction 0 but the program has 2 instructions"):
        run([FinishInsn(), uop_load()])


def test_unbalanced_tokens():
    with pytest.raises(ProgramError, match=r"unbalanced .*load->compute: 1 pushes, 0 pops"):
        run([nop(L, MemId.INP, push_next=True), FinishInsn()])
    with pytest.raises(ProgramError, match=r"store->compute: 0 pushes, 1 pops"):
        run([FinishInsn(pop_next=True)])


def test_finish_must_come_after_every_instruction():
    """Balanced tokens are not enough: the store here is not ordered before FINISH."""
    insns = [uop_load(), nop(L, MemId.UOP, push_next=True), nop(S, MemId.OUT, pop_prev=True),
             nop(L, MemId.UOP), FinishInsn()]
    with pytest.raises(ProgramError, match=r"FINISH \(instruction 4\) does not wait for instruction 2 \(store: "
                                           r"STORE NOP.*only 0 of the 1 store instructions happen before it"):
        run(insns)


# ---------------------------------------------------------------------------- deadlocks
def test_circular_wait_deadlocks_and_names_every_blocked_module():
    insns = [nop(L, MemId.INP, pop_next=True),            # load waits for compute
             nop(L, MemId.UOP, pop_prev=True),            # compute waits for load
             nop(L, MemId.INP, push_next=True), nop(L, MemId.UOP, push_prev=True), FinishInsn()]
    with pytest.raises(DeadlockError) as info:
        run(insns)
    text = str(info.value)
    assert "load: instruction 0 (load: LOAD NOP [pop_next]) waits to pop a token from compute->load" in text
    assert "compute: instruction 1 (compute: LOAD NOP [pop_prev]) waits to pop a token from load->compute" in text


def test_fetch_blocked_on_a_full_command_queue_deadlocks():
    """More token pushes queued at the load module than token and command queues can hold before compute pops."""
    count = CFG.token_queue_depth + CFG.cmd_queue_depth + 3
    insns = [nop(L, MemId.INP, push_next=True) for _ in range(count)]
    insns += [nop(L, MemId.UOP, pop_prev=True) for _ in range(count)] + [FinishInsn()]
    for rng in (None, random.Random(1)):
        with pytest.raises(DeadlockError) as info:
            run(insns, rng=rng)
        text = str(info.value)
        assert "waits to push a token to load->compute (full, 8 tokens)" in text
        assert "fetch: instruction 17 (load: LOAD NOP [push_next]) waits for room in the load command queue " \
               "(full, 8 entries)" in text
        assert "compute: idle" in text


def test_check_schedule_finds_deadlocks_without_data():
    def burst(count):
        return ([nop(L, MemId.INP, push_next=True) for _ in range(count)]
                + [nop(L, MemId.UOP, pop_prev=True) for _ in range(count)] + [FinishInsn()])

    limit = CFG.token_queue_depth + CFG.cmd_queue_depth + 1
    with pytest.raises(DeadlockError, match="waits to push a token to load->compute"):
        check_schedule(CFG, burst(limit + 2))
    check_schedule(CFG, burst(limit))
    with pytest.raises(ProgramError, match="unbalanced dependency tokens"):
        check_schedule(CFG, burst(limit)[1:])


def test_push_to_full_queue_with_one_less_instruction_completes():
    count = CFG.token_queue_depth + CFG.cmd_queue_depth + 1
    insns = [nop(L, MemId.INP, push_next=True) for _ in range(count)]
    insns += [nop(L, MemId.UOP, pop_prev=True) for _ in range(count)] + [FinishInsn()]
    assert run(insns).push_stalls["load->compute"] >= 1


def test_deadlock_with_a_smaller_token_queue_reports_queue_depth():
    config = VTAConfig.small(token_queue_depth=1, cmd_queue_depth=1)
    insns = [nop(L, MemId.INP, push_next=True)] * 4 + [nop(L, MemId.UOP, pop_prev=True)] * 4 + [FinishInsn()]
    with pytest.raises(DeadlockError, match=r"full, 1 tokens"):
        run(insns, config=config)


# ---------------------------------------------------------------------------- races
def _gemm_program(*, inp_token=True, out_token=True):
    """LOAD INP/WGT -> GEMM -> STORE, optionally without the RAW tokens."""
    return [uop_load(), GemmInsn(reset_reg=True),
            load(MemId.WGT, 0, 0, 1, 1), load(MemId.INP, 0, 0, 1, 1, push_next=inp_token),
            GemmInsn(pop_prev=inp_token, push_next=out_token),
            store(0, 64, 1, 1, pop_prev=out_token, push_prev=True), FinishInsn(pop_next=True)]


def test_well_ordered_gemm_program_runs():
    result = run(_gemm_program())
    assert result.stats.counters["gemm_counter"] == 1 and result.stats.counters["out_store_nbytes"] > 0


def test_race_compute_reads_inp_before_load_is_ordered():
    with pytest.raises(RaceError, match=r"data race on (INP|WGT) entry 0: instruction 4 \(compute: GEMM.*\) reads "
                                        r"it, and instruction [23] \(load: LOAD (INP|WGT).*\) writes it"):
        run(_gemm_program(inp_token=False))


def test_race_store_reads_out_before_compute_is_ordered():
    with pytest.raises(RaceError, match=r"data race on OUT entry 0: instruction 5 \(store: STORE.*\) reads it, "
                                        r"and instruction 4 \(compute: GEMM.*\) writes it"):
        run(_gemm_program(out_token=False))


def _race_directions(insns, seeds=range(24)):
    """Run under many stepping orders; every one must raise RaceError. Returns how each was detected:
    'raw' when the later access (in simulation) is the read, 'war' when it is the write."""
    seen = set()
    for seed in [None, *seeds]:
        with pytest.raises(RaceError) as info:
            run(insns, rng=None if seed is None else random.Random(seed))
        text = str(info.value)
        seen.add("war" if ") writes it, and " in text else "raw")
    return seen


def test_race_compute_overwrites_out_before_store_read_it():
    """OUT: the second ALU rewrites an entry the store reads, with no store->compute token between."""
    insns = [uop_load(), load(MemId.ACC, 0, 0, 1, 1), alu_map(AluOp.ADD, (0, 1), 1, imm=1, push_next=True),
             store(0, 64, 1, 1, pop_prev=True, push_prev=True),
             alu_map(AluOp.ADD, (0, 1), 1, imm=1), FinishInsn(pop_next=True)]
    with pytest.raises(RaceError, match=r"OUT entry 0: .*instruction 4 \(compute: ALU ADD"):
        run(insns)
    assert _race_directions(insns) == {"raw", "war"}


def test_dropping_one_war_token_from_blocked_gemm_is_a_race():
    """The canonical double-buffered pattern minus one compute->load token pair."""
    program = CASES["blocked_gemm_vt1"](CFG).program
    insns = list(program.insns)
    pushes = [i for i, x in enumerate(insns) if isinstance(x, GemmInsn) and x.push_prev]
    pops = [i for i, x in enumerate(insns) if x.opcode == L and getattr(x, "memory_type", None) == MemId.WGT
            and x.pop_next]
    k = 3                                     # the 4th WAR token: GEMM -> the next weight load
    insns[pushes[k]] = dataclasses.replace(insns[pushes[k]], push_prev=False)
    insns[pops[k + 1]] = dataclasses.replace(insns[pops[k + 1]], pop_next=False)
    with pytest.raises(RaceError, match=r"data race on (WGT|INP) entry"):
        simulate(program.config, insns, program.initial_dram())


def test_race_on_dram_load_reads_what_store_writes():
    """A store writes DRAM bytes an INP load reads, with nothing ordering the two."""
    insns = [uop_load(), load(MemId.ACC, 0, 0, 1, 1), alu_map(AluOp.ADD, (0, 1), 1, imm=1, push_next=True),
             store(0, 16, 1, 1, pop_prev=True, push_prev=True),     # OUT element 16 = bytes [64, 68)
             load(MemId.INP, 0, 16, 1, 1, push_next=True),          # INP element 16 = the same bytes
             FinishInsn(pop_prev=True, pop_next=True)]
    with pytest.raises(RaceError, match=r"data race on DRAM bytes \[0x40, 0x44\): instruction (3|4) .*instruction "
                                        r"(3|4)"):
        run(insns)
    assert _race_directions(insns) == {"raw", "war"}


def test_race_on_dram_compute_reads_what_store_writes():
    insns = [uop_load(), load(MemId.ACC, 0, 0, 1, 4), alu_map(AluOp.ADD, (0, 1), 4, imm=1, push_next=True),
             store(0, 16, 1, 4, pop_prev=True, push_prev=True),     # bytes [64, 80)
             load(MemId.ACC, 4, 4, 1, 1),                           # ACC element 4 = bytes [64, 80)
             FinishInsn(pop_next=True)]
    with pytest.raises(RaceError, match=r"DRAM bytes \[0x40, 0x44\)"):
        run(insns)
    assert _race_directions(insns) == {"raw", "war"}


def test_dram_reads_after_ordered_store_are_fine():
    insns = [uop_load(), load(MemId.ACC, 0, 0, 1, 4), alu_map(AluOp.ADD, (0, 1), 4, imm=1, push_next=True),
             store(0, 16, 1, 4, pop_prev=True, push_prev=True),
             load(MemId.ACC, 4, 4, 1, 1, pop_next=True),            # waits for the store
             FinishInsn()]
    result = run(insns)
    assert result.stats.counters["acc_load_nbytes"] == 5 * CFG.acc_elem_bytes   # both ACC loads ran


def test_races_can_be_switched_off():
    """Without race checking the racy program runs to the end, doing what the ordered one does (in
    fsim's sequential order the GEMM happens to finish before the STORE reads OUT)."""
    racy = run(_gemm_program(out_token=False), check_races=False)
    ordered = run(_gemm_program())
    assert racy.stats.counters == ordered.stats.counters
    assert racy.stats.counters["gemm_counter"] == 1 and racy.stats.counters["out_store_nbytes"] > 0
    np.testing.assert_array_equal(racy.machine.dram, ordered.machine.dram)


# ---------------------------------------------------------------------------- memory errors
def test_uninitialised_reads():
    with pytest.raises(MemoryAccessError, match=r"instruction 0 \(compute: GEMM.*\): reads UOP entry 0.*uninitialised"):
        run([GemmInsn(), FinishInsn()])
    with pytest.raises(MemoryAccessError, match=r"instruction 1 \(compute: GEMM.*\): reads INP entry 0"):
        run([uop_load(), GemmInsn(), FinishInsn()])
    with pytest.raises(MemoryAccessError, match=r"instruction 3 \(compute: GEMM.*\): reads ACC entry 0"):
        run([uop_load(), load(MemId.WGT, 0, 0, 1, 1), load(MemId.INP, 0, 0, 1, 1, push_next=True),
             GemmInsn(pop_prev=True), FinishInsn()])
    with pytest.raises(MemoryAccessError, match=r"instruction 1 \(compute: ALU.*\): reads ACC entry 0"):
        run([uop_load(), alu_map(AluOp.MAX, (0, 1), 1, imm=0), FinishInsn()])
    with pytest.raises(MemoryAccessError, match=r"instruction 2 \(store: STORE.*\): reads OUT entry 0"):
        run([load(MemId.ACC, 0, 0, 1, 1), nop(L, MemId.UOP, push_next=True),
             store(0, 64, 1, 1, pop_prev=True, push_prev=True), FinishInsn(pop_next=True)])


def test_sram_contents_do_not_survive_runs():
    dram = np.zeros(4096, dtype=np.uint8)
    simulate(CFG, [uop_load(), load(MemId.ACC, 0, 0, 1, 1), FinishInsn()], dram)
    with pytest.raises(MemoryAccessError, match="reads UOP entry 0"):
        simulate(CFG, [alu_map(AluOp.MAX, (0, 1), 1, imm=0), FinishInsn()], dram)


@pytest.mark.parametrize("insns, message", [
    ([load(MemId.INP, CFG.inp_depth - 1, 0, 1, 1, pads=(0, 0, 0, 1)), FinishInsn()],
     rf"instruction 0 \(load: LOAD INP.*\): INP entries \[{CFG.inp_depth - 1}, {CFG.inp_depth + 1}\) out of range; "
     rf"the INP buffer has {CFG.inp_depth} entries"),
    ([load(MemId.UOP, CFG.uop_depth, 0, 1, 1), FinishInsn()], r"UOP entries \[256, 257\) out of range"),
    ([uop_load(), GemmInsn(reset_reg=True, iter_out=CFG.acc_depth + 1, dst_factor_out=1), FinishInsn()],
     r"instruction 1 \(compute: GEMM.*\): dst index reaches 128 .*the ACC buffer has 128 entries"),
    ([uop_load(), load(MemId.ACC, 0, 0, 1, 1), AluInsn(iter_out=3, src_factor_out=CFG.acc_depth), FinishInsn()],
     r"src index reaches 256 .*the ACC buffer has 128 entries"),
    ([GemmInsn(uop_bgn=CFG.uop_depth - 1, uop_end=CFG.uop_depth + 1), FinishInsn()],
     r"micro-ops \[255, 257\) out of range; the micro-op cache has 256 entries"),
    ([load(MemId.WGT, 0, 4096 // 16, 1, 1), FinishInsn()],
     r"instruction 0 \(load: LOAD WGT.*\): DRAM bytes \[0x1000, 0x1010\) out of range; DRAM holds 0x1000 bytes"),
])
def test_out_of_range_accesses(insns, message):
    with pytest.raises(MemoryAccessError, match=message):
        run(insns)


def test_store_past_dram_end():
    insns = [uop_load(), load(MemId.ACC, 0, 0, 1, 2), alu_map(AluOp.ADD, (0, 1), 2, imm=0, push_next=True),
             store(0, 4096 // 4 - 1, 1, 2, pop_prev=True, push_prev=True), FinishInsn(pop_next=True)]
    with pytest.raises(MemoryAccessError, match=r"instruction 3 \(store: STORE OUT.*\): DRAM bytes \[0xffc, 0x1004\) "
                                                r"out of range"):
        run(insns)


def test_machine_rejects_a_bad_dram_image():
    with pytest.raises(MemoryAccessError, match="1-D uint8"):
        Machine(CFG, np.zeros(16, dtype=np.int32))


def test_non_instruction_is_a_program_error():
    with pytest.raises(ProgramError, match="instruction 0: 'LOAD' is not a VTA instruction"):
        run(["LOAD", FinishInsn()])


def test_fsim_cannot_write_a_trace(tmp_path):
    from vtakit.sim.backend import Launch, get_backend
    from vtakit.errors import SimError

    launch = Launch(CFG, [FinishInsn()], np.zeros(16, dtype=np.uint8), trace=tmp_path / "t.json")
    with pytest.raises(SimError, match=r"fsim models no time, so it cannot write the trace .*t\.json"):
        get_backend("fsim")(launch)
