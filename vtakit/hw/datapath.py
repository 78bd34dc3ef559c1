"""The execute stage of compute: the GEMM core and the vector ALU, one micro-op per cycle.

A separate component so that it is also a separate fragment of the simulation: pysim re-evaluates
a fragment's combinational logic whenever one of its inputs changes, and keeping the
BATCH x BLOCK_IN x BLOCK_OUT multiply-add tree apart from compute's counters means it is only
recomputed when its operands change.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.mac import lane_terms

__all__ = ["TensorDatapath", "gemm_datapath", "alu_datapath"]


def _tree_sum(terms):
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def gemm_datapath(config: VTAConfig, inp, wgt, acc):
    """acc[b][o] + sum_i inp[b][i] * wgt[o][i] for every lane, wrapped to 32 bits (a list of lanes).

    The products come from :func:`vtakit.hw.mac.lane_terms` (two per DSP48E1 with GEMM_DSP_PACKING)."""
    terms = lane_terms(config, inp, wgt)
    return [(acc.word_select(b * config.block_out + o, 32) + _tree_sum(terms[b][o]))[:32]
            for b in range(config.batch) for o in range(config.block_out)]


def _requant_sum(a, addend, imm):
    """REQUANT's sum (docs/isa.md): a + addend + (2**(s-1) if the rounding bit is set and s > 0), wrapped
    to 32 bits, with s = imm[4:0]."""
    amount = imm[:5]
    rounding = Mux(imm[6] & (amount != 0), (Const(1, 32) << amount) >> 1, 0)
    return (a + addend.as_signed() + rounding)[:32].as_signed()


def _requant_clip(shifted, imm):
    """REQUANT's clip of the shifted sum: to [0 if imm[5] (ReLU) else -128, 127], a comparator pair and its mux."""
    lo = Mux(imm[5], 0, -128)
    return Mux(shifted < lo, lo, Mux(shifted > 127, 127, shifted))[:32]


def alu_datapath(config: VTAConfig, alu_opcode, lhs, rhs, imm=None, use_imm=None):
    """One ALU lane: op(lhs, rhs) on int32 with docs/architecture.md §2's SHR and MUL rules (32-bit result).

    With ALU_REQUANT, REQUANT also reads the immediate field ``imm`` (its control bits) and
    ``use_imm`` (its addend is ``rhs`` in the tensor form, 0 in the immediate form); it shares SHR's
    right shifter (its input and amount muxed), so the lane adds an adder, the clip and two muxes."""
    a = lhs.as_signed()
    b = rhs.as_signed()
    shift = rhs[:6].as_signed()
    if config.alu_requant:
        requant = alu_opcode == isa.AluOp.REQUANT
        total = _requant_sum(a, Mux(use_imm, 0, rhs), imm)
        right = (Mux(requant, total, a) >> Mux(requant, imm[:5], shift[:5]))[:32]
    else:
        right = (a >> shift[:5])[:32]
    left = (a << (-shift)[:6])[:32]
    choices = {isa.AluOp.MIN: Mux(a < b, a, b)[:32], isa.AluOp.MAX: Mux(a > b, a, b)[:32],
               isa.AluOp.ADD: (a + b)[:32], isa.AluOp.SHR: Mux(shift[5], left, right)}
    if config.alu_mul:
        choices[isa.AluOp.MUL] = (a * rhs[:16].as_signed())[:32]
    if config.alu_requant:
        choices[isa.AluOp.REQUANT] = _requant_clip(right.as_signed(), imm)
    expr = Const(0, 32)
    for op, value in choices.items():
        expr = Mux(alu_opcode == op, value, expr)
    return expr


class TensorDatapath(wiring.Component):
    """result = ALU(acc_dst, imm or acc_src) if is_alu else (0 if reset else acc_dst + inp . wgt^T).

    Interface attributes: ``inp``, ``wgt``, ``acc_dst``, ``acc_src`` (operand elements),
    ``is_alu``, ``reset``, ``use_imm``, ``alu_op``, ``imm`` (sign-extended to 32 bits) in;
    ``result`` (an ACC element) out.
    """

    def __init__(self, config: VTAConfig):
        self._config = config
        super().__init__({
            "inp": In(config.inp_elem_bits), "wgt": In(config.wgt_elem_bits),
            "acc_dst": In(config.acc_elem_bits), "acc_src": In(config.acc_elem_bits),
            "is_alu": In(1), "reset": In(1), "use_imm": In(1), "alu_op": In(3), "imm": In(32),
            "result": Out(config.acc_elem_bits),
        })

    def elaborate(self, platform):
        cfg = self._config
        m = Module()
        gemm_lanes = gemm_datapath(cfg, self.inp, self.wgt, self.acc_dst)
        alu_lanes = [alu_datapath(cfg, self.alu_op, self.acc_dst.word_select(lane, 32),
                                  Mux(self.use_imm, self.imm, self.acc_src.word_select(lane, 32)), self.imm, self.use_imm)
                     for lane in range(cfg.batch * cfg.block_out)]
        m.d.comb += self.result.eq(Mux(self.is_alu, Cat(*alu_lanes), Mux(self.reset, 0, Cat(*gemm_lanes))))
        return m
