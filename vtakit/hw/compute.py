"""The compute module: micro-op cache, ACC and OUT, the GEMM core and the vector ALU.

It runs LOAD UOP / ACC / ACC_8BIT (through its own 2-D DMA engine), GEMM, ALU and FINISH in
program order. GEMM and ALU share one micro-op pipeline, one micro-op per cycle (the depths are in
vtakit/hw/pipeline.py, the timing in docs/timing.md §4):

    A  issue: loop counters produce the micro-op address; the uop SRAM is read
    U  the uop SRAM's data is registered
    B  index: uop fields + loop offsets give the ACC / INP / WGT addresses; INP and WGT are read
    GEMM only: operands registered, products registered, adder-tree stages (GemmPipeline)
    R  ACC dst is read (GEMM: two cycles before X; ALU: in B)
    Q  the read data is registered
    X  GEMM: execute, acc + sums; ALU: X1, the forwarded operands registered
    Y  ALU only: X2, execute the vector ALU from registers
    W  ACC and OUT written from the registered result

R, Q, X and W are shared: GEMM and ALU instructions never overlap, so each uses them at its own
depth. ACC's read port is transparent to its write port, so a micro-op reading in R the entry
written in R sees the new value. The two micro-ops whose results are registered (result_w) one and
two cycles before its X write ACC after its read: the earlier one is taken in Q from the register
(held for X), the later one in X. For GEMM those are the two micro-ops just before it: its
read-modify-write loop is one cycle (X: registered result -> forward mux -> adder -> register), so
GEMM keeps the strict micro-op order of docs/architecture.md §2 with no stalls. The ALU executes
in Y, so its loop would be one cycle only if the micro-op just before it did not write what it
reads: a micro-op that reads the entry the one before writes waits a cycle in B (the dependency
stall, docs/timing.md §4), and then takes its operand from the register. The block RAM's write
data comes from a register.

A tensor ALU micro-op reads two ACC entries (dst and src) and writes one. With ACC_READ_PORTS 2,
ACC has two read ports, which a two-port block RAM can only give by storing ACC twice. With
ACC_READ_PORTS 1 (the default) ACC is stored once and such a micro-op takes two cycles, as in
VTA's own designs: stage B becomes B1 (read src, keep dst's address) and B2 (read dst, keep src's
data), and A and U hold in B1. Unless it hits the src register: one entry (valid, address, data)
that each such two-cycle micro-op loads and every write-back to its address updates, emptied when
an ALU instruction starts. A micro-op whose src address is the register's reads dst alone and
takes one cycle, so a loop that adds one bias entry to many dst entries runs at one per cycle.
GEMM and immediate ALU micro-ops read dst alone and keep one per cycle (docs/timing.md §4).

GEMM's epilogue bit (docs/isa.md) changes no timing. A bias reset (BIAS_PRELOAD) carries its src
address beside dst through the GEMM stages and reads it in R where a GEMM reads dst (forwarded
alike), and X writes it to dst. A requantising write-back (GEMM_OUT_REQUANT) writes OUT in W with
the REQUANT of the written element under the requant register, which every ALU REQUANT sets when
it starts; the ALU lanes, idle during a GEMM, compute it.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Assert, Cat, Format, Module, Mux, Signal, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from vtakit.hw import isa
from vtakit.hw.bus import ReadPortSignature
from vtakit.hw.config import ITER_BITS, VTAConfig
from vtakit.hw.datapath import GemmPipeline, TensorDatapath
from vtakit.hw.dma import DmaLoad2D
from vtakit.hw.layouts import insn_layout, uop_layout
from vtakit.hw.sequencer import Sequencer, sequencer_ports

__all__ = ["ComputeModule", "NO_RW_CHECK"]

#: Memory attributes for a block RAM whose read data in a cycle that writes the same entry is never used:
#: Yosys' ``no_rw_check`` makes that read data undefined on the FPGA (the simulators return the old
#: data) instead of adding soft collision logic between the block RAM's slow output and its register.
NO_RW_CHECK = {"no_rw_check": 1}

_POPS = ("pop_prev", "pop_next")
_PUSHES = ("push_prev", "push_next")


@dataclass(frozen=True)
class _Loop:
    """A GEMM or ALU instruction's loop, registered when it starts: the last values of the counters
    k, j and i, k's first value, and the index factors (outer ``*_fo``, inner ``*_fi``) cut to the
    width of the index they step."""
    k_last: Signal
    j_last: Signal
    i_last: Signal
    uop_bgn: Signal
    dst_fo: Signal
    dst_fi: Signal
    src_fo: Signal
    src_fi: Signal
    wgt_fo: Signal
    wgt_fi: Signal


def _loop_bounds(m: Module, cfg: VTAConfig, start, is_alu, gemm, alu, k: Signal, src_bits: int) -> _Loop:
    """The loop registers of :class:`_Loop`, loaded from the instruction word where ``start``."""
    def reg(name: str, width: int, value) -> Signal:
        sig = Signal(width, name=f"loop_{name}")
        with m.If(start):
            m.d.sync += sig.eq(value)
        return sig
    acc, wgt = cfg.log_acc_depth, cfg.log_wgt_depth
    return _Loop(
        # (a last value as wide as its field: compared with the counter as the field would be)
        k_last=reg("k_last", len(gemm.uop_end), gemm.uop_end - 1),
        j_last=reg("j_last", len(gemm.iter_in), gemm.iter_in - 1),
        i_last=reg("i_last", len(gemm.iter_out), gemm.iter_out - 1), uop_bgn=reg("uop_bgn", len(k), gemm.uop_bgn),
        dst_fo=reg("dst_fo", acc, gemm.dst_factor_out), dst_fi=reg("dst_fi", acc, gemm.dst_factor_in),
        src_fo=reg("src_fo", src_bits, Mux(is_alu, alu.src_factor_out, gemm.src_factor_out)),
        src_fi=reg("src_fi", src_bits, Mux(is_alu, alu.src_factor_in, gemm.src_factor_in)),
        wgt_fo=reg("wgt_fo", wgt, gemm.wgt_factor_out), wgt_fi=reg("wgt_fi", wgt, gemm.wgt_factor_in))


def _dependency_stall(m: Module, cfg: VTAConfig, dep_b: Signal, alu_b, tensor, uop, v_q: Signal, dst_q: Signal,
                      dst_r, dst_off_b: Signal, dst_off_next, src_off_next) -> None:
    """``dep_b``: the ALU micro-op in stage B (``alu_b``) reads the ACC entry that the one just before it
    (now in Q, read in R the cycle before) writes: dst, or src in the tensor form (``tensor``).

    Its address is the uop field plus the B offset, so the test is ``field == dst_q - offset``
    (mod ACC depth), the difference registered in R from the next cycle's B offsets
    (``*_off_next``): the registered uop word meets only a comparator before hold and issue."""
    depth = cfg.log_acc_depth
    want_dst, want_src = Signal(depth), Signal(depth)
    m.d.sync += [want_dst.eq(dst_r - dst_off_next), want_src.eq(dst_r - src_off_next)]
    m.d.comb += dep_b.eq(alu_b & v_q & ((uop.dst_idx[:depth] == want_dst) | (tensor & (uop.src_idx[:depth] == want_src))))
    m.d.sync += Assert(~v_q | (want_dst == (dst_q - dst_off_b)[:depth]), "compute: want_dst is dst_q - dst_off_b")


class ComputeModule(wiring.Component):
    """Executes LOAD UOP/ACC/ACC_8BIT, GEMM, ALU and FINISH.

    Interface attributes: the sequencer ports, ``mem`` (read port for uop and ACC loads),
    ``inp_rd`` / ``wgt_rd`` (SRAM read ports), ``out_wr`` (OUT write port), ``finished`` (FINISH
    retires), ``gemm_uop`` / ``alu_uop`` (a counted micro-op executes).
    """

    def __init__(self, config: VTAConfig):
        self._config = config
        self.dma = DmaLoad2D(bus_width=config.bus_width, dram_latency=config.dram_latency,
                             data_width=max(config.acc_elem_bits, 32))
        super().__init__({
            **sequencer_ports(config, _POPS, _PUSHES),
            "mem": Out(ReadPortSignature(config.bus_width)),
            "inp_rd": In(memory.ReadPort.Signature(addr_width=config.log_inp_depth, shape=config.inp_elem_bits)),
            "wgt_rd": In(memory.ReadPort.Signature(addr_width=config.log_wgt_depth, shape=config.wgt_elem_bits)),
            "out_wr": In(memory.WritePort.Signature(addr_width=config.log_acc_depth, shape=config.out_elem_bits)),
            "finished": Out(1), "gemm_uop": Out(1), "alu_uop": Out(1),
        })

    def elaborate(self, platform):
        cfg = self._config
        m = Module()
        seq = Sequencer(m, self, cfg, _POPS, _PUSHES)
        mem_i = data.View(insn_layout(isa.Opcode.LOAD, cfg), seq.insn)
        gemm = data.View(insn_layout(isa.Opcode.GEMM, cfg), seq.insn)
        alu = data.View(insn_layout(isa.Opcode.ALU, cfg), seq.insn)
        opcode = seq.insn[:3]
        is_load = opcode == isa.Opcode.LOAD
        is_gemm = opcode == isa.Opcode.GEMM
        is_alu = opcode == isa.Opcode.ALU

        # uop: compute's own LOAD UOP writes it, GEMM and ALU read it, never in one instruction
        m.submodules.uop_mem = uop_mem = memory.Memory(shape=32, depth=cfg.uop_depth, init=[], attrs=NO_RW_CHECK)
        m.submodules.acc_mem = acc_mem = memory.Memory(shape=cfg.acc_elem_bits, depth=cfg.acc_depth, init=[])
        uop_wr = uop_mem.write_port()
        uop_rd = uop_mem.read_port()
        acc_wr = acc_mem.write_port()
        acc_rd_dst = acc_mem.read_port(transparent_for=(acc_wr,))
        one_port = cfg.acc_read_ports == 1
        acc_rd_src = acc_rd_dst if one_port else acc_mem.read_port(transparent_for=(acc_wr,))

        # ---------------------------------------------------------------- loads into uop / ACC
        kind = mem_i.memory_type
        is_uop_ld = kind == isa.MemId.UOP
        is_acc_ld = kind == isa.MemId.ACC
        is_acc8_ld = kind == isa.MemId.ACC_8BIT
        m.submodules.dma = dma = self.dma
        wiring.connect(m, wiring.flipped(self.mem), dma.mem)
        for name in ("sram_base", "dram_base", "y_size", "x_stride", "y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1"):
            m.d.comb += getattr(dma, name).eq(getattr(mem_i, name))
        m.d.comb += [
            dma.x_size.eq(Mux(is_uop_ld | is_acc_ld | is_acc8_ld, mem_i.x_size, 0)),
            dma.start.eq(seq.start & is_load),
            dma.log_elem.eq(Mux(is_uop_ld, exact_log2(cfg.uop_elem_bytes), Mux(is_acc_ld, exact_log2(cfg.acc_elem_bytes),
                                                                  exact_log2(cfg.acc8_elem_bytes)))),
        ]
        sext = [Signal(signed(32), name=f"acc8_lane{lane}") for lane in range(cfg.batch * cfg.block_out)]
        m.d.comb += [s.eq(dma.wr_data.word_select(lane, 8).as_signed()) for lane, s in enumerate(sext)]
        acc8 = Cat(*sext)

        # ---------------------------------------------------------------- micro-op pipeline
        is_alu_l = Signal()
        use_imm = Signal()
        reset = Signal()
        alu_op = Signal(3)
        imm = Signal(32)
        # GEMM's epilogue bit (docs/isa.md): a bias reset reads its src entry of ACC where a GEMM reads
        # dst and writes it to dst; a requantising write-back writes OUT through the requant register,
        # which every ALU REQUANT sets when it starts
        epilogue = gemm.epilogue if cfg.bias_preload or cfg.gemm_out_requant else 0
        bias = Signal()
        out_requant = Signal()
        requant = Signal(7)

        src_bits = cfg.uop_src_bits
        issuing = Signal()
        k = Signal(cfg.log_uop_depth + 1)
        j = Signal(ITER_BITS)
        i = Signal(ITER_BITS)
        dst_i, dst_ij = Signal(cfg.log_acc_depth), Signal(cfg.log_acc_depth)
        src_i, src_ij = Signal(src_bits), Signal(src_bits)
        wgt_i, wgt_ij = Signal(cfg.log_wgt_depth), Signal(cfg.log_wgt_depth)
        # the loop's bounds and factors, registered when the instruction starts, so that the counters'
        # next values come from registers (no subtracter or opcode multiplexer in front of them)
        loop = _loop_bounds(m, cfg, seq.start & (is_gemm | is_alu), is_alu, gemm, alu, k, src_bits)

        with m.If(seq.start & (is_gemm | is_alu)):
            m.d.sync += [
                issuing.eq((gemm.iter_out != 0) & (gemm.iter_in != 0) & (gemm.uop_end > gemm.uop_bgn)),
                k.eq(gemm.uop_bgn), j.eq(0), i.eq(0),
                dst_i.eq(0), dst_ij.eq(0), src_i.eq(0), src_ij.eq(0), wgt_i.eq(0), wgt_ij.eq(0),
                is_alu_l.eq(is_alu), use_imm.eq(alu.use_imm), reset.eq(gemm.reset_reg),
                alu_op.eq(alu.alu_opcode), imm.eq(alu.imm),
                bias.eq(is_gemm & gemm.reset_reg & epilogue if cfg.bias_preload else 0),
                out_requant.eq(is_gemm & ~gemm.reset_reg & epilogue if cfg.gemm_out_requant else 0),
            ]
        if cfg.gemm_out_requant:
            with m.If(seq.start & is_alu & (alu.alu_opcode == isa.AluOp.REQUANT)):
                m.d.sync += requant.eq(alu.imm[:7])

        v_u, v_b = Signal(), Signal()
        # two_read: a tensor ALU micro-op on a single ACC read port; miss_b: the one in stage B reads its
        # src from ACC (stages B1 and B2: A and U hold for a cycle) instead of the src register (see below);
        # dep_b: an ALU micro-op reads the entry the micro-op just before it writes, and takes B1 and B2
        # as well (its ALU would need that result in the cycle it is computed: docs/timing.md §4)
        two_read = Signal()
        miss_b, dep_b = Signal(), Signal()
        hold = Signal()
        m.d.comb += [two_read.eq(is_alu_l & ~use_imm if one_port else 0), hold.eq(v_b & (miss_b | dep_b))]
        issue = Signal()
        m.d.comb += issue.eq(issuing & ~hold)
        dst_off_u, src_off_u, wgt_off_u = Signal.like(dst_ij), Signal.like(src_ij), Signal.like(wgt_ij)
        dst_off_b, src_off_b, wgt_off_b = Signal.like(dst_ij), Signal.like(src_ij), Signal.like(wgt_ij)
        uop_b = Signal(32)
        # stage U: the uop SRAM's data (held by its read enable while B holds) is registered for B
        m.d.comb += [uop_rd.addr.eq(k), uop_rd.en.eq(~hold)]
        with m.If(hold):
            m.d.sync += v_b.eq(0)
        with m.Else():
            m.d.sync += [v_u.eq(issue), v_b.eq(v_u), uop_b.eq(uop_rd.data),
                         dst_off_b.eq(dst_off_u), src_off_b.eq(src_off_u), wgt_off_b.eq(wgt_off_u)]
        with m.If(issue):
            m.d.sync += [dst_off_u.eq(dst_ij), src_off_u.eq(src_ij), wgt_off_u.eq(wgt_ij)]
            with m.If(k == loop.k_last):
                m.d.sync += k.eq(loop.uop_bgn)
                with m.If(j == loop.j_last):
                    m.d.sync += [j.eq(0), i.eq(i + 1),
                                 dst_i.eq(dst_i + loop.dst_fo), dst_ij.eq(dst_i + loop.dst_fo),
                                 src_i.eq(src_i + loop.src_fo), src_ij.eq(src_i + loop.src_fo),
                                 wgt_i.eq(wgt_i + loop.wgt_fo), wgt_ij.eq(wgt_i + loop.wgt_fo)]
                    with m.If(i == loop.i_last):
                        m.d.sync += issuing.eq(0)
                with m.Else():
                    m.d.sync += [j.eq(j + 1), dst_ij.eq(dst_ij + loop.dst_fi),
                                 src_ij.eq(src_ij + loop.src_fi), wgt_ij.eq(wgt_ij + loop.wgt_fi)]
            with m.Else():
                m.d.sync += k.eq(k + 1)

        # stage B: indices
        uop = data.View(uop_layout(cfg), uop_b)
        dst_b = (uop.dst_idx + dst_off_b)[:cfg.log_acc_depth]
        src_b = (uop.src_idx + src_off_b)[:src_bits]
        wgt_b = (uop.wgt_idx + wgt_off_b)[:cfg.log_wgt_depth]
        v_b2 = Signal()                      # B2 of a held micro-op (B1 was the cycle before)
        v_m2 = Signal()                      # ... of a missing one (B2 loads the src register's data)
        dst_b2 = Signal(cfg.log_acc_depth)
        src_data = Signal(cfg.acc_elem_bits)
        # the src register (one port): the ACC entry src_addr holds src_data while src_valid
        src_valid = Signal()
        src_addr = Signal(cfg.log_acc_depth)
        src_acc = src_b[:cfg.log_acc_depth]  # the ACC address src reads
        # src_acc == src_addr, compared as uop.src_idx == src_addr - offset (mod ACC depth), that
        # difference kept in a register (src_want), so the registered uop word meets only the comparator
        # before hold and issue. A miss holds B and loads src_addr = uop.src_idx + src_off_b (the
        # difference becomes uop.src_idx); otherwise B takes src_off_u and src_addr stays
        src_want = Signal(cfg.log_acc_depth)
        m.d.sync += src_want.eq(Mux(v_b & miss_b, uop.src_idx[:cfg.log_acc_depth],
                                    Mux(hold, src_want, src_addr - src_off_u)))
        m.d.comb += miss_b.eq(two_read & ~(src_valid & (uop.src_idx[:cfg.log_acc_depth] == src_want)))
        m.d.sync += [v_b2.eq(hold), v_m2.eq(v_b & miss_b), dst_b2.eq(dst_b)]
        m.d.comb += [
            self.inp_rd.addr.eq(src_b), self.wgt_rd.addr.eq(wgt_b),
            self.inp_rd.en.eq(1), self.wgt_rd.en.eq(1),
        ]

        # GEMM: the products and the adder tree (vtakit/hw/pipeline.py), the dst address beside them
        m.submodules.gemm_core = gemm_core = GemmPipeline(cfg)
        m.d.comb += [gemm_core.inp.eq(self.inp_rd.data), gemm_core.wgt.eq(self.wgt_rd.data)]
        v_g = [Signal(name=f"v_g{n}") for n in range(gemm_core.latency)]
        dst_g = [Signal(cfg.log_acc_depth, name=f"dst_g{n}") for n in range(gemm_core.latency)]
        m.d.sync += [v_g[0].eq(v_b & ~is_alu_l), dst_g[0].eq(dst_b)]
        m.d.sync += [v.eq(prev) for v, prev in zip(v_g[1:], v_g)]
        m.d.sync += [d.eq(prev) for d, prev in zip(dst_g[1:], dst_g)]
        if cfg.bias_preload:   # a bias reset's ACC src address travels beside dst, read in R instead of it
            bias_g = [Signal(cfg.log_acc_depth, name=f"bias_g{n}") for n in range(gemm_core.latency)]
            m.d.sync += [bias_g[0].eq(src_b[:cfg.log_acc_depth])]
            m.d.sync += [d.eq(prev) for d, prev in zip(bias_g[1:], bias_g)]

        # The ACC loop, shared by GEMM and ALU (never in flight together): R reads dst (GEMM: the
        # cycle its sums enter the last tree stage; ALU: B, or B2 of a missing micro-op), Q registers
        # the operands, X executes, W writes ACC and OUT from the registered result. The read in R is
        # transparent to the write in R; the writes in Q (the micro-op two ahead, then in W) and in X
        # (the previous one, then in X) are forwarded from their registered results; later writes
        # come after the read.
        v_r = Signal()
        dst_r = Signal(cfg.log_acc_depth)
        rd_r = Signal(cfg.log_acc_depth)     # the entry R reads as the operand acc_dst: dst, a bias reset's src
        m.d.comb += [
            v_r.eq(Mux(is_alu_l, v_b2 | (v_b & ~miss_b & ~dep_b), v_g[-2])),
            dst_r.eq(Mux(is_alu_l, Mux(v_b2, dst_b2, dst_b), dst_g[-2])),
            rd_r.eq(Mux(bias, bias_g[-2], dst_r) if cfg.bias_preload else dst_r),
            acc_rd_dst.addr.eq(Mux(is_alu_l & v_b & miss_b, src_b, rd_r)),
        ]
        # X is GEMM's execute stage and ALU's X1; X2 (y) is ALU's second. v_e, dst_e: the micro-op whose
        # result enters result_w at the end of this cycle (in X for GEMM, in X2 for ALU)
        v_q, v_x, v_y, v_w = Signal(), Signal(), Signal(), Signal()
        dst_q, dst_x, dst_y, dst_w, rd_q = (Signal.like(dst_r) for _ in range(5))
        v_e, dst_e = Signal(), Signal.like(dst_r)
        m.d.comb += [v_e.eq(Mux(is_alu_l, v_y, v_x)), dst_e.eq(Mux(is_alu_l, dst_y, dst_x))]
        m.d.sync += [v_q.eq(v_r), dst_q.eq(dst_r), v_x.eq(v_q), dst_x.eq(dst_q), v_y.eq(v_x & is_alu_l), dst_y.eq(dst_x),
                     v_w.eq(v_e), dst_w.eq(dst_e), rd_q.eq(rd_r)]
        _dependency_stall(m, cfg, dep_b, v_b & is_alu_l, ~use_imm, uop, v_q, dst_q, dst_r, dst_off_b,
                          Mux(hold, dst_off_b, dst_off_u), Mux(hold, src_off_b, src_off_u))
        m.submodules.datapath = datapath = TensorDatapath(cfg, imm_selected=one_port)
        result = datapath.result
        result_w = Signal(cfg.acc_elem_bits)  # W: the written-back element, for OUT and forwarding
        m.d.sync += result_w.eq(result)
        # Q registers the read data as it comes (the block RAM's slow output meets no logic but the
        # transparency mux); X takes result_w instead where the micro-op before it writes the entry,
        # else the result of the one two ahead (result_w in Q, held in dst_fix) where that one writes it
        dst_val, src_val = Signal(cfg.acc_elem_bits), Signal(cfg.acc_elem_bits)
        dst_fix = Signal(cfg.acc_elem_bits)
        fwd_dst, fwd_src, fix_dst = Signal(), Signal(), Signal()
        m.d.sync += [dst_val.eq(acc_rd_dst.data), fwd_dst.eq(v_e & (dst_e == rd_q)),
                     fix_dst.eq(v_w & (dst_w == rd_q)), dst_fix.eq(result_w)]
        src_read = src_val                   # src as read
        if one_port:
            # src_addr is this micro-op's src in Q (a later miss changes it at the end of Q at the earliest).
            # Q registers the ALU's right operand as far as it is known: the immediate, else the src
            # register, or the result in W where that micro-op (two ahead) writes the entry (the src
            # register takes it only at the end of Q); X then only forwards the result of the micro-op
            # just ahead (never for an immediate).
            m.d.sync += [src_val.eq(Mux(use_imm, imm.replicate(cfg.batch * cfg.block_out), Mux(v_w & (dst_w == src_addr), result_w, src_data))),
                         fwd_src.eq(~use_imm & v_e & (dst_e == src_addr))]
        else:
            src_q = Signal(cfg.log_acc_depth)
            src_fix = Signal(cfg.acc_elem_bits)
            fix_src = Signal()
            m.d.sync += src_q.eq(src_acc)
            m.d.comb += acc_rd_src.addr.eq(src_acc)
            m.d.sync += [src_val.eq(acc_rd_src.data), fwd_src.eq(v_e & (dst_e == src_q)),
                         fix_src.eq(v_w & (dst_w == src_q)), src_fix.eq(result_w)]
            src_read = Mux(fix_src, src_fix, src_val)
        m.d.comb += [
            datapath.sums.eq(gemm_core.sums),
            datapath.acc_dst.eq(Mux(fwd_dst, result_w, Mux(fix_dst, dst_fix, dst_val))),
            datapath.acc_src.eq(Mux(fwd_src, result_w, src_read)),
            datapath.is_alu.eq(is_alu_l), datapath.reset.eq(reset), datapath.use_imm.eq(use_imm),
            datapath.alu_op.eq(alu_op), datapath.imm.eq(imm),
        ]
        if cfg.bias_preload:
            m.d.comb += datapath.bias.eq(bias)
        if cfg.gemm_out_requant:
            m.d.comb += [datapath.written.eq(result_w), datapath.requant_out.eq(out_requant),
                         datapath.requant_ctl.eq(requant)]

        lanes = cfg.batch * cfg.block_out
        acc_ld_we = dma.wr_en & (is_acc_ld | is_acc8_ld)
        # ACC is written in W from the registered result: no logic between the ALU and the block RAM
        m.d.comb += [
            uop_wr.en.eq(dma.wr_en & is_uop_ld), uop_wr.addr.eq(dma.wr_addr), uop_wr.data.eq(dma.wr_data),
            acc_wr.en.eq(v_w | acc_ld_we),
            acc_wr.addr.eq(Mux(v_w, dst_w, dma.wr_addr)),
            acc_wr.data.eq(Mux(v_w, result_w, Mux(is_acc8_ld, acc8, dma.wr_data))),
            self.out_wr.en.eq(v_w), self.out_wr.addr.eq(dst_w),
            self.out_wr.data.eq(datapath.out if cfg.gemm_out_requant
                                else Cat(*(result_w.word_select(lane, 32)[:8] for lane in range(lanes)))),
            self.gemm_uop.eq(v_x & ~is_alu_l & ~reset),
            self.alu_uop.eq(v_x & is_alu_l),
        ]
        if one_port:
            # The src register. A missing micro-op loads it: the address in B1, the data read in B2. A
            # hitting one (valid, same address: docs/timing.md §4) takes its src from it. Every result for
            # its entry updates it in W (after the load: newer; also the one whose ACC write came after the
            # read in B1); the micro-ops one and two behind the writer take that result by forwarding (X,
            # Q above), so src is current at any distance. ACC loads and GEMMs write ACC only in other
            # instructions, and each ALU instruction starts it empty.
            with m.If(v_b & miss_b):
                m.d.sync += [src_valid.eq(1), src_addr.eq(src_acc)]
            with m.If(v_m2):
                m.d.sync += src_data.eq(acc_rd_dst.data)
            with m.If(v_w & (dst_w == src_addr)):
                m.d.sync += src_data.eq(result_w)
            with m.If(seq.start & is_alu):
                m.d.sync += src_valid.eq(0)
        m.d.sync += Assert(~(v_w & acc_ld_we), "compute: micro-op and ACC load write in the same cycle")
        if one_port:
            m.d.sync += Assert(src_want == (src_addr - src_off_b)[:cfg.log_acc_depth],
                               "compute: src_want is src_addr - src_off_b")
        m.d.sync += Assert(~dma.wr_en | (dma.wr_addr < Mux(is_uop_ld, cfg.uop_depth, cfg.acc_depth)), Format(
            f"compute: SRAM write to entry {{}} is out of range (UOP has {cfg.uop_depth} entries, ACC {cfg.acc_depth})",
            dma.wr_addr))

        # ---------------------------------------------------------------- finish
        with m.Switch(opcode):
            with m.Case(isa.Opcode.LOAD):
                m.d.comb += seq.finish.eq(dma.finish)
            with m.Case(isa.Opcode.GEMM, isa.Opcode.ALU):
                m.d.comb += seq.finish.eq(~issuing & ~v_u & ~v_b & ~v_b2 & ~Cat(*v_g).any() & ~v_q & ~v_x & ~v_y)
            with m.Default():
                m.d.comb += seq.finish.eq(1)
        m.d.comb += self.finished.eq(self.retire.valid & (opcode == isa.Opcode.FINISH))
        return m
