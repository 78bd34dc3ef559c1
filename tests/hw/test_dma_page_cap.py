"""The burst walks' 4 KiB cap built from an address's bits (vtakit.hw.dma._page_cap) against its
definition: whether the boundary is within 256 beats, min(256, beats of 2**k bytes from the address to
the next 4 KiB boundary) and that minus one, for every beat position in a page, every beat size up to
64 bytes, 256 beats on, a page's start, and a beat size chosen at run time."""

from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from vtakit.hw.dma import _page_cap, _page_start_cap

SIZES = range(7)


def _reference(address: int, k: int) -> tuple[int, int, int]:
    to_boundary = (4096 - address % 4096) >> k
    return int(to_boundary <= 256), min(256, to_boundary), min(256, to_boundary) - 1


def test_page_cap_matches_its_definition():
    addr, log_size = Signal(32), Signal(3)
    m = Module()
    fixed, on_256 = {}, {}
    for k in SIZES:
        fixed[k] = (Signal(), Signal(9), Signal(8))
        on_256[k] = (Signal(), Signal(9), Signal(8))
        m.d.comb += [s.eq(v) for s, v in zip(fixed[k], _page_cap(addr, k, 0))]
        m.d.comb += [s.eq(v) for s, v in zip(on_256[k], _page_cap(addr, k, 0, plus256=True))]
    chosen = (Signal(), Signal(9), Signal(8))
    m.d.comb += [s.eq(v) for s, v in zip(chosen, _page_cap(addr, log_size, 3))]
    mismatches = []

    async def bench(ctx):
        for k in SIZES:
            for index in range(4096 >> k):
                address = 0x7000 | (index << k)
                ctx.set(addr, address)
                ctx.set(log_size, min(k, 3))
                want = _reference(address, k)
                if tuple(ctx.get(v) for v in fixed[k]) != want:
                    mismatches.append(("fixed", k, index))
                if not want[0] and tuple(ctx.get(v) for v in on_256[k]) != _reference(address + (256 << k), k):
                    mismatches.append(("256 on", k, index))
                if k <= 3 and tuple(ctx.get(v) for v in chosen) != want:
                    mismatches.append(("run-time size", k, index))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert mismatches == []
    for k in SIZES:
        assert tuple(v.value for v in _page_start_cap(k)) == _reference(0, k)
