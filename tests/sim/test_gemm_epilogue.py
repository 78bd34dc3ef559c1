"""GEMM's epilogue bit (BIAS_PRELOAD, GEMM_OUT_REQUANT): the configuration keys, the encoding (VTA's
bits when the keys are off), the errors without a key, the semantics on every engine (Python and
compiled fsim, Python and compiled cycle model) against a numpy reference written from docs/isa.md,
and random programs that use both forms and the requant register (every engine agrees)."""

import dataclasses

import numpy as np
import pytest

from tests.programs.corpus import alu_reference
from tests.sim.test_alu_requant import engines
from vtakit.errors import ConfigError, ISAError, ProgramError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, GemmInsn, MemId, Stage, Uop
from vtakit.runtime import ProgramBuilder
from vtakit.runtime.random_program import coverage, random_program
from vtakit.sim.machine import Machine

SMALL = VTAConfig.small(alu_requant=True)
BOTH = SMALL.replace(bias_preload=True, gemm_out_requant=True)
WRAP = 1 << 32


# ---------------------------------------------------------------------------- configuration and encoding
def test_keys_default_off_round_trip_and_validate():
    assert not VTAConfig().bias_preload and not VTAConfig().gemm_out_requant
    raw = BOTH.to_dict()
    assert raw["BIAS_PRELOAD"] is True and raw["GEMM_OUT_REQUANT"] is True
    assert VTAConfig.from_dict(raw) == BOTH
    with pytest.raises(ConfigError, match="GEMM_OUT_REQUANT=True needs ALU_REQUANT=True"):
        VTAConfig.small(gemm_out_requant=True)
    with pytest.raises(ConfigError, match="BIAS_PRELOAD=1 must be of type bool"):
        VTAConfig(BIAS_PRELOAD=1)


def _gemms() -> list[GemmInsn]:
    return [GemmInsn(reset_reg=r, uop_bgn=3, uop_end=7, iter_out=5, iter_in=2, dst_factor_out=9, src_factor_out=4,
                     wgt_factor_in=1, pop_prev=True) for r in (False, True)]


@pytest.mark.parametrize("config", [VTAConfig(), VTAConfig.small(),
                                    VTAConfig(log_uop_buff_size=12, log_batch=1)], ids=lambda c: c.model)
def test_the_bit_is_free_and_plain_gemms_keep_vtas_bits(config):
    """Bit 63 lies above every word-0 field on any encodable configuration; with the keys on, a GEMM
    without the bit encodes exactly as VTA's, and the bit decodes back."""
    on = config.replace(alu_requant=True, bias_preload=True, gemm_out_requant=True)
    word0 = [f for f in isa.layout(isa.Opcode.GEMM, on) if f.word == 0]
    assert word0[-1].name == "epilogue" and word0[-1].offset == 63
    assert all(f.offset + f.width <= 63 for f in word0[:-1])
    assert isa.encode(_gemms(), on) == isa.encode(_gemms(), config)
    flagged = [dataclasses.replace(g, epilogue=True) for g in _gemms()]
    data = isa.encode(flagged, on)
    assert isa._fast_encoder(on)(flagged) is not None   # the generated encoder takes them (no fallback)
    assert isa.decode(data, on) == flagged
    words = np.frombuffer(data, "<u8").reshape(-1, 2)
    assert all(int(w) >> 63 == 1 for w in words[:, 0])
    assert isa.decode(data, config) == _gemms()   # VTA ignores the bit


def test_each_form_needs_its_key():
    bias, requant = (dataclasses.replace(g, epilogue=True) for g in reversed(_gemms()))
    only_bias = SMALL.replace(bias_preload=True)
    only_requant = SMALL.replace(gemm_out_requant=True)
    isa.encode([bias], only_bias)
    isa.encode([requant], only_requant)
    with pytest.raises(ISAError, match="GEMM_OUT_REQUANT enabled"):
        isa.encode([requant], only_bias)
    with pytest.raises(ISAError, match="BIAS_PRELOAD enabled"):
        isa.encode([bias], only_requant)
    with pytest.raises(ISAError, match="BIAS_PRELOAD enabled"):
        isa.encode([bias], SMALL)
    with pytest.raises(ISAError, match="GEMM_OUT_REQUANT enabled"):
        isa.decode(isa.encode([requant], BOTH), only_bias)
    with pytest.raises(ProgramError, match="BIAS_PRELOAD enabled"):
        Machine(SMALL, np.zeros(64, np.uint8)).apply(bias)
    with pytest.raises(ProgramError, match="GEMM_OUT_REQUANT enabled"):
        ProgramBuilder(only_bias).gemm([Uop(0)], epilogue=True)
    assert "bias" in isa.disasm(bias) and "requant-out" in isa.disasm(requant)


