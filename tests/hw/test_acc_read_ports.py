"""ACC_READ_PORTS on the RTL: one ACC copy with the src register, or two copies.

docs/timing.md §4: an ALU finishes at e = s + (cycles of its micro-ops) + 5, a GEMM at + 5 + T. A micro-op takes
one cycle, except a tensor ALU micro-op (it reads dst and src) when ACC has one read port: two,
unless its src address is the previous micro-op's of the same instruction (it hits the src
register); and an ALU micro-op that reads the entry the previous one writes (dst, or src in the
tensor form) takes two as well. These programs chain tensor ALU micro-ops whose src is the dst of the micro-op one or
two before (forwarding at every distance), repeat and alternate src addresses, write the
register's entry from the micro-op that uses it, and overwrite it by an ACC load or a GEMM between
two ALUs; each is checked on rtl against fsim (data) and the cycle model, both engines and the
stepping model (every retire cycle), and against the expected cycle counts.
"""

import dataclasses

import numpy as np
import pytest
from amaranth.hdl import Fragment
from amaranth.lib import memory

from tests.programs import run_program
from tests.programs.runner import insn_address
from vtakit.hw.compute import ComputeModule
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop
from vtakit.sim import cycle
from vtakit.sim.backend import Launch
from vtakit.sim.program import Program, Segment

# docs/timing.md §4: a queued ALU (GEMM) without tokens retires (its micro-ops' cycles) + F (+ F_GEMM) after the
# previous compute instruction; F_GEMM on VTAConfig.small() (one registered tree stage)
F = 9
F_GEMM = 10


def _load(config, mem, sram, dram_bytes, x, **kw):
    elem = {MemId.UOP: 4, MemId.ACC: config.acc_elem_bytes, MemId.INP: config.inp_elem_bytes,
            MemId.WGT: config.wgt_elem_bytes}[mem]
    return MemInsn(opcode=Opcode.LOAD, memory_type=mem, sram_base=sram, dram_base=dram_bytes // elem, y_size=1,
                   x_size=x, x_stride=x, **kw)


def _program(config, uops, body, store=16):
    """LOAD the micro-ops, ACC entries 0..15 and INP/WGT, pop load's token (an empty GEMM), run
    ``body`` (compute instructions without tokens), store OUT entries 0..store-1 and FINISH."""
    out_base = 0x4000 // config.out_elem_bytes
    body = [*body[:-1], dataclasses.replace(body[-1], push_next=True)]
    insns = [_load(config, MemId.UOP, 0, 0x100, len(uops)),
             _load(config, MemId.ACC, 0, 0x1000, 16),
             _load(config, MemId.INP, 0, 0x2000, 8),
             _load(config, MemId.WGT, 0, 0x3000, 4, push_next=True),
             GemmInsn(uop_bgn=0, uop_end=0, iter_out=1, iter_in=1, pop_prev=True),
             *body,
             MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=0, dram_base=out_base, y_size=1,
                     x_size=store, x_stride=store, pop_prev=True, push_prev=True),
             FinishInsn(pop_next=True)]
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 0x4000, dtype=np.uint8)
    data[:0x1000] = rng.integers(-3, 4, 0x1000).astype(np.uint8)    # small ACC values keep the chains varied
    return Program(config, insns, uops, uop_addr=0x100, segments=[Segment(0x1000, data.tobytes(), "data")],
                   dram_size=1 << 15)


def _cycle(program, engine, stepping=False):
    encoded = program.encoded_insns()
    addr = insn_address(program)
    image = program.initial_dram(addr + len(encoded))
    memoryview(image)[addr:addr + len(encoded)] = encoded
    run = cycle.simulate(Launch(program.config, list(program.insns), image, addr, encoded=encoded), engine=engine,
                         stepping=stepping)
    return image, run


def _check(program):
    """rtl == fsim (DRAM) and cycle == rtl (every retire cycle) on every engine; returns, for each
    instruction of the body, its retire cycle minus the previous instruction's (rtl)."""
    fsim_dram, _ = run_program(program, "fsim")
    dram, rtl = run_program(program, "rtl")
    assert np.array_equal(dram, fsim_dram)
    for engine, stepping in (("python", False), ("python", True), ("auto", False)):
        image, run = _cycle(program, engine, stepping)
        assert run.stats.retire_cycles == rtl.retire_cycles and run.stats.cycles == rtl.cycles, (engine, stepping)
        assert np.array_equal(image, fsim_dram), engine
        if engine == "auto":
            assert run.engine == "native", cycle.native_timing(Launch(program.config, list(program.insns),
                                                                      image, insn_address(program)))
    r = rtl.retire_cycles
    return [b - a for a, b in zip(r[4:-3], r[5:-2])]


