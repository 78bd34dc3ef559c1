"""A simulated board for :mod:`vtakit.runtime.fpga`: the Amaranth simulation of the full shell.

:class:`SimulatedShell` runs :class:`vtakit.hw.shell.VTAShell` (core plus AXI4-Lite register file)
in the Amaranth simulator. Its :meth:`~SimulatedShell.read32` / :meth:`~SimulatedShell.write32`
are AXI4-Lite transactions on ``s_axil`` (AW+W then B; AR then R), and the simulation advances
only while a transaction is in flight, as a host's bus accesses would see the hardware. Behind
the shell's AXI4 master sits the DRAM model of :mod:`vtakit.sim.rtl` (same latency and burst
rules), serving the bytes of a :class:`SimBuffer`: a "physically contiguous" buffer at
``phys_addr`` whose ``flush``/``invalidate`` calls are recorded (``calls``) so that tests can
check the driver's cache handling. An access of the core outside the buffer raises
:class:`~vtakit.errors.MemoryAccessError`.

This is the test double of a PYNQ board: ``FPGADevice(shell, shell.buffer, config)``.
"""

from __future__ import annotations


import numpy as np
from amaranth.hdl import Cat, Elaboratable, Module, Signal
from amaranth.sim import Simulator

from vtakit.errors import MemoryAccessError, SimError
from vtakit.hw.config import VTAConfig
from vtakit.hw.shell import VTAShell
from vtakit.sim.rtl import AxiResponder, DramModel

__all__ = ["SimBuffer", "SimulatedShell"]


class SimBuffer:
    """A DMA buffer for the simulated board: ``size`` zeroed bytes at physical address ``phys_addr``.

    ``calls`` records ``"flush"`` and ``"invalidate"`` in order; ``array`` is the uint8 view.
    """

    def __init__(self, size: int, phys_addr: int = 0x1000_0000):
        if phys_addr % 4096 or size <= 0 or phys_addr + size > 1 << 32:
            raise MemoryAccessError(f"simulated buffer of {size} bytes at {phys_addr:#x} must be page-aligned "
                                    "and inside the 32-bit address space")
        self.phys_addr = phys_addr
        self.array = np.zeros(size, dtype=np.uint8)
        self.calls: list[str] = []

    @property
    def size(self) -> int:
        return self.array.size

    def flush(self) -> None:
        self.calls.append("flush")

    def invalidate(self) -> None:
        self.calls.append("invalidate")


class _BufferDram(DramModel):
    """The rtl harness's DRAM model, at the buffer's physical address."""

    def __init__(self, buffer: SimBuffer, config: VTAConfig):
        super().__init__(buffer.array, config)
        self.base = buffer.phys_addr

    def _local(self, addr: int, length: int, size: int, what: str) -> int:
        nbytes = (length + 1) << size
        local = addr - self.base
        if local < 0 or local + nbytes > self.dram.size:
            raise MemoryAccessError(f"AXI4 {what} of {nbytes} bytes at {addr:#x} is outside the DMA buffer "
                                    f"[{self.base:#x}, {self.base + self.dram.size:#x})")
        return local

    def read_request(self, cycle: int, addr: int, length: int, size: int, axi_id: int) -> None:
        super().read_request(cycle, self._local(addr, length, size, "read"), length, size, axi_id)

    def write_request(self, addr: int, length: int, size: int) -> None:
        super().write_request(self._local(addr, length, size, "write"), length, size)


class _ShellProbe(Elaboratable):
    """The shell plus one signal packing what the harness samples each cycle (see rtl._Probe)."""

    def __init__(self, shell: VTAShell):
        self.shell = shell
        axi, lite = shell.m_axi, shell.s_axil
        fields = {
            "arvalid": axi.arvalid, "awvalid": axi.awvalid, "wvalid": axi.wvalid,
            "l_awready": lite.awready, "l_bvalid": lite.bvalid, "l_arready": lite.arready, "l_rvalid": lite.rvalid,
            "araddr": axi.araddr, "arlen": axi.arlen, "arsize": axi.arsize, "arid": axi.arid,
            "awaddr": axi.awaddr, "awlen": axi.awlen, "awsize": axi.awsize, "wlast": axi.wlast, "wdata": axi.wdata,
            "l_rdata": lite.rdata,
        }
        self.offsets = {}
        offset = 0
        for name, sig in fields.items():
            self.offsets[name] = (offset, len(sig))
            offset += len(sig)
        self._fields = fields
        self.signal = Signal(offset)

    def elaborate(self, platform):
        m = Module()
        m.submodules.shell = self.shell
        m.d.comb += self.signal.eq(Cat(*self._fields.values()))
        return m

    def field(self, value: int, name: str) -> int:
        offset, width = self.offsets[name]
        return (value >> offset) & ((1 << width) - 1)


