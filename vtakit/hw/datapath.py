"""Compute's datapath: the pipelined GEMM core and the execute stages (GEMM accumulate, vector ALU).

:class:`GemmPipeline` turns the INP and WGT read data into the per-lane dot products through
registered operands, registered products and a registered adder tree (depths in
:mod:`vtakit.hw.pipeline`), one micro-op per cycle. :class:`TensorDatapath` holds the execute stages
that close the read-modify-write loop on ACC: ``acc + sums`` for GEMM in one stage (X), the ALU op
in two (X1 registers the forwarded operands, X2 computes). Both are separate components so that they are separate fragments of the
simulation: pysim re-evaluates a fragment's combinational logic whenever one of its inputs changes,
and keeping the multiply-add tree apart from compute's counters means it is only recomputed when
its operands change.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.mac import lane_products
from vtakit.hw.pipeline import TREE_LEVELS_PER_STAGE, gemm_product_latency, gemm_tree_stages

__all__ = ["GemmPipeline", "TensorDatapath", "alu_datapath"]

#: Width of a lane sum on :class:`GemmPipeline`'s output (sign-extended; the accumulate wraps to 32 bits).
_SUM_BITS = 32


def _registered(m: Module, values, name: str) -> list[Signal]:
    """Registers holding ``values`` (one cycle later), each of its value's shape."""
    regs = []
    for index, value in enumerate(values):
        reg = Signal(value.shape(), name=f"{name}_{index}")
        m.d.sync += reg.eq(value)
        regs.append(reg)
    return regs


class GemmPipeline(wiring.Component):
    """``sums[b][o] = sum_i inp[b][i] * wgt[o][i]`` for every lane, :func:`gemm_product_latency`
    cycles after ``inp`` and ``wgt`` (the SRAMs' read data) present the operands.

    Stages: the operands registered; the multipliers' outputs of :func:`vtakit.hw.mac.lane_products`
    registered (a packed pair's raw product: the stage is the multiplier alone); the adder tree,
    registered after every :data:`TREE_LEVELS_PER_STAGE` levels, its first stage beginning with the
    pairs' unpacking. The registers
    load every cycle (no enable): one micro-op per cycle flows through, and only the ones compute
    marks valid are written back.

    Interface attributes: ``inp``, ``wgt`` in; ``sums`` (BATCH x BLOCK_OUT lanes of 32 bits) out.
    """

    def __init__(self, config: VTAConfig):
        self._config = config
        super().__init__({
            "inp": In(config.inp_elem_bits), "wgt": In(config.wgt_elem_bits),
            "sums": Out(config.batch * config.block_out * _SUM_BITS),
        })

    @property
    def latency(self) -> int:
        return gemm_product_latency(self._config)

    def elaborate(self, platform):
        cfg = self._config
        m = Module()
        inp_q = Signal.like(self.inp, name="inp_q")
        wgt_q = Signal.like(self.wgt, name="wgt_q")
        m.d.sync += [inp_q.eq(self.inp), wgt_q.eq(self.wgt)]
        raw, unpack = lane_products(cfg, inp_q, wgt_q)
        terms = unpack(_registered(m, raw, "prod"))
        lanes = []
        for b in range(cfg.batch):
            for o in range(cfg.block_out):
                level = terms[b][o]
                for stage in range(gemm_tree_stages(cfg)):
                    for _ in range(TREE_LEVELS_PER_STAGE):
                        if len(level) > 1:
                            level = [level[i] + level[i + 1] if i + 1 < len(level) else level[i]
                                     for i in range(0, len(level), 2)]
                    level = _registered(m, level, f"tree{stage}_{b}_{o}")
                assert len(level) == 1, "the tree stages reduce every lane to one sum"
                lane = Signal(signed(_SUM_BITS), name=f"sum_{b}_{o}")
                m.d.comb += lane.eq(level[0])          # sign-extended to 32 bits
                lanes.append(lane)
        m.d.comb += self.sums.eq(Cat(*lanes))
        return m


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