def _chain(config):
    # uops 0..5: a chain over ACC entries 0..5 whose src is the dst one or two micro-ops before
    # (distance 1 and 2), src addresses 0, 0, 1, 1, 3, 3 (every second one hits); uops 6..11: GEMM
    # micro-ops on the same entries
    uops = [Uop(d, max(0, d - 1 - d % 2), 0) for d in range(6)] + [Uop(d, d, d % 4) for d in range(6)]
    loop = dict(uop_bgn=0, uop_end=6, iter_out=2, iter_in=2)
    return _program(config, uops, [
        AluInsn(alu_opcode=AluOp.ADD, **loop),                                        # 0: tensor
        AluInsn(alu_opcode=AluOp.SHR, use_imm=True, imm=1, **loop),                   # 1: immediate, 1 each
        GemmInsn(uop_bgn=6, uop_end=12, iter_out=1, iter_in=1),                       # 2: GEMM, 1 each
        AluInsn(alu_opcode=AluOp.MAX, uop_bgn=0, uop_end=6, iter_out=3, iter_in=1,    # 3: tensor, src moves
                src_factor_out=1),
        AluInsn(alu_opcode=AluOp.MIN, uop_bgn=1, uop_end=2, iter_out=1, iter_in=1)],  # 4: one tensor micro-op
        store=6)


@pytest.mark.parametrize("ports", [1, 2])
def test_tensor_alu_micro_op_cycles_per_read_port_count(ports):
    d = _check(_chain(VTAConfig.small(acc_read_ports=ports)))
    one = ports == 1
    # tensor ALU, 24 micro-ops, 4 passes over (dst, src) (0, 0), (1, 0), (2, 1), (3, 1), (4, 3), (5, 3):
    # uops 1, 2 and 4 read the previous dst (2 cycles); one port: uops 2, 4 and 0 miss as well
    # (the src steps between passes, uop 5 -> uop 0: src 3 -> 0, never repeat one), uops 3 and 5 hit
    assert d[0] == (24 + 4 * 4 if one else 24 + 4 * 3) + F
    assert d[1] == 24 + F                           # immediate ALU: dst never repeats, one cycle each
    assert d[2] == 6 + F_GEMM                       # GEMM
    # 18 micro-ops: passes of src (0, 0, 1, 1, 3, 3) + i. i = 0 as above (4 slow, 3 with two ports);
    # i = 1, src 1, 1, 2, 2, 4, 4: uops 3 and 5 read the previous dst, uops 0, 2, 4 miss (5; 2);
    # i = 2, src 2, 2, 3, 3, 5, 5: no previous dst read, uops 0, 2, 4 miss (3; 0)
    assert d[3] == (18 + 12 if one else 18 + 5) + F
    assert d[4] == (2 if one else 1) + F            # one micro-op: always a miss


