"""The ``rtl`` backend: runs a program on the Amaranth simulation of :class:`VTACore`.

The harness plays the rest of the system: it launches the core (``start`` with the instruction
address and count), serves the core's AXI4 port from the launch's DRAM image with the DRAM model
of docs/timing.md §DRAM (reads: first beat DRAM_LATENCY cycles after the accepted request, bursts
served in order back to back, one beat per cycle; writes: applied beat by beat, B the cycle after
the last beat), records every retire event, and stops at ``done`` or raises
:class:`~vtakit.errors.DeadlockError` the cycle the core's exact deadlock flag rises.

Before simulating, the functional simulator runs the launch (its DRAM image put back afterwards), so the
``rtl`` backend rejects exactly the programs ``fsim`` rejects, with fsim's error naming the
instruction: malformed programs (``ProgramError``), GEMM/ALU/DMA indices out of range and
uninitialised reads (``MemoryAccessError``), data races (``RaceError``). Those depend on micro-ops
and data loaded at run time, which the hardware does not check (it wraps SRAM addresses, as a real
accelerator would), and the pre-run costs next to nothing beside the RTL simulation. A deadlock is
left to the RTL, which reports the cycle it happens in. :func:`run_unchecked` runs the hardware
alone; there a DMA write past the end of an SRAM still trips an ``Assert`` of the RTL and becomes
a ``MemoryAccessError``.

For speed, everything the harness needs from the core in a cycle is packed into one probe signal
sampled once per clock edge, and the DRAM model reads whole bursts from the numpy image at once.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

import numpy as np
from amaranth.hdl import Cat, Elaboratable, Module, Signal
from amaranth.sim import Simulator

from vtakit.errors import DeadlockError, MemoryAccessError, ProgramError, SimError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.core import COUNTERS, TOKEN_QUEUES, VTACore
from vtakit.hw.sequencer import ModuleState
from vtakit.progress import Progress, progress
from vtakit.sim.backend import Launch
from vtakit.sim.fsim import check_program, simulate
from vtakit.sim.stats import STAGE_MODULES, RunStats

__all__ = ["execute", "run_unchecked", "validate", "DramModel", "AxiResponder", "profile_counters", "MAX_CYCLES"]

#: A run that has neither finished nor deadlocked after this many cycles is a harness bug.
MAX_CYCLES = 20_000_000
_PROGRESS_CYCLES = 255      # the progress bar shows the cycle count every 256 cycles
_MODULES = STAGE_MODULES


@dataclass
class _ReadBurst:
    first_cycle: int
    beats: list[int]
    axi_id: int


@dataclass
class _WriteBurst:
    addr: int
    size: int
    beat: int = 0


class DramModel:
    """The harness DRAM behind the core's AXI4 port (docs/timing.md §DRAM).

    Reads: a request accepted in cycle ``t`` delivers its first beat in cycle
    ``max(t + DRAM_LATENCY, last beat of the previous burst + 1)``, then one beat per cycle.
    Writes: each W beat is applied when it is transferred; B follows the burst's last beat by one
    cycle. ARREADY, AWREADY and WREADY are always high.
    """

    def __init__(self, dram: np.ndarray, config: VTAConfig):
        self.dram = dram
        self.latency = config.dram_latency
        self.bus_bytes = config.bus_bytes
        self.reads: deque[_ReadBurst] = deque()
        self.writes: deque[_WriteBurst] = deque()
        self.last_beat_cycle = -1
        self.read_bytes = 0
        self.write_bytes = 0

    def _check(self, addr: int, nbytes: int, what: str) -> None:
        if addr + nbytes > self.dram.size:
            raise MemoryAccessError(f"DRAM {what} of {nbytes} bytes at {addr:#x} runs past the end of "
                                    f"DRAM ({self.dram.size} bytes)")

    @staticmethod
    def _check_axi(addr: int, beats: int, step: int, what: str) -> None:
        """AXI4 rules the core must keep: aligned beats, no burst across 4 KiB."""
        if addr % step or addr // 4096 != (addr + beats * step - 1) // 4096:
            raise SimError(f"AXI4 violation: {what} burst of {beats} x {step} bytes at {addr:#x} is unaligned "
                           "or crosses a 4 KiB boundary")

    def read_request(self, cycle: int, addr: int, length: int, size: int, axi_id: int) -> None:
        beats, step, bus = length + 1, 1 << size, self.bus_bytes
        self._check_axi(addr, beats, step, "read")
        self._check(addr, beats * step, "read")
        chunk = self.dram[addr:addr + beats * step]
        if step == bus == 8:
            data = chunk.view("<u8").tolist()
        elif step == bus:
            raw = chunk.tobytes()
            data = [int.from_bytes(raw[i:i + bus], "little") for i in range(0, len(raw), bus)]
        else:
            raw = chunk.tobytes()
            data = [int.from_bytes(raw[i * step:(i + 1) * step], "little") << (8 * ((addr + i * step) % bus))
                    for i in range(beats)]
        first = max(cycle + self.latency, self.last_beat_cycle + 1)
        self.last_beat_cycle = first + beats - 1
        self.read_bytes += beats * step
        self.reads.append(_ReadBurst(first, data, axi_id))

    def read_beat(self, cycle: int) -> tuple[int, int, bool] | None:
        """(data, id, last) driven in ``cycle``, or None."""
        if not self.reads or self.reads[0].first_cycle > cycle:
            return None
        burst = self.reads[0]
        index = cycle - burst.first_cycle
        last = index == len(burst.beats) - 1
        if last:
            self.reads.popleft()
        return burst.beats[index], burst.axi_id, last

    def write_request(self, addr: int, length: int, size: int) -> None:
        self._check_axi(addr, length + 1, 1 << size, "write")
        self.writes.append(_WriteBurst(addr, size))

    def write_beat(self, data: int, last: bool) -> None:
        if not self.writes:
            raise SimError("DRAM model: W beat without a preceding AW request")
        burst = self.writes[0]
        step = 1 << burst.size
        addr = burst.addr + burst.beat * step
        self._check(addr, step, "write")
        lane = addr % self.bus_bytes
        value = (data >> (8 * lane)) & ((1 << (8 * step)) - 1)
        self.dram[addr:addr + step] = np.frombuffer(value.to_bytes(step, "little"), dtype=np.uint8)
        self.write_bytes += step
        burst.beat += 1
        if last:
            self.writes.popleft()


class AxiResponder:
    """The memory side of an AXI4 master in a testbench: write beats go to the DRAM model, and each
    cycle the model's read data (R) and write responses (B, one cycle after a burst's last beat) are
    driven back. The core's harness here and the simulated register shell (``shell_sim``) share it."""

    def __init__(self, ctx, axi, dram: DramModel) -> None:
        self.ctx, self.axi, self.dram = ctx, axi, dram
        self._r_driven = False
        self._b_driven = False
        self._b_pending: deque[int] = deque()
        for ready in (axi.arready, axi.awready, axi.wready):
            ctx.set(ready, 1)

    def write_beat(self, cycle: int, data: int, last: bool) -> None:
        """A W beat seen in ``cycle``; the last beat of a burst schedules its B response."""
        self.dram.write_beat(data, last)
        if last:
            self._b_pending.append(cycle + 1)

    def drive(self, cycle: int) -> None:
        """Set R and B for ``cycle`` (signals change only when their value does)."""
        ctx, axi = self.ctx, self.axi
        beat = self.dram.read_beat(cycle)
        if beat is not None:
            data, axi_id, last = beat
            ctx.set(axi.rdata, data)
            ctx.set(axi.rid, axi_id)
            ctx.set(axi.rlast, last)
            if not self._r_driven:
                ctx.set(axi.rvalid, 1)
                self._r_driven = True
        elif self._r_driven:
            ctx.set(axi.rvalid, 0)
            self._r_driven = False
        b_now = bool(self._b_pending) and self._b_pending[0] == cycle
        if b_now:
            self._b_pending.popleft()
        if b_now != self._b_driven:
            ctx.set(axi.bvalid, b_now)
            self._b_driven = b_now


