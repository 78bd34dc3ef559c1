"""ISA: round trips across configurations, VTA's exact bit positions, the fast encoders pinned to the
reference one, and rejection of bad values."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vtakit.errors import ISAError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop

CONFIGS = [VTAConfig(), VTAConfig.small(),
           VTAConfig(log_batch=1, log_block_in=3, log_block_out=3, log_uop_buff_size=12, log_inp_buff_size=13,
                     log_wgt_buff_size=14, log_acc_buff_size=14, alu_mul=True, alu_requant=True)]


def _uint(width):
    return st.integers(0, (1 << width) - 1)


_ENUM_FIELDS = {"memory_type": list(MemId), "alu_opcode": list(AluOp)}
_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next", "reset_reg", "use_imm")


def instructions(config):
    """Every instruction kind, each field drawn over its full width for ``config``."""
    def build(cls, kind, **fixed):
        kwargs = {}
        for f in isa.layout(kind, config):
            if f.name in _ENUM_FIELDS:   # REQUANT encodes only with ALU_REQUANT
                kwargs[f.name] = st.sampled_from([v for v in _ENUM_FIELDS[f.name]
                                                  if v != AluOp.REQUANT or config.alu_requant])
            elif f.name in _FLAGS:
                kwargs[f.name] = st.booleans()
            elif f.signed:
                kwargs[f.name] = st.integers(-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1)
            else:
                kwargs[f.name] = _uint(f.width)
        kwargs.update(fixed)
        return st.builds(cls, **kwargs)

    mem = st.one_of(*(build(MemInsn, op, opcode=st.just(op)) for op in (Opcode.LOAD, Opcode.STORE)))
    return st.one_of(mem, *(build(cls, op, opcode=st.just(op)) for cls, op in
                            ((GemmInsn, Opcode.GEMM), (AluInsn, Opcode.ALU), (FinishInsn, Opcode.FINISH))))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.model)
def test_round_trip(config):
    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(st.lists(instructions(config), min_size=1, max_size=12))
    def check(insns):
        data = isa.encode(insns, config)
        assert len(data) == 16 * len(insns)
        assert isa.decode(data, config) == insns

    check()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.model)
def test_uop_round_trip(config):
    fields = {f.name: f.width for f in isa.uop_layout(config)}

    @settings(max_examples=100, deadline=None, derandomize=True)
    @given(st.lists(st.builds(Uop, _uint(fields["dst_idx"]), _uint(fields["src_idx"]), _uint(fields["wgt_idx"])),
                    max_size=20))
    def check(uops):
        data = isa.encode_uops(uops, config)
        assert len(data) == 4 * len(uops)
        assert isa.decode_uops(data, config) == uops

    check()


def _word(insn, config=VTAConfig()):
    return int.from_bytes(isa.encode([insn], config), "little")


def test_mem_bit_positions():
    insn = MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, pop_next=True, push_prev=True, sram_base=0x1234,
                   dram_base=0xDEADBEEF, y_size=3, x_size=5, x_stride=0xABCD, y_pad_0=1, y_pad_1=2, x_pad_0=3,
                   x_pad_1=15)
    expected = (0 | 1 << 4 | 1 << 5 | 2 << 7 | 0x1234 << 10 | 0xDEADBEEF << 26 | 3 << 64 | 5 << 80
                | 0xABCD << 96 | 1 << 112 | 2 << 116 | 3 << 120 | 15 << 124)
    assert _word(insn) == expected
    store = MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, pop_prev=True)
    assert _word(store) == 1 | 1 << 3 | 4 << 7 | 1 << 64 | 1 << 80 | 1 << 96


def test_gemm_bit_positions():
    insn = GemmInsn(push_next=True, reset_reg=True, uop_bgn=0x1ABC, uop_end=0x2001, iter_out=0x3FFF, iter_in=5,
                    dst_factor_out=0x7FF, dst_factor_in=1, src_factor_out=2, src_factor_in=0x400,
                    wgt_factor_out=3, wgt_factor_in=0x3FF)
    expected = (2 | 1 << 6 | 1 << 7 | 0x1ABC << 8 | 0x2001 << 21 | 0x3FFF << 35 | 5 << 49
                | 0x7FF << 64 | 1 << 75 | 2 << 86 | 0x400 << 97 | 3 << 108 | 0x3FF << 118)
    assert _word(insn) == expected


def test_alu_bit_positions():
    insn = AluInsn(pop_prev=True, uop_bgn=1, uop_end=2, iter_out=3, iter_in=4, dst_factor_out=5, dst_factor_in=6,
                   src_factor_out=7, src_factor_in=8, alu_opcode=AluOp.SHR, use_imm=True, imm=-2)
    expected = (4 | 1 << 3 | 1 << 8 | 2 << 21 | 3 << 35 | 4 << 49 | 5 << 64 | 6 << 75 | 7 << 86 | 8 << 97
                | 3 << 108 | 1 << 111 | 0xFFFE << 112)
    assert _word(insn) == expected
    assert _word(FinishInsn(pop_prev=True, pop_next=True)) == 3 | 1 << 3 | 1 << 4


def test_uop_bit_positions():
    data = isa.encode_uops([Uop(0x7FF, 0x155, 0x3FF)], VTAConfig())
    assert int.from_bytes(data, "little") == 0x7FF | 0x155 << 11 | 0x3FF << 22


@pytest.mark.parametrize("insn, match", [
    (MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, y_pad_0=16), r"y_pad_0=16 does not fit its 4-bit field"),
    (MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, dram_base=1 << 32), r"dram_base=4294967296 .* 32-bit"),
    (GemmInsn(iter_out=1 << 14), r"iter_out=16384 does not fit its 14-bit field"),
    (GemmInsn(wgt_factor_in=-1), r"wgt_factor_in=-1 does not fit its 10-bit"),
    (AluInsn(imm=1 << 15), r"imm=32768 does not fit its 16-bit signed field \(range -32768..32767\)"),
])
def test_value_that_does_not_fit(insn, match):
    with pytest.raises(ISAError, match=match):
        isa.encode([FinishInsn(), insn], VTAConfig())


def test_small_config_field_widths():
    small = VTAConfig.small()
    with pytest.raises(ISAError, match=r"instruction 0: uop_bgn=256 does not fit its 8-bit field"):
        isa.encode([GemmInsn(uop_bgn=256, uop_end=257)], small)
    with pytest.raises(ISAError, match=r"micro-op 1: dst_idx=128 does not fit its 7-bit field"):
        isa.encode_uops([Uop(0), Uop(128)], small)


def test_decode_rejects_malformed():
    config = VTAConfig()
    with pytest.raises(ISAError, match="not a multiple of 16"):
        isa.decode(b"\0" * 17, config)
    with pytest.raises(ISAError, match="instruction 1: opcode 6 is not one of"):
        isa.decode(isa.encode([FinishInsn()], config) + (6).to_bytes(16, "little"), config)
    with pytest.raises(ISAError, match="memory_type=7 is not one of"):
        isa.decode((7 << 7).to_bytes(16, "little"), config)
    with pytest.raises(ISAError, match="alu_opcode=6 is not one of"):
        isa.decode((4 | 6 << 108).to_bytes(16, "little"), config)
    with pytest.raises(ISAError, match="not a multiple of 4"):
        isa.decode_uops(b"\0" * 3, config)
    with pytest.raises(ISAError, match="is not a VTA instruction"):
        isa.encode(["GEMM"], config)


def test_stage_routing_and_disasm():
    load = lambda m: MemInsn(opcode=Opcode.LOAD, memory_type=m)  # noqa: E731
    assert isa.stage_of(load(MemId.INP)) == isa.stage_of(load(MemId.WGT)) == isa.Stage.LOAD
    assert {isa.stage_of(load(m)) for m in (MemId.UOP, MemId.ACC, MemId.ACC_8BIT)} == {isa.Stage.COMPUTE}
    assert isa.stage_of(MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT)) == isa.Stage.STORE
    assert isa.stage_of(GemmInsn()) == isa.stage_of(AluInsn()) == isa.stage_of(FinishInsn()) == isa.Stage.COMPUTE
    assert isa.disasm(AluInsn(alu_opcode=AluOp.MAX, use_imm=True, imm=-3, pop_prev=True)) == \
        "ALU MAX uop=[0,1) iter=(1,1) dst=(0,0) src=(0,0) imm=-3 [pop_prev]"


def test_disasm_of_plain_int_enum_fields():
    """Fields may hold plain ints (the encoder takes them): disassembly names them as the enums would
    (error messages and timelines use it), and shows values no enum has as they are."""
    assert isa.disasm(MemInsn(opcode=1, memory_type=4, x_size=2)) == \
        isa.disasm(MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, x_size=2))
    assert isa.disasm(AluInsn(alu_opcode=1)) == isa.disasm(AluInsn(alu_opcode=AluOp.MAX))
    assert isa.disasm(MemInsn(opcode=Opcode.LOAD, memory_type=7)).startswith("LOAD 7 sram=")


def test_markdown_table_matches_layout():
    text = isa.isa_table_markdown(VTAConfig())
    assert "| 57:26 | dram_base |" in text and "| 127:112 | imm (signed) |" in text
    assert "| 31:22 | wgt_idx |" in text


def test_docs_isa_table_is_current():
    from pathlib import Path
    docs = Path(__file__).resolve().parents[2] / "docs" / "isa.md"
    assert docs.read_text().split("\n", 1)[1] == isa.isa_table_markdown(VTAConfig())


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.model)
def test_fast_encoder_matches_reference(config):
    """The generated encoder takes every well-formed instruction and agrees with the field-table packer."""
    fast = isa._fast_encoder(config)

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(st.lists(instructions(config), min_size=1, max_size=12))
    def check(insns):
        assert fast(insns) is not None            # no silent fallback: the fast path itself is tested
        assert isa.encode(insns, config) == isa._encode_vectorised(insns, config)

    check()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.model)
def test_fast_uop_encoder_matches_reference(config):
    fields = {f.name: f.width for f in isa.uop_layout(config)}
    reference = lambda uops: isa._pack(uops, isa.uop_layout(config), "micro-op", range(len(uops)), 1)[:, 0] \
        .astype("<u4").tobytes()  # noqa: E731

    @settings(max_examples=100, deadline=None, derandomize=True)
    @given(st.lists(st.builds(Uop, _uint(fields["dst_idx"]), _uint(fields["src_idx"]), _uint(fields["wgt_idx"])),
                    max_size=20))
    def check(uops):
        assert isa.encode_uops(uops, config) == reference(uops)

    check()


class _TaggedGemm(GemmInsn):
    """A subclass: not the fast encoder's business, so it takes the reference path."""


