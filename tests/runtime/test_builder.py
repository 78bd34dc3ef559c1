"""ProgramBuilder: VTA's DepPush/DepPop/Synchronize rules, micro-op kernel caching, DMA helpers."""

import numpy as np
import pytest

from vtakit.errors import AllocationError, ISAError, ProgramError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Stage, Uop
from vtakit.runtime import Device, ProgramBuilder
from vtakit.runtime.replay import run_fresh

SMALL = VTAConfig.small()
L, C, S = Stage.LOAD, Stage.COMPUTE, Stage.STORE


def flags(insn):
    return {f for f in ("pop_prev", "pop_next", "push_prev", "push_next") if getattr(insn, f)}


def test_pop_attaches_to_the_next_instruction_of_its_stage():
    b = ProgramBuilder(SMALL)
    b.dep_pop(L, C)                                   # compute waits on load: pop_prev
    b.dep_pop(S, C)                                   # compute waits on store: pop_next
    b.load_2d(MemId.INP, 0, 0, 1, 1)                  # a load-stage instruction: no pops
    b.gemm([Uop(0)], reset=True)                      # LOAD UOP is the next compute instruction
    assert flags(b.insns[0]) == set()
    assert b.insns[1].memory_type == MemId.UOP and flags(b.insns[1]) == {"pop_prev", "pop_next"}
    assert flags(b.insns[2]) == set()


def test_repeated_pop_commits_the_pending_one_on_a_noop():
    b = ProgramBuilder(SMALL)
    b.dep_pop(C, L)
    b.dep_pop(C, L)
    assert len(b.insns) == 1
    first = b.insns[0]
    assert (first.opcode, first.memory_type, first.x_size) == (Opcode.LOAD, MemId.INP, 0)
    assert flags(first) == {"pop_next"}
    b.load_2d(MemId.WGT, 0, 0, 1, 1)
    assert flags(b.insns[1]) == {"pop_next"}


def test_dma_helpers_return_the_index_of_their_instruction():
    b = ProgramBuilder(SMALL)
    b.dep_pop(C, L)
    b.dep_pop(C, L)                                   # commits a no-op first: the load is not at 0
    assert b.load_2d(MemId.INP, 0, 0, 1, 1) == 1 and b.insns[1].memory_type == MemId.INP
    b.gemm([Uop(0)], reset=True)
    assert b.store_2d(0, 0, 1, 1) == 4 and b.insns[4].opcode == Opcode.STORE


def test_push_sets_the_flag_on_the_last_instruction_only_if_it_is_the_stage_s():
    b = ProgramBuilder(SMALL)
    b.load_2d(MemId.INP, 0, 0, 1, 1)
    b.dep_push(L, C)                                  # last instruction is a load: flag set on it
    assert len(b.insns) == 1 and flags(b.insns[0]) == {"push_next"}
    b.dep_push(L, C)                                  # flag already set: token-only no-op
    assert len(b.insns) == 2 and flags(b.insns[1]) == {"push_next"} and b.insns[1].x_size == 0
    b.gemm([Uop(0)], reset=True)
    b.load_2d(MemId.INP, 0, 0, 1, 1)
    b.dep_push(C, S)                                  # last instruction is on load, not compute: no-op
    last = b.insns[-1]
    assert (last.opcode, last.memory_type, last.x_size) == (Opcode.LOAD, MemId.UOP, 0)
    assert flags(last) == {"push_next"}
    assert flags(b.insns[3]) == set()                 # the GEMM (not the last instruction) is untouched


@pytest.mark.parametrize("src, dst, flag, opcode, memory", [
    (L, C, "push_next", Opcode.LOAD, MemId.INP),
    (C, L, "push_prev", Opcode.LOAD, MemId.UOP),
    (C, S, "push_next", Opcode.LOAD, MemId.UOP),
    (S, C, "push_prev", Opcode.STORE, MemId.UOP),
])
def test_push_noops_per_queue(src, dst, flag, opcode, memory):
    b = ProgramBuilder(SMALL)
    b.dep_push(src, dst)
    (insn,) = b.insns
    assert (insn.opcode, insn.memory_type, insn.x_size, insn.y_size) == (opcode, memory, 0, 0)
    assert flags(insn) == {flag}


def test_push_first_commits_pending_pops_of_the_pushing_stage():
    b = ProgramBuilder(SMALL)
    b.dep_pop(C, S)
    b.dep_push(S, C)                                  # VTA: CommitPendingPop(S) then flag on that no-op
    (insn,) = b.insns
    assert insn.opcode == Opcode.STORE and flags(insn) == {"pop_prev", "push_prev"}


def test_illegal_queues():
    b = ProgramBuilder(SMALL)
    for src, dst in ((L, S), (S, L), (C, C)):
        with pytest.raises(ProgramError, match=f"no token queue from {src.name} to {dst.name}"):
            b.dep_push(src, dst)
        with pytest.raises(ProgramError, match="no token queue"):
            b.dep_pop(src, dst)
    with pytest.raises(ProgramError, match=r"token queue \(5, 1\): stages must be Stage.LOAD/COMPUTE/STORE"):
        b.dep_push(5, 1)