def profile_counters(insns: list[isa.Instruction], config: VTAConfig) -> dict[str, int]:
    """VTA's byte counters, from the instruction list (padding not counted)."""
    elem = {isa.MemId.INP: ("inp_load_nbytes", config.inp_elem_bytes),
            isa.MemId.WGT: ("wgt_load_nbytes", config.wgt_elem_bytes),
            isa.MemId.ACC: ("acc_load_nbytes", config.acc_elem_bytes),
            isa.MemId.ACC_8BIT: ("acc_load_nbytes", config.acc_elem_bytes),
            isa.MemId.UOP: ("uop_load_nbytes", config.uop_elem_bytes)}
    counters = {"inp_load_nbytes": 0, "wgt_load_nbytes": 0, "acc_load_nbytes": 0, "uop_load_nbytes": 0,
                "out_store_nbytes": 0}
    for insn in insns:
        if isinstance(insn, isa.MemInsn) and insn.x_size:
            if insn.opcode == isa.Opcode.STORE:
                counters["out_store_nbytes"] += insn.x_size * insn.y_size * config.out_elem_bytes
            elif insn.memory_type in elem:
                name, nbytes = elem[insn.memory_type]
                counters[name] += insn.x_size * insn.y_size * nbytes
    return counters


# The probe's event flags (its first eight fields, in order).
_AR, _AW, _W, _DONE, _DEADLOCK = 0x01, 0x02, 0x04, 0x40, 0x80
_RETIRES = ((0x08, "load"), (0x10, "compute"), (0x20, "store"))
_EVENTS = 0xFF


