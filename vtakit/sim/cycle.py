"""The ``cycle`` backend: an event-driven model of docs/timing.md, cycle-exact to the RTL.

Users need cycle counts for whole layers in seconds, not the hours an RTL simulation takes. This
model evaluates the core only in the cycles where something happens and jumps over the rest: a
GEMM of N micro-ops finishes ``N + 1`` cycles after it starts (one event, however long it is), a
DMA transfer is a handful of events per AXI burst (its acceptance, its last beat), fetch is a
few events per instruction. Every rule comes from docs/timing.md; the comments cite its sections.

Within an evaluated cycle ``c`` every decision reads the state at the start of ``c`` and its effect
is visible from ``c + 1`` (§1), exactly as the registers of the RTL behave:

* the read arbiter accepts at most one burst (fetch > compute > load) while fewer than
  DRAM_OUTSTANDING bursts are in flight; the DRAM serves accepted bursts in order on one data
  channel, so a burst's beat cycles are known the moment it is accepted (§5);
* fetch presents a request when its buffer has room for it (``requested - dispatched + n <= 16``)
  and dispatches its head, once complete, into a command queue with room (§2);
* each module steps IDLE -> WAIT -> EXEC -> RETIRE (§3) with the finish cycle of §4.

After evaluating ``c`` the model asks every component for the earliest cycle in which it could act
on its own (an instruction's known finish cycle, a burst's presentation, the first cycle a slot of
the outstanding-read window frees, a fetched instruction becoming complete, a take/pop/push that
is possible now) and jumps to the minimum. When no component can ever act again and FINISH has not
retired, the program is deadlocked, which is what the RTL's exact deadlock flag reports (§6).

Data is the functional simulator's: each instruction's effect is applied with
:class:`vtakit.sim.machine.Machine` in the cycle it starts, with fsim's static checks
(:func:`vtakit.sim.fsim.check_program`) and its happens-before race detector
(:class:`vtakit.sim.hb.RaceDetector`) fed by this model's own schedule (take, pops, pushes) -- a
valid schedule of the same Kahn network, so the DRAM result is fsim's, byte for byte.

Statistics per module (``RunStats``): ``busy_cycles`` is the RTL's counter (EXEC cycles plus the
retire cycle; fetch: cycles until everything is dispatched). ``token_stall_cycles``: cycles a
module waited in WAIT for a token or in RETIRE for room in a token queue (fetch: cycles its head
waited for room in a full command queue). ``memory_stall_cycles``: the part of the busy cycles a
DMA instruction spent waiting for DRAM, i.e. EXEC cycles in which it neither wrote a pad nor
received a beat (store: the cycle waiting for the last write response; fetch: cycles with an
empty instruction buffer). ``idle_cycles`` is the rest of 1..cycles (an empty command queue plus
the take and start cycle of each instruction). ``launch.trace`` (a ``.json`` path) gets the
timeline of :mod:`vtakit.sim.timeline`.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from vtakit.errors import DeadlockError, MemoryAccessError, ProgramError, SimError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, FinishInsn, GemmInsn, MemId, MemInsn, Opcode
from vtakit.sim.backend import Launch
from vtakit.sim.fsim import check_finish, check_program
from vtakit.sim.hb import MODULES, RaceDetector
from vtakit.sim.machine import QUEUE_NAMES, Machine, describe
from vtakit.sim.stats import RunStats

__all__ = ["execute", "simulate", "CycleRun", "InsnTiming", "FETCH_BURST", "FETCH_DEPTH"]

#: Instructions per fetch burst (bursts are aligned groups) and instruction-buffer entries (§2).
FETCH_BURST = 4
FETCH_DEPTH = 16
_MAX_BURST = 256
_BOUNDARY = 4096
_LOAD, _COMPUTE, _STORE = range(3)
_READ_PRIORITY = (_COMPUTE, _LOAD)      # after fetch (§5)
_IDLE, _WAIT, _EXEC, _RETIRE = range(4)
_NEVER = 1 << 62


@dataclass
class InsnTiming:
    """When one instruction went through its module (cycles; -1 where not applicable).

    ``taken``: the IDLE cycle it left its command queue; ``started``: its last WAIT cycle (the
    cycle of its last pop), so EXEC runs ``started + 1 .. finished``; ``retired``: its retire
    cycle. ``dispatched``/``fetched``: the cycle fetch dispatched it and the cycle its last beat
    arrived. ``pads``: zero entries a LOAD wrote; ``beats``: (first, last) beat cycles of each
    read burst of a LOAD (empty otherwise); ``write_beats``: beats of a STORE.
    """

    module: int
    fetched: int = -1
    dispatched: int = -1
    taken: int = -1
    started: int = -1
    finished: int = -1
    retired: int = -1
    pads: int = 0
    beats: list[tuple[int, int]] = field(default_factory=list)
    write_beats: int = 0

    @property
    def memory_stall(self) -> int:
        """EXEC cycles in which this DMA instruction neither wrote a pad nor moved a beat."""
        if self.beats:
            received = sum(last - first + 1 for first, last in self.beats)
            return self.finished - self.started - self.pads - received
        if self.write_beats:
            return self.finished - self.started - self.write_beats
        return 0


@dataclass
class CycleRun:
    """What :func:`simulate` returns: the machine (final SRAM state), stats, per-instruction timing and
    ``events``, the number of cycles the model evaluated (all others were jumped over)."""

    machine: Machine
    stats: RunStats
    timing: list[InsnTiming]
    events: int


class _Memory:
    """The read side of the memory system (§5): arbitration window and the in-order DRAM channel."""

    __slots__ = ("latency", "limit", "in_flight", "channel_last", "read_bytes", "bursts")

    def __init__(self, config: VTAConfig) -> None:
        self.latency = config.dram_latency
        self.limit = config.dram_outstanding
        self.in_flight: deque[int] = deque()   # last-beat cycles of accepted bursts (ascending)
        self.channel_last = -1                 # last beat cycle of the latest accepted burst
        self.read_bytes = 0
        self.bursts: list[tuple[str, int, int]] = []   # (requester, first beat, last beat), for timelines

    def accept(self, cycle: int, beats: int, beat_bytes: int, requester: str) -> int:
        """Accept a burst of ``requester`` in ``cycle``; returns the cycle of its first beat."""
        first = max(cycle + self.latency, self.channel_last + 1)
        self.channel_last = first + beats - 1
        self.bursts.append((requester, first, self.channel_last))
        self.in_flight.append(self.channel_last)
        self.read_bytes += beats * beat_bytes
        return first

    def window_open(self, cycle: int) -> int:
        """The first cycle >= ``cycle`` in which fewer than DRAM_OUTSTANDING bursts are in flight."""
        flight = self.in_flight
        while flight and flight[0] < cycle:
            flight.popleft()
        if len(flight) < self.limit:
            return cycle
        return flight[len(flight) - self.limit] + 1


class _ReadDma:
    """A module's 2-D load engine while it runs one LOAD: its remaining bursts and when it presents."""

    __slots__ = ("bursts", "next", "present_from", "beat_bytes", "timing")

    def __init__(self, bursts: list[int], present_from: int, beat_bytes: int, timing: InsnTiming) -> None:
        self.bursts = bursts
        self.next = 0
        self.present_from = present_from
        self.beat_bytes = beat_bytes
        self.timing = timing