def test_finish_is_vta_synchronize():
    program = ProgramBuilder(SMALL).finish()
    kinds = [(i.opcode, getattr(i, "memory_type", None), frozenset(flags(i))) for i in program.insns]
    assert kinds == [(Opcode.STORE, MemId.UOP, {"push_prev"}), (Opcode.LOAD, MemId.INP, {"push_next"}),
                     (Opcode.LOAD, MemId.UOP, {"pop_prev", "pop_next"}), (Opcode.FINISH, None, frozenset())]
    run_fresh(program)                                # and the functional simulator accepts it


def test_finish_reuses_trailing_instructions_and_closes_the_builder():
    b = ProgramBuilder(SMALL)
    b.load_2d(MemId.INP, 0, 0, 1, 1)
    program = b.finish()
    assert isinstance(program.insns[-1], FinishInsn) and flags(program.insns[-1]) == set()
    with pytest.raises(ProgramError, match="has finished"):
        b.gemm([Uop(0)])
    with pytest.raises(ProgramError, match="has finished"):
        b.finish()


def test_uop_kernels_are_deduplicated():
    b = ProgramBuilder(SMALL)
    k1 = [Uop(0, 1, 2), Uop(1, 2, 3)]
    k2 = [(5, 0, 0)]
    b.gemm(k1)
    b.gemm(k1, iter_out=2)
    b.alu(AluOp.ADD, k2, imm=1)
    b.gemm([Uop(0, 1, 2), Uop(1, 2, 3)])               # equal content: same kernel
    program = b.finish()
    loads = [i for i in program.insns if isinstance(i, MemInsn) and i.memory_type == MemId.UOP and i.x_size]
    compute = [i for i in program.insns if not isinstance(i, (MemInsn, FinishInsn))]
    assert len(loads) == 2
    assert [(i.uop_bgn, i.uop_end) for i in compute] == [(0, 2), (0, 2), (2, 3), (0, 2)]
    assert program.uops == [Uop(0, 1, 2), Uop(1, 2, 3), Uop(5, 0, 0)]
    base = program.uop_addr // 4
    assert [(i.sram_base, i.dram_base, i.x_size) for i in loads] == [(0, base, 2), (2, base + 2, 1)]


def test_uop_cache_wraps_and_evicts_but_the_image_keeps_one_copy():
    depth = SMALL.uop_depth                            # 256
    b = ProgramBuilder(SMALL)
    big, other, small = [Uop(i % 8) for i in range(200)], [Uop(1, 1, 1)] * 100, [Uop(2)] * 50
    b.gemm(big, reset=True)                            # [0, 200)
    b.gemm(other, reset=True)                          # does not fit after big: wraps to 0, evicts big
    b.gemm(small, reset=True)                          # [100, 150)
    b.gemm(other, reset=True)                          # still resident: no load
    b.gemm(big, reset=True)                            # wraps again, evicting other and small
    program = b.finish()
    loads = [i for i in program.insns if isinstance(i, MemInsn) and i.memory_type == MemId.UOP and i.x_size]
    gemms = [i for i in program.insns if isinstance(i, GemmInsn)]
    assert [(i.sram_base, i.x_size) for i in loads] == [(0, 200), (0, 100), (100, 50), (0, 200)]
    assert [(g.uop_bgn, g.uop_end) for g in gemms] == [(0, 200), (0, 100), (100, 150), (0, 100), (0, 200)]
    assert loads[0].dram_base == loads[3].dram_base and len(program.uops) == 350
    with pytest.raises(ProgramError, match="kernel of 257 micro-ops exceeds the micro-op SRAM"):
        ProgramBuilder(SMALL).gemm([Uop(0)] * (depth + 1))
    with pytest.raises(ProgramError, match="at least one micro-op"):
        ProgramBuilder(SMALL).gemm([])


