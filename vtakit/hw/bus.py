"""Bus interfaces: the core's internal DMA request ports and the external AXI4 / AXI4-Lite ports.

Inside the core every DMA engine talks to the memory master through a pair of streams (read:
AR requests out, R beats in; write: AW and W out, B in) carrying AXI4 fields. Outside, the
memory master is a plain AXI4 master (flat, AXI-named members so the generated Verilog reads like
any AXI IP) and the shell adds an AXI4-Lite slave for the control registers.

Conventions shared by every engine (docs/timing.md §DMA): INCR bursts only; a beat carries one
DRAM element when the element is at most a bus word (a narrow transfer, ``size`` = log2 element
bytes, data on the byte lanes of its address, as AXI4 requires), else ``element / bus`` full-width
beats; bursts never cross a 4 KiB boundary and never exceed 256 beats; R and B are always ready.
"""

from __future__ import annotations

from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ADDR_BITS", "ID_BITS", "ar_layout", "r_layout", "w_layout", "HandshakeSignature",
           "ReadPortSignature", "WritePortSignature", "Axi4Signature", "AxiLiteSignature",
           "MAX_BURST_BEATS", "BOUNDARY_BYTES"]

ADDR_BITS = 32
ID_BITS = 2
MAX_BURST_BEATS = 256
BOUNDARY_BYTES = 4096


def ar_layout() -> data.StructLayout:
    """AR/AW request: byte address, beats - 1, log2 bytes per beat."""
    return data.StructLayout({"addr": unsigned(ADDR_BITS), "len": unsigned(8), "size": unsigned(3)})


def r_layout(bus_width: int) -> data.StructLayout:
    return data.StructLayout({"data": unsigned(bus_width), "last": unsigned(1)})


def w_layout(bus_width: int) -> data.StructLayout:
    return data.StructLayout({"data": unsigned(bus_width), "strb": unsigned(bus_width // 8),
                              "last": unsigned(1)})


class HandshakeSignature(wiring.Signature):
    """A valid/ready handshake without payload (tokens, B responses), source side."""

    def __init__(self):
        super().__init__({"valid": Out(1), "ready": In(1)})


class ReadPortSignature(wiring.Signature):
    """A DMA engine's read port, engine side: AR requests out, R beats in (always accepted)."""

    def __init__(self, bus_width: int):
        super().__init__({
            "ar": Out(stream.Signature(ar_layout())),
            "r": In(stream.Signature(r_layout(bus_width), always_ready=True)),
        })


class WritePortSignature(wiring.Signature):
    """A DMA engine's write port, engine side: AW and W out, B responses in (always accepted)."""

    def __init__(self, bus_width: int):
        super().__init__({
            "aw": Out(stream.Signature(ar_layout())),
            "w": Out(stream.Signature(w_layout(bus_width))),
            "b": In(HandshakeSignature()),
        })


class Axi4Signature(wiring.Signature):
    """An AXI4 master port (INCR bursts; no locks, caches, QoS or regions), master side."""

    def __init__(self, *, data_width: int, addr_width: int = ADDR_BITS, id_width: int = ID_BITS):
        members = {}
        for ch in ("ar", "aw"):
            members.update({f"{ch}valid": Out(1), f"{ch}ready": In(1), f"{ch}addr": Out(addr_width),
                            f"{ch}id": Out(id_width), f"{ch}len": Out(8), f"{ch}size": Out(3),
                            f"{ch}burst": Out(2)})
        members.update({"rvalid": In(1), "rready": Out(1), "rdata": In(data_width), "rid": In(id_width),
                        "rresp": In(2), "rlast": In(1),
                        "wvalid": Out(1), "wready": In(1), "wdata": Out(data_width),
                        "wstrb": Out(data_width // 8), "wlast": Out(1),
                        "bvalid": In(1), "bready": Out(1), "bid": In(id_width), "bresp": In(2)})
        super().__init__(members)


class AxiLiteSignature(wiring.Signature):
    """An AXI4-Lite slave port (32-bit data), slave side."""

    def __init__(self, *, addr_width: int = 12):
        super().__init__({
            "awvalid": In(1), "awready": Out(1), "awaddr": In(addr_width),
            "wvalid": In(1), "wready": Out(1), "wdata": In(32), "wstrb": In(4),
            "bvalid": Out(1), "bready": In(1), "bresp": Out(2),
            "arvalid": In(1), "arready": Out(1), "araddr": In(addr_width),
            "rvalid": Out(1), "rready": In(1), "rdata": Out(32), "rresp": Out(2),
        })
