"""The fetch module alone (vtakit/hw/fetch.py) against docs/timing.md §2 and §6.

A cycle model written from §2's rules (requests of ``n`` aligned instructions iff ``K + I + n <= 16``,
presented until accepted; an instruction complete with its last beat; dispatch of the head, one per
cycle, into a command queue holding fewer than ``Qc`` entries) predicts every read request (cycle,
address, beats, size), every dispatch (cycle, queue, program index, instruction word), and the
``busy`` and ``blocked`` outputs cycle for cycle; the RTL must match it exactly. Covered: VTA's routing
of every opcode and memory type, bus widths with several beats per instruction and narrow beats,
unaligned instruction addresses, delayed grants, command queues that stay full (in-order stall, the
16-instruction buffer stopping requests), an empty program, and a second start.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from amaranth.sim import Simulator

from tests.hw.dram_port import ReadPortSlave
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.fetch import FetchModule
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode

QUEUES = ("load", "compute", "store")
BUFFER = 16          # instructions (docs/timing.md §2)
GROUP = 4            # instructions per aligned request group


def _target(insn) -> str:
    """VTA's routing (docs/timing.md §2)."""
    if insn.opcode == Opcode.STORE:
        return "store"
    if insn.opcode == Opcode.LOAD and insn.memory_type in (MemId.INP, MemId.WGT):
        return "load"
    return "compute"


def _insn(kind: str, i: int):
    if kind == "store":
        return MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=i, dram_base=i + 1, push_prev=True)
    if kind in ("INP", "WGT", "UOP", "ACC", "ACC_8BIT"):
        return MemInsn(opcode=Opcode.LOAD, memory_type=MemId[kind], sram_base=i, dram_base=3 * i, x_size=i % 5,
                       pop_next=bool(i % 2))
    if kind == "gemm":
        return GemmInsn(uop_bgn=i % 7, uop_end=i % 7 + 1, iter_out=i % 3 + 1, push_next=True)
    if kind == "alu":
        return AluInsn(alu_opcode=AluOp.ADD, use_imm=True, imm=i, uop_end=2)
    return FinishInsn(pop_prev=True)


KINDS = ("store", "INP", "WGT", "UOP", "ACC", "ACC_8BIT", "gemm", "alu", "finish")


@dataclass
class Run:
    bursts: list          # (presented, accepted, addr, beats, size)
    dispatches: list      # (cycle, queue, index, word)
    busy: list            # per cycle from 0
    blocked: list


