"""The memory master: one AXI4 port shared by the core's DMA engines.

Read requests from fetch, compute and load are arbitrated with a fixed priority in that order
(``READ_PRIORITY``) by a **registered grant** (docs/timing.md §5): in cycle c the arbiter picks,
among the requesters presenting a request in c other than the one whose burst the AR channel
carries in c, the highest-priority one, if fewer than DRAM_OUTSTANDING read bursts will be in
flight in c + 1 (counted from the accepted request to its last R beat); it registers that
request's payload and ID, drives them on AR from c + 1 and answers the requester's ``ready`` in
the cycle of the AR handshake. So no path runs from one requester's request logic through the
arbiter into any requester's next-state logic: ``ready`` and the AR channel come from registers.
A request presented from cycle p is accepted in p + 1 at the earliest, one burst per cycle over
all requesters, one every other cycle for one requester alone. Each read burst carries its
requester's index as AXI ID, and the R beats are routed back by ID; R and B are always ready. The
only writer, store, drives the write channels directly (ID 0).

The AR register holds while ARVALID is high and ARREADY low, so the AR payload is stable, as AXI4
requires; a requester keeps presenting its request until it is accepted.
"""

from __future__ import annotations

from amaranth.hdl import Assert, Const, Module, Mux, Signal
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
        # the AR register: the request picked in the previous cycle, driven on AR until accepted
        ar_valid = Signal()
        # the pick one-hot, a flip-flop per requester (not a decoded ID register): Yosys' share pass cannot
        # prove two requesters' acceptances exclusive then, so it does not merge two DMA engines'
        # next-address adders into one behind input multiplexers; the AXI ID is encoded from it
        to = [Signal(name=f"ar_to_{name}") for name in READ_PRIORITY]
        ar_fields = {field: Signal.like(getattr(axi, "ar" + field), name=f"ar_{field}")
                     for field in ("addr", "len", "size")}
        m.d.comb += [axi.arvalid.eq(ar_valid), axi.arid.eq(_any_of(Mux(reg, index, 0) for index, reg in enumerate(to))),
                     axi.arburst.eq(0b01)]
        m.d.comb += [getattr(axi, "ar" + field).eq(reg) for field, reg in ar_fields.items()]
        ar_fire = ar_valid & axi.arready
        for index, port in enumerate(ports):
            m.d.comb += port.ar.ready.eq(to[index] & axi.arready)
            # a requester presents its request until it is accepted (its payload unchanged)
            m.d.sync += Assert(~to[index] | port.ar.valid,
                               f"memory master: {READ_PRIORITY[index]} withdrew a granted read request")

        r_last = axi.rvalid & axi.rlast
        # Bursts in flight from the next cycle on: the picked request is accepted there only below O.
        room = Signal()
        m.d.comb += room.eq(Mux(ar_fire & ~r_last, outstanding < limit - 1, Mux(~ar_fire & r_last, 1, outstanding < limit)))
        # the candidates: presenting, and not the request the AR register carries (its requester
        # still presents it in the cycle it is accepted)
        candidates = [port.ar.valid & ~to[index] for index, port in enumerate(ports)]
        pick = Signal(range(len(ports)))
        for index in reversed(range(len(ports))):
            with m.If(candidates[index]):
                m.d.comb += pick.eq(index)
        with m.If(~ar_valid | axi.arready):
            m.d.sync += ar_valid.eq(_any_of(candidates) & room)
            for index, reg in enumerate(to):
                higher = _any_of(candidates[:index]) if index else Const(0, 1)
                m.d.sync += reg.eq(candidates[index] & ~higher & room)
            # the payload as an AND-OR of the requesters' payloads, not a multiplexer: Yosys' opt_share
            # would merge the arithmetic cells that feed one multiplexer into one cell with
            # pick-selected inputs
            for field, reg in ar_fields.items():
                m.d.sync += reg.eq(_any_of(Mux(pick == index, getattr(port.ar.payload, field), 0)
                                           for index, port in enumerate(ports)))

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