def test_dma_helpers_compute_element_addresses():
    b = ProgramBuilder(SMALL)
    wgt = b.array(np.zeros((8, 4, 4), np.int8))
    out = b.empty((8, 1, 4), np.int8)
    b.load_2d(MemId.WGT, 3, wgt, 2, 3, 4, offset=1, y_pad_0=1, x_pad_1=2)
    b.store_2d(5, out, 2, 2, offset=3)
    load, store = b.insns
    assert (load.dram_base, load.sram_base, load.y_size, load.x_size, load.x_stride) == \
           (wgt.phys_addr // SMALL.wgt_elem_bytes + 1, 3, 2, 3, 4)
    assert (load.y_pad_0, load.y_pad_1, load.x_pad_0, load.x_pad_1) == (1, 0, 0, 2)
    assert (store.memory_type, store.dram_base, store.x_stride) == (MemId.OUT, out.phys_addr // 4 + 3, 2)
    program = b.finish()
    assert [s.addr for s in program.segments] == [wgt.phys_addr, out.phys_addr]
    assert program.uop_addr >= out.phys_addr + out.nbytes and program.dram_size >= out.phys_addr + out.nbytes


def test_builder_errors():
    b = ProgramBuilder(SMALL)
    with pytest.raises(ProgramError, match="load_2d of memory OUT"):
        b.load_2d(MemId.OUT, 0, 0, 1, 1)
    dev = Device(SMALL, dram_size=4096)
    first = dev.empty(4, np.int8, alignment=4)
    odd = dev.empty(64, np.int8, alignment=4, name="odd")
    assert (first.phys_addr, odd.phys_addr) == (0, 4)
    with pytest.raises(ProgramError, match=r"odd at 0x4 is not aligned to the 16-byte WGT element"):
        ProgramBuilder(SMALL, dev).load_2d(MemId.WGT, 0, odd, 1, 1)
    with pytest.raises(ProgramError, match="ALU MUL needs a configuration with ALU_MUL"):
        b.alu(AluOp.MUL, [Uop(0)], imm=2)
    with pytest.raises(ProgramError, match="FINISH is appended by finish"):
        b.append(FinishInsn())
    with pytest.raises(ProgramError, match=r"this builder was built for 1x16_i8w8a32_15_15_18_17, its device is "
                                           r"1x4_i8w8a32_10_9_10_11: LOG_BLOCK_IN=4 vs 2"):
        ProgramBuilder(VTAConfig(), dev)
    with pytest.raises(AllocationError, match="dtype object cannot live in device DRAM"):
        b.array(np.array([object()]))
    with pytest.raises(AllocationError, match=r"cannot make a program-image array of shape \(2.5,\)"):
        b.empty((2.5,))
    bad = ProgramBuilder(SMALL, name="bad")
    bad.load_2d(MemId.INP, 1 << 16, 0, 1, 1)
    with pytest.raises(ISAError, match="program 'bad': instruction 0: sram_base=65536 does not fit"):
        bad.finish()


def test_mul_allowed_with_alu_mul():
    b = ProgramBuilder(SMALL.replace(alu_mul=True))
    b.alu(AluOp.MUL, [Uop(0)], imm=3)
    assert b.insns[-1].alu_opcode == AluOp.MUL


def test_built_program_computes_relu_and_clip_like_numpy():
    """ACC load -> MAX 0 -> MIN 50 -> ADD tensor (x += x) -> store, checked against numpy on fsim."""
    cfg = SMALL
    dev = Device(cfg, dram_size=1 << 16)
    rng = np.random.default_rng(7)
    data = rng.integers(-100, 100, size=(6, 1, 4), dtype=np.int32)
    x = dev.array(data)
    y = dev.empty((2, 3, 1, 4), np.int8)
    b = ProgramBuilder(cfg, dev)
    b.load_2d(MemId.ACC, 0, x, 1, 6)
    loop = dict(iter_out=2, iter_in=3, dst_factor=(3, 1))
    b.alu(AluOp.MAX, [Uop(0)], imm=0, **loop)
    b.alu(AluOp.MIN, [Uop(0)], imm=50, **loop)
    b.alu(AluOp.ADD, [Uop(0, 0)], src_factor=(3, 1), **loop)
    b.dep_push(C, S)
    b.dep_pop(C, S)
    b.store_2d(0, y, 2, 3, 3)
    dev.run(b.finish())
    expected = 2 * np.clip(data, 0, 50)
    np.testing.assert_array_equal(y.numpy().reshape(6, 1, 4), expected.astype(np.int8))


def test_gemm_of_built_program_matches_numpy():
    cfg = SMALL
    dev = Device(cfg, dram_size=1 << 16)
    rng = np.random.default_rng(3)
    inp = rng.integers(-128, 128, size=(2, 1, 4), dtype=np.int8)      # 2 INP elements
    wgt = rng.integers(-128, 128, size=(2, 4, 4), dtype=np.int8)      # 2 WGT elements
    a, w, o = dev.array(inp), dev.array(wgt), dev.empty((1, 1, 4), np.int8)
    b = ProgramBuilder(cfg, dev)
    b.load_2d(MemId.INP, 0, a, 1, 2)
    b.load_2d(MemId.WGT, 0, w, 1, 2)
    b.dep_push(L, C)
    b.dep_pop(L, C)
    b.gemm([Uop(0)], reset=True)
    b.gemm([Uop(0, 0, 0), Uop(0, 1, 1)])
    b.dep_push(C, S)
    b.dep_pop(C, S)
    b.store_2d(0, o, 1, 1)
    dev.run(b.finish())
    acc = sum(inp[k].astype(np.int32) @ wgt[k].astype(np.int32).T for k in range(2))
    np.testing.assert_array_equal(o.numpy()[0], acc.astype(np.int8))


def test_buffer_channel_rejects_bad_shapes():
    from vtakit.runtime.pipeline import BufferChannel

    with pytest.raises(ProgramError, match="units >= 0 and buffers >= 1, got 4, 0"):
        BufferChannel(ProgramBuilder(SMALL), L, C, 4, 0)