class _Txn:
    def __init__(self, write: bool, addr: int, data: int = 0):
        self.write, self.addr, self.data = write, addr, data
        self.done = False


class SimulatedShell:
    """The shell of ``config`` in simulation, with a :class:`SimBuffer` of ``size`` bytes as its DRAM.

    Implements the driver's MMIO interface (``read32``/``write32`` at a byte offset of the
    register map). ``cycle`` is the simulated clock cycle count.
    """

    #: A single AXI4-Lite transaction that takes longer than this many cycles is a harness bug.
    MAX_TXN_CYCLES = 64

    def __init__(self, config: VTAConfig, size: int = 1 << 20, phys_addr: int = 0x1000_0000):
        self.config = config
        self.buffer = SimBuffer(size, phys_addr)
        self._dram = _BufferDram(self.buffer, config)
        self._probe = _ShellProbe(VTAShell(config))
        self._txn: _Txn | None = None
        self.cycle = 0
        self.transactions = 0
        self._sim: Simulator | None = None      # made on the first register access

    # ------------------------------------------------------------------ MMIO
    def read32(self, offset: int) -> int:
        return self._transact(_Txn(False, offset))

    def write32(self, offset: int, value: int) -> None:
        self._transact(_Txn(True, offset, value & 0xFFFF_FFFF))

    def _transact(self, txn: _Txn) -> int:
        if not 0 <= txn.addr < 1 << 8:
            raise SimError(f"register offset {txn.addr:#x} is outside the shell's 8-bit AXI4-Lite address space")
        if self._sim is None:
            self._sim = Simulator(self._probe)
            self._sim.add_clock(1e-8)
            self._sim.add_process(self._harness)
        self._txn = txn
        start = self.cycle
        while not txn.done:
            self._sim.advance()
            if self.cycle - start > self.MAX_TXN_CYCLES:
                raise SimError(f"AXI4-Lite {'write' if txn.write else 'read'} at {txn.addr:#x} got no response "
                               f"in {self.MAX_TXN_CYCLES} cycles")
        self._txn = None
        self.transactions += 1
        return txn.data

    # ------------------------------------------------------------------ the simulation
    async def _harness(self, ctx):
        probe, dram = self._probe, self._dram
        f = probe.field
        shell = probe.shell
        lite = shell.s_axil
        memory = AxiResponder(ctx, shell.m_axi, dram)
        ctx.set(lite.bready, 1)
        ctx.set(lite.rready, 1)
        ctx.set(lite.wstrb, 0xF)
        active: _Txn | None = None     # the AXI4-Lite transaction on the bus
        phase = 0                      # 1: address (and data) valid, 2: waiting for B / R
        cycle = 0
        async for _, _, value in ctx.tick().sample(probe.signal):
            # `value` holds the signals of cycle `cycle`.
            if value & 1:
                dram.read_request(cycle, f(value, "araddr"), f(value, "arlen"), f(value, "arsize"), f(value, "arid"))
            if value & 2:
                dram.write_request(f(value, "awaddr"), f(value, "awlen"), f(value, "awsize"))
            if value & 4:
                memory.write_beat(cycle, f(value, "wdata"), bool(f(value, "wlast")))
            if active is not None:
                if active.write:
                    if phase == 1 and f(value, "l_awready"):
                        ctx.set(lite.awvalid, 0)
                        ctx.set(lite.wvalid, 0)
                        phase = 2
                    elif phase == 2 and f(value, "l_bvalid"):
                        active.done, active = True, None
                else:
                    if phase == 1 and f(value, "l_arready"):
                        ctx.set(lite.arvalid, 0)
                        phase = 2
                    elif phase == 2 and f(value, "l_rvalid"):
                        active.data = f(value, "l_rdata")
                        active.done, active = True, None
            cycle += 1
            self.cycle = cycle
            if active is None and self._txn is not None and not self._txn.done:
                active, phase = self._txn, 1
                if active.write:
                    ctx.set(lite.awaddr, active.addr)
                    ctx.set(lite.wdata, active.data)
                    ctx.set(lite.awvalid, 1)
                    ctx.set(lite.wvalid, 1)
                else:
                    ctx.set(lite.araddr, active.addr)
                    ctx.set(lite.arvalid, 1)
            memory.drive(cycle)              # R and B of the AXI4 master for the next cycle