class _Probe(Elaboratable):
    """The core plus one wide signal with everything the harness samples each cycle.

    Bits 0..7 are event flags (AR, AW, W, the three retires, done, deadlock) so a quiet cycle is
    recognised by one comparison.
    """

    def __init__(self, core: VTACore):
        self.core = core
        axi = core.axi
        self._fields = {
            "arvalid": axi.arvalid, "awvalid": axi.awvalid, "wvalid": axi.wvalid,
            "ret_load": core.retire_load.valid, "ret_compute": core.retire_compute.valid,
            "ret_store": core.retire_store.valid, "done": core.done, "deadlock": core.deadlock,
            "araddr": axi.araddr, "arlen": axi.arlen, "arsize": axi.arsize, "arid": axi.arid,
            "awaddr": axi.awaddr, "awlen": axi.awlen, "awsize": axi.awsize, "wlast": axi.wlast, "wdata": axi.wdata,
            "idx_load": core.retire_load.index, "idx_compute": core.retire_compute.index,
            "idx_store": core.retire_store.index,
        }
        self.offsets = {}
        offset = 0
        for name, sig in self._fields.items():
            self.offsets[name] = (offset, len(sig))
            offset += len(sig)
        self.signal = Signal(offset)

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = self.core
        m.d.comb += self.signal.eq(Cat(*self._fields.values()))
        return m

    def field(self, value: int, name: str) -> int:
        offset, width = self.offsets[name]
        return (value >> offset) & ((1 << width) - 1)


@lru_cache(maxsize=4)
def _probe_for(config: VTAConfig) -> _Probe:
    return _Probe(VTACore(config))


def _status_signals(core: VTACore) -> dict:
    """Signals read once at the end of a run (counters) or at a deadlock (module states)."""
    signals = {name: getattr(core, name) for name in COUNTERS}
    signals["fetch_done"] = core.fetch.done
    for name in _MODULES:
        module = getattr(core, name)
        signals[f"{name}_state"] = module.state
        signals[f"{name}_index"] = module.index
    for queue in TOKEN_QUEUES:
        signals[f"{queue}_count"] = core.token_queues[queue].count
    return signals


