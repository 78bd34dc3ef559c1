"""The machine's per-instruction data effects against naive Python loops written from docs/architecture.md §2.

Hypothesis draws instructions over every field that matters (index factors, aliasing micro-ops,
padding, strides); the references below walk the loops one element at a time.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.programs.corpus import alu_reference
from vtakit.errors import MemoryAccessError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, GemmInsn, MemId, MemInsn, Opcode, Uop
from vtakit.sim.machine import Machine

SMALL = VTAConfig.small(alu_mul=True, alu_requant=True)
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


def _machine(config=SMALL, dram_size=1 << 14, seed=0):
    """A machine whose SRAMs all hold random, initialised contents."""
    rng = np.random.default_rng(seed)
    dram = rng.integers(0, 256, dram_size, dtype=np.uint8)
    m = Machine(config, dram)
    m.write_sram("inp", 0, rng.integers(-128, 128, m.inp.shape))
    m.write_sram("wgt", 0, rng.integers(-128, 128, m.wgt.shape))
    m.write_sram("acc", 0, rng.integers(-(1 << 31), 1 << 31, m.acc.shape, dtype=np.int64))
    m.write_sram("out", 0, rng.integers(-128, 128, m.out.shape))
    m.write_sram("uop", 0, np.zeros(m.uop.shape, dtype=np.int64))
    return m


def _wrap32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _set_uops(m, uops):
    m.write_sram("uop", 0, np.array([(u.dst_idx, u.src_idx, u.wgt_idx) for u in uops]))


uop_fields = st.builds(Uop, st.integers(0, 20), st.integers(0, 20), st.integers(0, 10))
loop = dict(iter_out=st.integers(1, 4), iter_in=st.integers(1, 4), dst_factor_out=st.integers(0, 8),
            dst_factor_in=st.integers(0, 8), src_factor_out=st.integers(0, 8), src_factor_in=st.integers(0, 8))


GEMM_ARGS = dict(uops=st.lists(uop_fields, min_size=1, max_size=4), reset=st.booleans(),
                 wgt_out=st.integers(0, 8), wgt_in=st.integers(0, 8), data=st.data())


def check_gemm(uops, reset, wgt_out, wgt_in, data):
    """One GEMM on random state equals the naive loop."""
    fields = {k: data.draw(v, label=k) for k, v in loop.items()}
    insn = GemmInsn(uop_bgn=0, uop_end=len(uops), reset_reg=reset, wgt_factor_out=wgt_out, wgt_factor_in=wgt_in,
                    **fields)
    m = _machine(seed=len(uops))
    _set_uops(m, uops)
    acc = m.acc.astype(np.int64).copy()
    out = m.out.copy()
    for i in range(insn.iter_out):
        for j in range(insn.iter_in):
            for u in uops:
                d = u.dst_idx + i * insn.dst_factor_out + j * insn.dst_factor_in
                s = u.src_idx + i * insn.src_factor_out + j * insn.src_factor_in
                w = u.wgt_idx + i * wgt_out + j * wgt_in
                for b in range(SMALL.batch):
                    for o in range(SMALL.block_out):
                        if reset:
                            acc[d, b, o] = 0
                        else:
                            dot = sum(int(m.inp[s, b, k]) * int(m.wgt[w, o, k]) for k in range(SMALL.block_in))
                            acc[d, b, o] = _wrap32(int(acc[d, b, o]) + dot)
                        out[d, b, o] = np.int64(acc[d, b, o]).astype(np.int8)
    m.gemm(insn)
    assert np.array_equal(m.acc, acc.astype(np.int32))
    assert np.array_equal(m.out, out)
    assert m.counters["gemm_counter"] == (0 if reset else insn.iter_out * insn.iter_in * len(uops))


test_gemm_matches_naive_loop = SETTINGS(given(**GEMM_ARGS)(check_gemm))


ALU_ARGS = dict(uops=st.lists(st.builds(Uop, st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=4),
                op=st.sampled_from(list(AluOp)), use_imm=st.booleans(),
                imm=st.integers(-(1 << 15), (1 << 15) - 1), data=st.data())


def check_alu(uops, op, use_imm, imm, data):
    """Micro-ops take effect strictly in order, including when destinations and sources alias."""
    fields = {k: data.draw(st.integers(0, 3) if "factor" in k else v, label=k) for k, v in loop.items()}
    insn = AluInsn(alu_opcode=op, use_imm=use_imm, imm=imm, uop_bgn=0, uop_end=len(uops), **fields)
    m = _machine(seed=7)
    _set_uops(m, uops)
    acc = m.acc.copy()
    out = m.out.copy()
    for i in range(insn.iter_out):
        for j in range(insn.iter_in):
            for u in uops:
                d = u.dst_idx + i * insn.dst_factor_out + j * insn.dst_factor_in
                s = u.src_idx + i * insn.src_factor_out + j * insn.src_factor_in
                if op == AluOp.REQUANT:   # the addend (0 in the immediate form); imm is the control field
                    acc[d] = alu_reference(op, acc[d], 0 if use_imm else acc[s], imm)
                else:
                    acc[d] = alu_reference(op, acc[d], imm if use_imm else acc[s])
                out[d] = acc[d].astype(np.int8)
    m.alu(insn)
    assert np.array_equal(m.acc, acc)
    assert np.array_equal(m.out, out)
    assert m.counters["alu_counter"] == insn.iter_out * insn.iter_in * len(uops)


test_alu_matches_naive_sequential_loop = SETTINGS(given(**ALU_ARGS)(check_alu))


def test_alu_with_many_aliasing_micro_ops_matches_sequential_loop():
    """A max-pool-like reduction (repeated dst, src walking over earlier dsts) over a long loop."""
    m = _machine(seed=3)
    _set_uops(m, [Uop(0, 1), Uop(1, 0), Uop(2, 2)])
    insn = AluInsn(alu_opcode=AluOp.ADD, uop_bgn=0, uop_end=3, iter_out=20, iter_in=5, dst_factor_out=3,
                   dst_factor_in=0, src_factor_out=2, src_factor_in=1)
    acc = m.acc.copy()
    for i in range(20):
        for j in range(5):
            for d0, s0 in ((0, 1), (1, 0), (2, 2)):
                d, s = d0 + 3 * i, s0 + 2 * i + j
                acc[d] = alu_reference(AluOp.ADD, acc[d], acc[s])
    m.alu(insn)
    assert np.array_equal(m.acc, acc)


@pytest.mark.parametrize("shift, expected", [
    (0, lambda x: x), (3, lambda x: x >> 3), (31, lambda x: x >> 31),
    (-1, lambda x: x << 1), (-31, lambda x: x << 31), (-32, lambda x: 0),
    (32, lambda x: 0),            # low 6 bits 100000 = -32: left by 32
    (33, lambda x: x << 31),      # 100001 = -31
    (63, lambda x: x << 1),       # 111111 = -1
    (64, lambda x: x),            # 000000
    (-40, lambda x: x >> 24),     # -40 & 63 = 24
    (100, lambda x: x << 28),     # 100 & 63 = 36 -> -28
])
def test_shift_amount_is_low_six_bits_signed(shift, expected):
    """SHR: s = low 6 bits of the operand, signed; s >= 0 arithmetic right, s < 0 left; wrapped to 32 bits."""
    values = np.array([-(1 << 31), -12345678, -1, 0, 1, 0x1234567, (1 << 31) - 1], dtype=np.int64)
    lanes = SMALL.batch * SMALL.block_out
    for use_imm in (True, False):
        m = _machine(seed=1)
        _set_uops(m, [Uop(0, 10)])
        m.acc[:len(values)] = np.repeat(values[:, None], lanes, axis=1).reshape(-1, SMALL.batch, SMALL.block_out)
        m.acc[10:10 + len(values)] = shift
        insn = AluInsn(alu_opcode=AluOp.SHR, uop_end=1, iter_out=len(values), dst_factor_out=1, src_factor_out=1,
                       use_imm=use_imm, imm=shift if use_imm and -(1 << 15) <= shift < 1 << 15 else 0)
        m.alu(insn)
        want = [_wrap32(int(expected(int(v))) & 0xFFFFFFFF) for v in values]
        assert m.acc[:len(values), 0, 0].tolist() == want, (shift, use_imm)


@SETTINGS
@given(mem=st.sampled_from([MemId.INP, MemId.WGT, MemId.ACC, MemId.ACC_8BIT, MemId.UOP]),
       y=st.integers(0, 3), x=st.integers(1, 3), extra_stride=st.integers(-1, 2),
       pads=st.tuples(*[st.integers(0, 3)] * 4), sram=st.integers(0, 8), dram=st.integers(0, 20))
def test_load_matches_naive_loop(mem, y, x, extra_stride, pads, sram, dram):
    m = _machine(seed=5)
    config = SMALL
    stride = max(0, x + extra_stride)
    spec = {MemId.INP: ("inp", config.inp_elem_bytes), MemId.WGT: ("wgt", config.wgt_elem_bytes),
            MemId.ACC: ("acc", config.acc_elem_bytes), MemId.ACC_8BIT: ("acc", config.acc8_elem_bytes),
            MemId.UOP: ("uop", 4)}[mem]
    name, elem = spec
    sram_state = getattr(m, name)
    insn = MemInsn(opcode=Opcode.LOAD, memory_type=mem, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                   x_stride=stride, y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2], x_pad_1=pads[3])
    if sram + (pads[0] + y + pads[1]) * (pads[2] + x + pads[3]) > len(sram_state):
        with pytest.raises(MemoryAccessError, match=f"{name.upper()} entries .* out of range"):
            m.apply(insn)
        return
    expected = sram_state.copy()
    entry = sram
    for row in range(-pads[0], y + pads[1]):
        for col in range(-pads[2], x + pads[3]):
            if 0 <= row < y and 0 <= col < x:
                addr = (dram + row * stride + col) * elem
                raw = m.dram[addr:addr + elem]
                if mem == MemId.UOP:
                    u = isa.decode_uops(raw.tobytes(), config)[0]
                    value = [u.dst_idx, u.src_idx, u.wgt_idx]
                elif mem == MemId.ACC:
                    value = raw.view("<i4").reshape(sram_state.shape[1:])
                else:
                    value = raw.view(np.int8).reshape(sram_state.shape[1:])   # ACC_8BIT: sign-extended by assignment
                expected[entry] = value
            else:
                expected[entry] = 0
            entry += 1
    m.apply(insn)
    assert np.array_equal(sram_state, expected)
    counter = {"inp": "inp_load_nbytes", "wgt": "wgt_load_nbytes", "acc": "acc_load_nbytes",
               "uop": "uop_load_nbytes"}[name]
    per_elem = config.acc_elem_bytes if name == "acc" else elem
    assert m.counters[counter] == x * y * per_elem


@SETTINGS
@given(y=st.integers(1, 4), x=st.integers(1, 4), extra_stride=st.integers(-2, 2), sram=st.integers(0, 8),
       dram=st.integers(0, 30))
def test_store_matches_naive_loop(y, x, extra_stride, sram, dram):
    """STORE copies OUT row by row; with a stride shorter than a row, later rows overwrite earlier ones."""
    m = _machine(seed=9)
    stride = max(0, x + extra_stride)
    elem = SMALL.out_elem_bytes
    expected = m.dram.copy()
    for row in range(y):
        for col in range(x):
            addr = (dram + row * stride + col) * elem
            expected[addr:addr + elem] = m.out[sram + row * x + col].reshape(-1).view(np.uint8)
    m.apply(MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=sram, dram_base=dram, y_size=y,
                    x_size=x, x_stride=stride))
    assert np.array_equal(m.dram, expected)
    assert m.counters["out_store_nbytes"] == x * y * elem


def test_acc8_load_sign_extends_into_full_32_bits():
    config = VTAConfig.small()
    values = np.array([-128, -1, 0, 127], dtype=np.int8)
    dram = np.zeros(64, dtype=np.uint8)
    dram[:4] = values.view(np.uint8)
    m = Machine(config, dram)
    m.apply(MemInsn(opcode=Opcode.LOAD, memory_type=MemId.ACC_8BIT, sram_base=2, dram_base=0, y_size=1, x_size=1))
    assert m.acc[2, 0].tolist() == [-128, -1, 0, 127]
    assert m.counters["acc_load_nbytes"] == config.acc_elem_bytes


def test_gemm_reset_writes_zero_to_acc_and_out_and_reads_nothing():
    config = VTAConfig.small()
    m = Machine(config, np.zeros(64, dtype=np.uint8))
    m.write_sram("uop", 0, np.array([(3, 0, 0)]))
    m.apply(GemmInsn(reset_reg=True, uop_end=1, iter_out=2, dst_factor_out=1))   # INP/WGT/ACC never loaded
    assert m.written["acc"][3:5].all() and m.written["out"][3:5].all()
    assert not m.acc[3:5].any() and not m.out[3:5].any()
    assert m.counters["gemm_counter"] == 0


def test_alu_immediate_does_not_read_src_and_writes_out():
    config = VTAConfig.small()
    m = Machine(config, np.zeros(64, dtype=np.uint8))
    m.write_sram("uop", 0, np.array([(0, 50, 0)]))     # src 50 never written: fine with an immediate
    m.write_sram("acc", 0, np.full((1, 1, 4), 300))
    m.apply(AluInsn(alu_opcode=AluOp.ADD, uop_end=1, use_imm=True, imm=-45))
    assert m.acc[0, 0].tolist() == [255] * 4 and m.out[0, 0].tolist() == [-1] * 4
    with pytest.raises(MemoryAccessError, match="ACC entry 50"):
        m.apply(AluInsn(alu_opcode=AluOp.ADD, uop_end=1, use_imm=False), index=4)


def test_load_acc_does_not_write_out():
    config = VTAConfig.small()
    m = Machine(config, np.zeros(256, dtype=np.uint8))
    m.apply(MemInsn(opcode=Opcode.LOAD, memory_type=MemId.ACC, y_size=1, x_size=2))
    assert m.written["acc"][:2].all() and not m.written["out"].any()
    with pytest.raises(MemoryAccessError, match="OUT entry 0"):
        m.apply(MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, dram_base=8, y_size=1, x_size=1), index=2)


def test_large_gemm_uses_the_bincount_path_exactly():
    """Enough repeated destinations to take the large segmented-sum path; int32 wrap-around included."""
    config = VTAConfig()
    m = _machine(config, seed=11)
    m.write_sram("inp", 0, np.full(m.inp.shape, 127))
    m.write_sram("wgt", 0, np.full(m.wgt.shape, -128))
    m.acc[:] = (1 << 31) - 1
    _set_uops(m, [Uop(o, i, o * 64 + i) for i in range(64) for o in range(16)])
    insn = GemmInsn(uop_end=1024, iter_out=8, dst_factor_out=16, src_factor_out=64)
    m.gemm(insn)
    per_dst = 64 * 16 * 127 * -128
    assert set(np.unique(m.acc[:128]).tolist()) == {_wrap32((1 << 31) - 1 + per_dst)}
    assert (m.acc[128:] == (1 << 31) - 1).all()


def test_write_sram_rejects_unknown_buffers_and_ranges():
    m = Machine(VTAConfig.small(), np.zeros(16, dtype=np.uint8))
    with pytest.raises(MemoryAccessError, match=r"'acc' entries \[127, 129\)"):
        m.write_sram("acc", 127, np.zeros((2, 1, 4)))
    with pytest.raises(MemoryAccessError, match=r"'dram' entries"):
        m.write_sram("dram", 0, np.zeros(1))


def test_long_inner_loops_are_split_into_chunks_in_order(monkeypatch):
    """Loops longer than one vectorised chunk give the same result as the naive order (ALU with aliasing)."""
    import vtakit.sim.machine as machine_module

    monkeypatch.setattr(machine_module, "_GEMM_CHUNK", 4)
    m = _machine(seed=21)
    _set_uops(m, [Uop(0, 1), Uop(1, 0)])
    insn = AluInsn(alu_opcode=AluOp.ADD, uop_end=2, iter_out=3, iter_in=5, dst_factor_out=2, dst_factor_in=0,
                   src_factor_out=1, src_factor_in=1)
    acc = m.acc.copy()
    for i in range(3):
        for j in range(5):
            for d0, s0 in ((0, 1), (1, 0)):
                d, s = d0 + 2 * i, s0 + i + j
                acc[d] = alu_reference(AluOp.ADD, acc[d], acc[s])
    m.alu(insn)
    assert np.array_equal(m.acc, acc)
    gemm = _machine(seed=22)
    reference = _machine(seed=22)
    for target in (gemm, reference):
        _set_uops(target, [Uop(0, 1, 2), Uop(1, 0, 3)])
    insn = GemmInsn(uop_end=2, iter_out=3, iter_in=5, dst_factor_out=2, src_factor_in=1, wgt_factor_in=1)
    gemm.gemm(insn)
    monkeypatch.setattr(machine_module, "_GEMM_CHUNK", 1 << 16)
    reference.gemm(insn)
    assert np.array_equal(gemm.acc, reference.acc) and np.array_equal(gemm.out, reference.out)
