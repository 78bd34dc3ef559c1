"""The functional simulator: bit-exact data, no time (docs/architecture.md §2, backend ``fsim``).

It runs a program the way the hardware's four modules would, as a bounded Kahn network: fetch
dispatches instructions in program order into per-module command queues of CMD_QUEUE_DEPTH
entries (stalling when the target queue is full; an entry leaves its queue when the module takes
it as its current instruction); each module then waits for its pops, executes, and posts its
pushes into token queues of TOKEN_QUEUE_DEPTH tokens (a push to a full queue stalls the module).
Pops are taken in flag order (pop_prev, then pop_next) and pushes posted in flag order
(push_prev, then push_next), one at a time, as VTA's HLS modules do. With every queue bounded
and each queue having one producer and one consumer, the final state and whether the program
deadlocks do not depend on the order modules are stepped in; ``simulate(..., rng=...)`` steps
them in a random order to demonstrate it.

The data effect of each instruction is :class:`vtakit.sim.machine.Machine`'s; this module adds
the scheduler and the program-level checks:

* statically, before anything runs: every instruction legal for its module
  (:func:`~vtakit.sim.machine.validate_instruction`), exactly one FINISH and it is last, and as
  many pushes as pops on every token queue (:class:`ProgramError`);
* while running: deadlock (:class:`DeadlockError`, listing every blocked module, its instruction
  and the queue it waits on), data races between modules (:class:`RaceError`, from
  :class:`vtakit.sim.hb.RaceDetector`), the machine's range and uninitialised-read checks
  (:class:`MemoryAccessError`), and at FINISH that every instruction of every module happens
  before it (:class:`ProgramError`).

Whether a program is accepted does not depend on the stepping order either: addresses never
depend on data, so the conflicting access pairs and the happens-before order are properties of
the program, and the vector-clock check finds every unordered pair in any order. Only for a
program that is rejected can the error differ between orders (a read that races with a write
not yet performed is reported as uninitialised).

The fetch model reads ``launch.insns`` (the decoded stream the runtime also encoded at
``insn_addr``); instruction bytes in DRAM are not re-read.

Engines: this module is the reference engine. When the compiled core ``vtakit.sim._fsim_core``
is built (see :mod:`vtakit.sim.native`), :func:`simulate` and :func:`execute` first offer the
program to it (:func:`run_native`): it runs the same checks, schedule and data effects on a fresh
:class:`Machine`'s arrays from the encoded stream, and declines, DRAM untouched, anything the
Python engine would reject (or it does not support); the Python engine then runs the program and
raises its usual error. Results, statistics and errors are the same either way.
``simulate(..., engine="python")`` (or ``VTAKIT_NATIVE=0``) forces the Python engine; a random
stepping order (``rng``) always runs on it.
"""

from __future__ import annotations

import operator
import random
import time
from collections import deque
from dataclasses import dataclass, field
from math import gcd

import numpy as np

from vtakit.errors import DeadlockError, MemoryAccessError, ProgramError, SimError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import FinishInsn, Instruction, Stage
from vtakit.sim import native
from vtakit.sim.backend import Launch
from vtakit.sim.hb import MODULES, RaceDetector
from vtakit.sim.machine import POP_QUEUES, PUSH_QUEUES, QUEUE_NAMES, Machine, checked_stage, describe
from vtakit.sim.stats import COUNTER_NAMES, RunStats

__all__ = ["execute", "simulate", "run_native", "check_program", "check_schedule", "check_finish", "FsimRun",
           "Routing", "ENGINES"]

#: What ``simulate(..., engine=...)`` accepts: "auto" (the compiled core when built, else Python) or "python".
ENGINES = ("auto", "python")

_STAGES = (Stage.LOAD, Stage.COMPUTE, Stage.STORE)
_COMPUTE = 1
# what a module's current instruction is doing
_POPPING, _PUSHING = 0, 1


@dataclass(frozen=True)
class Routing:
    """Where fetch sends an instruction and which token queues it pops and pushes, in order."""

    module: int                  # index into MODULES
    pops: tuple[int, ...]        # token queues, in the order popped
    pushes: tuple[int, ...]      # token queues, in the order pushed