def _deadlock_report(status: dict, insns: list[isa.Instruction], cycle: int, token_depth: int) -> str:
    parts = []
    for name in _MODULES:
        state = ModuleState(status[f"{name}_state"])
        index = status[f"{name}_index"]
        if state == ModuleState.IDLE:
            parts.append(f"{name}: idle, command queue empty")
            continue
        insn = insns[index] if index < len(insns) else None
        text = isa.disasm(insn) if insn is not None else "?"
        if state == ModuleState.WAIT:
            waits = [q for q, (_, _, consumer, flag) in TOKEN_QUEUES.items()
                     if consumer == name and getattr(insn, flag, False) and status[f"{q}_count"] == 0]
            parts.append(f"{name}: instruction {index} ({text}) waits for a token on {', '.join(waits)}")
        else:
            full = [q for q, (producer, flag, _, _) in TOKEN_QUEUES.items()
                    if producer == name and getattr(insn, flag, False) and status[f"{q}_count"] >= token_depth]
            parts.append(f"{name}: instruction {index} ({text}) cannot push, full queue(s) {', '.join(full)}")
    parts.append("fetch: every instruction dispatched" if status["fetch_done"]
                 else "fetch: stalled on a full command queue")
    return f"deadlock at cycle {cycle}: " + "; ".join(parts)


def execute(launch: Launch) -> RunStats:
    """Run ``launch`` on the RTL simulation after :func:`validate`; mutates ``launch.dram``."""
    _check_launch(launch)
    validate(launch)
    return run_unchecked(launch)


def validate(launch: Launch) -> None:
    """Raise what the functional simulator raises for ``launch``, except a deadlock, which the RTL
    run reports with its cycle (docs/timing.md). ``launch.dram`` is left as it was.

    STOREs are the only DRAM writers, and each writes within the span its fields name, so the
    pre-run runs on ``launch.dram`` itself and puts back only those spans afterwards (a few KiB
    for a typical program, against a copy of the whole image: seconds and double the memory for a
    256 MiB DRAM)."""
    dram = launch.dram
    saved = [(start, dram[start:end].copy()) for start, end in _store_spans(launch.insns, launch.config, dram.size)]
    try:
        simulate(launch.config, launch.insns, dram)
    except DeadlockError:
        pass
    finally:
        for start, data in saved:
            dram[start:start + data.size] = data


def _store_spans(insns: list[isa.Instruction], config: VTAConfig, dram_bytes: int) -> list[tuple[int, int]]:
    """The merged ``[start, end)`` byte spans of DRAM the STOREs of ``insns`` can write, clipped to
    the DRAM (a STORE reaching past it is rejected before it writes)."""
    elem = config.out_elem_bytes
    spans = []
    for insn in insns:
        if isinstance(insn, isa.MemInsn) and insn.opcode == isa.Opcode.STORE and insn.y_size and insn.x_size:
            start = insn.dram_base * elem
            end = start + (insn.y_size - 1) * insn.x_stride * elem + insn.x_size * elem
            start, end = max(start, 0), min(end, dram_bytes)
            if start < end:
                spans.append((start, end))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _check_launch(launch: Launch) -> None:
    if launch.insn_addr % isa.INSN_BYTES:
        raise ProgramError(f"instruction address {launch.insn_addr:#x} is not {isa.INSN_BYTES}-byte aligned")
    if launch.insn_addr < 0 or launch.insn_addr + isa.INSN_BYTES * len(launch.insns) > launch.dram.size:
        raise MemoryAccessError(f"instruction stream of {len(launch.insns)} instructions at {launch.insn_addr:#x} "
                                f"runs past the end of DRAM ({launch.dram.size} bytes)")
    if launch.trace is not None and Path(launch.trace).suffix != ".vcd":
        raise SimError(f"the rtl backend writes a VCD waveform; trace path {str(launch.trace)!r} must end in .vcd "
                       "(the cycle backend writes .json timelines)")