def test_src_register_hits_and_misses():
    """Repeated src (a bias added to many entries), alternating src, the register's entry written by
    the micro-op before, by the micro-op that hits it, across i/j steps, and ACC written between two
    ALUs by a LOAD and by a GEMM."""
    config = VTAConfig.small()
    B = 12                                          # the "bias" entry
    uops = ([Uop(d, B, 0) for d in range(4)]                            # 0-3: dst 0..3, src B
            + [Uop(d, 12 + d % 2, 0) for d in range(4)]                 # 4-7: src 12, 13, 12, 13
            + [Uop(4, B, 0), Uop(B, B, 0), Uop(5, B, 0), Uop(B, 5, 0), Uop(6, B, 0)]   # 8-12: B rewritten
            + [Uop(7, 0, 0), Uop(8, 7, 0), Uop(9, 8, 0)]                # 13-15: src = the previous dst
            + [Uop(d, d % 8, d % 4) for d in range(16)]                 # 16-31: GEMM on every entry
            + [Uop(0, 14, 0)])                                          # 32: one micro-op, src 14
    body = [
        AluInsn(alu_opcode=AluOp.ADD, uop_bgn=0, uop_end=4, iter_out=1, iter_in=1),    # 0: 1 miss + 3 hits
        AluInsn(alu_opcode=AluOp.ADD, uop_bgn=4, uop_end=8, iter_out=1, iter_in=1),    # 1: 4 misses
        AluInsn(alu_opcode=AluOp.MAX, uop_bgn=8, uop_end=13, iter_out=1, iter_in=1),   # 2: B written by B's users
        AluInsn(alu_opcode=AluOp.ADD, uop_bgn=13, uop_end=16, iter_out=1, iter_in=1),  # 3: 3 misses, forwarded
        # 4: one uop, j steps keep src (factor_in 0), i steps move it by 1: hits but the first of each i
        AluInsn(alu_opcode=AluOp.ADD, uop_bgn=32, uop_end=33, iter_out=2, iter_in=4, dst_factor_out=4,
                dst_factor_in=1, src_factor_out=1),
        # 5: uops 0-3 again, j steps move dst only: every micro-op but the first hits
        AluInsn(alu_opcode=AluOp.ADD, uop_bgn=0, uop_end=4, iter_out=1, iter_in=2, dst_factor_in=4),
        _load(config, MemId.ACC, B, 0x1800, 1),                                         # 6: overwrites B
        AluInsn(alu_opcode=AluOp.ADD, uop_bgn=0, uop_end=4, iter_out=1, iter_in=1),    # 7: misses B first
        GemmInsn(uop_bgn=16, uop_end=32, iter_out=1, iter_in=1),                       # 8: writes B (and all)
        AluInsn(alu_opcode=AluOp.MIN, uop_bgn=0, uop_end=4, iter_out=1, iter_in=1),    # 9: misses B first
        # 10: src steps by j (factor_in 1) over uop src 12, 13: the sequence 12, 13, 13, 14
        AluInsn(alu_opcode=AluOp.ADD, uop_bgn=4, uop_end=6, iter_out=1, iter_in=2, dst_factor_in=2,
                src_factor_in=1),
    ]
    d = _check(_program(config, uops, body))
    assert d[0] == 1 * 2 + 3 + F                    # repeated src
    assert d[1] == 4 * 2 + F                        # alternating src
    # src B, B, B, 5, B: hits at uops 9 and 10, but uop 10 reads B, which uop 9 writes: 2 cycles
    assert d[2] == 5 * 2 - 1 + F
    assert d[3] == 3 * 2 + F
    assert d[4] == 8 * 2 - 6 + F                    # hits at j = 1..3 of each i
    assert d[5] == 8 * 2 - 7 + F
    assert d[7] == 4 * 2 - 3 + F                    # after the ACC load
    assert d[9] == 4 * 2 - 3 + F                    # after the GEMM
    assert d[10] == 4 * 2 - 1 + F                   # the j step repeats 13


@pytest.mark.parametrize("seed", range(6))
def test_random_src_register_programs(seed):
    """Random tensor ALU loops over a few src entries, some also written as dst (so the register's
    entry is rewritten at every distance), mixed with immediate ALUs, GEMMs and ACC loads."""
    config = VTAConfig.small()
    rng = np.random.default_rng(100 + seed)
    srcs = [0, 1, 2, 3, 8, 9]
    uops = ([Uop(int(rng.integers(0, 8)), int(rng.choice(srcs)), 0) for _ in range(12)]
            + [Uop(d, d % 8, d % 4) for d in range(16)])                # 12-27: GEMM on every entry
    body = [GemmInsn(uop_bgn=12, uop_end=28, iter_out=1, iter_in=1)]
    for _ in range(8):
        kind = rng.integers(0, 8)
        if kind == 0:
            body.append(_load(config, MemId.ACC, int(rng.choice(srcs)), 0x1000 + 16 * int(rng.integers(0, 64)), 1))
        elif kind == 1:
            body.append(GemmInsn(uop_bgn=12, uop_end=28, iter_out=1, iter_in=1))
        else:
            bgn = int(rng.integers(0, 11))
            body.append(AluInsn(alu_opcode=AluOp(int(rng.choice([AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR]))),
                                use_imm=kind == 2, imm=1, uop_bgn=bgn, uop_end=int(rng.integers(bgn + 1, 13)),
                                iter_out=int(rng.integers(1, 4)), iter_in=int(rng.integers(1, 4)),
                                dst_factor_out=int(rng.integers(0, 3)), dst_factor_in=int(rng.integers(0, 3)),
                                src_factor_out=int(rng.integers(0, 2)), src_factor_in=int(rng.integers(0, 2))))
    _check(_program(config, uops, body))


