"""``VTACore``: the decoupled access-execute accelerator of docs/architecture.md §2, minus the bus shell.

Fetch feeds three command queues; load, compute and store run their queues in order and
synchronise through four token queues; INP and WGT sit between load and compute, OUT between
compute and store; one memory master serves every DMA engine over AXI4. Around them: control
(``start`` with the instruction address and count, ``done``), status (a cycle counter, per-module
busy-cycle counters, GEMM and ALU micro-op counters) and an exact deadlock flag.
"""

from __future__ import annotations

from amaranth.hdl import Assert, Module
from amaranth.lib import fifo, memory, wiring
from amaranth.lib.wiring import In, Out

from vtakit.hw.bus import Axi4Signature
from vtakit.hw.compute import NO_RW_CHECK, ComputeModule
from vtakit.hw.config import VTAConfig
from vtakit.hw.fetch import FetchModule
from vtakit.hw.layouts import INDEX_BITS, command_layout
from vtakit.hw.load import LoadModule
from vtakit.hw.memory_master import MemoryMaster
from vtakit.hw.sequencer import RetireSignature, TokenSignature
from vtakit.hw.store import StoreModule

__all__ = ["VTACore", "TokenQueue", "COUNTERS", "TOKEN_QUEUES"]

#: Status counters, in register order (docs/registers.md).
COUNTERS = ("cycles", "busy_fetch", "busy_load", "busy_compute", "busy_store", "gemm_uops", "alu_uops")
#: Token queues: name -> (producer module, its flag, consumer module, its flag).
TOKEN_QUEUES = {
    "load_to_compute": ("load", "push_next", "compute", "pop_prev"),
    "compute_to_load": ("compute", "push_prev", "load", "pop_next"),
    "compute_to_store": ("compute", "push_next", "store", "pop_prev"),
    "store_to_compute": ("store", "push_prev", "compute", "pop_next"),
}


