"""The fetch module: reads the instruction stream from DRAM and dispatches it in program order.

Instructions are read in bursts of up to ``FETCH_BURST`` instructions aligned to
``FETCH_BURST * 16`` bytes (so a burst never crosses 4 KiB) into an instruction buffer of
``FETCH_DEPTH`` entries; a burst is requested only when the buffer has room for all of it,
counting instructions already in flight, so R beats are always accepted. The head of the buffer
is dispatched, one per cycle, to the command queue of its module (VTA's routing: STORE -> store,
LOAD INP/WGT -> load, everything else -> compute); a full target queue stalls dispatch.
"""

from __future__ import annotations

from amaranth.hdl import Assert, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from vtakit.hw import isa
from vtakit.hw.bus import ReadPortSignature
from vtakit.hw.config import INSN_BITS, VTAConfig
from vtakit.hw.layouts import INDEX_BITS, command_layout, insn_layout

__all__ = ["FetchModule", "FETCH_BURST", "FETCH_DEPTH"]

#: Instructions per fetch burst (bursts are aligned to this many instructions).
FETCH_BURST = 4
#: Instruction buffer entries.
FETCH_DEPTH = 16


class FetchModule(wiring.Component):
    """Instruction fetch and dispatch.

    Interface attributes
    --------------------
    start, insn_addr, insn_count : in
        ``start`` (one cycle) latches the byte address (16-byte aligned) and the count.
    to_load, to_compute, to_store : out streams of command-queue entries
    mem : read port
    done : out
        Every instruction has been dispatched.
    blocked : out
        Done, or the buffer head waits for a full command queue (deadlock detection).
    """

    def __init__(self, config: VTAConfig):
        self._config = config
        entry = command_layout(config)
        super().__init__({
            "start": In(1), "insn_addr": In(32), "insn_count": In(INDEX_BITS),
            "to_load": Out(stream.Signature(entry)), "to_compute": Out(stream.Signature(entry)),
            "to_store": Out(stream.Signature(entry)),
            "mem": Out(ReadPortSignature(config.bus_width)),
            "done": Out(1), "blocked": Out(1), "busy": Out(1),
        })

    def elaborate(self, platform):
        cfg = self._config
        m = Module()
        bus = cfg.bus_width
        narrow = bus >= INSN_BITS
        log_size = exact_log2(INSN_BITS // 8) if narrow else exact_log2(bus // 8)
        beats_per_insn = 1 if narrow else INSN_BITS // bus

        # each entry: the instruction and its target queue, decoded as it is written (is_store, is_load),
        # so that dispatch does not decode the opcode behind the buffer's read port
        m.submodules.buffer = buffer = fifo.SyncFIFO(width=INSN_BITS + 2, depth=FETCH_DEPTH)
        w_insn = Signal(INSN_BITS)
        count = Signal(INDEX_BITS)
        remaining = Signal(INDEX_BITS)      # count - instructions requested (a register: no subtraction before AR)
        dispatched = Signal(INDEX_BITS)
        addr = Signal(32)
        in_flight = Signal(range(FETCH_DEPTH + 1))
        active = Signal()
        more = Signal()                     # remaining != 0, a register (no 32-bit OR before AR)

        # ---- requests: FETCH_BURST-aligned groups of instructions, when the buffer has room. ARVALID
        # and the AR payload are functions of registers only (the memory master's registered pick
        # depends on ARVALID): n, the next burst's instructions, is kept one request ahead, and free, the buffer
        # entries neither filled nor awaited (FETCH_DEPTH - level - in_flight), beside in_flight.
        def burst(rem, at):
            """Instructions in the burst from address ``at`` with ``rem`` left: up to the alignment."""
            to_align = FETCH_BURST - at[4:4 + exact_log2(FETCH_BURST)]
            low = exact_log2(FETCH_BURST) + 1
            return Mux((rem[low:] == 0) & (rem[:low] < to_align), rem[:low], to_align)

        n = Signal(range(FETCH_BURST + 1))
        free = Signal(range(FETCH_DEPTH + 1), init=FETCH_DEPTH)
        # n <= free as a lookup (no carry chain): room for a whole burst, or n against free's low bits
        low_free = exact_log2(FETCH_BURST)
        table = sum(1 << (f | (k << low_free)) for k in range(FETCH_BURST + 1) for f in range(FETCH_BURST) if k <= f)
        fits = (free[low_free:] != 0) | Const(table, (FETCH_BURST + 1) * FETCH_BURST * 2).bit_select(
            Cat(free[:low_free], n), 1)
        ar = self.mem.ar
        m.d.comb += [
            ar.valid.eq(active & more & fits),
            ar.payload.addr.eq(addr), ar.payload.size.eq(log_size),
            ar.payload.len.eq(n * beats_per_insn - 1),
        ]
        ar_fire = ar.valid & ar.ready

        # ---- beats: assemble instructions into the buffer.
        beat = Signal(range(max(beats_per_insn, 2)))
        word = Signal(INSN_BITS)
        complete = Signal()
        r = self.mem.r
        if narrow:
            lane = Signal(range(bus // 8))
            m.d.comb += [complete.eq(r.valid), w_insn.eq(r.payload.data >> (lane << 3))]
            with m.If(r.valid):
                m.d.sync += lane.eq(lane + 16)
            with m.If(self.start):
                m.d.sync += lane.eq(self.insn_addr)
        else:
            assembled = Signal(INSN_BITS)
            m.d.comb += [assembled.eq(word), assembled.word_select(beat, bus).eq(r.payload.data),
                         complete.eq(r.valid & (beat == beats_per_insn - 1)), w_insn.eq(assembled)]
            with m.If(r.valid):
                m.d.sync += [word.word_select(beat, bus).eq(r.payload.data), beat.eq(beat + 1)]
        incoming = data.View(insn_layout(isa.Opcode.LOAD, cfg), w_insn)
        w_store = incoming.opcode == isa.Opcode.STORE
        w_load = (incoming.opcode == isa.Opcode.LOAD) & ((incoming.memory_type == isa.MemId.INP)
                                                         | (incoming.memory_type == isa.MemId.WGT))
        m.d.comb += [buffer.w_en.eq(complete), buffer.w_data.eq(Cat(w_insn, w_store, w_load))]
        m.d.sync += Assert(~complete | buffer.w_rdy, "fetch: instruction buffer overflow")
        m.d.sync += in_flight.eq(in_flight + Mux(ar_fire, n, 0) - complete)
        with m.If(ar_fire):
            m.d.sync += [remaining.eq(remaining - n), more.eq(remaining != n), addr.eq(addr + (n << 4)),
                         n.eq(burst(remaining - n, addr + (n << 4)))]

        # ---- dispatch the buffer head.
        head = buffer.r_data[:INSN_BITS]
        is_store, is_load = buffer.r_data[INSN_BITS], buffer.r_data[INSN_BITS + 1]
        targets = ((self.to_store, is_store), (self.to_load, is_load), (self.to_compute, ~is_store & ~is_load))
        target_ready = Signal()
        for queue, selected in targets:
            m.d.comb += [queue.payload.insn.eq(head), queue.payload.index.eq(dispatched),
                         queue.valid.eq(buffer.r_rdy & selected)]
            with m.If(selected):
                m.d.comb += target_ready.eq(queue.ready)
        dispatch = buffer.r_rdy & target_ready
        m.d.comb += buffer.r_en.eq(dispatch)
        with m.If(dispatch):
            m.d.sync += dispatched.eq(dispatched + 1)
        # dispatch only selects (an AND-OR, which Yosys' opt_share leaves alone) between two sums of registers
        free_next = Signal.like(free)
        m.d.comb += free_next.eq(free - Mux(ar_fire, n, 0))
        m.d.sync += free.eq(Mux(dispatch, free_next + 1, 0) | Mux(dispatch, 0, free_next))
        m.d.sync += Assert(free == FETCH_DEPTH - buffer.level - in_flight, "fetch: free count out of step")

        with m.If(self.start):
            m.d.sync += [active.eq(1), count.eq(self.insn_count), remaining.eq(self.insn_count),
                         more.eq(self.insn_count != 0), n.eq(burst(self.insn_count, self.insn_addr)),
                         dispatched.eq(0),
                         addr.eq(self.insn_addr), in_flight.eq(0), beat.eq(0)]
        done = active & (dispatched == count)
        m.d.comb += [
            self.done.eq(done),
            self.busy.eq(active & ~done),
            self.blocked.eq(done | (buffer.r_rdy & ~target_ready)),
        ]
        return m