def test_micro_ops_from_stored_data():
    """Micro-ops that a STORE wrote to DRAM and a LOAD UOP then read (the token orders them): their
    src fields decide the timing, and the compiled core, which sees the DRAM before the run,
    declines; the Python solver times them (equal to rtl)."""
    config = VTAConfig.small()
    acc = np.zeros((16, 4), np.int32)
    acc[:4, 0] = [4, 5, 6, 7]                       # OUT entries 0-3 as micro-ops: dst 4..7 ...
    acc[:4, 1] = [5, 5, 6, 6]                       # ... src 2 * 5, 2 * 5, 2 * 6, 2 * 6 (bits 7.. of the word)
    acc[4:] = np.arange(48).reshape(12, 4) % 5
    insns = [_load(config, MemId.UOP, 0, 0x100, 4),
             _load(config, MemId.ACC, 0, 0x1000, 16),
             AluInsn(alu_opcode=AluOp.ADD, use_imm=True, imm=0, uop_bgn=0, uop_end=4, iter_out=1, iter_in=1,
                     push_next=True),                                    # 2: OUT 0-3 = the micro-ops
             MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=0, dram_base=0x800 // 4, y_size=1,
                     x_size=4, x_stride=4, pop_prev=True, push_prev=True),
             MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, sram_base=8, dram_base=0x800 // 4, y_size=1,
                     x_size=4, x_stride=4, pop_next=True),               # 4: after the STORE
             AluInsn(alu_opcode=AluOp.ADD, uop_bgn=8, uop_end=12, iter_out=1, iter_in=1, push_next=True),
             MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=4, dram_base=0x900 // 4, y_size=1,
                     x_size=4, x_stride=4, pop_prev=True, push_prev=True),
             FinishInsn(pop_next=True)]
    program = Program(config, insns, [Uop(d, 0, 0) for d in range(4)], uop_addr=0x100,
                      segments=[Segment(0x1000, acc.tobytes(), "acc")], dram_size=1 << 13)
    fsim_dram, _ = run_program(program, "fsim")
    dram, rtl = run_program(program, "rtl")
    assert np.array_equal(dram, fsim_dram)
    r = rtl.retire_cycles
    assert r[5] - r[4] == 4 * 2 - 2 + F             # src 10, 10, 12, 12: two hits
    encoded, addr = program.encoded_insns(), insn_address(program)
    image = program.initial_dram(addr + len(encoded))               # (0x800 holds zeros before the run)
    memoryview(image)[addr:addr + len(encoded)] = encoded
    assert cycle.native_timing(Launch(config, insns, image, addr, encoded=encoded)) in (None, "uops from stored data")
    for engine, stepping in (("python", False), ("python", True), ("auto", False)):
        image, run = _cycle(program, engine, stepping)
        assert run.stats.retire_cycles == r and np.array_equal(image, fsim_dram), (engine, stepping)
        assert run.engine != "native"


def test_micro_op_cycles_match_the_loop():
    """cycle.micro_op_cycles (what the engines use) against docs/timing.md §4's rule applied to the
    micro-op loop written out: an ALU micro-op takes 2 cycles when it reads the entry the previous one
    writes (dst, or src in the tensor form), or, tensor with one read port, when its src is not the
    previous one's (the first one always); 1 otherwise."""
    rng = np.random.default_rng(0)
    for trial in range(400):
        config = VTAConfig.small(acc_read_ports=int(rng.integers(1, 3)), log_acc_buff_size=int(rng.choice([7, 11])))
        mask = config.acc_depth - 1
        count = int(rng.integers(1, 6))
        uops = np.stack([rng.integers(0, 4, count), rng.integers(0, 4, count), np.zeros(count, np.int64)], axis=1)
        # small factors, or any (wrapping around ACC); loops long enough to repeat residues
        top = 5 if trial % 2 else mask + 1
        factors = [int(f) for f in rng.integers(0, top, 4)]
        insn = AluInsn(uop_bgn=0, uop_end=count, iter_out=int(rng.integers(1, 7)), iter_in=int(rng.integers(1, 7)),
                       dst_factor_out=factors[0], dst_factor_in=factors[1],
                       src_factor_out=factors[2], src_factor_in=factors[3], use_imm=bool(trial % 3 == 0))
        seq = [((int(uops[k, 0]) + i * insn.dst_factor_out + j * insn.dst_factor_in) & mask,
                (int(uops[k, 1]) + i * insn.src_factor_out + j * insn.src_factor_in) & mask)
               for i in range(insn.iter_out) for j in range(insn.iter_in) for k in range(count)]
        two_read = config.acc_read_ports == 1 and not insn.use_imm
        want = 0
        for n, (dst, src) in enumerate(seq):
            if n == 0:
                want += 2 if two_read else 1
                continue
            prev_dst, prev_src = seq[n - 1]
            reads_write = dst == prev_dst or (not insn.use_imm and src == prev_dst)
            want += 2 if reads_write or (two_read and src != prev_src) else 1
        assert cycle.micro_op_cycles(insn, config, uops) == want


def test_one_read_port_stores_acc_once():
    """The single-port ACC is one memory with one read port; two ports read one memory twice."""
    for ports in (1, 2):
        frag = Fragment.get(ComputeModule(VTAConfig.small(acc_read_ports=ports)), None)
        acc = [sub for sub, name, _ in frag.subfragments if name == "acc_mem"]
        assert len(acc) == 1
        mem = acc[0]
        assert isinstance(mem, memory.MemoryInstance)
        assert len(mem._read_ports) == ports