def _model(config: VTAConfig, insns, addr: int, waits, pops, horizon: int) -> Run:
    """docs/timing.md §2 (start in cycle 0), with the slave's grants (tests/hw/dram_port.py) and consumers that
    pop their queue in the cycles ``pops[queue]`` (when it holds an entry)."""
    count, bus, qc = len(insns), config.bus_bytes, config.cmd_queue_depth
    k = max(1, 16 // bus)
    size = min(16, bus).bit_length() - 1
    complete = []                          # completion cycle of each requested instruction
    requested, dispatched = 0, 0
    level = dict.fromkeys(QUEUES, 0)
    bursts, dispatches, busy, blocked = [], [], [False], [False]
    first = None
    last_beat = -1
    for c in range(1, horizon):
        done_before = sum(1 for t in complete if t < c)
        in_buffer = done_before - dispatched            # K
        in_flight = requested - done_before             # I
        head = _target(insns[dispatched]) if in_buffer else None
        busy.append(dispatched < count)
        blocked.append(dispatched == count or (head is not None and level[head] >= qc))
        # the request
        if requested < count:
            n = min(count - requested, GROUP - ((addr // 16 + requested) % GROUP))
            if in_buffer + in_flight + n <= BUFFER:
                if first is None:
                    first = c
                if c >= first + 1 + (waits[len(bursts)] if len(bursts) < len(waits) else 0):
                    bursts.append((first, c, addr + 16 * requested, n * k, size))
                    beat0 = max(c + config.dram_latency, last_beat + 1)
                    last_beat = beat0 + n * k - 1
                    complete += [beat0 + (i + 1) * k - 1 for i in range(n)]
                    requested += n
                    first = None
        # dispatch, then the consumers (both judged on the levels at the start of c)
        popped = {q for q in QUEUES if c in pops.get(q, ()) and level[q] > 0}
        if head is not None and level[head] < qc:
            dispatches.append((c, head, dispatched))
            level[head] += 1
            dispatched += 1
        for q in popped:
            level[q] -= 1
    return Run(bursts, dispatches, busy, blocked)


def _program_bytes(config: VTAConfig, insns) -> bytes:
    return isa.encode(insns, config)


def _simulate(config: VTAConfig, programs, waits=(), pops=None, horizon: int = 200) -> Run:
    """``programs``: (start cycle, byte address, instructions) launched in turn; each consumer pops its queue in
    the cycles ``pops[queue]``. Returns the RTL's trace, words included in the dispatches."""
    pops = pops or {}
    dut = FetchModule(config)
    dram = np.zeros(1 << 16, np.uint8)
    for _, addr, insns in programs:
        data = _program_bytes(config, insns)
        dram[addr:addr + len(data)] = np.frombuffer(data, np.uint8)
    slave = ReadPortSlave(dut.mem, dram, config, list(waits))
    run = Run([], [], [], [])
    starts = {cycle: (addr, len(insns)) for cycle, addr, insns in programs}
    qc = config.cmd_queue_depth

    async def bench(ctx):
        level = dict.fromkeys(QUEUES, 0)
        for c in range(horizon):
            ctx.set(dut.start, c in starts)
            if c in starts:
                ctx.set(dut.insn_addr, starts[c][0])
                ctx.set(dut.insn_count, starts[c][1])
            slave.step(ctx, c)
            for q in QUEUES:
                ctx.set(getattr(dut, f"to_{q}").ready, level[q] < qc)
            valid = [q for q in QUEUES if ctx.get(getattr(dut, f"to_{q}").valid)]
            assert len(valid) <= 1, (c, valid)
            popped = {q for q in QUEUES if c in pops.get(q, ()) and level[q] > 0}
            if valid and level[valid[0]] < qc:
                stream = getattr(dut, f"to_{valid[0]}")
                run.dispatches.append((c, valid[0], ctx.get(stream.payload.index), ctx.get(stream.payload.insn)))
                level[valid[0]] += 1
            for q in popped:
                level[q] -= 1
            run.busy.append(bool(ctx.get(dut.busy)))
            run.blocked.append(bool(ctx.get(dut.blocked)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    run.bursts = [(b.presented, b.accepted, b.addr, b.beats, b.size) for b in slave.bursts]
    return run


def _words(config: VTAConfig, insns) -> list[int]:
    data = _program_bytes(config, insns)
    return [int.from_bytes(data[16 * i:16 * i + 16], "little") for i in range(len(insns))]


def _check(config: VTAConfig, insns, addr: int, waits=(), pops=None, horizon: int = 200) -> Run:
    pops = pops if pops is not None else {q: range(horizon) for q in QUEUES}
    got = _simulate(config, [(0, addr, insns)], waits, pops, horizon)
    want = _model(config, insns, addr, waits, pops, horizon)
    assert len(want.dispatches) == len(insns), "horizon too short"
    assert got.bursts == want.bursts
    words = _words(config, insns)
    assert got.dispatches == [(c, q, i, words[i]) for c, q, i in want.dispatches]
    assert got.busy == want.busy and got.blocked == want.blocked
    return got


def test_routing_of_every_opcode_and_memory_type():
    config = VTAConfig.small()
    insns = [_insn(kind, i) for i, kind in enumerate(KINDS + KINDS[::-1])]
    run = _check(config, insns, 0x100)
    targets = {kind: {q for (_, q, i, _) in run.dispatches if KINDS.index(kind) in (i, len(insns) - 1 - i)}
               for kind in KINDS}
    assert targets == {"store": {"store"}, "INP": {"load"}, "WGT": {"load"}, "UOP": {"compute"},
                       "ACC": {"compute"}, "ACC_8BIT": {"compute"}, "gemm": {"compute"}, "alu": {"compute"},
                       "finish": {"compute"}}
    cycles = [c for c, *_ in run.dispatches]
    assert [i for _, _, i, _ in run.dispatches] == list(range(len(insns))) and cycles == sorted(set(cycles))


def test_finish_alone_worked_example():
    """docs/timing.md §7: presented in 1, accepted in 2, beats in 2 + L and 3 + L, dispatched in 4 + L."""
    config = VTAConfig.small(dram_latency=7)
    run = _check(config, [FinishInsn()], 0x40, horizon=20)
    assert run.bursts == [(1, 2, 0x40, 2, 3)]
    assert run.dispatches[0][:3] == (4 + 7, "compute", 0)
    assert run.busy[1:12] == [True] * 11 and not any(run.busy[12:])


@pytest.mark.parametrize("bus", [32, 64, 128, 256])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_requests_and_dispatch_match_the_contract(bus, offset):
    """Random programs at an address ``offset`` instructions past a 64-byte group, random grant delays, consumers
    that pop now and then (so queues fill and dispatch stalls)."""
    rng = np.random.default_rng(bus + offset)
    config = VTAConfig.small(bus_width=bus, dram_latency=int(rng.integers(2, 12)))
    insns = [_insn(KINDS[int(v)], i) for i, v in enumerate(rng.integers(0, len(KINDS), 30))]
    waits = [int(v) for v in rng.integers(0, 4, 12)]
    horizon = 400
    pops = {q: set(np.flatnonzero(rng.random(horizon) < 0.06).tolist()) for q in QUEUES}
    run = _check(config, insns, 0x1000 - 16 * GROUP * 2 + 16 * offset, waits, pops, horizon)
    assert any(run.blocked[c] and run.busy[c] for c in range(horizon))    # some queue was full


def test_full_queue_stalls_in_order_and_the_buffer_stops_requests():
    """Stores with a store queue nobody drains: 8 (Qc) go in, the head waits, the loads behind it wait too, the
    buffer fills to 16 and requests stop; draining from cycle 150 lets everything through (blocked until
    the first pop has freed a slot)."""
    config = VTAConfig.small(dram_latency=3)
    insns = [_insn("store", i) for i in range(10)] + [_insn("INP", i) for i in range(26)]
    pops = {"store": range(150, 400), "load": range(400), "compute": range(400)}
    run = _check(config, insns, 0, pops=pops, horizon=260)
    qc = config.cmd_queue_depth
    before = [d for d in run.dispatches if d[0] < 150]
    assert [q for _, q, _, _ in before] == ["store"] * qc
    requested_before = sum(beats for _, accepted, _, beats, _ in run.bursts if accepted < 150) // 2
    assert requested_before == qc + BUFFER
    assert all(run.blocked[c] for c in range(100, 150)) and not any(run.blocked[151:run.dispatches[-1][0] + 1])
    assert [i for _, _, i, _ in run.dispatches] == list(range(len(insns)))


def test_empty_program_is_done_at_once():
    config = VTAConfig.small()
    run = _simulate(config, [(0, 0x80, [])], horizon=30)
    assert run.bursts == [] and run.dispatches == []
    assert not any(run.busy) and all(run.blocked[1:])


def test_second_start_runs_a_new_program():
    """A start after everything is dispatched latches the new address and count; indices restart at 0."""
    config = VTAConfig.small(dram_latency=4)
    first = [_insn(kind, i) for i, kind in enumerate(("INP", "gemm", "store"))]
    second = [_insn(kind, i) for i, kind in enumerate(("alu", "WGT", "finish", "store", "UOP"))]
    run = _simulate(config, [(0, 0x200, first), (40, 0x330, second)], horizon=90)
    want = _model(config, second, 0x330, (), {q: range(90) for q in QUEUES}, 50)
    assert [(c, q, i) for c, q, i, _ in run.dispatches] == (
        [d for d in _model(config, first, 0x200, (), {q: range(90) for q in QUEUES}, 40).dispatches]
        + [(c + 40, q, i) for c, q, i in want.dispatches])
    assert [w for *_, w in run.dispatches] == _words(config, first) + _words(config, second)
    assert [b[2] for b in run.bursts] == [0x200, 0x330, 0x340]