class TokenQueue(wiring.Component):
    """A dependency-token queue of ``depth`` tokens: a counter (tokens carry no data).

    A push is accepted when the count is below ``depth`` and a pop when it is above zero, both
    judged on the count at the start of the cycle; both may happen in the same cycle.
    """

    def __init__(self, depth: int):
        self._depth = depth
        super().__init__({"push": In(TokenSignature()), "pop": Out(TokenSignature()), "count": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        push = self.push.valid & self.push.ready
        pop = self.pop.valid & self.pop.ready
        m.d.comb += [self.push.ready.eq(self.count < self._depth), self.pop.valid.eq(self.count != 0)]
        m.d.sync += [
            self.count.eq(self.count + push - pop),
            Assert(~self.push.valid | self.push.ready, "token queue: push to a full queue"),
            Assert(~self.pop.ready | self.pop.valid, "token queue: pop from an empty queue"),
        ]
        return m


class VTACore(wiring.Component):
    """The accelerator core.

    Interface attributes
    --------------------
    start, insn_addr, insn_count : in
        ``start`` for one cycle launches ``insn_count`` instructions read from byte address
        ``insn_addr`` (16-byte aligned).
    done : out
        Set when FINISH retires, cleared by ``start``.
    running, deadlock : out
    <COUNTERS> : out, 32 bits each
    retire_load, retire_compute, retire_store : retire events (valid + program index)
    axi : the AXI4 master
    """

    def __init__(self, config: VTAConfig):
        self._config = config
        self.fetch = FetchModule(config)
        self.load = LoadModule(config)
        self.compute = ComputeModule(config)
        self.store = StoreModule(config)
        self.memory_master = MemoryMaster(config)
        self.token_queues = {name: TokenQueue(config.token_queue_depth) for name in TOKEN_QUEUES}
        self.command_queues = {name: fifo.SyncFIFO(width=command_layout(config).size, depth=config.cmd_queue_depth)
                               for name in ("load", "compute", "store")}
        super().__init__({
            "start": In(1), "insn_addr": In(32), "insn_count": In(INDEX_BITS),
            "done": Out(1), "running": Out(1), "deadlock": Out(1),
            **{name: Out(32) for name in COUNTERS},
            **{f"retire_{name}": Out(RetireSignature()) for name in ("load", "compute", "store")},
            "axi": Out(Axi4Signature(data_width=config.bus_width)),
        })

    @property
    def config(self) -> VTAConfig:
        return self._config

    def elaborate(self, platform):
        cfg = self._config
        m = Module()
        modules = {"load": self.load, "compute": self.compute, "store": self.store}
        m.submodules.fetch = fetch = self.fetch
        m.submodules.memory_master = master = self.memory_master
        for name, module in modules.items():
            m.submodules[name] = module
            m.submodules[f"{name}_queue"] = queue = self.command_queues[name]
            wiring.connect(m, getattr(fetch, f"to_{name}"), queue.w_stream)
            wiring.connect(m, queue.r_stream, module.cmd)
            wiring.connect(m, module.retire, wiring.flipped(getattr(self, f"retire_{name}")))
        for name, (producer, push_flag, consumer, pop_flag) in TOKEN_QUEUES.items():
            m.submodules[name] = queue = self.token_queues[name]
            wiring.connect(m, getattr(modules[producer], push_flag), queue.push)
            wiring.connect(m, queue.pop, getattr(modules[consumer], pop_flag))

        # Memory system.
        wiring.connect(m, fetch.mem, master.fetch)
        wiring.connect(m, self.compute.mem, master.compute)
        wiring.connect(m, self.load.mem, master.load)
        wiring.connect(m, self.store.mem, master.store)
        wiring.connect(m, master.axi, wiring.flipped(self.axi))

        # Scratchpads shared between modules (compute owns its uop and ACC memories). Their writer and
        # reader are different modules, which touch one entry in one cycle only in a program whose
        # tokens do not order them (a race, undefined anyway): NO_RW_CHECK lets synthesis drop the
        # old-data-on-collision logic behind the block RAM's read port.
        m.submodules.inp_mem = inp_mem = memory.Memory(shape=cfg.inp_elem_bits, depth=cfg.inp_depth, init=[],
                                                       attrs=NO_RW_CHECK)
        m.submodules.wgt_mem = wgt_mem = memory.Memory(shape=cfg.wgt_elem_bits, depth=cfg.wgt_depth, init=[],
                                                       attrs=NO_RW_CHECK)
        m.submodules.out_mem = out_mem = memory.Memory(shape=cfg.out_elem_bits, depth=cfg.out_depth, init=[],
                                                       attrs=NO_RW_CHECK)
        for port, mem in ((self.load.inp_wr, inp_mem), (self.load.wgt_wr, wgt_mem), (self.compute.out_wr, out_mem)):
            wp = mem.write_port()
            m.d.comb += [wp.en.eq(port.en), wp.addr.eq(port.addr), wp.data.eq(port.data)]
        for port, mem in ((self.compute.inp_rd, inp_mem), (self.compute.wgt_rd, wgt_mem), (self.store.out_rd, out_mem)):
            rp = mem.read_port()
            m.d.comb += [rp.en.eq(port.en), rp.addr.eq(port.addr), port.data.eq(rp.data)]

        # Control and status.
        m.d.comb += [fetch.start.eq(self.start), fetch.insn_addr.eq(self.insn_addr),
                     fetch.insn_count.eq(self.insn_count)]
        with m.If(self.running):
            m.d.sync += self.cycles.eq(self.cycles + 1)
            for module, counter in ((fetch, self.busy_fetch), (self.load, self.busy_load),
                                    (self.compute, self.busy_compute), (self.store, self.busy_store)):
                with m.If(module.busy):
                    m.d.sync += counter.eq(counter + 1)
            with m.If(self.compute.gemm_uop):
                m.d.sync += self.gemm_uops.eq(self.gemm_uops + 1)
            with m.If(self.compute.alu_uop):
                m.d.sync += self.alu_uops.eq(self.alu_uops + 1)
        with m.If(self.compute.finished):
            m.d.sync += [self.running.eq(0), self.done.eq(1)]
        with m.If(self.start):
            m.d.sync += [self.running.eq(1), self.done.eq(0)]
            m.d.sync += [getattr(self, name).eq(0) for name in COUNTERS]

        m.d.comb += self.deadlock.eq(self.running & fetch.blocked & self.load.blocked & self.compute.blocked
                                     & self.store.blocked)
        m.d.sync += Assert(~(self.start & self.running), "core: start while running")
        return m