def run_unchecked(launch: Launch) -> RunStats:
    """Run ``launch`` on the RTL alone, as the hardware would: only fsim's static checks (legality,
    FINISH rules, token balance) first, so SRAM indices out of range wrap, races and uninitialised
    reads go unnoticed, and a DMA past an SRAM's end trips the RTL's ``Assert``."""
    config = launch.config
    _check_launch(launch)
    check_program(launch.insns, config)     # legality, FINISH rules, token balance: clear errors, not a hang
    probe = _probe_for(config)
    core = probe.core
    dram = DramModel(launch.dram, config)
    n_insns = len(launch.insns)
    retire = [-1] * n_insns
    result: dict = {}

    async def harness(ctx, bar: Progress):
        bar.step("cycle 0")
        f = probe.field
        ctx.set(core.start, 1)
        ctx.set(core.insn_addr, launch.insn_addr)
        ctx.set(core.insn_count, n_insns)
        memory = AxiResponder(ctx, core.axi, dram)
        cycle = 0
        with ctx.critical():
            async for _, _, value in ctx.tick().sample(probe.signal):
                # `value` holds the signals of cycle `cycle`.
                if value & _EVENTS:
                    if value & _AR:
                        dram.read_request(cycle, f(value, "araddr"), f(value, "arlen"), f(value, "arsize"),
                                          f(value, "arid"))
                    if value & _AW:
                        dram.write_request(f(value, "awaddr"), f(value, "awlen"), f(value, "awsize"))
                    if value & _W:
                        memory.write_beat(cycle, f(value, "wdata"), bool(f(value, "wlast")))
                    for bit, name in _RETIRES:
                        if value & bit:
                            retire[f(value, f"idx_{name}")] = cycle
                            bar.advance()
                    if value & (_DONE | _DEADLOCK):
                        break
                cycle += 1
                if cycle == 1:
                    ctx.set(core.start, 0)
                if not cycle & _PROGRESS_CYCLES:
                    bar.step(f"cycle {cycle}")
                if cycle > MAX_CYCLES:
                    raise SimError(f"the RTL simulation made no end after {MAX_CYCLES} cycles")
                memory.drive(cycle)          # R and B for the next cycle
            # Counters are frozen after done and a deadlock is stable: one more edge reads them.
            names = list(status_signals)
            _, _, *values = await ctx.tick().sample(*status_signals.values())
            result["status"] = dict(zip(names, values))
            result["deadlock"] = bool(value & _DEADLOCK)
            result["end_cycle"] = cycle

    status_signals = _status_signals(core)
    trace = Path(launch.trace) if launch.trace is not None else None
    with progress("rtl", total=n_insns, unit="insn") as bar:
        bar.step("preparing the simulation")    # (seconds for the default configuration)
        sim = Simulator(probe)
        sim.add_clock(1e-8)
        sim.add_process(partial(harness, bar=bar))
        began = time.perf_counter()
        writer = (sim.write_vcd(str(trace), str(trace.with_suffix(".gtkw")), traces=_trace_signals(core))
                  if trace is not None else nullcontext())
        try:
            with writer:
                sim.run()
        except AssertionError as exc:   # an in-hardware Assert (vtakit/hw): the program did what the RTL forbids
            error = MemoryAccessError if "out of range" in str(exc) else SimError
            raise error(f"RTL {exc} (the fsim backend names the offending instruction)") from exc
        elapsed = time.perf_counter() - began

    hw = result["status"]
    if result["deadlock"]:
        raise DeadlockError(_deadlock_report(hw, launch.insns, result["end_cycle"], config.token_queue_depth))
    missing = [i for i, c in enumerate(retire) if c < 0]
    if missing:
        raise SimError(f"RTL run finished but instruction(s) {missing[:8]} never retired")
    counters = profile_counters(launch.insns, config)
    counters.update(gemm_counter=hw["gemm_uops"], alu_counter=hw["alu_uops"])
    return RunStats(
        backend="rtl", counters=counters, cycles=hw["cycles"], retire_cycles=retire,
        busy_cycles={name: hw[f"busy_{name}"] for name in ("fetch", "load", "compute", "store")},
        dram_read_bytes=dram.read_bytes, dram_write_bytes=dram.write_bytes, sim_seconds=elapsed)


def _trace_signals(core: VTACore) -> list:
    axi = core.axi
    signals = [core.start, core.running, core.done, core.deadlock, core.cycles]
    for name in _MODULES:
        module = getattr(core, name)
        signals += [module.state, module.index, getattr(core, f"retire_{name}").valid]
    signals += [q.count for q in core.token_queues.values()]
    signals += [axi.arvalid, axi.araddr, axi.arlen, axi.arid, axi.rvalid, axi.rid, axi.rlast,
                axi.awvalid, axi.awaddr, axi.wvalid, axi.wlast, axi.bvalid]
    return signals