class _Module:
    """One execution module's sequencer state (§3)."""

    __slots__ = ("index", "state", "commands", "current", "pops", "pushes", "step", "finish", "dma", "timing")

    def __init__(self, index: int) -> None:
        self.index = index
        self.state = _IDLE
        self.commands: deque[int] = deque()
        self.current = -1
        self.pops: tuple[int, ...] = ()
        self.pushes: tuple[int, ...] = ()
        self.step = 0
        self.finish = _NEVER          # finish cycle e, once known
        self.dma: _ReadDma | None = None
        self.timing: InsnTiming | None = None


def _bursts(row_beats: int, rows: int, base: int, stride: int, beat_bytes: int) -> list[int]:
    """Beats of each AXI burst of a 2-D transfer: rows cut at 256 beats and at 4 KiB (§4)."""
    out = []
    mask = 0xFFFFFFFF
    for y in range(rows):
        addr = (base + y * stride) & mask
        left = row_beats
        while left:
            beats = min(left, _MAX_BURST, (_BOUNDARY - (addr & (_BOUNDARY - 1))) // beat_bytes)
            out.append(beats)
            addr = (addr + beats * beat_bytes) & mask
            left -= beats
    return out


class _Core:
    """The whole core for one launch: fetch, memory, modules, token queues, and the data machine."""

    def __init__(self, launch: Launch) -> None:
        config = launch.config
        self.config = config
        self.insns = launch.insns
        self.routes = check_program(self.insns, config)
        self.executed: list[list[int]] = [[] for _ in MODULES]
        self.hb = RaceDetector(config, lambda m, epoch: describe(self.executed[m][epoch - 1],
                                                                 self.insns[self.executed[m][epoch - 1]]))
        self.machine = Machine(config, launch.dram, self.hb)
        self.totals = [sum(1 for r in self.routes if r.module == m) for m in range(len(MODULES))]
        self.memory = _Memory(config)
        self.modules = [_Module(m) for m in range(len(MODULES))]
        self.tokens: list[deque] = [deque() for _ in QUEUE_NAMES]
        self.timing = [InsnTiming(r.module) for r in self.routes]
        self.bus = config.bus_bytes
        self.elem_bytes = {MemId.INP: config.inp_elem_bytes, MemId.WGT: config.wgt_elem_bytes,   # DRAM side (§4)
                           MemId.UOP: config.uop_elem_bytes, MemId.ACC: config.acc_elem_bytes,
                           MemId.ACC_8BIT: config.acc8_elem_bytes}
        # fetch (§2)
        self.count = len(self.insns)
        self.slot0 = launch.insn_addr // isa.INSN_BYTES
        self.insn_beats = max(1, isa.INSN_BYTES // self.bus)
        self.requested = 0
        self.fetch_next = self._fetch_burst()          # instructions in fetch's next request (0: all requested)
        self.token_depth = config.token_queue_depth
        self.cmd_depth = config.cmd_queue_depth
        self.dispatched = 0
        self.complete: list[int] = [0] * self.count   # cycle each requested instruction's last beat arrives
        self.done_cycle = -1
        self.write_bytes = 0
        self.events = 0                                # cycles evaluated (the rest were jumped over)
        self.token_cycle = 0                           # the last cycle a token was popped or pushed
        # (cycle, queue, tokens from that cycle on), kept only for timelines
        self.token_log: list[tuple[int, int, int]] | None = [] if launch.trace is not None else None

    # ------------------------------------------------------------------ helpers
    def _fetch_burst(self) -> int:
        """Instructions in fetch's next request (0 when everything is requested)."""
        left = self.count - self.requested
        return min(left, FETCH_BURST - (self.slot0 + self.requested) % FETCH_BURST)

    def _fetch_presents(self) -> bool:
        """Fetch presents its next request: there is one, and the buffer has room for all of it (§2)."""
        n = self.fetch_next
        return n > 0 and self.requested - self.dispatched + n <= FETCH_DEPTH

    def _start(self, mod: _Module, cycle: int) -> None:
        """The instruction's last pop happened in ``cycle``: apply its data effect, time its datapath."""
        index = mod.current
        insn = self.insns[index]
        timing = mod.timing
        timing.started = cycle
        s = cycle + 1
        self.hb.module = mod.index
        if isinstance(insn, FinishInsn):
            check_finish(self.hb, self.routes, self.insns, index)
        else:
            self.machine.apply(insn, index, validate=False)
        mod.finish = s
        if isinstance(insn, (GemmInsn, AluInsn)):
            n = insn.iter_out * insn.iter_in * max(0, insn.uop_end - insn.uop_bgn)
            if n:
                mod.finish = s + n + 1
        elif isinstance(insn, MemInsn) and insn.x_size:
            if insn.opcode == Opcode.STORE:
                self._start_store(mod, insn, s)
            else:
                self._start_load(mod, insn, s)

    def _start_load(self, mod: _Module, insn: MemInsn, s: int) -> None:
        elem = self.elem_bytes[insn.memory_type]
        width = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        height = insn.y_pad_0 + insn.y_size + insn.y_pad_1
        data = insn.x_size * insn.y_size
        pads = height * width - data
        mod.timing.pads = pads
        if not data:
            mod.finish = s + max(pads, 1) - 1
            return
        beat = min(elem, self.bus)
        bursts = _bursts(insn.x_size * (elem // beat), insn.y_size, insn.dram_base * elem, insn.x_stride * elem, beat)
        mod.dma = _ReadDma(bursts, s + max(0, pads - self.config.dram_latency), beat, mod.timing)
        mod.finish = _NEVER

    def _start_store(self, mod: _Module, insn: MemInsn, s: int) -> None:
        elem = self.config.out_elem_bytes
        beat = min(elem, self.bus)
        total = insn.x_size * insn.y_size * (elem // beat)
        mod.timing.write_beats = total
        self.write_bytes += total * beat
        mod.finish = s + total

    # ------------------------------------------------------------------ one evaluated cycle
    def step(self, c: int) -> None:
        """Evaluate cycle ``c``: every decision on the state at the start of ``c`` (§1)."""
        memory = self.memory
        modules = self.modules
        tokens = self.tokens
        hb = self.hb

        # Read arbitration (§5): one burst per cycle, fetch > compute > load, window permitting.
        flight = memory.in_flight           # memory.window_open(c) == c, inlined
        while flight and flight[0] < c:
            flight.popleft()
        if len(flight) < memory.limit:
            n = self.fetch_next
            if n and self.requested - self.dispatched + n <= FETCH_DEPTH:      # _fetch_presents(), inlined
                k = self.insn_beats
                first = memory.accept(c, n * k, min(isa.INSN_BYTES, self.bus), "fetch")
                for j in range(self.requested, self.requested + n):
                    first += k
                    self.complete[j] = self.timing[j].fetched = first - 1
                self.requested += n
                self.fetch_next = self._fetch_burst()
            else:
                for m in _READ_PRIORITY:
                    dma = modules[m].dma
                    if dma is not None and dma.present_from <= c:
                        beats = dma.bursts[dma.next]
                        first = memory.accept(c, beats, dma.beat_bytes, MODULES[m])
                        dma.timing.beats.append((first, first + beats - 1))
                        dma.next += 1
                        dma.present_from = c + 1
                        if dma.next == len(dma.bursts):
                            modules[m].finish = first + beats - 1
                            modules[m].dma = None
                        break

        # Modules (§3). Pops see the token counts at the start of c (pushes come after them below).
        popped = pushed = taken = 0          # bit masks over queues / modules
        for mod in modules:
            state = mod.state
            if state == _IDLE:
                if mod.commands:
                    index = mod.commands.popleft()
                    taken |= 1 << mod.index
                    route = self.routes[index]
                    mod.current, mod.pops, mod.pushes, mod.step = index, route.pops, route.pushes, 0
                    mod.state = _WAIT
                    mod.timing = self.timing[index]
                    mod.timing.taken = c
                    hb.begin(mod.index)
                    self.executed[mod.index].append(index)
            elif state == _WAIT:
                pops = mod.pops
                while mod.step < len(pops) and tokens[pops[mod.step]]:
                    q = pops[mod.step]
                    hb.join(mod.index, tokens[q].popleft())
                    popped |= 1 << q
                    mod.step += 1
                if mod.step == len(pops):
                    self._start(mod, c)
                    mod.state = _EXEC
            elif state == _EXEC:
                if mod.finish == c:
                    mod.state, mod.step = _RETIRE, 0
                    mod.timing.finished = c
        depth = self.token_depth
        for mod in modules:
            if mod.state != _RETIRE or mod.timing.finished == c:   # entered RETIRE this cycle: acts from c + 1
                continue
            pushes = mod.pushes
            while mod.step < len(pushes):
                q = pushes[mod.step]
                # the count at the start of c: one pusher per queue, so only this cycle's pop differs
                if len(tokens[q]) + (popped >> q & 1) >= depth:
                    break
                tokens[q].append(hb.snapshot(mod.index))
                pushed |= 1 << q
                mod.step += 1
            if mod.step == len(pushes):
                mod.timing.retired = c
                mod.state = _IDLE
                if mod.current == self.count - 1:          # FINISH: the last instruction (check_program)
                    self.done_cycle = c
                mod.current = -1
        if popped | pushed:
            self.token_cycle = c
            if self.token_log is not None:
                self.token_log.extend((c + 1, q, len(tokens[q])) for q in range(len(tokens))
                                      if (popped | pushed) >> q & 1)

        # Dispatch (§2): the complete head goes to its module's queue if it had room at the start of c.
        d = self.dispatched
        if d < self.requested and self.complete[d] < c:
            mod = modules[self.routes[d].module]
            if len(mod.commands) + (taken >> mod.index & 1) < self.cmd_depth:
                mod.commands.append(d)
                self.timing[d].dispatched = c
                self.dispatched = d + 1

    # ------------------------------------------------------------------ jumping
    def next_event(self, c: int) -> int:
        """The earliest cycle after ``c`` in which some component can act (``_NEVER``: none can)."""
        c1 = c + 1
        nxt = _NEVER
        tokens = self.tokens
        for mod in self.modules:
            state = mod.state
            if state == _IDLE:
                if mod.commands:
                    return c1
            elif state == _WAIT:
                if mod.step == len(mod.pops) or tokens[mod.pops[mod.step]]:
                    return c1
            elif state == _EXEC:
                if mod.finish < nxt:
                    nxt = mod.finish
            elif mod.step == len(mod.pushes) or len(tokens[mod.pushes[mod.step]]) < self.token_depth:
                return c1
        d = self.dispatched
        if d < self.requested:
            complete = self.complete[d]
            if complete >= c1:
                nxt = min(nxt, complete + 1)
            elif len(self.modules[self.routes[d].module].commands) < self.cmd_depth:
                return c1
        n = self.fetch_next              # self._fetch_presents(), inlined
        present = c1 if n > 0 and self.requested - self.dispatched + n <= FETCH_DEPTH else _NEVER
        modules = self.modules
        for m in _READ_PRIORITY:
            dma = modules[m].dma
            if dma is not None:
                present = min(present, max(dma.present_from, c1))
        if present < nxt:
            nxt = min(nxt, self._window_open_after(present))
        return nxt

    def _window_open_after(self, cycle: int) -> int:
        """Like ``_Memory.window_open`` for a future cycle, without forgetting bursts."""
        flight = self.memory.in_flight
        live = [last for last in flight if last >= cycle]
        if len(live) < self.memory.limit:
            return cycle
        return live[len(live) - self.memory.limit] + 1

    def run(self, every_cycle: bool = False) -> int:
        """Run to FINISH; returns ``cycles`` (raises ``DeadlockError`` if the program deadlocks).

        ``every_cycle`` evaluates every cycle instead of jumping (a check of the jumps: the result
        must be the same, since a cycle jumped over is one in which nothing can happen).
        """
        c = 1
        while True:
            self.events += 1
            self.step(c)
            if self.done_cycle >= 0:
                return self.done_cycle
            nxt = self.next_event(c)
            if nxt >= _NEVER:
                raise DeadlockError(self._deadlock_report(self._deadlock_cycle()))
            c = c + 1 if every_cycle else nxt

    def _deadlock_cycle(self) -> int:
        """The cycle the RTL's deadlock flag rises (§6): the first in which every module and fetch is blocked.

        A module is not blocked in a cycle in which it takes, pops, starts, executes, pushes or
        retires; fetch is not blocked while it dispatches or waits for its head's last beat
        (later fetch requests and beats do not count: fetch is blocked behind a full queue).
        """
        last = self.token_cycle
        for t in self.timing:
            last = max(last, t.taken, t.started, t.finished, t.retired, t.dispatched)
        if self.dispatched < self.count:
            last = max(last, self.complete[self.dispatched])
        return last + 1

    def _deadlock_report(self, cycle: int) -> str:
        lines = []
        depth = self.config.token_queue_depth
        for mod in self.modules:
            name = MODULES[mod.index]
            if mod.state == _IDLE:
                if self.timing and len(self.executed[mod.index]) < self.totals[mod.index]:
                    lines.append(f"  {name}: idle, its next instruction is not dispatched yet")
                continue
            what = describe(mod.current, self.insns[mod.current])
            if mod.state == _WAIT:
                lines.append(f"  {name}: {what} waits to pop a token from {QUEUE_NAMES[mod.pops[mod.step]]} (empty)")
            else:
                lines.append(f"  {name}: {what} waits to push a token to {QUEUE_NAMES[mod.pushes[mod.step]]} "
                             f"(full, {depth} tokens)")
        if self.dispatched < self.count:
            d = self.dispatched
            lines.append(f"  fetch: {describe(d, self.insns[d])} waits for room in the "
                         f"{MODULES[self.routes[d].module]} command queue (full, {self.config.cmd_queue_depth} entries)")
        return (f"deadlock at cycle {cycle}: no module can make progress and FINISH has not run:\n"
                + "\n".join(lines))

    # ------------------------------------------------------------------ results
    def stats(self, cycles: int, seconds: float) -> RunStats:
        busy = [0, 0, 0]
        token = [0, 0, 0]
        memory = [0, 0, 0]
        for t in self.timing:
            m = t.module
            busy[m] += t.finished - t.started + 1
            token[m] += (t.started - t.taken - 1) + (t.retired - t.finished - 1)
            memory[m] += t.memory_stall
        fetch_mem = fetch_queue = 0
        head_since = 1
        for t in self.timing:
            fetch_mem += max(0, t.fetched - head_since + 1)
            fetch_queue += t.dispatched - max(head_since, t.fetched + 1)
            head_since = t.dispatched + 1
        fetch_busy = self.timing[-1].dispatched
        names = ("fetch",) + MODULES
        return RunStats(
            backend="cycle", counters=dict(self.machine.counters), cycles=cycles,
            retire_cycles=[t.retired for t in self.timing],
            busy_cycles=dict(zip(names, [fetch_busy] + busy)),
            token_stall_cycles=dict(zip(names, [fetch_queue] + token)),
            memory_stall_cycles=dict(zip(names, [fetch_mem] + memory)),
            idle_cycles=dict(zip(names, [cycles - fetch_busy] + [cycles - b - k for b, k in zip(busy, token)])),
            dram_read_bytes=self.memory.read_bytes, dram_write_bytes=self.write_bytes, sim_seconds=seconds)


def simulate(launch: Launch, *, every_cycle: bool = False) -> CycleRun:
    """Run ``launch`` (mutating ``launch.dram``); returns the machine, the stats and every instruction's timing.

    ``every_cycle=True`` evaluates every cycle instead of jumping from event to event (slow; for
    checking the model's jumps).
    """
    began = time.perf_counter()
    if launch.insn_addr % isa.INSN_BYTES:
        raise ProgramError(f"instruction address {launch.insn_addr:#x} is not {isa.INSN_BYTES}-byte aligned")
    if launch.insn_addr < 0 or launch.insn_addr + isa.INSN_BYTES * len(launch.insns) > launch.dram.size:
        raise MemoryAccessError(f"instruction stream of {len(launch.insns)} instructions at {launch.insn_addr:#x} "
                                f"runs past the end of DRAM ({launch.dram.size} bytes)")
    if launch.trace is not None and Path(launch.trace).suffix != ".json":
        raise SimError(f"the cycle backend writes a Chrome trace-event timeline; trace path {str(launch.trace)!r} "
                       "must end in .json (the rtl backend writes .vcd waveforms)")
    core = _Core(launch)
    cycles = core.run(every_cycle)
    stats = core.stats(cycles, time.perf_counter() - began)
    if launch.trace is not None:
        from vtakit.sim.timeline import write_trace
        write_trace(Path(launch.trace), launch.config, launch.insns, core.timing, stats, core.memory.bursts,
                    core.token_log)
    return CycleRun(core.machine, stats, core.timing, core.events)


def execute(launch: Launch) -> RunStats:
    """The ``cycle`` backend entry point (see :mod:`vtakit.sim.backend`)."""
    return simulate(launch).stats