# Programs that passed check_program lately, most recent first: (config, instructions, routes). The
# checks are a function of the (frozen) configuration and (frozen) instructions, so a program made of
# the very same objects -- one program run on several backends, or run again -- is not checked twice.
_CHECKED: list[tuple[VTAConfig, tuple[Instruction, ...], list[Routing]]] = []
_CHECKED_KEEP = 16


def check_program(insns: list[Instruction], config: VTAConfig) -> list[Routing]:
    """The static checks (legality, FINISH rules, token balance); returns each instruction's routing."""
    program = tuple(insns)
    for known_config, known, routes in _CHECKED:
        if known_config is config and len(known) == len(program) and all(map(operator.is_, known, program)):
            return list(routes)
    routes = _check_program(program, config)
    _CHECKED.insert(0, (config, program, routes))
    del _CHECKED[_CHECKED_KEEP:]
    return list(routes)


def _check_program(insns: tuple[Instruction, ...], config: VTAConfig) -> list[Routing]:
    routes = []
    finishes = []
    known: dict[tuple, list] = {}    # a handful of distinct routings per program: [routing, uses], built once each
    for index, insn in enumerate(insns):
        stage = checked_stage(insn, config, index)
        key = (stage, insn.pop_prev, insn.pop_next, insn.push_prev, insn.push_next)
        slot = known.get(key)
        if slot is None:
            slot = known[key] = [Routing(_STAGES.index(stage),
                                         tuple(q for flag, q in POP_QUEUES[stage] if getattr(insn, flag)),
                                         tuple(q for flag, q in PUSH_QUEUES[stage] if getattr(insn, flag))), 0]
        slot[1] += 1
        if isinstance(insn, FinishInsn):
            finishes.append(index)
        routes.append(slot[0])
    pushes = [0] * len(QUEUE_NAMES)
    pops = [0] * len(QUEUE_NAMES)
    for entry, uses in known.values():
        for q in entry.pops:
            pops[q] += uses
        for q in entry.pushes:
            pushes[q] += uses
    if not finishes:
        raise ProgramError(f"program of {len(insns)} instructions has no FINISH; expected exactly one FINISH "
                           "as the last instruction")
    if len(finishes) > 1:
        raise ProgramError(f"program has {len(finishes)} FINISH instructions (at {finishes}); expected exactly one")
    if finishes[0] != len(insns) - 1:
        raise ProgramError(f"FINISH is instruction {finishes[0]} but the program has {len(insns)} instructions; "
                           "FINISH must be the last instruction")
    unbalanced = [f"{QUEUE_NAMES[q]}: {pushes[q]} pushes, {pops[q]} pops" for q in range(len(QUEUE_NAMES))
                  if pushes[q] != pops[q]]
    if unbalanced:
        raise ProgramError(f"unbalanced dependency tokens ({'; '.join(unbalanced)}); every queue needs as many "
                           "pushes as pops")
    return routes


def check_finish(hb: RaceDetector, routes: list[Routing], insns: list[Instruction], index: int) -> None:
    """The FINISH rule, checked when FINISH (instruction ``index``) executes: every instruction of
    every module happens before it (:class:`ProgramError` naming the first one that does not)."""
    modules = None
    for m in range(len(MODULES)):
        if m == _COMPUTE:
            continue   # FINISH is compute's last instruction: program order covers the rest
        seen = hb.clocks[_COMPUTE][m]
        if modules is None:
            modules = [route.module for route in routes]
        total = modules.count(m)
        if seen < total:
            indices = [i for i, module in enumerate(modules) if module == m]
            pending = indices[seen]
            raise ProgramError(
                f"FINISH (instruction {index}) does not wait for {describe(pending, insns[pending])}: "
                f"only {seen} of the {len(indices)} {MODULES[m]} instructions happen before it; end the "
                f"program with a {MODULES[m]}->compute token popped by FINISH (VTA's Synchronize)")