class _AluTerms:
    """One ALU lane's operations before the result select: ``lt`` (``a < b``, signed), MIN/MAX's select
    ``minmax`` with ``is_max``, its operands ``a`` and ``b``, and the other operations as (select, value).
    ``lt`` and ``add`` (ADD's ``a + b``), when given, were computed a stage ahead."""

    def __init__(self, config: VTAConfig, alu_opcode, lhs, rhs, imm=None, use_imm=None, lt=None, add=None):
        a = self.a = lhs.as_signed()
        b = self.b = rhs.as_signed()
        shift = rhs[:6].as_signed()
        if config.alu_requant:
            requant = alu_opcode == isa.AluOp.REQUANT
            total = _requant_sum(a, Mux(use_imm, 0, rhs), imm)
            right = (Mux(requant, total, a) >> Mux(requant, imm[:5], shift[:5]))[:32]
        else:
            right = (a >> shift[:5])[:32]
        # a negative amount s (-32..-1) shifts left by -s = ~s + 1: (a << 1) << ~s[4:0], no negation (a carry
        # chain) between the operand and the shifter's select lines
        left = ((a << 1) << (~shift)[:5])[:32]
        # MIN and MAX share one comparison: MIN takes a if a < b, MAX takes b if a < b (either when equal)
        self.lt = a < b if lt is None else lt
        self.is_max = alu_opcode == isa.AluOp.MAX
        self.minmax = (alu_opcode == isa.AluOp.MIN) | self.is_max
        self.others = [(alu_opcode == isa.AluOp.ADD, (a + b)[:32] if add is None else add),
                       (alu_opcode == isa.AluOp.SHR, Mux(shift[5], left, right))]
        if config.alu_mul:
            self.others.append((alu_opcode == isa.AluOp.MUL, (a * rhs[:16].as_signed())[:32]))
        if config.alu_requant:
            self.others.append((alu_opcode == isa.AluOp.REQUANT, _requant_clip(right.as_signed(), imm)))

    def result(self):
        """The lane's 32-bit result: a parallel AND-OR select (not a chain of muxes)."""
        return _select([(self.minmax, Mux(self.lt ^ self.is_max, self.a, self.b)[:32]), *self.others])


def _select(choices):
    """The AND-OR of (select, value) pairs whose selects are exclusive: one level after the slowest value."""
    expr = Const(0, 32)
    for selected, value in choices:
        expr = expr | Mux(selected, value, 0)
    return expr


def alu_datapath(config: VTAConfig, alu_opcode, lhs, rhs, imm=None, use_imm=None):
    """One ALU lane: op(lhs, rhs) on int32 with docs/architecture.md §2's SHR and MUL rules (32-bit result).

    With ALU_REQUANT, REQUANT also reads the immediate field ``imm`` (its control bits) and
    ``use_imm`` (its addend is ``rhs`` in the tensor form, 0 in the immediate form); it shares SHR's
    right shifter (its input and amount muxed), so the lane adds an adder, the clip and two muxes."""
    return _AluTerms(config, alu_opcode, lhs, rhs, imm, use_imm).result()