def test_unusual_integers_encode_like_plain_ints():
    config = VTAConfig()
    plain = [GemmInsn(uop_bgn=3, uop_end=9, iter_out=7, dst_factor_in=5),
             MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, x_size=4, x_stride=4, pop_prev=True),
             AluInsn(alu_opcode=AluOp.ADD, use_imm=True, imm=-7, uop_end=2)]
    expected = isa.encode(plain, config)
    numpy_ints = [dataclasses.replace(plain[0], uop_end=np.int64(9), iter_out=np.uint16(7)),
                  dataclasses.replace(plain[1], x_size=np.int32(4), pop_prev=np.True_),
                  dataclasses.replace(plain[2], imm=np.int8(-7))]
    assert isa._fast_encoder(config)(numpy_ints) is None     # numpy scalars are not trusted on the fast path ...
    assert isa.encode(numpy_ints, config) == expected         # ... and encode the same on the reference path
    plain_ints = [dataclasses.replace(plain[1], opcode=1, memory_type=4, pop_prev=1)]
    assert isa.encode(plain_ints, config) == expected[16:32]  # enums and bools are ints
    tagged = _TaggedGemm(uop_bgn=3, uop_end=9, iter_out=7, dst_factor_in=5)
    assert isa.encode([tagged], config) == expected[:16]
    assert isa.encode_uops([Uop(np.int64(5), 2, np.uint8(1))], config) == isa.encode_uops([Uop(5, 2, 1)], config)