@dataclass
class _Unit:
    """One module's runtime state."""

    module: int
    commands: deque = field(default_factory=deque)   # global instruction indices
    current: int = -1                                # instruction in progress, -1 when idle
    phase: int = _POPPING
    step: int = 0                                    # pops taken / pushes posted so far
    executed: list[int] = field(default_factory=list)  # global indices, in the module's order


class _Simulator:
    """Fetch, the three modules and the four token queues around one :class:`Machine`."""

    def __init__(self, config: VTAConfig, insns: list[Instruction], dram: np.ndarray | None,
                 check_races: bool) -> None:
        self.config = config
        self.insns = insns
        self.routes = check_program(insns, config)
        self.units = [_Unit(m) for m in range(len(MODULES))]
        self.hb = RaceDetector(config, self._describe_epoch)
        # without a DRAM image only the schedule runs: tokens, queues and the FINISH rule, no data
        self.machine = None if dram is None else Machine(config, dram, self.hb if check_races else None)
        self.tokens: list[deque] = [deque() for _ in QUEUE_NAMES]
        modules = [route.module for route in self.routes]
        self.totals = [modules.count(m) for m in range(len(MODULES))]
        self.last = len(insns) - 1          # FINISH (check_program)
        self.fetched = 0
        self.finished = False
        self.stalls: set[tuple[str, str, int]] = set()   # (kind, queue, instruction) seen blocked on a full queue

    def _describe_epoch(self, module: int, epoch: int) -> str:
        index = self.units[module].executed[epoch - 1]
        return describe(index, self.insns[index])

    # ------------------------------------------------------------------ stepping
    def fetch(self, budget: int) -> int:
        """Dispatch up to ``budget`` instructions; returns how many."""
        done = 0
        depth = self.config.cmd_queue_depth
        fetched, count = self.fetched, len(self.insns)
        routes, units = self.routes, self.units
        while done < budget and fetched < count:
            unit = units[routes[fetched].module]
            if len(unit.commands) >= depth:
                self.stalls.add(("fetch", MODULES[unit.module], fetched))
                break
            unit.commands.append(fetched)
            fetched += 1
            done += 1
        self.fetched = fetched
        return done

    def advance(self, unit: _Unit, budget: int) -> int:
        """Let ``unit`` take up to ``budget`` actions (start, pop, execute, push); returns how many."""
        if self.finished:
            return 0
        done = 0
        tokens = self.tokens
        depth = self.config.token_queue_depth
        hb = self.hb
        m = unit.module
        commands = unit.commands
        # the unit's state lives in locals while it steps, and is written back whenever it stops
        current, phase, step = unit.current, unit.phase, unit.step
        route = None if current < 0 else self.routes[current]
        try:
            while done < budget:
                if current < 0:
                    if not commands:
                        break
                    current = commands.popleft()
                    route = self.routes[current]
                    phase, step = _POPPING, 0
                    hb.begin(m)
                    unit.executed.append(current)
                    done += 1
                    continue
                if phase == _POPPING:
                    pops = route.pops
                    if step < len(pops):
                        queue = tokens[pops[step]]
                        if not queue:
                            break
                        hb.join(m, queue.popleft())
                        step += 1
                    else:
                        self._execute(m, current)
                        phase, step = _PUSHING, 0
                    done += 1
                    continue
                pushes = route.pushes
                if step < len(pushes):
                    queue = tokens[pushes[step]]
                    if len(queue) >= depth:
                        self.stalls.add(("push", QUEUE_NAMES[pushes[step]], current))
                        break
                    queue.append(hb.snapshot(m))
                    step += 1
                else:
                    finished = current == self.last   # FINISH retired: the program is done
                    current = -1
                    if finished:
                        self.finished = True
                        done += 1
                        break
                done += 1
        finally:
            unit.current, unit.phase, unit.step = current, phase, step
        return done

    def drain(self, unit: _Unit) -> bool:
        """:meth:`advance` with no budget: every action ``unit`` can take, in the same order, with the
        bookkeeping of a whole instruction done in one pass; returns whether it took any."""
        if self.finished:
            return False
        tokens = self.tokens
        depth = self.config.token_queue_depth
        hb = self.hb
        machine = self.machine
        insns, routes, last = self.insns, self.routes, self.last
        m = unit.module
        commands = unit.commands
        executed = unit.executed
        current, phase, step = unit.current, unit.phase, unit.step
        progress = False
        try:
            while True:
                if current < 0:
                    if not commands:
                        break
                    current = commands.popleft()
                    phase, step = _POPPING, 0
                    hb.begin(m)
                    executed.append(current)
                    progress = True
                route = routes[current]
                if phase == _POPPING:
                    pops = route.pops
                    while step < len(pops):
                        queue = tokens[pops[step]]
                        if not queue:
                            return progress
                        hb.join(m, queue.popleft())
                        step += 1
                        progress = True
                    hb.module = m
                    if current == last:
                        check_finish(hb, routes, insns, current)
                    elif machine is not None:
                        machine.apply(insns[current], current, validate=False)   # check_program validated it
                    phase, step = _PUSHING, 0
                    progress = True
                pushes = route.pushes
                while step < len(pushes):
                    queue = tokens[pushes[step]]
                    if len(queue) >= depth:
                        self.stalls.add(("push", QUEUE_NAMES[pushes[step]], current))
                        return progress
                    queue.append(hb.snapshot(m))
                    step += 1
                    progress = True
                finished = current == last   # FINISH retired: the program is done
                current = -1
                progress = True
                if finished:
                    self.finished = True
                    break
        finally:
            unit.current, unit.phase, unit.step = current, phase, step
        return progress

    def _execute(self, module: int, index: int) -> None:
        self.hb.module = module
        if index == self.last:
            check_finish(self.hb, self.routes, self.insns, index)
        elif self.machine is not None:
            self.machine.apply(self.insns[index], index, validate=False)   # check_program validated it

    # ------------------------------------------------------------------ driving
    def run(self, rng: random.Random | None) -> None:
        everything = 1 << 62
        fetch, drain, units = self.fetch, self.drain, self.units
        if rng is not None:
            steppers = [fetch] + [lambda budget, u=u: self.advance(u, budget) for u in units]
        while not self.finished:
            if rng is None:   # fetch, then each module, as far as each can go
                progress = fetch(everything) > 0
                for unit in units:
                    progress = drain(unit) or progress
            else:
                order = rng.sample(range(len(steppers)), len(steppers))
                progress = 0
                for k in order:  # one action by the first stepper, in random order, that can act
                    progress = steppers[k](rng.randint(1, 3))
                    if progress:
                        break
            if not progress:
                raise DeadlockError(self._deadlock_report())

    def _deadlock_report(self) -> str:
        lines = []
        for m, unit in enumerate(self.units):
            if unit.current >= 0:
                route = self.routes[unit.current]
                what = describe(unit.current, self.insns[unit.current])
                if unit.phase == _POPPING:
                    queue = QUEUE_NAMES[route.pops[unit.step]]
                    lines.append(f"  {MODULES[m]}: {what} waits to pop a token from {queue} (empty)")
                else:
                    queue = QUEUE_NAMES[route.pushes[unit.step]]
                    lines.append(f"  {MODULES[m]}: {what} waits to push a token to {queue} "
                                 f"(full, {self.config.token_queue_depth} tokens)")
            elif len(unit.executed) < self.totals[m]:
                lines.append(f"  {MODULES[m]}: idle, its next instruction is not fetched yet")
        if self.fetched < len(self.insns):
            index = self.fetched
            target = MODULES[self.routes[index].module]
            lines.append(f"  fetch: {describe(index, self.insns[index])} waits for room in the {target} command "
                         f"queue (full, {self.config.cmd_queue_depth} entries)")
        return "deadlock: no module can make progress and FINISH has not run:\n" + "\n".join(lines)


