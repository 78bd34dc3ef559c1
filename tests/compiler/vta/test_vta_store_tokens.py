"""Store tokens (vtakit.compiler.vta.store_tokens): a compute -> store push moves to the last compute
instruction its stores need, never past a writer of what they read; a store -> compute pop moves
to the first compute instruction that needs it; programs stay race-free (the happens-before
checker runs in every simulation here) and bit-exact, and a two-thread conv with the fused GEMM
epilogue gets faster."""

import dataclasses

import numpy as np
import vtakit.compiler.vta.codegen as codegen
from vtakit.compiler.topi_vta.bench import compile_conv2d, run_conv2d
from vtakit.compiler.topi_vta.knobs import Conv2dKnobs
from vtakit.compiler.topi_vta.workloads import Conv2dWorkload
from vtakit.compiler.vta.env import get_env
from vtakit.compiler.vta.store_tokens import hoist_store_pushes, sink_store_pops
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import GemmInsn, MemId, MemInsn, Opcode, Uop
from vtakit.runtime.template import Relocation
from vtakit.runtime.random_program import random_program
from vtakit.sim.fsim import simulate

SMALL = VTAConfig.small()


def _uop_load(base: int, count: int, **flags) -> MemInsn:
    return MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, sram_base=base, dram_base=base, y_size=1,
                   x_size=count, x_stride=count, **flags)


def _gemm(uop: int, **flags) -> GemmInsn:
    return GemmInsn(uop_bgn=uop, uop_end=uop + 1, iter_out=4, iter_in=1, dst_factor_out=1, **flags)


def _store(base: int, **flags) -> MemInsn:
    return MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=base, dram_base=base, y_size=1,
                   x_size=4, x_stride=4, **flags)


def _two_threads(middle: list) -> list:
    """Thread 0 writes OUT 0..3, thread 1 OUT 4..7; ``middle`` runs after thread 1's GEMM, and both
    pushes sit after it."""
    return [_uop_load(0, 2), _gemm(0), _gemm(1), *middle, _gemm(1, push_next=True),
            MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, push_next=True),
            _store(0, pop_prev=True), _store(4, pop_prev=True)]


UOPS = [Uop(0, 0, 0), Uop(4, 0, 0)]


def _pushes(insns) -> list[int]:
    return [n for n, i in enumerate(insns) if isa.stage_of(i) == isa.Stage.COMPUTE and i.push_next]


def test_push_moves_to_the_last_writer_of_what_its_store_reads():
    insns, moved = hoist_store_pushes(_two_threads([]), UOPS, 0, [], SMALL.uop_depth, SMALL.out_depth)
    assert _pushes(insns) == [1, 3] and moved == 2      # thread 0's GEMM, then thread 1's last
    assert [dataclasses.replace(i, push_next=False) for i in insns] == \
        [dataclasses.replace(i, push_next=False) for i in _two_threads([])]   # only flags moved


def test_push_stays_after_a_later_writer_and_a_dram_read():
    # a GEMM rewriting thread 0's entries after thread 1's first: the first push cannot pass it
    insns, _ = hoist_store_pushes(_two_threads([_gemm(0)]), UOPS, 0, [], SMALL.uop_depth, SMALL.out_depth)
    assert _pushes(insns) == [3, 4]
    # a LOAD ACC (DRAM the stores might overwrite) in between: the push stays at or after it
    acc = MemInsn(opcode=Opcode.LOAD, memory_type=MemId.ACC, sram_base=0, dram_base=0, y_size=1, x_size=1,
                  x_stride=1)
    insns, _ = hoist_store_pushes(_two_threads([acc]), UOPS, 0, [], SMALL.uop_depth, SMALL.out_depth)
    assert _pushes(insns) == [3, 4]


def test_unknown_micro_ops_leave_the_program_unchanged():
    program = _two_threads([])[1:]                       # no LOAD UOP: the GEMMs' footprints are unknown
    insns, moved = hoist_store_pushes(program, UOPS, 0, [], SMALL.uop_depth, SMALL.out_depth)
    assert moved == 0 and insns == program