@pytest.mark.parametrize("insn, match", [
    (GemmInsn(uop_end=2.5), r"instruction 1: uop_end=2.5 is not an integer \(float\)"),
    (MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, x_size=None), r"x_size=None is not an integer"),
    (MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, dram_base=1 << 70), r"dram_base=1180591620717411303424 "
                                                                           r"does not fit its 32-bit field"),
    (GemmInsn(opcode=Opcode.ALU), r"instruction 1: a GemmInsn with opcode <Opcode.ALU: 4>; expected GEMM=2"),
    (MemInsn(opcode=Opcode.FINISH, memory_type=MemId.INP), r"a MemInsn with opcode .*; expected LOAD=0 or STORE=1"),
    (FinishInsn(opcode=9), r"a FinishInsn with opcode 9; expected FINISH=3"),
])
def test_malformed_instruction(insn, match):
    with pytest.raises(ISAError, match=match):
        isa.encode([FinishInsn(), insn], VTAConfig())


def test_malformed_uop():
    with pytest.raises(ISAError, match=r"micro-op 1: src_idx=1.0 is not an integer \(float\)"):
        isa.encode_uops([Uop(0), Uop(0, 1.0)], VTAConfig())
    with pytest.raises(ISAError, match=r"micro-op 0: \(1, 2, 3\) is not a Uop"):
        isa.encode_uops([(1, 2, 3)], VTAConfig())