@dataclass
class FsimRun:
    """What :func:`simulate` returns: the final machine state, the stats, and where queues filled up.

    ``fetch_stalls`` counts instructions fetch had to hold back because their module's command
    queue was full, per module; ``push_stalls`` counts instructions whose push found its token
    queue full, per queue. Both depend on the stepping order (the data never does).
    """

    machine: Machine
    stats: RunStats
    fetch_stalls: dict[str, int]
    push_stalls: dict[str, int]


def simulate(config: VTAConfig, insns: list[Instruction], dram: np.ndarray, *, rng: random.Random | None = None,
             check_races: bool = True, engine: str = "auto", encoded: bytes | None = None) -> FsimRun:
    """Run ``insns`` on ``dram`` (uint8, mutated in place).

    By default fetch and the modules are stepped in a fixed order, each as far as it can go;
    ``rng`` steps them in a random order, one to three actions at a time, instead; results must
    not change. ``check_races=False`` skips the happens-before race checks (every other check stays).
    ``engine="python"`` runs the Python engine even when the compiled core is built (the default
    ``"auto"`` offers the program to the core first, see the module docstring); ``encoded`` is
    the instruction stream when the caller has it (``Launch.encoded``), saving its encoding. It
    must be ``isa.encode(insns, config)``: the core runs those bytes (as the RTL, which fetches
    them, would) and only their length is checked against ``insns``.
    """
    if engine not in ENGINES:
        raise SimError(f"unknown fsim engine {engine!r}; expected one of {list(ENGINES)}")
    if rng is None and engine == "auto":
        if type(insns) is not list:
            insns = list(insns)
        run = _native_run(config, insns, dram, encoded, check_races)[0]
        if run is not None:
            return run
    start = time.perf_counter()
    sim = _Simulator(config, list(insns), dram, check_races)
    sim.run(rng)
    stats = RunStats(backend="fsim", counters=dict(sim.machine.counters),
                     sim_seconds=time.perf_counter() - start)
    fetch_stalls = {name: sum(1 for kind, q, _ in sim.stalls if kind == "fetch" and q == name) for name in MODULES}
    push_stalls = {name: sum(1 for kind, q, _ in sim.stalls if kind == "push" and q == name) for name in QUEUE_NAMES}
    return FsimRun(sim.machine, stats, fetch_stalls, push_stalls)


