"""The store module: STORE OUT, copying the OUT SRAM to DRAM.

It only pops ``pop_prev`` (compute -> store: results are ready) and pushes ``push_prev`` (store
-> compute: the OUT slots are drained), as in VTA.
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from vtakit.hw import isa
from vtakit.hw.bus import WritePortSignature
from vtakit.hw.config import VTAConfig
from vtakit.hw.dma import DmaStore2D
from vtakit.hw.layouts import insn_layout
from vtakit.hw.sequencer import Sequencer, sequencer_ports

__all__ = ["StoreModule"]

_POPS = ("pop_prev",)
_PUSHES = ("push_prev",)


class StoreModule(wiring.Component):
    """Executes STORE instructions.

    Interface attributes: the sequencer ports, ``mem`` (write port) and ``out_rd`` (OUT SRAM
    read port, synchronous).
    """

    def __init__(self, config: VTAConfig):
        self._config = config
        super().__init__({
            **sequencer_ports(config, _POPS, _PUSHES),
            "mem": Out(WritePortSignature(config.bus_width)),
            "out_rd": In(memory.ReadPort.Signature(addr_width=config.log_acc_depth, shape=config.out_elem_bits)),
        })

    def elaborate(self, platform):
        cfg = self._config
        m = Module()
        seq = Sequencer(m, self, cfg, _POPS, _PUSHES)
        insn = data.View(insn_layout(isa.Opcode.STORE, cfg), seq.insn)
        m.submodules.dma = dma = DmaStore2D(bus_width=cfg.bus_width, elem_bytes=cfg.out_elem_bytes)
        wiring.connect(m, wiring.flipped(self.mem), dma.mem)
        m.d.comb += [
            dma.start.eq(seq.start),
            seq.finish.eq(dma.finish),
            self.out_rd.en.eq(dma.rd_en), self.out_rd.addr.eq(dma.rd_addr), dma.rd_data.eq(self.out_rd.data),
        ]
        for name in ("sram_base", "dram_base", "y_size", "x_size", "x_stride"):
            m.d.comb += getattr(dma, name).eq(getattr(insn, name))
        return m
