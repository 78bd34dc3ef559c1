"""The ``cycle`` backend: docs/timing.md as a program, cycle-exact to the RTL.

Users need cycle counts for whole layers in seconds, not the hours an RTL simulation takes. Every
rule here comes from docs/timing.md (the comments cite its sections); two engines implement them:

* :class:`_Solver`, the default, treats the rules as recurrences. Every wait of §2-§3 is on a
  condition that, once true, stays true until the waiting component acts itself, so each event's
  cycle is a max over earlier events' cycles plus constants (a take, a pop, a start, a finish
  cycle of §4, a push, a dispatch, a fetch request). Each module walks through its instructions as
  far as known cycles allow; only the read arbiter (§5), where requesters compete, needs decisions
  in cycle order. Cost: a few microseconds per instruction and per unblocking DRAM acceptance,
  however long the program runs in cycles.
* :class:`_Core`, the stepping model, is the rules' literal transcription: it evaluates the core
  cycle by cycle -- every decision on the state at the start of the cycle, its effect visible from
  the next (§1) -- and jumps over cycles in which nothing can happen (``every_cycle`` evaluates
  them all). It is the solver's check: the tests compare the two on random programs over corner
  configurations, DMA edge shapes, the corpus and deadlocks (``simulate(stepping=True)``).

Both report a deadlock (no component can ever act again and FINISH has not retired) with the cycle
in which the RTL's exact deadlock flag rises (§6).

The solver also exists compiled (``vtakit/sim/csrc/timing_core.c``, :mod:`vtakit.sim.native`), and
that is what :func:`simulate` runs first: timing depends only on instruction fields (and, with one
ACC read port, on the micro-op cache's src fields, which the C core reads from the DRAM image as
compute's LOAD UOPs do, §4), so the C core times the encoded stream without computing data, and the
data comes from one run of the functional
simulator (:func:`vtakit.sim.fsim.simulate`), whose DRAM result, for a program it accepts, is the
same in every valid schedule -- the solver's included. The C core declines whatever it does not
fully understand (a deadlock, an illegal instruction, unbalanced tokens, ...), and so do we when
fsim reports a deadlock; then :class:`_Solver` runs and raises the usual error. An erroneous
program raises fsim's error on either path (see :func:`_fsims_error`). ``simulate(...,
engine="python")`` (or ``VTAKIT_NATIVE=0``) runs the Python solver alone; the tests compare both.

In the Python engines, data is the functional simulator's too: each instruction's effect is
applied with :class:`vtakit.sim.machine.Machine` in the cycle it starts, with fsim's static checks
(:func:`vtakit.sim.fsim.check_program`) and its happens-before race detector
(:class:`vtakit.sim.hb.RaceDetector`) fed by the engine's own schedule (take, pops, pushes; the
solver runs each module's steps in its program order, every token's clock taken before the pop
that reads it) -- a valid schedule of the same Kahn network, so the DRAM result is fsim's, byte
for byte.

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

import operator
import time
from collections import deque
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Callable

import numpy as np

from vtakit.errors import DeadlockError, MemoryAccessError, ProgramError, RaceError, SimError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, FinishInsn, GemmInsn, MemId, MemInsn, Opcode
from vtakit.hw.pipeline import LOAD_PREP_CYCLES, finish_delay
from vtakit.sim import native
from vtakit.sim.backend import Launch
from vtakit.sim.fsim import check_finish, check_program
from vtakit.sim.fsim import simulate as _fsim_simulate
from vtakit.sim.hb import MODULES, RaceDetector
from vtakit.sim.machine import QUEUE_NAMES, Machine, describe
from vtakit.sim.stats import RunStats

__all__ = ["execute", "simulate", "CycleRun", "InsnTiming", "ENGINES", "FETCH_BURST", "FETCH_DEPTH",
           "micro_op_cycles"]

#: Instructions per fetch burst (bursts are aligned groups) and instruction-buffer entries (§2).
FETCH_BURST = 4
FETCH_DEPTH = 16
_MAX_BURST = 256
_BOUNDARY = 4096
_LOAD, _COMPUTE, _STORE = range(3)
_READ_PRIORITY = (_COMPUTE, _LOAD)      # after fetch (§5)
_IDLE, _WAIT, _EXEC, _RETIRE = range(4)
_NEVER = 1 << 126                 # after every cycle (any int: VTAConfig allows DRAM latencies past 2^62)
_DISPATCH = 8                     # wake bits of the solver: 1 << module, and dispatch
_ALL = 15
_MICRO_CODED = (GemmInsn, AluInsn)
_PRODUCER = (_LOAD, _COMPUTE, _COMPUTE, _STORE)   # the module that pushes to each token queue
_CONSUMER = (_COMPUTE, _LOAD, _STORE, _COMPUTE)   # the module that pops it
# What a solver module waits for: a token in queue q (q), room in queue q (_ON_ROOM + q), its next
# instruction's dispatch, or nobody else's action (a LOAD's bursts, which the arbiter finishes; or done).
_ON_ROOM, _ON_DISPATCH, _ON_NOTHING = 4, 8, -1


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
    """What :func:`simulate` returns: the machine (final SRAM state), stats, ``events`` (the stepping
    model: cycles evaluated, all others jumped over; the solver: arbiter decisions), per-instruction
    ``timing`` (built on first use) and the engine that ran: ``"native"`` (the compiled solver, data
    by fsim), ``"solver"`` (:class:`_Solver`) or ``"stepping"``."""

    machine: Machine
    stats: RunStats
    events: int
    _timings: Callable[[], list[InsnTiming]] = field(repr=False, compare=False)
    engine: str = "solver"
    detail: bytes | None = field(default=None, repr=False, compare=False)   # the compiled solver's raw result

    @cached_property
    def timing(self) -> list[InsnTiming]:
        return self._timings()


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

    __slots__ = ("bursts", "next", "present_from", "beat_bytes", "received")

    def __init__(self, bursts: list[int], present_from: int, beat_bytes: int,
                 received: list[tuple[int, int]]) -> None:
        self.bursts = bursts
        self.next = 0
        self.present_from = present_from
        self.beat_bytes = beat_bytes
        self.received = received       # (first, last) beat cycle of each accepted burst


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


_ELEMENT_BYTES: dict[int, tuple[VTAConfig, list[int], int]] = {}


def micro_op_cycles(insn: GemmInsn | AluInsn, config: VTAConfig, uops: np.ndarray) -> int:
    """Cycles of all the micro-ops of a GEMM or ALU instruction together (§4), ``uops`` the micro-op
    cache's entries ``[uop_bgn, uop_end)`` (dst, src, wgt columns) when it starts: one per micro-op,
    except that an ALU micro-op takes 2 when it is a tensor one with one ACC read port
    (ACC_READ_PORTS 1) that misses the src register (its src address is not the previous micro-op's),
    or when it reads the entry the previous micro-op writes (its dst, or its src in the tensor form)."""
    n = insn.iter_out * insn.iter_in * max(0, insn.uop_end - insn.uop_bgn)
    if n <= 0 or not isinstance(insn, AluInsn):
        return n
    two_read = config.acc_read_ports == 1 and not insn.use_imm
    if len(uops) != insn.uop_end - insn.uop_bgn:     # past the cache's end: the program fails in fsim
        return 2 * n if two_read else n
    return n + _alu_extra_cycles(insn, uops, config.acc_depth - 1, two_read)


def _alu_extra_cycles(insn: AluInsn, uops: np.ndarray, mask: int, two_read: bool) -> int:
    """How many micro-ops of an ALU loop take 2 cycles (§4): micro-op (i, j, k) writes
    ``(dst[k] + i * dst_factor_out + j * dst_factor_in) & mask`` and reads it and, in the tensor form,
    ``(src[k] + i * src_factor_out + j * src_factor_in) & mask``, k innermost. Counted by kind of
    step from the micro-op before (k within one (i, j); a j step; an i step): whether dst repeats
    and whether src repeats depend on the step alone, and src meeting the previous dst is
    ``c + i * A + j * B == 0`` (mod ACC depth) with A, B the factors' differences, counted by
    :func:`_count_lattice`."""
    tensor = not insn.use_imm
    size = mask + 1
    dst = [int(v) & mask for v in uops[:, 0]]
    src = [int(v) & mask for v in uops[:, 1]]
    last, n_i, n_j = len(dst) - 1, insn.iter_out, insn.iter_in
    dfo, dfi, sfo, sfi = insn.dst_factor_out, insn.dst_factor_in, insn.src_factor_out, insn.src_factor_in
    a, b = (sfo - dfo) & mask, (sfi - dfi) & mask
    extra = 1 if two_read else 0            # the first micro-op misses (the register starts empty)
    targets: dict[int, int] = {}            # within (i, j): src - previous dst == c + iA + jB, by -c
    # (dst step, src step, src - previous dst without the i, j terms, i range, j range) per kind of step
    steps = [(dst[k] - dst[k - 1], src[k] - src[k - 1], src[k] - dst[k - 1], (0, n_i), (0, n_j))
             for k in range(1, last + 1)]
    steps.append((dst[0] - dst[last] + dfi, src[0] - src[last] + sfi, src[0] - dst[last] + dfi, (0, n_i), (1, n_j)))
    edge = dfo - (n_j - 1) * dfi
    steps.append((dst[0] - dst[last] + edge, src[0] - src[last] + sfo - (n_j - 1) * sfi, src[0] - dst[last] + edge,
                  (1, n_i), (0, 1)))
    for dst_step, src_step, c, i_range, j_range in steps:
        count = max(0, i_range[1] - i_range[0]) * max(0, j_range[1] - j_range[0])
        if dst_step & mask == 0 or (two_read and src_step & mask != 0):
            extra += count
        elif tensor and count:
            key = (-c & mask, i_range, j_range)
            targets[key] = targets.get(key, 0) + 1
    for (target, i_range, j_range), times in targets.items():
        extra += times * _count_lattice(i_range, j_range, a, b, target, size)
    return extra


def _count_lattice(i_range: tuple[int, int], j_range: tuple[int, int], a: int, b: int, target: int,
                   size: int) -> int:
    """``#{(i, j) in i_range x j_range : i * a + j * b == target (mod size)}``, size a power of two:
    for each i of the shorter range, the j with ``j * b == target - i * a`` form one residue class
    modulo ``size / g`` (g = the largest power of two dividing b), or none."""
    if i_range[1] - i_range[0] > j_range[1] - j_range[0]:
        i_range, j_range, a, b = j_range, i_range, b, a
    mask = size - 1
    i = np.arange(i_range[0], i_range[1], dtype=np.int64)
    rest = (target - i * (a & mask)) & mask         # j * b must equal this
    b &= mask
    if b == 0:
        return int(np.count_nonzero(rest == 0)) * (j_range[1] - j_range[0])
    g = b & -b
    period = size // g
    first = ((rest // g) * pow(b // g, -1, period)) % period
    found = (j_range[1] - 1 - first) // period - (j_range[0] - 1 - first) // period
    return int(found[rest % g == 0].sum())


def _element_bytes(config: VTAConfig) -> tuple[list[int], int]:
    """DRAM bytes of one element of each memory type (indexed by MemId; §4) and of an OUT element.

    Kept per configuration object: the derived properties cost microseconds each."""
    entry = _ELEMENT_BYTES.get(id(config))
    if entry is None or entry[0] is not config:
        table = [0] * (max(MemId) + 1)
        for mem, size in ((MemId.UOP, config.uop_elem_bytes), (MemId.WGT, config.wgt_elem_bytes),
                          (MemId.INP, config.inp_elem_bytes), (MemId.ACC, config.acc_elem_bytes),
                          (MemId.ACC_8BIT, config.acc8_elem_bytes)):
            table[mem] = size
        if len(_ELEMENT_BYTES) >= 64:
            _ELEMENT_BYTES.clear()
        entry = _ELEMENT_BYTES[id(config)] = (config, table, config.out_elem_bytes)
    return entry[1], entry[2]


def _bursts(row_beats: int, rows: int, base: int, stride: int, beat_bytes: int) -> list[int]:
    """Beats of each AXI burst of a 2-D transfer: rows cut at 256 beats and at 4 KiB (§4)."""
    out = []
    mask = 0xFFFFFFFF
    row_bytes = row_beats * beat_bytes
    if row_beats <= _MAX_BURST and row_bytes <= _BOUNDARY:    # a row is one burst, or two across 4 KiB
        if (base & (_BOUNDARY - 1)) + (rows - 1) * stride + row_bytes <= _BOUNDARY:
            return [row_beats] * rows                      # every row within one 4 KiB page
        for y in range(rows):
            room = _BOUNDARY - ((base + y * stride) & (_BOUNDARY - 1))
            if row_bytes <= room:
                out.append(row_beats)
            else:
                out.append(room // beat_bytes)
                out.append(row_beats - room // beat_bytes)
        return out
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
    """The stepping model: the whole core for one launch (fetch, memory, modules, token queues, the
    data machine), evaluated cycle by cycle.

    After evaluating ``c`` it asks every component for the earliest cycle in which it could act on
    its own (an instruction's known finish cycle, a burst's presentation, the first cycle a slot of
    the outstanding-read window frees, a fetched instruction becoming complete, a take/pop/push
    that is possible now) and jumps to the minimum."""

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
        self.finish_delay = (finish_delay(config, False), finish_delay(config, True))   # e - s - M: GEMM, ALU
        self.elem_bytes = {MemId.INP: config.inp_elem_bytes, MemId.WGT: config.wgt_elem_bytes,   # DRAM side (§4)
                           MemId.UOP: config.uop_elem_bytes, MemId.ACC: config.acc_elem_bytes,
                           MemId.ACC_8BIT: config.acc8_elem_bytes}
        # fetch (§2)
        self.count = len(self.insns)
        self.slot0 = operator.index(launch.insn_addr) // isa.INSN_BYTES   # (a numpy scalar would wrap)
        self.insn_beats = max(1, isa.INSN_BYTES // self.bus)
        self.requested = 0
        self.fetch_next = self._fetch_burst()          # instructions in fetch's next request (0: all requested)
        self.token_depth = config.token_queue_depth
        self.cmd_depth = config.cmd_queue_depth
        self.dispatched = 0
        # the first cycle fetch presents that request (§2; _NEVER: not yet); it is accepted from the next
        self.fetch_from = 1 if self._fetch_presents() else _NEVER
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
            n = micro_op_cycles(insn, self.config, self.machine.uop[insn.uop_bgn:insn.uop_end])
            if n:
                mod.finish = s + n + self.finish_delay[isinstance(insn, AluInsn)]
        elif isinstance(insn, MemInsn) and insn.x_size:
            if insn.opcode == Opcode.STORE:
                self._start_store(mod, insn, s)
            else:
                self._start_load(mod, insn, s + LOAD_PREP_CYCLES)

    def _start_load(self, mod: _Module, insn: MemInsn, s: int) -> None:
        """``s``: the first cycle after the engine's preparation (§4: s + LOAD_PREP_CYCLES)."""
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
        mod.dma = _ReadDma(bursts, s + max(0, pads - self.config.dram_latency), beat, mod.timing.beats)
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

        # Read arbitration (§5): one burst per cycle, fetch > compute > load, window permitting; the
        # registered grant accepts a request from the cycle after the first it is presented in (the
        # arbiter picks it in c - 1 among the requests presented then, other than the one accepted in c - 1).
        flight = memory.in_flight           # memory.window_open(c) == c, inlined
        while flight and flight[0] < c:
            flight.popleft()
        if len(flight) < memory.limit:
            n = self.fetch_next
            if self.fetch_from < c:
                k = self.insn_beats
                first = memory.accept(c, n * k, min(isa.INSN_BYTES, self.bus), "fetch")
                for j in range(self.requested, self.requested + n):
                    first += k
                    self.complete[j] = self.timing[j].fetched = first - 1
                self.requested += n
                self.fetch_next = min(self.count - self.requested,
                                      FETCH_BURST - (self.slot0 + self.requested) % FETCH_BURST)
                self.fetch_from = _NEVER
            else:
                for m in _READ_PRIORITY:
                    dma = modules[m].dma
                    if dma is not None and dma.present_from < c:
                        beats = dma.bursts[dma.next]
                        first = memory.accept(c, beats, dma.beat_bytes, MODULES[m])
                        dma.received.append((first, first + beats - 1))
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
        # fetch presents its next request from c + 1 if the state at the start of c + 1 allows it
        if self.fetch_from == _NEVER and self._fetch_presents():
            self.fetch_from = c + 1

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
        # the first cycle a request can be accepted: the one after it is first presented (§5)
        present = max(self.fetch_from + 1, c1) if self.fetch_from < _NEVER else _NEVER
        modules = self.modules
        for m in _READ_PRIORITY:
            dma = modules[m].dma
            if dma is not None:
                present = min(present, max(dma.present_from + 1, c1))
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
        states = [(mod.state, mod.current if mod.state != _IDLE else
                   (0 if len(self.executed[mod.index]) < self.totals[mod.index] else -1), mod.step)
                  for mod in self.modules]
        return _deadlock_message(cycle, self.config, self.insns, self.routes, states, self.dispatched)

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


_WINDOW_CHECK = 1 << 12


def _most_bursts(insns: list, config: VTAConfig) -> int:
    """More read bursts than ``insns`` can ever have in flight: one per instruction (fetch) plus every
    LOAD's data beats (every burst has at least one)."""
    elem, _ = _element_bytes(config)
    total = len(insns) + 1
    for insn in insns:
        if isinstance(insn, MemInsn) and insn.opcode != Opcode.STORE and insn.x_size:
            size = elem[insn.memory_type] if 0 <= insn.memory_type < len(elem) else 0
            if size > 0:
                total += insn.x_size * insn.y_size * (size // min(size, config.bus_bytes))
    return total


class _Solver:
    """The default engine: the rules of §2-§5 solved as recurrences, one instruction at a time.

    With ``k`` tokens pushed to queue ``q`` so far and ``j`` the instruction's place in its module:

    * take: ``max(dispatched + 1, previous retire of the module + 1)``;
    * a pop of the ``t``-th token of ``q``: ``max(take + 1, its push + 1)``, pop_next not before
      pop_prev; the start is the last pop;
    * a push: ``max(finish + 1, pop of token k - Qt of q + 1)``, push_next not before push_prev;
      the retire is the last push;
    * dispatch: ``max(complete + 1, previous dispatch + 1, take of the module's instruction
      j - Qc + 1)``;
    * fetch presents its next burst from ``max(previous acceptance + 1, dispatch of instruction
      R + n - 17 + 1)``; like every read request, it may be accepted from the cycle after it is
      first presented (the registered grant, §5).

    Each of these waits for conditions that only the waiting component can falsify again (only a
    queue's consumer removes its tokens, only its producer fills its slots, ...), which is why a max
    of known cycles is exact. A module walks its instructions until it needs a cycle not known yet
    and records what it waits for; whoever produces that cycle wakes it. The arbiter then decides
    the earliest cycle in which a requester presents. That is safe once nothing else can be
    resolved: a requester not yet known to present waits for a value that only a later acceptance
    can produce (a beat, plus at least a cycle), so it cannot present before that acceptance.
    """

    def __init__(self, launch: Launch) -> None:
        config = launch.config
        self.config = config
        insns = self.insns = launch.insns
        routes = self.routes = check_program(insns, config)
        n = self.count = len(insns)
        lists = self.lists = ([], [], [])              # each module's instructions, in order
        modules = self.modules = [route.module for route in routes]
        freed_by = self.freed_by = [-1] * n             # dispatch waits for the take Qc ahead in its queue
        depth = config.cmd_queue_depth
        for i, m in enumerate(modules):
            lst = lists[m]
            if len(lst) >= depth:
                freed_by[i] = lst[len(lst) - depth]
            lst.append(i)
        self.dispatch_wait = -1                         # the module whose take dispatch waits for
        self.waits = [_ON_DISPATCH] * 3                 # what each module waits for (_ON_...)
        self.hb = RaceDetector(config, lambda m, epoch: describe(lists[m][epoch - 1], insns[lists[m][epoch - 1]]))
        self.machine = Machine(config, launch.dram, self.hb)
        self.apply = self.machine.apply
        self.uop = self.machine.uop                     # the micro-op cache (tensor ALU timing, §4)
        self.finish_delay = (finish_delay(config, False), finish_delay(config, True))   # e - s - M: GEMM, ALU
        self.elem_bytes, self.out_elem_bytes = _element_bytes(config)
        self.bus = config.bus_bytes
        self.latency = config.dram_latency
        self.limit = config.dram_outstanding
        if self.limit > _WINDOW_CHECK:           # a window larger than all the bursts never fills: same as
            self.limit = min(self.limit, _most_bursts(insns, config))   # that size (lasts stays small)
        self.token_depth = config.token_queue_depth
        # per instruction (-1: not yet)
        self.fetched = [-1] * n
        self.dispatched = [-1] * n
        self.taken = [-1] * n
        self.started = [-1] * n
        self.finished = [-1] * n
        self.retired = [-1] * n
        self.pads: dict[int, int] = {}                      # LOAD -> zero entries written
        self.beats: dict[int, list[tuple[int, int]]] = {}   # LOAD -> (first, last) beat of each read burst
        self.write_beats: dict[int, int] = {}               # STORE -> W beats
        # token queues: cycle of every push and pop, and the clock each token carries
        self.push_cycles: list[list[int]] = [[] for _ in QUEUE_NAMES]
        self.pop_cycles: list[list[int]] = [[] for _ in QUEUE_NAMES]
        self.stamps: list[list] = [[] for _ in QUEUE_NAMES]
        # modules: next instruction (position in its list), state, cycle cursor, token step
        self.next = [0, 0, 0]
        self.state = [_IDLE, _IDLE, _IDLE]
        self.cursor = [1, 1, 1]        # IDLE: first cycle it may take; WAIT/RETIRE: earliest next pop/push
        self.step = [0, 0, 0]
        # each module's LOAD while its bursts are being accepted (§4): their beats, the next one, the
        # cycle it presents from (_NEVER: no LOAD reading) and the (first, last) beats received
        self.reading: list[list[int] | None] = [None, None, None]
        self.read_next = [0, 0, 0]
        self.present = [_NEVER, _NEVER, _NEVER]
        self.received: list[list[tuple[int, int]] | None] = [None, None, None]
        # accounting, accumulated as instructions retire (RunStats)
        self.busy = [0, 0, 0]
        self.token_stall = [0, 0, 0]
        self.memory_stall = [0, 0, 0]
        self.fetch_memory = self.fetch_queue = 0
        self.head_since = 1
        # fetch (§2) and the read side of memory (§5)
        self.slot0 = operator.index(launch.insn_addr) // isa.INSN_BYTES   # (a numpy scalar would wrap)
        self.insn_beats = max(1, isa.INSN_BYTES // self.bus)
        self.insn_beat_bytes = min(isa.INSN_BYTES, self.bus)
        self.requested = 0
        self.n_dispatched = 0
        self.fetch_from = 1             # fetch presents its next request from this cycle (room permitting)
        self.fetch_next = min(n, FETCH_BURST - self.slot0 % FETCH_BURST)    # instructions in it (0: none)
        self.frontier = 1               # the arbiter has decided every cycle before this one
        # last beat of every accepted read burst, in order, after O placeholders (-1: long done)
        self.lasts = [-1] * self.limit
        self.fetch_bursts: list[tuple[int, int]] = []    # (first, last) beat of each fetch burst
        self.read_bytes = 0             # by LOADs (fetch's are added at the end)
        self.write_bytes = 0
        self.done_cycle = -1
        self.events = 0                 # arbiter decisions

    # ------------------------------------------------------------------ the loop
    def run(self) -> int:
        """Run to FINISH; returns ``cycles`` (raises ``DeadlockError`` if the program deadlocks)."""
        advance, dispatch, arbitrate = self._advance, self._dispatch, self._arbitrate
        wake = _ALL
        while True:
            # Resolve every cycle that known cycles determine. ``wake``: bit m for module m, bit 3
            # for dispatch -- the components whose inputs changed; each reports whom it unblocks.
            while wake:
                if wake & _DISPATCH:
                    wake ^= _DISPATCH
                    wake |= dispatch()
                elif wake & 1:
                    wake ^= 1
                    wake |= advance(_LOAD)
                elif wake & 2:
                    wake ^= 2
                    wake |= advance(_COMPUTE)
                else:
                    wake ^= 4
                    wake |= advance(_STORE)
            if self.done_cycle >= 0:
                return self.done_cycle
            self.events += 1
            wake = arbitrate()
            if wake < 0:
                raise DeadlockError(self._deadlock_report())

    def _dispatch(self) -> int:
        """Dispatch (§2) every fetched instruction whose command queue's room is known; returns the
        modules whose next instruction may now be in their queue."""
        d = self.n_dispatched
        requested = self.requested
        if d >= requested:
            return 0
        fetched, dispatched, taken = self.fetched, self.dispatched, self.taken
        freed_by, modules = self.freed_by, self.modules
        last = dispatched[d - 1] if d else 0
        head_since = self.head_since
        memory = queue = wake = 0
        self.dispatch_wait = -1
        while d < requested:
            complete = fetched[d]
            t = complete + 1
            if t <= last:
                t = last + 1
            f = freed_by[d]
            if f >= 0:                 # room: the instruction Qc ahead in the same queue has been taken
                freed = taken[f]
                if freed < 0:
                    self.dispatch_wait = modules[d]
                    break
                if freed >= t:
                    t = freed + 1
            dispatched[d] = last = t
            wake |= 1 << modules[d]
            if complete >= head_since:
                memory += complete - head_since + 1
                queue += t - complete - 1
            else:
                queue += t - head_since
            head_since = t + 1
            d += 1
        self.fetch_memory += memory
        self.fetch_queue += queue
        self.head_since = head_since
        self.n_dispatched = d
        waits = self.waits                 # wake the modules waiting for an instruction
        return wake & ((waits[_LOAD] == _ON_DISPATCH) | (waits[_COMPUTE] == _ON_DISPATCH) << 1
                       | (waits[_STORE] == _ON_DISPATCH) << 2)

    def _advance(self, m: int) -> int:
        """Walk module ``m`` (§3) through its instructions until it needs a cycle not known yet;
        returns the components its takes, pops and pushes unblock."""
        lst = self.lists[m]
        k = self.next[m]
        if k >= len(lst):
            return 0
        state, cursor, step = self.state[m], self.cursor[m], self.step[m]
        hb, insns, routes, apply = self.hb, self.insns, self.routes, self.apply
        push_cycles, pop_cycles, stamps, waits = self.push_cycles, self.pop_cycles, self.stamps, self.waits
        taken, started, finished = self.taken, self.started, self.finished
        busy = token_stall = wake = 0
        while True:
            i = lst[k]
            if state == _IDLE:                 # take (§3 IDLE)
                if i >= self.n_dispatched:
                    wait = _ON_DISPATCH
                    break
                t = self.dispatched[i] + 1
                if t < cursor:
                    t = cursor
                taken[i] = t
                hb.begin(m)
                if self.dispatch_wait == m:
                    wake |= _DISPATCH
                state, cursor, step = _WAIT, t + 1, 0
            if state == _WAIT:                 # pops, then start
                pops = routes[i].pops
                while step < len(pops):
                    q = pops[step]
                    popped = pop_cycles[q]
                    j = len(popped)
                    pushed = push_cycles[q]
                    if j >= len(pushed):
                        break
                    if pushed[j] >= cursor:
                        cursor = pushed[j] + 1
                    popped.append(cursor)
                    hb.join(m, stamps[q][j])
                    if waits[_PRODUCER[q]] == _ON_ROOM + q:
                        wake |= 1 << _PRODUCER[q]
                    step += 1
                if step < len(pops):
                    wait = q
                    break
                started[i] = cursor
                insn = insns[i]
                if isinstance(insn, _MICRO_CODED):  # GEMM, ALU: e = s + M + D (s for N = 0), §4
                    hb.module = m
                    apply(insn, i, validate=False)
                    n = micro_op_cycles(insn, self.config, self.uop[insn.uop_bgn:insn.uop_end])
                    e = cursor + 1 + n + self.finish_delay[isinstance(insn, AluInsn)] if n > 0 else cursor + 1
                else:
                    e = self._start(m, i, insn, cursor)
                    if e < 0:                  # a LOAD's bursts: the arbiter finishes it
                        state, wait = _EXEC, _ON_NOTHING
                        break
                finished[i] = e
                state, cursor, step = _RETIRE, e + 1, 0
            elif state == _EXEC:
                wait = _ON_NOTHING
                break
            pushes = routes[i].pushes          # RETIRE: pushes, then retire
            while step < len(pushes):
                q = pushes[step]
                pushed = push_cycles[q]
                j = len(pushed) - self.token_depth
                if j >= 0:
                    popped = pop_cycles[q]
                    if j >= len(popped):
                        break
                    if popped[j] >= cursor:
                        cursor = popped[j] + 1
                pushed.append(cursor)
                stamps[q].append(hb.snapshot(m))
                if waits[_CONSUMER[q]] == q:
                    wake |= 1 << _CONSUMER[q]
                step += 1
            if step < len(pushes):
                wait = _ON_ROOM + q
                break
            self.retired[i] = cursor
            s, e = started[i], finished[i]
            busy += e - s + 1
            token_stall += s - taken[i] + cursor - e - 2
            if i == self.count - 1:            # FINISH: the last instruction (check_program)
                self.done_cycle = cursor
            state, cursor = _IDLE, cursor + 1
            k += 1
            if k == len(lst):
                wait = _ON_NOTHING
                break
        self.next[m], self.state[m], self.cursor[m], self.step[m] = k, state, cursor, step
        waits[m] = wait
        self.busy[m] += busy
        self.token_stall[m] += token_stall
        return wake

    def _start(self, m: int, index: int, insn: isa.Instruction, cycle: int) -> int:
        """A DMA or FINISH instruction starts (its last pop) in ``cycle``: apply its data effect; returns
        its finish cycle e (§4), or -1 for a LOAD whose bursts the arbiter has yet to schedule."""
        s = cycle + 1
        self.hb.module = m
        if isinstance(insn, FinishInsn):      # (subclasses and plain-int opcodes are legal too)
            check_finish(self.hb, self.routes, self.insns, index)
            return s
        self.apply(insn, index, validate=False)
        if isinstance(insn, MemInsn):
            x_size, y_size = insn.x_size, insn.y_size
            if not x_size:
                return s
            if insn.opcode == Opcode.STORE:
                elem = self.out_elem_bytes
                beat = elem if elem < self.bus else self.bus
                total = x_size * y_size * (elem // beat)
                self.write_beats[index] = total
                self.write_bytes += total * beat
                if total:
                    self.memory_stall[m] += 1          # the cycle waiting for the last write response
                return s + total
            data = x_size * y_size
            pads = self.pads[index] = ((insn.y_pad_0 + y_size + insn.y_pad_1) * (insn.x_pad_0 + x_size + insn.x_pad_1)
                                       - data)
            s += LOAD_PREP_CYCLES                 # the engine prepares first (§4); those cycles are memory stalls
            if not data:
                return s + pads - 1 if pads else s
            elem = self.elem_bytes[insn.memory_type]
            beat = elem if elem < self.bus else self.bus
            k = elem // beat
            received = self.beats[index] = []
            self.read_bytes += data * elem
            self.memory_stall[m] -= cycle + pads + data * k      # + e when the last beat is known
            self.reading[m] = _bursts(x_size * k, y_size, insn.dram_base * elem, insn.x_stride * elem, beat)
            self.read_next[m] = 0
            self.present[m] = s + pads - self.latency if pads > self.latency else s
            self.received[m] = received
            return -1
        raise AssertionError(f"no datapath for {insn!r}")

    # ------------------------------------------------------------------ the read arbiter (§5)
    def _arbitrate(self) -> int:
        """Accept bursts (§5), each in the earliest cycle in which a requester may be accepted and the
        window is open, to the highest-priority one, until an acceptance may unblock someone: returns
        whom (-1: nobody presents, ever). A LOAD's bursts before its last one unblock nobody.

        The grant is registered: a request presented from cycle p may be accepted from p + 1 (the
        arbiter picks in c among the requests presented in c, except the one accepted in c, for c + 1);
        so a requester accepted in c presents its next request from c + 1 and is accepted in c + 2 at
        the earliest, and a lower-priority one may take the cycle between. The DRAM serves bursts in
        order, so last beats grow with acceptance: fewer than O bursts are in flight in cycle c iff the
        O-th latest accepted one (``lasts[-O]``) has its last beat before c."""
        fetch_present = _NEVER
        n = self.fetch_next
        if n:
            x = self.requested + n - FETCH_DEPTH - 1      # the dispatch that makes room for the burst
            if x < 0:
                fetch_present = self.fetch_from
            elif x < self.n_dispatched:
                fetch_present = max(self.fetch_from, self.dispatched[x] + 1)
            fetch_present += 1            # from here on: the first cycle each requester may be accepted
        compute, load = self.present[_COMPUTE] + 1, self.present[_LOAD] + 1
        present = fetch_present
        if compute < present:
            present = compute
        if load < present:
            present = load
        if present >= _NEVER:
            return -1
        lasts, limit, latency = self.lasts, self.limit, self.latency
        c = present if present > self.frontier else self.frontier
        if lasts[-limit] >= c:
            c = lasts[-limit] + 1
        last = lasts[-1]
        if fetch_present <= c:
            k = self.insn_beats
            first = c + latency if c + latency > last else last + 1
            last = first + n * k - 1
            lasts.append(last)
            self.fetch_bursts.append((first, last))
            r = self.requested               # instruction j is complete with its k-th beat
            self.fetched[r:r + n] = range(first + k - 1, last + 1, k)
            self.requested = r + n
            self.fetch_next = min(self.count - self.requested,
                                  FETCH_BURST - (self.slot0 + self.requested) % FETCH_BURST)
            self.frontier = self.fetch_from = c + 1
            return _DISPATCH
        if compute <= c:
            m = _COMPUTE
            rival = fetch_present if fetch_present < load else load
        else:
            m = _LOAD
            rival = fetch_present if fetch_present < compute else compute
        # Accept its burst, and its further bursts while nobody else may be accepted first: it presents
        # from the cycle after each acceptance, so is accepted two cycles on unless the window delays it.
        bursts, j, received = self.reading[m], self.read_next[m], self.received[m]
        while True:
            first = c + latency if c + latency > last else last + 1
            last = first + bursts[j] - 1
            lasts.append(last)
            received.append((first, last))
            j += 1
            if j == len(bursts):
                break
            nc = c + 2 if lasts[-limit] <= c + 1 else lasts[-limit] + 1
            if nc >= rival:
                break
            c = nc
        if j < len(bursts):
            self.frontier = self.present[m] = c + 1
            self.read_next[m] = j
            return 0
        self.frontier = c + 1
        self.present[m], self.reading[m] = _NEVER, None   # the LOAD finishes with its last beat (§4)
        i = self.lists[m][self.next[m]]
        self.finished[i] = last
        self.memory_stall[m] += last                   # (the rest was counted at the start)
        self.state[m], self.cursor[m], self.step[m] = _RETIRE, last + 1, 0
        return 1 << m

    # ------------------------------------------------------------------ deadlock (§6)
    def _deadlock_report(self) -> str:
        last = max([-1] + [cycles[-1] for cycles in self.push_cycles + self.pop_cycles if cycles])
        for series in (self.taken, self.started, self.finished, self.retired, self.dispatched):
            last = max(last, max(series))
        if self.n_dispatched < self.count:
            last = max(last, self.fetched[self.n_dispatched])
        return _deadlock_message(last + 1, self.config, self.insns, self.routes, [
            (self.state[m], self.lists[m][self.next[m]] if self.next[m] < len(self.lists[m]) else -1, self.step[m])
            for m in range(len(MODULES))], self.n_dispatched)

    # ------------------------------------------------------------------ results
    def stats(self, cycles: int, seconds: float) -> RunStats:
        fetch_busy = self.dispatched[-1]
        names = ("fetch",) + MODULES
        busy, token = self.busy, self.token_stall
        return RunStats(
            backend="cycle", counters=dict(self.machine.counters), cycles=cycles,
            retire_cycles=list(self.retired),
            busy_cycles=dict(zip(names, [fetch_busy] + busy)),
            token_stall_cycles=dict(zip(names, [self.fetch_queue] + token)),
            memory_stall_cycles=dict(zip(names, [self.fetch_memory] + self.memory_stall)),
            idle_cycles=dict(zip(names, [cycles - fetch_busy] + [cycles - b - k for b, k in zip(busy, token)])),
            dram_read_bytes=self.read_bytes + self.count * self.insn_beats * self.insn_beat_bytes,
            dram_write_bytes=self.write_bytes, sim_seconds=seconds)

    def timings(self) -> list[InsnTiming]:
        return [InsnTiming(route.module, self.fetched[i], self.dispatched[i], self.taken[i], self.started[i],
                           self.finished[i], self.retired[i], self.pads.get(i, 0), self.beats.get(i, []),
                           self.write_beats.get(i, 0))
                for i, route in enumerate(self.routes)]

    def bursts(self) -> list[tuple[str, int, int]]:
        """(requester, first beat, last beat) of every read burst, in acceptance (= beat) order."""
        bursts = [("fetch", first, last) for first, last in self.fetch_bursts]
        for index, received in self.beats.items():
            name = MODULES[self.modules[index]]
            bursts.extend((name, first, last) for first, last in received)
        bursts.sort(key=lambda burst: burst[1])
        return bursts

    def token_log(self) -> list[tuple[int, int, int]]:
        """(cycle, queue, tokens from that cycle on) at every change, as the stepping model logs it."""
        return _token_log(self.push_cycles, self.pop_cycles)


def _token_log(push_cycles: list[list[int]], pop_cycles: list[list[int]]) -> list[tuple[int, int, int]]:
    """The token-queue log of a schedule given by every queue's push and pop cycles."""
    log = []
    for q, (pushes, pops) in enumerate(zip(push_cycles, pop_cycles)):
        delta: dict[int, int] = {}
        for c in pushes:
            delta[c] = delta.get(c, 0) + 1
        for c in pops:
            delta[c] = delta.get(c, 0) - 1
        count = 0
        for c in sorted(delta):
            count += delta[c]
            log.append((c + 1, q, count))
    log.sort()
    return log


def _deadlock_message(cycle: int, config: VTAConfig, insns: list, routes: list, states: list[tuple[int, int, int]],
                      dispatched: int) -> str:
    """The DeadlockError text: each module's (state, instruction, token step) and fetch's head.

    An IDLE module's instruction is -1 when it has run all of its instructions."""
    lines = []
    for m, (state, index, step) in enumerate(states):
        name = MODULES[m]
        if state == _IDLE:
            if index >= 0:
                lines.append(f"  {name}: idle, its next instruction is not dispatched yet")
            continue
        what = describe(index, insns[index])
        if state == _WAIT:
            lines.append(f"  {name}: {what} waits to pop a token from {QUEUE_NAMES[routes[index].pops[step]]} (empty)")
        else:
            lines.append(f"  {name}: {what} waits to push a token to {QUEUE_NAMES[routes[index].pushes[step]]} "
                         f"(full, {config.token_queue_depth} tokens)")
    if dispatched < len(insns):
        lines.append(f"  fetch: {describe(dispatched, insns[dispatched])} waits for room in the "
                     f"{MODULES[routes[dispatched].module]} command queue (full, {config.cmd_queue_depth} entries)")
    return (f"deadlock at cycle {cycle}: no module can make progress and FINISH has not run:\n"
            + "\n".join(lines))


def simulate(launch: Launch, *, stepping: bool = False, every_cycle: bool = False, engine: str = "auto") -> CycleRun:
    """Run ``launch`` (mutating ``launch.dram``); returns the machine, the stats and every instruction's timing.

    The default engine solves the timing recurrences: compiled when the core is built and takes the
    program (``engine="auto"``), else, or with ``engine="python"``, in Python (:class:`_Solver`).
    ``stepping=True`` runs the literal transcription of docs/timing.md instead, evaluating the core
    cycle by cycle and jumping over cycles in which nothing can happen; ``every_cycle=True`` makes
    it evaluate every cycle (slow). All give the same schedule: the slower ones check the faster.
    """
    began = time.perf_counter()
    if engine not in ENGINES:
        raise SimError(f"unknown cycle-model engine {engine!r}; expected one of {list(ENGINES)}")
    try:
        insn_addr = operator.index(launch.insn_addr)
    except TypeError:
        raise ProgramError(f"instruction address {launch.insn_addr!r} is not an integer") from None
    if insn_addr % isa.INSN_BYTES:
        raise ProgramError(f"instruction address {launch.insn_addr:#x} is not {isa.INSN_BYTES}-byte aligned")
    if insn_addr < 0 or insn_addr + isa.INSN_BYTES * len(launch.insns) > launch.dram.size:
        raise MemoryAccessError(f"instruction stream of {len(launch.insns)} instructions at {launch.insn_addr:#x} "
                                f"runs past the end of DRAM ({launch.dram.size} bytes)")
    if launch.trace is not None and Path(launch.trace).suffix != ".json":
        raise SimError(f"the cycle backend writes a Chrome trace-event timeline; trace path {str(launch.trace)!r} "
                       "must end in .json (the rtl backend writes .vcd waveforms)")
    if stepping or every_cycle:
        core = _Core(launch)
        try:
            cycles = core.run(every_cycle)
        except (MemoryAccessError, RaceError, ProgramError) as exc:
            raise _fsims_error(launch, exc) from None
        stats = core.stats(cycles, time.perf_counter() - began)
        run = CycleRun(core.machine, stats, core.events, lambda: core.timing, "stepping")
        bursts, token_log = core.memory.bursts, core.token_log
    elif engine == "auto" and (fast := _native_run(launch, began)) is not None:
        run = fast
        if launch.trace is not None:
            stats = run.stats
            bursts, token_log = _native_bursts(run.detail), _native_token_log(run.detail)
    else:
        solver = _Solver(launch)
        try:
            cycles = solver.run()
        except (MemoryAccessError, RaceError, ProgramError) as exc:
            raise _fsims_error(launch, exc) from None
        stats = solver.stats(cycles, time.perf_counter() - began)
        run = CycleRun(solver.machine, stats, solver.events, solver.timings)
        bursts = solver.bursts() if launch.trace is not None else None
        token_log = solver.token_log() if launch.trace is not None else None
    if launch.trace is not None:
        from vtakit.sim.timeline import write_trace
        write_trace(Path(launch.trace), launch.config, launch.insns, run.timing, stats, bursts, token_log)
    return run


#: What ``simulate(engine=...)`` takes: ``auto`` (the compiled solver when it takes the program), ``python``.
ENGINES = ("auto", "python")
_NATIVE_PARAMS: dict[int, tuple[VTAConfig, bytes, tuple[int, ...]]] = {}


def _native_params(config: VTAConfig) -> tuple[bytes, tuple[int, ...]]:
    """The compiled solver's layout table and timing parameters for ``config`` (kept per configuration
    object, like :func:`_element_bytes`)."""
    entry = _NATIVE_PARAMS.get(id(config))
    if entry is None or entry[0] is not config:
        elem, out = _element_bytes(config)
        # (depths and the window beyond 2^62 act as infinite, exactly; such a latency the core declines)
        huge = 1 << 62
        # ALU flags: MUL legal, tensor micro-ops of 2 cycles unless they hit the src register (§4), REQUANT legal
        alu_flags = (int(bool(config.alu_mul)) | (2 if config.acc_read_ports == 1 else 0)
                     | (4 if config.alu_requant else 0))
        params = (min(config.cmd_queue_depth, huge), min(config.token_queue_depth, huge),
                  min(config.dram_latency, huge), min(config.dram_outstanding, huge), config.bus_bytes,
                  alu_flags, out, elem[MemId.UOP], elem[MemId.WGT], elem[MemId.INP], elem[MemId.ACC],
                  elem[MemId.ACC_8BIT], config.uop_depth, config.acc_depth,
                  finish_delay(config, False), finish_delay(config, True), LOAD_PREP_CYCLES)
        if len(_NATIVE_PARAMS) >= 64:
            _NATIVE_PARAMS.clear()
        entry = _NATIVE_PARAMS[id(config)] = (config, native.layout_table(config), params)
    return entry[1], entry[2]


def native_timing(launch: Launch) -> tuple | str | None:
    """The compiled solver's answer for ``launch`` (pure: DRAM untouched): its result tuple, the reason
    it declines (a string), or None when the core is not built (or ``VTAKIT_NATIVE=0``)."""
    return _native_timing(launch)[0]


def _native_timing(launch: Launch) -> tuple[tuple | str | None, bytes | None]:
    """:func:`native_timing`, and the encoded stream it timed."""
    core = native.core("_timing_core")
    if core is None:
        return None, None
    config = launch.config
    layout, params = _native_params(config)
    encoded = launch.encoded
    if encoded is not None and encoded.__class__ is not bytes:
        try:                    # any buffer, strided ones too, as the bytes the core and fsim take
            encoded = memoryview(encoded).tobytes()
        except TypeError:       # not a buffer at all: time the instructions themselves
            encoded = None
    try:
        stream = native.encoded_stream(launch.insns, config, encoded)
    except Exception:           # not encodable: the Python solver's checks name what is wrong
        return "not encodable", None
    dram = launch.dram
    if not (isinstance(dram, np.ndarray) and dram.flags.c_contiguous):
        dram = np.ascontiguousarray(dram, dtype=np.uint8)    # (the core reads micro-ops from it, §4)
    return core.solve(stream, layout, params, launch.insn_addr, dram), stream


def _native_run(launch: Launch, began: float) -> CycleRun | None:
    """The fast path of :func:`simulate`: timing by the compiled solver, data by fsim; None when either
    declines (the Python solver then runs). fsim's errors are the cycle backend's (:func:`_fsims_error`)."""
    result, stream = _native_timing(launch)
    if result is None or result.__class__ is str:
        return None
    try:
        data = _fsim_simulate(launch.config, launch.insns, launch.dram, encoded=stream)
    except DeadlockError:        # (the core saw none): let the Python solver report it, cycle and all
        return None
    cycles, retired, s, read_bytes, write_bytes, events, detail = result
    stats = RunStats(
        backend="cycle", counters=dict(data.machine.counters), cycles=cycles, retire_cycles=retired,
        busy_cycles={"fetch": s[0], "load": s[1], "compute": s[2], "store": s[3]},
        token_stall_cycles={"fetch": s[4], "load": s[5], "compute": s[6], "store": s[7]},
        memory_stall_cycles={"fetch": s[8], "load": s[9], "compute": s[10], "store": s[11]},
        idle_cycles={"fetch": cycles - s[0], "load": cycles - s[1] - s[5], "compute": cycles - s[2] - s[6],
                     "store": cycles - s[3] - s[7]},
        dram_read_bytes=read_bytes, dram_write_bytes=write_bytes, sim_seconds=time.perf_counter() - began)
    return CycleRun(data.machine, stats, events, partial(_native_timings, detail), "native", detail)


def _unpack(detail: bytes) -> tuple[np.ndarray, np.ndarray, list[list[int]], list[list[int]]]:
    """The compiled solver's detail (see timing_core.c's write_detail): per-instruction rows, read
    bursts (instruction or -1 for fetch, first beat, last beat), each queue's push and pop cycles."""
    a = np.frombuffer(detail, dtype=np.int64)
    n, reads = int(a[0]), int(a[1])
    counts = a[2:10].tolist()
    at = 10 + 9 * n
    rows = a[10:at].reshape(n, 9)
    bursts = a[at:at + 3 * reads].reshape(reads, 3)
    at += 3 * reads
    cycles = []
    for count in counts:
        cycles.append(a[at:at + count].tolist())
        at += count
    return rows, bursts, cycles[:4], cycles[4:]


def _native_timings(detail: bytes) -> list[InsnTiming]:
    rows, bursts, _, _ = _unpack(detail)
    beats: dict[int, list[tuple[int, int]]] = {}
    for index, first, last in bursts.tolist():
        if index >= 0:
            beats.setdefault(index, []).append((first, last))
    return [InsnTiming(m, fetched, dispatched, taken, started, finished, retired, pads, beats.get(i, []), write)
            for i, (m, fetched, dispatched, taken, started, finished, retired, pads, write) in enumerate(rows.tolist())]


def _native_bursts(detail: bytes) -> list[tuple[str, int, int]]:
    """(requester, first beat, last beat) of every read burst, in acceptance (= beat) order."""
    rows, bursts, _, _ = _unpack(detail)
    modules = rows[:, 0].tolist()
    return [("fetch" if index < 0 else MODULES[modules[index]], first, last) for index, first, last in bursts.tolist()]


def _native_token_log(detail: bytes) -> list[tuple[int, int, int]]:
    _, _, pushes, pops = _unpack(detail)
    return _token_log(pushes, pops)


def _fsims_error(launch: Launch, error: SimError) -> SimError:
    """The error the functional simulator raises for ``launch``, which raised ``error`` here.

    An erroneous program may hold several errors, and which one a run meets first depends on the
    order it applies instructions in: the solver walks each module ahead, the stepping model goes
    in cycle order, fsim drains load, then compute, then store, each as far as it can go. Worse, a
    read of an entry a racing write has not yet written is uninitialised in one order and a race in
    another. So that every backend names the
    same error (the ``rtl`` backend runs fsim first), the cycle backend reports fsim's: fsim, run
    again, meets the same instructions, since errors depend on the instructions and the schedule,
    not on data (the DRAM holds the failed run's partial writes). Only the error path pays for it.
    """
    try:
        _fsim_simulate(launch.config, launch.insns, launch.dram)
    except (MemoryAccessError, RaceError, ProgramError) as fsims:
        return fsims
    except DeadlockError:
        pass
    return error       # fsim accepts the program: keep this run's error rather than lose it


def execute(launch: Launch) -> RunStats:
    """The ``cycle`` backend entry point (see :mod:`vtakit.sim.backend`)."""
    return simulate(launch).stats
