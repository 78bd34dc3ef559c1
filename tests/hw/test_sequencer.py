"""The dependence-token sequencer (vtakit/hw/sequencer.py) with the core's token queues and a command FIFO,
against docs/timing.md §3 and §6.

A stand-in datapath finishes each instruction a chosen number of cycles into EXEC; outside producers
push tokens into the queues the module pops, and outside consumers drain the queues it pushes. A cycle
model written from §3's table (take from the command queue in IDLE; pops in flag order, a later one in
the same cycle as an earlier one but never before it, on the count at the start of the cycle; start in
the last pop's cycle; RETIRE pushes in flag order into queues holding fewer than ``Qt`` tokens; the
retire cycle) predicts the state, start, retire event (with the program index), ``blocked``, ``busy`` and
every token count, cycle for cycle, for the flag sets of load, compute and store.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from vtakit.hw import isa
from vtakit.hw.config import INSN_BITS, VTAConfig
from vtakit.hw.core import TokenQueue
from vtakit.hw.layouts import command_layout
from vtakit.hw.sequencer import ModuleState, Sequencer, sequencer_ports

CONFIG = VTAConfig.small(token_queue_depth=3, cmd_queue_depth=4)
QT, QC = CONFIG.token_queue_depth, CONFIG.cmd_queue_depth
# the flags each module honours, in flag order (docs/timing.md §3)
FLAGS = {"load": (("pop_next",), ("push_next",)), "compute": (("pop_prev", "pop_next"), ("push_prev", "push_next")),
         "store": (("pop_prev",), ("push_prev",))}
ALL_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


class _Unit(wiring.Component):
    """A module around a Sequencer whose datapath is the ``finish`` input."""

    def __init__(self, pops, pushes):
        self._pops, self._pushes = pops, pushes
        super().__init__({**sequencer_ports(CONFIG, pops, pushes), "finish": In(1), "started": Out(1)})

    def elaborate(self, platform):
        m = Module()
        seq = Sequencer(m, self, CONFIG, self._pops, self._pushes)
        m.d.comb += [seq.finish.eq(self.finish), self.started.eq(seq.start)]
        return m


class _Harness(Elaboratable):
    """The unit with its command queue and a token queue per flag, wired as in VTACore."""

    def __init__(self, pops, pushes):
        self.unit = _Unit(pops, pushes)
        self.queue = fifo.SyncFIFO(width=command_layout(CONFIG).size, depth=QC)
        self.tokens = {flag: TokenQueue(QT) for flag in pops + pushes}
        self.pops, self.pushes = pops, pushes

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit, m.submodules.queue = self.unit, self.queue
        wiring.connect(m, self.queue.r_stream, self.unit.cmd)
        for flag, queue in self.tokens.items():
            m.submodules[flag] = queue
            if flag in self.pops:
                wiring.connect(m, queue.pop, getattr(self.unit, flag))
            else:
                wiring.connect(m, getattr(self.unit, flag), queue.push)
        return m


@dataclass(frozen=True)
class Insn:
    flags: frozenset
    exec_cycles: int          # e - s + 1


@dataclass
class Scenario:
    module: str
    insns: list
    arrive: list              # the cycle each command is first offered to the command queue (in order)
    outside: dict             # flag -> cycles in which the outside pushes (pop flags) or pops (push flags)


@dataclass
class Trace:
    state: list = field(default_factory=list)
    started: list = field(default_factory=list)
    retired: list = field(default_factory=list)      # program index or None
    blocked: list = field(default_factory=list)
    busy: list = field(default_factory=list)
    tokens: list = field(default_factory=list)       # {flag: count} at the start of each cycle
    queued: list = field(default_factory=list)       # the cycle each command entered the command queue


def _word(insn: Insn) -> int:
    """An instruction word carrying the flags (every opcode has them at the same place); a GEMM here."""
    return int.from_bytes(isa.encode([isa.GemmInsn(**{f: f in insn.flags for f in ALL_FLAGS})], CONFIG), "little")


def _index(j: int) -> int:
    return 1000 + 7 * j       # the program index travels with the command; not the position in this stream


def _model(sc: Scenario, horizon: int) -> Trace:
    """docs/timing.md §3, cycle by cycle."""
    pops, pushes = FLAGS[sc.module]
    trace = Trace()
    state, queue, offered = ModuleState.IDLE, [], 0
    count = dict.fromkeys(pops + pushes, 0)
    current = pending = finish_at = None
    for c in range(horizon):
        trace.state.append(state)
        trace.tokens.append(dict(count))
        level = len(queue)
        started = retired = blocked = busy = False
        delta = dict.fromkeys(count, 0)
        next_state = state
        if state == ModuleState.IDLE:
            blocked = not queue
            if queue:
                current = queue.pop(0)
                pending = [f for f in pops if f in sc.insns[current].flags]
                next_state = ModuleState.WAIT
        elif state == ModuleState.WAIT:
            fired = 0
            while fired < len(pending) and count[pending[fired]] > 0:
                delta[pending[fired]] -= 1
                fired += 1
            blocked = bool(pending) and fired == 0
            pending = pending[fired:]
            if not pending:
                started = True
                finish_at = c + sc.insns[current].exec_cycles     # s = c + 1, e = s + exec_cycles - 1
                next_state = ModuleState.EXEC
                pending = [f for f in pushes if f in sc.insns[current].flags]
        elif state == ModuleState.EXEC:
            busy = True
            if c == finish_at:
                next_state = ModuleState.RETIRE
        else:
            fired = 0
            while fired < len(pending) and count[pending[fired]] < QT:
                delta[pending[fired]] += 1
                fired += 1
            blocked = bool(pending) and fired == 0
            pending = pending[fired:]
            if not pending:
                retired = busy = True
                next_state = ModuleState.IDLE
        # the outside, on the counts at the start of the cycle
        for flag in pops:
            if c in sc.outside.get(flag, ()) and count[flag] < QT:
                delta[flag] += 1
        for flag in pushes:
            if c in sc.outside.get(flag, ()) and count[flag] > 0:
                delta[flag] -= 1
        if offered < len(sc.insns) and c >= sc.arrive[offered] and level < QC:     # the FIFO's w_rdy
            queue.append(offered)               # readable from c + 1
            trace.queued.append(c)
            offered += 1
        trace.started.append(started)
        trace.retired.append(_index(current) if retired else None)
        trace.blocked.append(blocked)
        trace.busy.append(busy)
        for flag in count:
            count[flag] += delta[flag]
        state = next_state
    return trace


def _simulate(sc: Scenario, horizon: int) -> Trace:
    pops, pushes = FLAGS[sc.module]
    dut = _Harness(pops, pushes)
    unit = dut.unit
    trace = Trace()

    async def bench(ctx):
        offered, started, finish_at = 0, 0, None
        for c in range(horizon):
            offer = offered < len(sc.insns) and c >= sc.arrive[offered]
            ctx.set(dut.queue.w_en, offer)
            if offer:
                ctx.set(dut.queue.w_data, _word(sc.insns[offered]) | (_index(offered) << INSN_BITS))
                if ctx.get(dut.queue.w_rdy):
                    trace.queued.append(c)
                    offered += 1
            for flag in pops:           # outside producers push only where there is room
                queue = dut.tokens[flag]
                ctx.set(queue.push.valid, c in sc.outside.get(flag, ()) and ctx.get(queue.push.ready))
            for flag in pushes:         # outside consumers pop only where there is a token
                queue = dut.tokens[flag]
                ctx.set(queue.pop.ready, c in sc.outside.get(flag, ()) and ctx.get(queue.pop.valid))
            ctx.set(unit.finish, c == finish_at)
            trace.state.append(ModuleState(ctx.get(unit.state)))
            trace.tokens.append({flag: ctx.get(queue.count) for flag, queue in dut.tokens.items()})
            trace.started.append(bool(ctx.get(unit.started)))
            trace.retired.append(ctx.get(unit.retire.index) if ctx.get(unit.retire.valid) else None)
            trace.blocked.append(bool(ctx.get(unit.blocked)))
            trace.busy.append(bool(ctx.get(unit.busy)))
            if trace.started[-1]:
                finish_at = c + sc.insns[started].exec_cycles
                started += 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return trace


def _check(sc: Scenario, horizon: int) -> Trace:
    got, want = _simulate(sc, horizon), _model(sc, horizon)
    assert got.queued == want.queued
    for name in ("state", "started", "retired", "blocked", "busy", "tokens"):
        got_list, want_list = getattr(got, name), getattr(want, name)
        bad = next((c for c in range(horizon) if got_list[c] != want_list[c]), None)
        assert bad is None, f"{name} differs first in cycle {bad}: rtl {got_list[bad]}, contract {want_list[bad]}"
    return got


def _insns(*specs) -> list[Insn]:
    return [Insn(frozenset(flags), cycles) for flags, cycles in specs]


def test_no_tokens_take_start_retire():
    """Taken in t, started in t + 1, s = t + 2; finishing in s + x - 1 it retires in s + x; the next one is taken
    the cycle after."""
    sc = Scenario("compute", _insns(((), 1), ((), 4), ((), 1)), arrive=[0, 0, 0], outside={})
    trace = _check(sc, 30)
    taken, want_starts, want_retires = 1, [], []    # written in 0, in the queue from 1
    for insn in sc.insns:
        s = taken + 2
        want_starts.append(taken + 1)
        want_retires.append(s + insn.exec_cycles)     # e = s + x - 1, retire e + 1
        taken = want_retires[-1] + 1
    starts = [c for c, v in enumerate(trace.started) if v]
    retires = [c for c, v in enumerate(trace.retired) if v is not None]
    assert (starts, retires) == (want_starts, want_retires) == ([2, 6, 13], [4, 11, 15])
    assert [trace.retired[c] for c in retires] == [_index(0), _index(1), _index(2)]
    assert [c for c, v in enumerate(trace.busy) if v] == [3, 4, 7, 8, 9, 10, 11, 14, 15]   # EXEC and retire


@pytest.mark.parametrize("prev_at,next_at,pops_at", [(12, 5, (13, 13)), (5, 12, (6, 13)), (7, 7, (8, 8))])
def test_pops_go_in_flag_order(prev_at, next_at, pops_at):
    """pop_next never before pop_prev, but in the same cycle; a token pushed in c can be popped from c + 1."""
    sc = Scenario("compute", _insns((("pop_prev", "pop_next"), 2)), arrive=[0],
                  outside={"pop_prev": {prev_at}, "pop_next": {next_at}})
    trace = _check(sc, 30)
    popped = {flag: next(c for c in range(1, 30) if trace.tokens[c][flag] < trace.tokens[c - 1][flag]) - 1
              for flag in ("pop_prev", "pop_next")}
    assert (popped["pop_prev"], popped["pop_next"]) == pops_at
    assert trace.started.index(True) == pops_at[1]
    assert all(trace.blocked[c] for c in range(2, pops_at[1]) if c not in pops_at)


@pytest.mark.parametrize("module", ["load", "store", "compute"])
def test_push_waits_for_room_in_a_full_token_queue(module):
    """Qt pushes fill the queue; the next instruction waits in RETIRE (blocked) until the outside pops in cycle
    40, then pushes and retires in 41 (a slot freed in c is usable from c + 1)."""
    flag = FLAGS[module][1][-1]
    sc = Scenario(module, _insns(*[((flag,), 1)] * (QT + 1)), arrive=[0] * (QT + 1), outside={flag: {40}})
    trace = _check(sc, 50)
    retires = [c for c, v in enumerate(trace.retired) if v is not None]
    assert len(retires) == QT + 1 and retires[-1] == 41
    assert trace.tokens[retires[QT - 1] + 1][flag] == QT
    assert trace.state[40] == ModuleState.RETIRE and trace.blocked[retires[QT - 1] + 5:40] == [True] * (
        40 - retires[QT - 1] - 5)


def test_flags_another_module_owns_are_ignored():
    """Load honours pop_next/push_next only: an instruction carrying pop_prev and push_prev too runs without them."""
    sc = Scenario("load", _insns((ALL_FLAGS, 1)), arrive=[0], outside={"pop_next": {3}})
    trace = _check(sc, 20)
    assert trace.tokens[-1] == {"pop_next": 0, "push_next": 1} and trace.retired.count(_index(0)) == 1


@pytest.mark.parametrize("module", ["load", "compute", "store"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_programs_match_the_contract(module, seed):
    """Random flags, execution lengths, command arrivals and outside token traffic: the whole trace equals the
    contract's, and instructions retire in program order, each once."""
    rng = np.random.default_rng(seed * 10 + len(module))
    pops, pushes = FLAGS[module]
    insns = [Insn(frozenset(f for f in pops + pushes if rng.random() < 0.6), int(rng.integers(1, 5)))
             for _ in range(16)]
    arrive = sorted(int(v) for v in rng.integers(0, 24, len(insns)))    # faster than they run: the queue fills
    horizon = 300
    # outside traffic at a rate per flag: scarce pop_prev tokens behind plentiful pop_next ones (so pop order
    # matters), slow consumers (so pushes wait)
    rates = {"pop_prev": 0.08, "pop_next": 0.2, "push_prev": 0.08, "push_next": 0.12}
    outside = {f: set(np.flatnonzero(rng.random(horizon) < rates[f]).tolist()) for f in pops + pushes}
    trace = _check(Scenario(module, insns, arrive, outside), horizon)
    assert [v for v in trace.retired if v is not None] == [_index(j) for j in range(len(insns))]
    assert any(b and s in (ModuleState.WAIT, ModuleState.RETIRE) for s, b in zip(trace.state, trace.blocked))
