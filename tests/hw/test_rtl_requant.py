"""ALU REQUANT on the RTL: random programs that use both forms give fsim's DRAM bytes and the cycle
model's retire cycles (the micro-op still takes one cycle, or two as a tensor op with one ACC read
port); a configuration without ALU_REQUANT builds no REQUANT lane (opcode 5 then yields 0, as VTA)."""

import dataclasses

import pytest
from amaranth.sim import Simulator

from tests.hw.rtl_cache import session_cache_dir
from tests.sim.test_alu_requant import CONTROLS, _requant_program
from tests.sim.test_cycle import first_divergence
from vtakit.hw.config import VTAConfig
from vtakit.hw.datapath import TensorDatapath
from vtakit.hw.isa import AluInsn, AluOp, requant_imm
from vtakit.runtime.random_program import coverage, random_program

REQUANT = VTAConfig.small(alu_requant=True)
#: seeds whose programs use REQUANT in both forms (checked below)
SEEDS = (0, 2, 8, 15)


@pytest.fixture(scope="session")
def rtl_cache_dir(tmp_path_factory, worker_id):
    return session_cache_dir(tmp_path_factory, worker_id)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_requant_programs_match_fsim_and_the_cycle_model(seed, rtl_cache_dir):
    program = random_program(REQUANT, seed)
    assert {"alu.REQUANT.imm", "alu.REQUANT.tensor"} <= coverage(program)
    assert first_divergence(program, rtl_cache_dir) is None


def test_every_control_field_and_reserved_bits_match(rtl_cache_dir):
    """The corpus-style program of every shift, ReLU and rounding combination, both forms, with
    reserved bits 15:7 set: the RTL ignores them as fsim does."""
    for tensor in (False, True):
        program, _, _ = _requant_program(tensor, CONTROLS)
        noisy = dataclasses.replace(program, insns=[
            dataclasses.replace(i, imm=i.imm | -0x80) if isinstance(i, AluInsn) else i for i in program.insns])
        assert first_divergence(noisy, rtl_cache_dir) is None


@pytest.mark.parametrize("config, expected", [(REQUANT, 127), (VTAConfig.small(), 0)], ids=["on", "off"])
def test_the_lane_exists_only_with_the_key(config, expected):
    dut = TensorDatapath(config)
    seen = []

    async def bench(ctx):
        ctx.set(dut.acc_dst, 0x7FFF_FFFF)
        ctx.set(dut.is_alu, 1)
        ctx.set(dut.alu_op, int(AluOp.REQUANT))
        ctx.set(dut.use_imm, 1)
        ctx.set(dut.imm, requant_imm(3))
        await ctx.tick()                    # X1 registers the operands, X2 computes
        seen.append(ctx.get(dut.result) & 0xFFFF_FFFF)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [expected]
