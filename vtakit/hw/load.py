"""The load module: LOAD INP / LOAD WGT into the input and weight SRAMs.

It only pops ``pop_next`` (compute -> load: the slots are free) and pushes ``push_next`` (load ->
compute: the data is there), as in VTA. One 2-D DMA engine serves both memories; the element
size of the instruction's memory type selects the beat pattern.
"""

from __future__ import annotations

from amaranth.hdl import Assert, Format, Module, Mux
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from vtakit.hw import isa
from vtakit.hw.bus import ReadPortSignature
from vtakit.hw.config import VTAConfig
from vtakit.hw.dma import DmaLoad2D
from vtakit.hw.layouts import insn_layout
from vtakit.hw.sequencer import Sequencer, sequencer_ports

__all__ = ["LoadModule"]

_POPS = ("pop_next",)
_PUSHES = ("push_next",)


class LoadModule(wiring.Component):
    """Executes LOAD INP/WGT instructions (fetch routes only those here).

    Interface attributes: the sequencer ports (``cmd``, ``pop_next``, ``push_next``, ``retire``,
    ``state``, ``blocked``, ``busy``, ``index``), ``mem`` (read port), ``inp_wr`` and ``wgt_wr``
    (SRAM write ports).
    """

    def __init__(self, config: VTAConfig):
        self._config = config
        super().__init__({
            **sequencer_ports(config, _POPS, _PUSHES),
            "mem": Out(ReadPortSignature(config.bus_width)),
            "inp_wr": In(memory.WritePort.Signature(addr_width=config.log_inp_depth, shape=config.inp_elem_bits)),
            "wgt_wr": In(memory.WritePort.Signature(addr_width=config.log_wgt_depth, shape=config.wgt_elem_bits)),
        })

    def elaborate(self, platform):
        cfg = self._config
        m = Module()
        seq = Sequencer(m, self, cfg, _POPS, _PUSHES)
        insn = data.View(insn_layout(isa.Opcode.LOAD, cfg), seq.insn)
        m.submodules.dma = dma = DmaLoad2D(bus_width=cfg.bus_width, dram_latency=cfg.dram_latency,
                                           data_width=max(cfg.inp_elem_bits, cfg.wgt_elem_bits))
        wiring.connect(m, wiring.flipped(self.mem), dma.mem)
        is_wgt = insn.memory_type == isa.MemId.WGT
        m.d.comb += [
            dma.start.eq(seq.start),
            dma.log_elem.eq(Mux(is_wgt, exact_log2(cfg.wgt_elem_bytes), exact_log2(cfg.inp_elem_bytes))),
            seq.finish.eq(dma.finish),
            self.inp_wr.en.eq(dma.wr_en & ~is_wgt), self.inp_wr.addr.eq(dma.wr_addr),
            self.inp_wr.data.eq(dma.wr_data),
            self.wgt_wr.en.eq(dma.wr_en & is_wgt), self.wgt_wr.addr.eq(dma.wr_addr),
            self.wgt_wr.data.eq(dma.wr_data),
        ]
        for name in ("sram_base", "dram_base", "y_size", "x_size", "x_stride", "y_pad_0", "y_pad_1",
                     "x_pad_0", "x_pad_1"):
            m.d.comb += getattr(dma, name).eq(getattr(insn, name))
        depth = Mux(is_wgt, cfg.wgt_depth, cfg.inp_depth)
        m.d.sync += Assert(~dma.wr_en | (dma.wr_addr < depth), Format(
            f"load: SRAM write to entry {{}} is out of range (INP has {cfg.inp_depth} entries, WGT {cfg.wgt_depth})",
            dma.wr_addr))
        return m