def _acc_load(**flags) -> MemInsn:
    return MemInsn(opcode=Opcode.LOAD, memory_type=MemId.ACC, sram_base=0, dram_base=0, y_size=1, x_size=1,
                   x_stride=1, **flags)


def _set() -> isa.AluInsn:
    return isa.AluInsn(alu_opcode=isa.AluOp.REQUANT, use_imm=True, imm=8, uop_bgn=0, uop_end=0)


def _pops(insns) -> list[int]:
    return [n for n, i in enumerate(insns) if isa.stage_of(i) == isa.Stage.COMPUTE and i.pop_next]


def test_pop_moves_to_the_first_instruction_that_needs_it():
    # bias load (of a tensor no store writes) and requant set run while the store drains; the reset
    # writes OUT, so it pops
    reloc = [Relocation(0, 2, MemId.ACC), Relocation(3, 3, MemId.OUT)]
    insns, moved = sink_store_pops([_acc_load(pop_next=True), _set(), _gemm(0), _store(0)], reloc)
    assert _pops(insns) == [2] and moved == 1
    # the load reads a tensor a store writes (or an unknown one): it keeps the pop
    for reloc in ([Relocation(0, 3, MemId.ACC), Relocation(3, 3, MemId.OUT)], []):
        insns, moved = sink_store_pops([_acc_load(pop_next=True), _set(), _gemm(0), _store(0)], reloc)
        assert _pops(insns) == [0] and moved == 0
    # nothing passes an instruction that pushes a token
    insns, _ = sink_store_pops([MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, pop_next=True),
                                MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, push_prev=True), _gemm(0)], [])
    assert _pops(insns) == [1]


def test_random_programs_stay_race_free_and_equal():
    """Random programs (1..3 virtual threads, every opcode) with their store pushes hoisted and store
    pops sunk: the race checker accepts them and the final DRAM is the original's, byte for byte."""
    config = VTAConfig.small(alu_requant=True, bias_preload=True, gemm_out_requant=True)
    total = 0
    for seed in range(8):
        program = random_program(config, seed)
        insns, moved = hoist_store_pushes(program.insns, program.uops, program.uop_addr // isa.UOP_BYTES, [],
                                          config.uop_depth, config.out_depth)
        insns, sunk = sink_store_pops(insns, [])
        total += moved + sunk
        want = program.initial_dram()
        simulate(config, list(program.insns), want)
        got = program.initial_dram()
        simulate(config, insns, got)
        np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}")
    assert total > 0                                     # the sample moves pushes (8 of them when written)


def _conv(config):
    """A two-thread 3x3 conv (four output tiles per thread), run on the cycle model and checked
    against numpy; its result and its instructions."""
    env = get_env(config)
    wl = Conv2dWorkload(8, 8, 2 * env.block_in, 4 * env.block_out, 3, 1, 1)
    knobs = Conv2dKnobs(2, 8, 2, 1, oc_nthread=2)
    result = run_conv2d(wl, config, "cycle", 2, knobs)
    assert result.correct
    return result, compile_conv2d(wl, config, 2, knobs).module.template.insns


def test_two_thread_conv_with_fused_epilogue_gets_faster(monkeypatch):
    config = VTAConfig.small(alu_requant=True, bias_preload=True, gemm_out_requant=True)
    stats, insns = _conv(config)
    first = _pushes(insns)[0]
    assert isinstance(insns[first], GemmInsn)                 # thread 0's last GEMM releases its store
    monkeypatch.setattr(codegen, "hoist_store_pushes", lambda insns, *a: (list(insns), 0))
    before, old = _conv(config)
    assert not isinstance(old[_pushes(old)[0]], GemmInsn) or _pushes(old)[0] > first
    assert stats.cycles < before.cycles
