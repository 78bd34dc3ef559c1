"""ACC_READ_PORTS on the RTL: one ACC copy with two-cycle tensor ALU micro-ops, or two copies.

docs/timing.md §4: a GEMM or ALU of N micro-ops finishes at e = s + N·m + 1, where m = 2 for a
tensor ALU micro-op (it reads dst and src) when ACC has one read port, else 1. These programs
chain tensor ALU micro-ops whose src is the dst of the micro-op one or two before (forwarding at
every distance), mixed with immediate ALU and GEMM micro-ops, and check rtl against fsim (data)
and the cycle model, both engines (every retire cycle).
"""

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

F = 5   # docs/timing.md §4: a queued GEMM/ALU without tokens retires N·m + 5 cycles after the previous one


def _load(config, mem, sram, dram_bytes, x, **kw):
    elem = {MemId.UOP: 4, MemId.ACC: config.acc_elem_bytes, MemId.INP: config.inp_elem_bytes,
            MemId.WGT: config.wgt_elem_bytes}[mem]
    return MemInsn(opcode=Opcode.LOAD, memory_type=mem, sram_base=sram, dram_base=dram_bytes // elem, y_size=1,
                   x_size=x, x_stride=x, **kw)


def _program(config):
    # uops 0..5: a chain over ACC entries 0..5 whose src is the dst one or two micro-ops before
    # (distance 1 and 2); uops 6..11: GEMM micro-ops on the same entries
    uops = [Uop(d, max(0, d - 1 - d % 2), 0) for d in range(6)] + [Uop(d, d, d % 4) for d in range(6)]
    loop = dict(uop_bgn=0, uop_end=6, iter_out=2, iter_in=2)
    out_base = 0x4000 // config.out_elem_bytes
    insns = [_load(config, MemId.UOP, 0, 0x100, len(uops)),
             _load(config, MemId.ACC, 0, 0x1000, 8),
             _load(config, MemId.INP, 0, 0x2000, 8),
             _load(config, MemId.WGT, 0, 0x3000, 4, push_next=True),
             AluInsn(alu_opcode=AluOp.ADD, pop_prev=True, **loop),                        # 4: tensor, m each
             AluInsn(alu_opcode=AluOp.SHR, use_imm=True, imm=1, **loop),                  # 5: immediate, 1 each
             GemmInsn(uop_bgn=6, uop_end=12, iter_out=1, iter_in=1),                      # 6: GEMM, 1 each
             AluInsn(alu_opcode=AluOp.MAX, uop_bgn=0, uop_end=6, iter_out=3, iter_in=1,   # 7: tensor, src moves
                     src_factor_out=1),
             AluInsn(alu_opcode=AluOp.MIN, uop_bgn=1, uop_end=2, iter_out=1, iter_in=1,   # 8: one tensor micro-op
                     push_next=True),
             MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=0, dram_base=out_base, y_size=1,
                     x_size=6, x_stride=6, pop_prev=True, push_prev=True),
             FinishInsn(pop_next=True)]
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 0x4000, dtype=np.uint8)
    data[:0x1000] = rng.integers(-3, 4, 0x1000).astype(np.uint8)    # small ACC values keep the chain varied
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


@pytest.mark.parametrize("ports", [1, 2])
def test_tensor_alu_micro_op_cycles_per_read_port_count(ports):
    config = VTAConfig.small(acc_read_ports=ports)
    program = _program(config)
    fsim_dram, _ = run_program(program, "fsim")
    dram, rtl = run_program(program, "rtl")
    assert np.array_equal(dram, fsim_dram)
    r = rtl.retire_cycles
    m = 2 if ports == 1 else 1
    assert r[5] - r[4] == 24 + F                  # immediate ALU: one cycle per micro-op
    assert r[6] - r[5] == 6 + F                   # GEMM
    assert r[7] - r[6] == 18 * m + F              # tensor ALU
    assert r[8] - r[7] == 1 * m + F
    for engine, stepping in (("python", False), ("python", True), ("auto", False)):
        image, run = _cycle(program, engine, stepping)
        assert run.stats.retire_cycles == r and run.stats.cycles == rtl.cycles, engine
        assert np.array_equal(image, fsim_dram), engine


def test_one_read_port_stores_acc_once():
    """The single-port ACC is one memory with one read port; two ports read one memory twice."""
    for ports in (1, 2):
        frag = Fragment.get(ComputeModule(VTAConfig.small(acc_read_ports=ports)), None)
        acc = [sub for sub, name, _ in frag.subfragments if name == "acc_mem"]
        assert len(acc) == 1
        mem = acc[0]
        assert isinstance(mem, memory.MemoryInstance)
        assert len(mem._read_ports) == ports