def run_native(launch: Launch) -> Machine | None:
    """Run ``launch`` on the compiled core: the final :class:`Machine` (counters included), or None
    when the core is not built, turned off (``VTAKIT_NATIVE=0``) or declines the program, in
    which case DRAM holds its original bytes and the Python engine should run it."""
    run = _native_run(launch.config, launch.insns, launch.dram, launch.encoded, True)[0]
    return None if run is None else run.machine


# The encodings of programs run lately by identity of their instruction objects (as _CHECKED):
# a program run again, or on several backends, is not encoded again.
_ENCODED: list[tuple[VTAConfig, tuple[Instruction, ...], bytes]] = []


def _stream(config: VTAConfig, insns: list[Instruction], encoded: bytes | None) -> bytes | None:
    """The encoded instruction stream of ``insns``; None when they cannot be encoded (the Python
    engine reports why)."""
    if encoded is not None and len(encoded) == isa.INSN_BYTES * len(insns):
        return encoded
    program = tuple(insns)
    for known_config, known, stream in _ENCODED:
        if known_config is config and len(known) == len(program) and all(map(operator.is_, known, program)):
            return stream
    try:
        stream = native.encoded_stream(insns, config, None)
    except Exception:   # noqa: BLE001 - anything the encoder rejects, Python's checks name properly
        return None
    _ENCODED.insert(0, (config, program, stream))
    del _ENCODED[_CHECKED_KEEP:]
    return stream


# Per configuration (by identity: hashing a VTAConfig costs more than a short native run's glue; the
# entry keeps the config alive): the layout table and csrc/fsim_core.c's ``fs_config``.
_NATIVE_CONFIGS: dict[int, tuple[VTAConfig, bytes, tuple[int, ...]]] = {}


