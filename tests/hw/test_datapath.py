"""The pipelined GEMM core and the execute stages (GEMM accumulate and vector ALU) against numpy, edge values
included."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from tests.programs.corpus import alu_reference
from vtakit.hw.config import VTAConfig
from vtakit.hw.datapath import GemmPipeline, TensorDatapath
from vtakit.hw.isa import AluOp

CONFIG = VTAConfig.small(alu_mul=True, alu_requant=True)
LANES = CONFIG.batch * CONFIG.block_out
EDGES = np.array([0, 1, -1, 31, 32, -32, -31, 63, 64, 0x7FFFFFFF, -0x80000000, 0x8000, -0x8001, 12345], np.int64)


def _pack(values, bits):
    return sum((int(v) & ((1 << bits) - 1)) << (bits * i) for i, v in enumerate(values))


def _unpack_i32(word):
    lanes = [(word >> (32 * i)) & 0xFFFFFFFF for i in range(LANES)]
    return np.array([v - (1 << 32) if v >> 31 else v for v in lanes], np.int64)


def _run(vectors):
    """Each vector's result: held for a clock edge, so that the ALU's result (computed in X2 from the
    operands registered in X1) and GEMM's (combinational, stage X) can both be read after it."""
    dut = TensorDatapath(CONFIG)
    results = []

    async def bench(ctx):
        for v in vectors:
            for name, value in v.items():
                ctx.set(getattr(dut, name), value)
            await ctx.tick()
            results.append(_unpack_i32(ctx.get(dut.result)))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return results


def _gemm_sums(operands):
    """GemmPipeline fed one (inp, wgt) pair per cycle: the sums that come out ``latency`` cycles later."""
    dut = GemmPipeline(CONFIG)
    sums = []

    async def bench(ctx):
        for cycle in range(len(operands) + dut.latency):
            if cycle < len(operands):
                ctx.set(dut.inp, operands[cycle][0])
                ctx.set(dut.wgt, operands[cycle][1])
            if cycle >= dut.latency:
                sums.append(ctx.get(dut.sums))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return sums


def test_gemm_lanes_match_numpy():
    rng = np.random.default_rng(1)
    vectors, expected, operands = [], [], []
    for trial in range(20):
        inp = rng.integers(-128, 128, (CONFIG.batch, CONFIG.block_in))
        wgt = rng.integers(-128, 128, (CONFIG.block_out, CONFIG.block_in))
        acc = rng.integers(-(1 << 31), 1 << 31, (CONFIG.batch, CONFIG.block_out))
        reset = trial % 5 == 0
        operands.append((_pack(inp.ravel(), 8), _pack(wgt.ravel(), 8)))
        vectors.append({"acc_dst": _pack(acc.ravel(), 32), "is_alu": 0, "reset": reset})
        value = np.zeros(LANES, np.int64) if reset else (acc + inp @ wgt.T).ravel()
        expected.append(((value + (1 << 31)) % (1 << 32)) - (1 << 31))
    for v, sums in zip(vectors, _gemm_sums(operands), strict=True):
        v["sums"] = sums
    for got, want in zip(_run(vectors), expected):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("op", list(AluOp))
@pytest.mark.parametrize("use_imm", [False, True])
def test_alu_lanes_match_reference(op, use_imm):
    rng = np.random.default_rng(int(op) * 2 + use_imm)
    vectors, expected = [], []
    for trial in range(12):
        a = np.concatenate([EDGES, rng.integers(-(1 << 31), 1 << 31, 8)])[trial:trial + LANES]
        control = int(rng.integers(0, 128)) if op == AluOp.REQUANT else 0   # REQUANT: shift, ReLU, rounding
        if use_imm:
            imms = np.concatenate([EDGES[:9], [-(1 << 15), (1 << 15) - 1, 7]])
            imm = control if op == AluOp.REQUANT else int(imms[trial])
            b = np.full(LANES, 0 if op == AluOp.REQUANT else imm)
            operand = {"use_imm": 1, "imm": imm & 0xFFFFFFFF, "acc_src": 0}
        else:
            b = np.concatenate([EDGES[::-1], rng.integers(-(1 << 31), 1 << 31, 8)])[trial:trial + LANES]
            operand = {"use_imm": 0, "imm": control, "acc_src": _pack(b, 32)}
        vectors.append({"acc_dst": _pack(a, 32), "is_alu": 1, "alu_op": int(op), **operand})
        expected.append(alu_reference(op, a, b, control).astype(np.int64))
    for got, want in zip(_run(vectors), expected):
        assert np.array_equal(got, want), (op, got, want)


def test_shr_every_shift_amount():
    """SHR by each of the 64 amounts of the operand's low 6 bits (-32..31: negative shifts left, through
    the shifter's ~s form), tensor form, against the reference."""
    a = np.array([0x7FFFFFFF, -0x80000000, 0x12345678, -3], np.int64)[:LANES]
    vectors, expected = [], []
    for amount in range(-32, 32):
        b = np.array([amount + (k << 6) for k in range(LANES)], np.int64)   # bits above the low 6 are ignored
        vectors.append({"acc_dst": _pack(a, 32), "is_alu": 1, "alu_op": int(AluOp.SHR), "use_imm": 0, "imm": 0,
                        "acc_src": _pack(b, 32)})
        expected.append(alu_reference(AluOp.SHR, a, b, 0).astype(np.int64))
    for got, want in zip(_run(vectors), expected, strict=True):
        assert np.array_equal(got, want), (got, want)
