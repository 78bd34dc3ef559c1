"""The memory master alone: fixed-priority arbitration, the outstanding-burst limit, R routing."""

import pytest
from amaranth.sim import Simulator

from vtakit.hw.config import VTAConfig
from vtakit.hw.memory_master import READ_PRIORITY, MemoryMaster

CONFIG = VTAConfig.small(dram_outstanding=2)


def _simulate(requests, beats):
    """requests: name -> first cycle it presents a 1-beat burst (kept until accepted);
    beats: cycle -> AXI ID of a last beat driven that cycle. Returns (accepts, routed beats)."""
    dut = MemoryMaster(CONFIG)
    accepts, routed = [], []

    async def bench(ctx):
        ctx.set(dut.axi.arready, 1)
        pending = dict(requests)
        for cycle in range(12):
            for name in READ_PRIORITY:
                port = getattr(dut, name)
                ctx.set(port.ar.valid, name in pending and pending[name] <= cycle)
                ctx.set(port.ar.payload.addr, 0x100 * READ_PRIORITY.index(name))
            ctx.set(dut.axi.rvalid, cycle in beats)
            ctx.set(dut.axi.rid, beats.get(cycle, 0))
            ctx.set(dut.axi.rlast, 1)
            for name in READ_PRIORITY:
                port = getattr(dut, name)
                if ctx.get(port.ar.valid) and ctx.get(port.ar.ready):
                    accepts.append((cycle, name, ctx.get(dut.axi.araddr), ctx.get(dut.axi.arid)))
                    del pending[name]
                if ctx.get(port.r.valid):
                    routed.append((cycle, name))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return accepts, routed


def test_fixed_priority_and_outstanding_limit():
    # all three present in cycle 0; O = 2: fetch (0), compute (1), then load waits for a last beat
    accepts, routed = _simulate({"fetch": 0, "compute": 0, "load": 0}, {5: 0})
    assert accepts == [(0, "fetch", 0x000, 0), (1, "compute", 0x100, 1), (6, "load", 0x200, 2)]
    assert routed == [(5, "fetch")]


def test_r_beats_routed_by_id():
    _, routed = _simulate({"load": 0, "compute": 1}, {4: 2, 5: 1})
    assert routed == [(4, "load"), (5, "compute")]


def test_stray_beat_trips_the_assertion():
    with pytest.raises(AssertionError, match="R beat with no read burst in flight"):
        _simulate({}, {3: 1})