# ---------------------------------------------------------------------------- semantics
def _epilogue_program(control: int, seed: int = 0):
    """Bias rows in ACC, a bias reset (in place over an overlapping range too: micro-op order), GEMMs
    with the requantising write-back after a register set, stored; returns the program and the
    expected int8 output rows."""
    c = BOTH
    rng = np.random.default_rng(seed)
    lanes = (c.batch, c.block_out)
    bias = rng.integers(-(1 << 31), 1 << 31, (4, *lanes)).astype(np.int32)
    bias[0].flat[:2] = (1 << 31) - 1, -(1 << 31)            # sums that wrap
    x = rng.integers(-128, 128, (2, c.batch, c.block_in)).astype(np.int8)
    w = rng.integers(-128, 128, (2, c.block_out, c.block_in)).astype(np.int8)
    b = ProgramBuilder(c)
    acc = b.array(bias, name="bias")
    inp = b.array(x, name="inp")
    wgt = b.array(w, name="wgt")
    out = b.empty((8, *lanes), np.int8, name="out")
    b.load_2d(MemId.ACC, 0, acc, 1, 4)
    # bias reset of entries 4..11 from entries (0..3) twice: src factors index ACC
    b.gemm([Uop(4, 0), Uop(5, 1)], iter_out=2, iter_in=2, dst_factor=(4, 2), src_factor=(2, 0), reset=True,
           epilogue=True)
    b.gemm([Uop(1, 0)], reset=True, epilogue=True)          # in place: acc[1] = acc[0]
    b.load_2d(MemId.INP, 0, inp, 1, 2)
    b.load_2d(MemId.WGT, 0, wgt, 1, 2)
    b.dep_push(Stage.LOAD, Stage.COMPUTE)
    b.dep_pop(Stage.LOAD, Stage.COMPUTE)
    b.set_requant(control)
    # entries 4..11 accumulate two products each; OUT gets the requantised sums
    b.gemm([Uop(4, 0, 0), Uop(4, 1, 1)], iter_out=8, dst_factor=(1, 0), epilogue=True)
    b.dep_push(Stage.COMPUTE, Stage.STORE)
    b.dep_pop(Stage.COMPUTE, Stage.STORE)
    b.store_2d(4, out, 1, 8)
    program = b.finish()
    # the reference, from docs/isa.md
    a = np.zeros((12, *lanes), np.int64)
    a[:4] = bias
    for i in range(2):
        for j in range(2):
            for k, (d, s) in enumerate(((4, 0), (5, 1))):
                a[d + 4 * i + 2 * j] = a[s + 2 * i]
    a[1] = a[0]
    dot = [x[k].astype(np.int64) @ w[k].astype(np.int64).T for k in range(2)]
    for i in range(8):
        a[4 + i] = a[4 + i] + dot[0] + dot[1]
    a = (a + (1 << 31)) % WRAP - (1 << 31)
    return program, out.phys_addr, alu_reference(AluOp.REQUANT, a[4:], 0, control).astype(np.int8)


@pytest.mark.parametrize("control", [isa.requant_imm(0), isa.requant_imm(9, True, True), isa.requant_imm(31, False, True),
                                     isa.requant_imm(4, True)], ids=str)
def test_bias_reset_and_requantising_write_back_on_every_engine(control):
    program, out, expected = _epilogue_program(control)
    results = engines(program, "gemm_counter")
    for (backend, native), (dram, _, gemms) in results.items():
        got = dram[out:out + expected.size].view(np.int8).reshape(expected.shape)
        np.testing.assert_array_equal(got, expected, err_msg=f"{backend} native={native}")
        assert gemms == 16   # resets, bias resets included, are not counted
    assert results["cycle", "1"][1] == results["cycle", "0"][1]


def test_register_is_set_by_every_requant_and_starts_at_zero():
    """A REQUANT with micro-ops sets the register too; before any REQUANT it is 0 (clip(acc, -128, 127))."""
    m = Machine(BOTH, np.zeros(1 << 12, np.uint8))
    assert m.requant == 0
    m.write_sram("acc", 0, np.full((2, BOTH.batch, BOTH.block_out), 300, np.int32))
    m.write_sram("inp", 0, np.zeros((1, BOTH.batch, BOTH.block_in), np.int8))
    m.write_sram("wgt", 0, np.zeros((1, BOTH.block_out, BOTH.block_in), np.int8))
    m.write_sram("uop", 0, np.array([[0, 0, 0], [1, 0, 0]]))
    m.apply(GemmInsn(epilogue=True, uop_end=1))
    assert (m.out[0] == 127).all() and (m.acc[0] == 300).all()
    m.apply(AluInsn(alu_opcode=AluOp.REQUANT, use_imm=True, imm=isa.requant_imm(2) | -0x80, uop_bgn=1, uop_end=2))
    assert m.requant == 2
    m.apply(GemmInsn(epilogue=True, uop_end=1))
    assert (m.out[0] == 75).all()


# ---------------------------------------------------------------------------- random programs
@pytest.mark.parametrize("config", [BOTH, SMALL.replace(bias_preload=True), SMALL.replace(gemm_out_requant=True),
                                    VTAConfig.small(bias_preload=True, acc_read_ports=2)], ids=str)
def test_random_programs_agree_on_every_engine(config):
    features = set()
    for seed in range(12):
        program = random_program(config, seed)
        features |= coverage(program)
        results = engines(program, "gemm_counter")
        reference = results["fsim", "0"][0]
        for key, (dram, _, _) in results.items():
            assert np.array_equal(dram, reference), (seed, key)
        assert results["cycle", "1"][1] == results["cycle", "0"][1], seed
    wanted = ({"gemm.bias"} if config.bias_preload else set()) | (
        {"gemm.requant_out", "alu.REQUANT.set"} if config.gemm_out_requant else set())
    assert wanted <= features
