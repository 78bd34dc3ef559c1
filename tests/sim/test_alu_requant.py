"""ALU REQUANT (ALU_REQUANT): its encoding and the errors without the key, its semantics on every
engine (Python and compiled fsim, Python and compiled cycle model) against a reference written
from docs/isa.md, and random programs that use it (fsim == cycle, every engine)."""

import dataclasses
import os

import numpy as np
import pytest

from tests.programs.corpus import alu_reference
from vtakit.errors import ISAError, ProgramError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, MemId, Stage, Uop
from vtakit.runtime import ProgramBuilder
from vtakit.runtime.random_program import coverage, random_program
from vtakit.runtime.replay import run_fresh
from vtakit.sim.machine import requant_op

SMALL = VTAConfig.small()
REQUANT = VTAConfig.small(alu_requant=True)
EDGES = [0, 1, -1, 127, 128, -128, -129, 255, 1 << 30, (1 << 31) - 1, -(1 << 31), 12345, -54321, 1 << 20]


def engines(program, counter: str = "alu_counter"):
    """(DRAM, cycles, ``counter``) of ``program`` on fsim and cycle, compiled and Python engines each."""
    results = {}
    for native in ("1", "0"):
        os.environ["VTAKIT_NATIVE"] = native
        try:
            for backend in ("fsim", "cycle"):
                stats, dram = run_fresh(program, backend)
                results[backend, native] = (dram, stats.cycles, stats.counters[counter])
        finally:
            os.environ.pop("VTAKIT_NATIVE")
    return results


def _requant_program(tensor: bool, controls: list[int], seed: int = 0):
    """ACC rows of edge and random values, one REQUANT per control field (tensor: with an addend
    row), stored; returns the program and the expected int8 output."""
    rng = np.random.default_rng(seed)
    lanes = REQUANT.batch * REQUANT.block_out
    n = len(controls)
    x = np.array(EDGES + rng.integers(-(1 << 31), 1 << 31, 2 * lanes).tolist(), np.int64)[:2 * lanes]
    x = x.reshape(2, REQUANT.batch, REQUANT.block_out)
    y = rng.integers(-(1 << 31), 1 << 31, x.shape)
    y[0].flat[:3] = (1 << 31) - 1, -(1 << 31), -1          # sums that wrap
    b = ProgramBuilder(REQUANT)
    acc = b.array(np.concatenate([np.tile(x, (n, 1, 1)), y]).astype(np.int32), name="acc")
    out = b.empty((2 * n, REQUANT.batch, REQUANT.block_out), np.int8, name="out")
    b.load_2d(MemId.ACC, 0, acc, 1, 2 * n + 2)
    expected = []
    for k, control in enumerate(controls):
        uops = [Uop(2 * k + r, 2 * n + r) for r in range(2)]
        b.alu(AluOp.REQUANT, uops, imm=control, use_imm=not tensor)
        expected.append(alu_reference(AluOp.REQUANT, x, y if tensor else 0, control))
    b.dep_push(Stage.COMPUTE, Stage.STORE)
    b.dep_pop(Stage.COMPUTE, Stage.STORE)
    b.store_2d(0, out, 1, 2 * n)
    return b.finish(), out.phys_addr, np.concatenate(expected).astype(np.int8)


CONTROLS = [isa.requant_imm(s, relu, rnd) for s in (0, 1, 7, 16, 31) for relu in (False, True) for rnd in (False, True)]


@pytest.mark.parametrize("tensor", [False, True], ids=["imm", "tensor"])
def test_requant_semantics_on_every_engine(tensor):
    program, out, expected = _requant_program(tensor, CONTROLS)
    results = engines(program)
    for (backend, native), (dram, cycles, alu) in results.items():
        got = dram[out:out + expected.size].view(np.int8)
        np.testing.assert_array_equal(got, expected.reshape(-1), err_msg=f"{backend} native={native}")
        assert alu == 2 * len(CONTROLS)
    assert results["cycle", "1"][1] == results["cycle", "0"][1]
    from vtakit.sim.backend import Launch
    from vtakit.sim.cycle import simulate
    dram = program.initial_dram(1 << 16)
    assert simulate(Launch(REQUANT, list(program.insns), dram, 0x8000)).engine == "native"   # the core takes it


def test_reserved_bits_are_ignored_by_every_engine():
    """Bits 15:7 of the control field carry no meaning (the builder refuses them; a program written
    by hand may hold them): every engine computes as if they were zero."""
    program, out, expected = _requant_program(True, CONTROLS[:6], seed=1)
    noisy = dataclasses.replace(program, insns=[
        dataclasses.replace(i, imm=i.imm | -0x80) if isinstance(i, AluInsn) else i for i in program.insns])
    assert any(isinstance(i, AluInsn) and i.imm < 0 for i in noisy.insns)
    for (backend, native), (dram, _, _) in engines(noisy).items():
        np.testing.assert_array_equal(dram[out:out + expected.size].view(np.int8), expected.reshape(-1),
                                      err_msg=f"{backend} native={native}")


