"""The memory master: one AXI4 port shared by the core's DMA engines.

Read requests from fetch, compute and load are arbitrated with a fixed priority in that order
(``READ_PRIORITY``); at most one request is accepted per cycle and at most DRAM_OUTSTANDING read
bursts are in flight (counted from the accepted request to its last R beat). Each read burst
carries its requester's index as AXI ID, and the R beats are routed back by ID; R and B are
always ready. The only writer, store, drives the write channels directly (ID 0).

A requester that was offered but not accepted keeps its grant until accepted, so the AR payload
stays stable while ARVALID is high, as AXI4 requires.
"""

from __future__ import annotations

from amaranth.hdl import Assert, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from vtakit.hw.bus import Axi4Signature, ReadPortSignature, WritePortSignature
from vtakit.hw.config import VTAConfig

__all__ = ["MemoryMaster", "READ_PRIORITY"]

#: Read requesters, highest priority first; the position is the AXI ID.
READ_PRIORITY = ("fetch", "compute", "load")


def _any_of(values):
    """The bitwise OR of ``values``."""
    values = list(values)
    out = values[0]
    for value in values[1:]:
        out = out | value
    return out


class MemoryMaster(wiring.Component):
    """Interface attributes: ``fetch``, ``compute``, ``load`` (read ports, master side),
    ``store`` (write port, master side), ``axi`` (the AXI4 master), ``reads_in_flight``."""

    def __init__(self, config: VTAConfig):
        self._config = config
        super().__init__({
            **{name: In(ReadPortSignature(config.bus_width)) for name in READ_PRIORITY},
            "store": In(WritePortSignature(config.bus_width)),
            "axi": Out(Axi4Signature(data_width=config.bus_width)),
            "reads_in_flight": Out(range(config.dram_outstanding + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        axi = self.axi
        limit = self._config.dram_outstanding
        ports = [getattr(self, name) for name in READ_PRIORITY]

        outstanding = Signal(range(limit + 1))
        held = Signal()                       # an offered request was not accepted: keep its grant
        held_id = Signal(range(len(ports)))
        grant = Signal(range(len(ports)))
        any_valid = Signal()
        for index in reversed(range(len(ports))):
            with m.If(ports[index].ar.valid):
                m.d.comb += [grant.eq(index), any_valid.eq(1)]
        with m.If(held):
            m.d.comb += grant.eq(held_id)

        can_issue = outstanding < limit
        m.d.comb += [axi.arvalid.eq(any_valid & can_issue), axi.arid.eq(grant), axi.arburst.eq(0b01)]
        # The AR payload as an AND-OR of the requesters' payloads, not a multiplexer: Yosys' opt_share
        # merges the arithmetic cells that feed one multiplexer into one cell with grant-selected
        # inputs, which put one DMA engine's burst cutting on another's next-state path.
        for field in ("addr", "len", "size"):
            m.d.comb += getattr(axi, "ar" + field).eq(
                _any_of(Mux(grant == index, getattr(port.ar.payload, field), 0) for index, port in enumerate(ports)))
        for index, port in enumerate(ports):
            m.d.comb += port.ar.ready.eq((grant == index) & can_issue & axi.arready)
        ar_fire = axi.arvalid & axi.arready
        m.d.sync += [held.eq(axi.arvalid & ~axi.arready), held_id.eq(grant)]

        r_last = axi.rvalid & axi.rlast
        m.d.sync += [
            outstanding.eq(outstanding + ar_fire - r_last),
            Assert(~axi.rvalid | (outstanding != 0), "memory master: R beat with no read burst in flight"),
        ]
        m.d.comb += [axi.rready.eq(1), self.reads_in_flight.eq(outstanding)]
        for index, port in enumerate(ports):
            m.d.comb += [port.r.valid.eq(axi.rvalid & (axi.rid == index)),
                         port.r.payload.data.eq(axi.rdata), port.r.payload.last.eq(axi.rlast)]

        st = self.store
        m.d.comb += [
            axi.awvalid.eq(st.aw.valid), axi.awaddr.eq(st.aw.payload.addr), axi.awlen.eq(st.aw.payload.len),
            axi.awsize.eq(st.aw.payload.size), axi.awburst.eq(0b01), axi.awid.eq(0),
            st.aw.ready.eq(axi.awready),
            axi.wvalid.eq(st.w.valid), axi.wdata.eq(st.w.payload.data), axi.wstrb.eq(st.w.payload.strb),
            axi.wlast.eq(st.w.payload.last), st.w.ready.eq(axi.wready),
            axi.bready.eq(st.b.ready), st.b.valid.eq(axi.bvalid),
        ]
        return m
