"""The memory master alone: fixed-priority arbitration, the outstanding-burst limit, R routing."""

import pytest
from amaranth.sim import Simulator

from vtakit.hw.config import VTAConfig
from vtakit.hw.memory_master import READ_PRIORITY, MemoryMaster

CONFIG = VTAConfig.small(dram_outstanding=2)


def _simulate(requests, beats, config=CONFIG, streams=()):
    """requests: name -> first cycle it presents a 1-beat burst (kept until accepted); streams: names
    that present a new request every cycle (the next one from the cycle after each acceptance);
    beats: cycle -> AXI ID of a last beat driven that cycle. Returns (accepts, routed beats)."""
    dut = MemoryMaster(config)
    accepts, routed = [], []

    async def bench(ctx):
        ctx.set(dut.axi.arready, 1)
        pending = dict(requests)
        for cycle in range(12):
            for name in READ_PRIORITY:
                port = getattr(dut, name)
                ctx.set(port.ar.valid, name in streams or (name in pending and pending[name] <= cycle))
                ctx.set(port.ar.payload.addr, 0x100 * READ_PRIORITY.index(name))
            ctx.set(dut.axi.rvalid, cycle in beats)
            ctx.set(dut.axi.rid, beats.get(cycle, 0))
            ctx.set(dut.axi.rlast, 1)
            for name in READ_PRIORITY:
                port = getattr(dut, name)
                if ctx.get(port.ar.valid) and ctx.get(port.ar.ready):
                    accepts.append((cycle, name, ctx.get(dut.axi.araddr), ctx.get(dut.axi.arid)))
                    pending.pop(name, None)
                if ctx.get(port.r.valid):
                    routed.append((cycle, name))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return accepts, routed


def test_fixed_priority_and_outstanding_limit():
    # all three present from cycle 0 and each is accepted a cycle after it is picked (the registered
    # grant); O = 2: fetch (1), compute (2), then load waits for the last beat of cycle 5
    accepts, routed = _simulate({"fetch": 0, "compute": 0, "load": 0}, {5: 0})
    assert accepts == [(1, "fetch", 0x000, 0), (2, "compute", 0x100, 1), (6, "load", 0x200, 2)]
    assert routed == [(5, "fetch")]


def test_one_requester_every_other_cycle_lower_one_between():
    # compute and load present all the time: compute is picked in 0, accepted in 1, presents its next
    # request from 2, so load (lower priority) takes cycle 2; fetch arrives in 3 and is accepted in 4
    accepts, _ = _simulate({"fetch": 3}, {}, config=VTAConfig.small(dram_outstanding=8), streams=("compute", "load"))
    assert [(cycle, name) for cycle, name, _, _ in accepts] == [
        (1, "compute"), (2, "load"), (3, "compute"), (4, "fetch"), (5, "compute"), (6, "load"), (7, "compute"),
        (8, "load")]
    accepts, _ = _simulate({}, {}, config=VTAConfig.small(dram_outstanding=8), streams=("load",))
    assert [cycle for cycle, *_ in accepts] == [1, 3, 5, 7, 9, 11]


def test_r_beats_routed_by_id():
    _, routed = _simulate({"load": 0, "compute": 1}, {4: 2, 5: 1})
    assert routed == [(4, "load"), (5, "compute")]


def test_stray_beat_trips_the_assertion():
    with pytest.raises(AssertionError, match="R beat with no read burst in flight"):
        _simulate({}, {3: 1})