def _native_config(config: VTAConfig) -> tuple[VTAConfig, bytes, tuple[int, ...]]:
    hit = _NATIVE_CONFIGS.get(id(config))
    if hit is None or hit[0] is not config:
        if len(_NATIVE_CONFIGS) >= 64:
            _NATIVE_CONFIGS.clear()
        hit = _NATIVE_CONFIGS[id(config)] = (config, native.layout_table(config), _native_params(config))
    return hit


def _native_params(config: VTAConfig) -> tuple[int, ...]:
    """The configuration as csrc/fsim_core.c's ``fs_config`` (its field order)."""
    c = config
    depths = (c.uop_depth, c.inp_depth, c.wgt_depth, c.acc_depth, c.out_depth)
    written_at = np.cumsum((0,) + depths[:-1]).tolist()   # Machine's one mask array: uop, inp, wgt, acc, out
    uop_fields = isa.uop_layout(config)
    return (c.batch, c.block_in, c.block_out, *depths, *written_at,
            c.uop_elem_bytes, c.inp_elem_bytes, c.wgt_elem_bytes, c.acc_elem_bytes, c.acc8_elem_bytes,
            c.out_elem_bytes, *(f.offset for f in uop_fields), *((1 << f.width) - 1 for f in uop_fields),
            # (any command queue deeper than the program behaves alike; VTAConfig bounds no depth but the token queues')
            min(c.cmd_queue_depth, 1 << 62), c.token_queue_depth, int(c.alu_mul),
            # the race detector's DRAM granule: every DMA row starts and ends on one (as in hb)
            gcd(c.uop_elem_bytes, c.inp_elem_bytes, c.wgt_elem_bytes, c.acc_elem_bytes, c.acc8_elem_bytes,
                c.out_elem_bytes), int(c.alu_requant), int(c.bias_preload), int(c.gemm_out_requant))


def _native_run(config: VTAConfig, insns: list[Instruction], dram: np.ndarray, encoded: bytes | None,
                check_races: bool) -> tuple[FsimRun | None, str]:
    """:func:`simulate` on the compiled core: (the run, "") or (None, why it was not used)."""
    core = native.core("_fsim_core")
    if core is None:
        return None, "the compiled core is not available"
    start = time.perf_counter()
    stream = _stream(config, insns, encoded)
    if stream is None:
        return None, "the instructions cannot be encoded"
    if type(dram) is not np.ndarray:
        return None, "DRAM is not a numpy array"
    try:
        machine = Machine(config, dram)
    except MemoryAccessError:   # a DRAM image of another dtype or shape: the Python engine reports it
        return None, "DRAM is not a 1-D uint8 array"
    _, layout, params = _native_config(config)
    result = core.run(layout, stream, params, dram, machine.uop, machine.inp, machine.wgt, machine.acc,
                      machine.out, machine._written, check_races)
    if type(result) is str:
        return None, result
    counters, fetch_stalls, push_stalls, machine.requant = result
    machine.counters = dict(zip(COUNTER_NAMES, counters))
    stats = RunStats(backend="fsim", counters=dict(machine.counters), sim_seconds=time.perf_counter() - start)
    return FsimRun(machine, stats, dict(zip(MODULES, fetch_stalls)), dict(zip(QUEUE_NAMES, push_stalls))), ""


def check_schedule(config: VTAConfig, insns: list[Instruction]) -> None:
    """The program checks that do not depend on data: legality, FINISH rules, token balance and
    deadlock (with the configuration's queue depths). Raises what :func:`simulate` would."""
    _Simulator(config, list(insns), None, check_races=False).run(None)


def execute(launch: Launch) -> RunStats:
    """The ``fsim`` backend entry point (see :mod:`vtakit.sim.backend`)."""
    if launch.trace is not None:
        raise SimError(f"backend fsim models no time, so it cannot write the trace {str(launch.trace)!r}; "
                       "use backend 'cycle' for a .json timeline or 'rtl' for a .vcd waveform")
    return simulate(launch.config, launch.insns, launch.dram, encoded=launch.encoded).stats