class TensorDatapath(wiring.Component):
    """The execute stages: ``result = ALU(acc_dst, imm or acc_src)`` if ``is_alu`` else (0 if ``reset``
    else ``acc_dst + sums``), every lane wrapped to 32 bits, for compute to register as the written-back
    element (docs/timing.md §4).

    GEMM takes one stage, X: ``acc_dst + sums`` is combinational from compute's operands (the
    one-cycle read-modify-write loop that keeps GEMM's accumulate forwarded at any distance). The
    ALU takes two, X1 and X2: X1 registers the operands (``acc_dst``, ``acc_src``: compute's
    forwarded values) with their comparison and sum (the carry chains that need both operands), and
    X2 computes the rest of the ALU (shifter, MUL, REQUANT) and its result select from registers. ``result`` is the ALU's
    in X2 while ``is_alu``, GEMM's in X otherwise.

    Interface attributes: ``sums`` (:class:`GemmPipeline`'s lane sums), ``acc_dst``, ``acc_src``
    (operand elements), ``is_alu``, ``reset``, ``use_imm``, ``alu_op``, ``imm`` (sign-extended to
    32 bits) in; ``result`` (an ACC element) out. With ``imm_selected``, ``acc_src`` already holds the
    immediate where ``use_imm`` (compute selects it a cycle ahead, off the execute stage).

    With BIAS_PRELOAD, ``bias`` in: a reset passes ``acc_dst`` (compute read the bias entry there)
    instead of 0. With GEMM_OUT_REQUANT, ``written`` (the element written back the cycle before,
    stage W), ``requant_out`` and ``requant_ctl`` (the requant register) in, ``out`` (the OUT element
    for ``written``) out: its lanes' low 8 bits, or with ``requant_out`` REQUANT immediate of them
    with the register's control bits, computed by the ALU lanes, which a GEMM leaves idle.
    """

    def __init__(self, config: VTAConfig, imm_selected: bool = False):
        self._config = config
        self._imm_selected = imm_selected
        super().__init__({
            "sums": In(config.batch * config.block_out * _SUM_BITS),
            "acc_dst": In(config.acc_elem_bits), "acc_src": In(config.acc_elem_bits),
            "is_alu": In(1), "reset": In(1), "use_imm": In(1), "alu_op": In(3), "imm": In(32),
            "result": Out(config.acc_elem_bits),
            **({"bias": In(1)} if config.bias_preload else {}),
            **({"written": In(config.acc_elem_bits), "requant_out": In(1), "requant_ctl": In(7),
                "out": Out(config.out_elem_bits)} if config.gemm_out_requant else {}),
        })

    def elaborate(self, platform):
        cfg = self._config
        m = Module()
        lanes = range(cfg.batch * cfg.block_out)
        # X1: the ALU's operands registered (GEMM does not use them) with the two carry chains that need
        # both, a < b and a + b (the forwarding multiplexers in front of them, the select behind in X2)
        def rhs(lane):
            src = self.acc_src.word_select(lane, 32)
            # compute put the immediate there already (imm_selected)
            return src if self._imm_selected else Mux(self.use_imm, self.imm, src)
        operands = [(self.acc_dst.word_select(lane, 32), rhs(lane)) for lane in lanes]
        lhs_x2 = Signal.like(self.acc_dst, name="alu_lhs")
        rhs_x2 = Signal.like(self.acc_src, name="alu_rhs")
        lt_x2 = Signal(len(lanes), name="alu_lt")
        add_x2 = Signal.like(self.acc_dst, name="alu_add")
        m.d.sync += [lhs_x2.eq(self.acc_dst), rhs_x2.eq(Cat(*[b for _, b in operands])),
                     lt_x2.eq(Cat(*[a.as_signed() < b.as_signed() for a, b in operands])),
                     add_x2.eq(Cat(*[(a + b)[:32] for a, b in operands]))]
        op, imm, use_imm, lhs = self.alu_op, self.imm, self.use_imm, lhs_x2
        if cfg.gemm_out_requant:   # a requantising GEMM's W stage: the idle ALU lanes run REQUANT imm on it
            requant = self.requant_out   # (its immediate form reads neither the right operand, lt nor a + b)
            op = Mux(requant, int(isa.AluOp.REQUANT), op)
            imm = Mux(requant, self.requant_ctl, imm)
            use_imm = use_imm | requant
            lhs = Mux(requant, self.written, lhs)
        terms = [_AluTerms(cfg, op, lhs.word_select(lane, 32), rhs_x2.word_select(lane, 32), imm, use_imm,
                           lt=lt_x2[lane], add=add_x2.word_select(lane, 32)) for lane in lanes]
        # X2: each lane's ALU result as one flat select from registers (the instruction's op, X1's
        # comparison last), then the GEMM/ALU select
        alu_lanes = []
        for t in terms:
            when_lt = _select(t.others + [(t.minmax, Mux(t.is_max, t.b, t.a)[:32])])
            when_ge = _select(t.others + [(t.minmax, Mux(t.is_max, t.a, t.b)[:32])])
            alu_lanes.append(Mux(t.lt, when_lt, when_ge))
        # X (GEMM): acc + sums, 0 for a reset, the entry read for a bias reset
        gemm_lanes = []
        for lane in lanes:
            acc = self.acc_dst.word_select(lane, 32)
            total = (acc + self.sums.word_select(lane, _SUM_BITS))[:32]
            kept = Mux(self.bias, acc, 0) if cfg.bias_preload else 0
            gemm_lanes.append(Mux(self.reset, kept, total))
        m.d.comb += self.result.eq(Mux(self.is_alu, Cat(*alu_lanes), Cat(*gemm_lanes)))
        if cfg.gemm_out_requant:
            low = Cat(*(self.written.word_select(lane, 32)[:8] for lane in lanes))
            m.d.comb += self.out.eq(Mux(self.requant_out, Cat(*(t.result()[:8] for t in terms)), low))
        return m