def test_requant_op_matches_the_reference_and_ignores_reserved_bits():
    rng = np.random.default_rng(4)
    a = np.array(EDGES * 3, np.int64)
    addend = rng.integers(-(1 << 31), 1 << 31, a.size)
    for control in CONTROLS + [0x7F | 0xFF80, -1, -32768]:
        for b in (None, addend):
            want = alu_reference(AluOp.REQUANT, a, 0 if b is None else b, control)
            np.testing.assert_array_equal(requant_op(a.astype(np.int32), b, control), want)
    # the rounding adds 2**(s-1) before the shift: ties round up, the sum wraps
    assert requant_op(np.array([5, -5, 6, -6]), None, isa.requant_imm(1, rounding=True)).tolist() == [3, -2, 3, -3]
    assert requant_op(np.array([(1 << 31) - 1]), np.array([1]), isa.requant_imm(24)).tolist() == [-128]


def test_requant_needs_the_key_everywhere():
    insn = AluInsn(alu_opcode=AluOp.REQUANT, use_imm=True, imm=3)
    with pytest.raises(ISAError, match=r"instruction 0: ALU REQUANT needs a configuration with ALU_REQUANT "
                                       r"enabled \(1x4_i8w8a32_10_9_10_11 has ALU_REQUANT=false\)"):
        isa.encode([insn], SMALL)
    with pytest.raises(ISAError, match="instruction 1: ALU REQUANT needs .*ALU_REQUANT=false"):
        isa.decode(isa.encode([FinishInsn(), insn], REQUANT), SMALL)
    assert isa.decode(isa.encode([insn], REQUANT), REQUANT) == [insn]
    with pytest.raises(ProgramError, match="ALU REQUANT needs a configuration with ALU_REQUANT enabled"):
        ProgramBuilder(SMALL).alu(AluOp.REQUANT, [Uop(0)], imm=3)
    from vtakit.sim import fsim
    for native in ("1", "0"):
        os.environ["VTAKIT_NATIVE"] = native
        try:
            with pytest.raises(ProgramError, match=r"instruction 0 \(compute: ALU REQUANT .*\): ALU REQUANT needs"):
                fsim.simulate(SMALL, [insn, FinishInsn()], np.zeros(64, np.uint8))
        finally:
            os.environ.pop("VTAKIT_NATIVE")


@pytest.mark.parametrize("call, message", [
    (lambda b: b.alu(AluOp.REQUANT, [Uop(0)]), r"REQUANT needs its control field as imm .* got None"),
    (lambda b: b.alu(AluOp.REQUANT, [Uop(0)], imm=0x80), r"bits 15:7 zero\), got 128"),
    (lambda b: b.alu(AluOp.REQUANT, [Uop(0)], imm=-1, use_imm=False), r"got -1"),
    (lambda b: b.alu(AluOp.ADD, [Uop(0)], imm=3, use_imm=False), r"ALU ADD tensor \(use_imm=False\) takes no imm"),
    (lambda b: b.alu(AluOp.ADD, [Uop(0)], use_imm=True), r"ALU ADD with use_imm needs an imm"),
])
def test_builder_rejects_bad_requant_fields(call, message):
    with pytest.raises(ProgramError, match=message):
        call(ProgramBuilder(REQUANT))


@pytest.mark.parametrize("shift", [-1, 32, 2.0, True])
def test_requant_imm_rejects_shifts_it_cannot_encode(shift):
    with pytest.raises(ISAError, match=r"REQUANT shift .* must be an int in \[0, 31\]"):
        isa.requant_imm(shift)


def test_requant_disassembles_with_its_control_bits():
    insn = AluInsn(alu_opcode=AluOp.REQUANT, use_imm=False, imm=isa.requant_imm(9, relu=True, rounding=True))
    assert isa.disasm(insn).endswith("shift=9 relu round tensor")
    assert isa.requant_fields(0xFF80 | 0x27) == (7, True, False)


def test_random_programs_use_requant_and_agree_acrossengines():
    features = set()
    for seed in range(12):
        program = random_program(REQUANT, seed)
        features |= coverage(program)
        results = engines(program)
        (dram, cycles, _), *others = results.values()
        for key, (other, other_cycles, _) in results.items():
            np.testing.assert_array_equal(other, dram, err_msg=f"seed {seed} {key}")
        assert results["cycle", "1"][1] == results["cycle", "0"][1], seed
    assert {"alu.REQUANT.imm", "alu.REQUANT.tensor"} <= features
    assert not any("REQUANT" in f for s in range(12) for f in coverage(random_program(SMALL, s)))
