"""The 2-D DMA engines alone (vtakit/hw/dma.py) against docs/timing.md §4 and a numpy model.

DmaLoad2D: the two preparation cycles, the zero pads written one per cycle in address order, read
bursts cut at row ends, 256 beats and 4 KiB, presented from ``s' + max(0, P - L)`` and held until
accepted, narrow transfers (E < B) and multi-beat elements (E > B), every SRAM entry written once
(data and pads) one cycle after the cycle the contract counts, and the finish cycle ``e``.
DmaStore2D: the same burst cutting, AW in ``s + j``, W beats one per cycle in ``s .. s + T - 1`` with
WLAST at each burst's end and the byte strobes of narrow transfers, ``e = s + T``, and the DRAM bytes
stored. Shapes are small and random, with strides, pads on every side, rows across a 4 KiB boundary,
``y_size`` 0 and ``x_size`` 0; beats come from the harness DRAM model (vtakit/sim/rtl.py) behind a
registered grant that may also wait longer (tests/hw/dram_port.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from amaranth.sim import Simulator

from tests.hw.dram_port import ReadPortSlave, grant_schedule
from vtakit.hw.config import VTAConfig
from vtakit.hw.dma import DmaLoad2D, DmaStore2D
from vtakit.hw.pipeline import LOAD_PREP_CYCLES
from vtakit.sim.rtl import DramModel

DRAM_BYTES = 1 << 16
START = 3            # the cycle ``start`` is high; s = START + 1 (the sequencer's pop cycle, then EXEC)


@dataclass(frozen=True)
class Shape:
    sram_base: int = 0
    dram_base: int = 0
    y_size: int = 1
    x_size: int = 1
    x_stride: int = 1
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0


def _bursts(base_elem: int, shape: Shape, elem: int, bus: int) -> list[tuple[int, int]]:
    """(byte address, beats) of every burst, cut as docs/timing.md §4 says."""
    step = min(elem, bus)
    out = []
    for y in range(shape.y_size if shape.x_size else 0):
        addr = ((base_elem + y * shape.x_stride) * elem) % (1 << 32)
        left = shape.x_size * elem // step
        while left:
            beats = min(left, 256, (4096 - addr % 4096) // step)
            out.append((addr, beats))
            addr, left = addr + beats * step, left - beats
    return out


def _elements(dram: np.ndarray, elem: int, shape: Shape) -> np.ndarray:
    """The (y_size, x_size, elem) bytes the 2-D pattern reads from ``dram``."""
    index = shape.dram_base + np.arange(shape.y_size)[:, None] * shape.x_stride + np.arange(shape.x_size)[None, :]
    return dram.reshape(-1, elem)[index]


def _random_dram(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, DRAM_BYTES, dtype=np.uint8)


# ---------------------------------------------------------------------------- load
def _run_load(config: VTAConfig, elem: int, shape: Shape, dram: np.ndarray, waits=()):
    """Simulate one LOAD: (SRAM writes as (cycle, addr, E bytes), finish cycles, the slave)."""
    dut = DmaLoad2D(bus_width=config.bus_width, data_width=max(8 * elem, 32), dram_latency=config.dram_latency)
    slave = ReadPortSlave(dut.mem, dram, config, list(waits))
    writes, finishes = [], []
    bursts = _bursts(shape.dram_base, shape, elem, config.bus_bytes)
    footprint = (shape.y_pad_0 + shape.y_size + shape.y_pad_1) * (shape.x_pad_0 + shape.x_size + shape.x_pad_1)
    horizon = (START + 8 + footprint + config.dram_latency + sum(b for _, b in bursts) + 2 * len(bursts)
               + sum(waits))

    async def bench(ctx):
        ctx.set(dut.log_elem, elem.bit_length() - 1)
        for name, value in vars(shape).items():
            ctx.set(getattr(dut, name), value)
        for cycle in range(horizon):
            ctx.set(dut.start, cycle == START)
            slave.step(ctx, cycle)
            if ctx.get(dut.wr_en):
                data = ctx.get(dut.wr_data) & ((1 << (8 * elem)) - 1)
                writes.append((cycle, ctx.get(dut.wr_addr), data.to_bytes(elem, "little")))
            if ctx.get(dut.finish):
                finishes.append(cycle)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return writes, finishes, slave


def _load_expectation(config: VTAConfig, elem: int, shape: Shape, dram: np.ndarray, waits=()):
    """docs/timing.md §4 LOAD with s = START + 1: (bursts as (presented, accepted, addr, beats), SRAM writes as
    (cycle, addr, bytes) one cycle after the cycle the contract counts, e)."""
    s = START + 1
    if shape.x_size == 0:
        return [], [], s
    bus, latency = config.bus_bytes, config.dram_latency
    k = max(1, elem // bus)
    width = shape.x_pad_0 + shape.x_size + shape.x_pad_1
    height = shape.y_pad_0 + shape.y_size + shape.y_pad_1
    data_rows = range(shape.y_pad_0, shape.y_pad_0 + shape.y_size)
    data_cols = range(shape.x_pad_0, shape.x_pad_0 + shape.x_size)
    pads = [shape.sram_base + r * width + c for r in range(height) for c in range(width)
            if not (r in data_rows and c in data_cols)]
    s1 = s + LOAD_PREP_CYCLES
    writes = [(s1 + i + 1, addr, bytes(elem)) for i, addr in enumerate(pads)]
    q0 = s1 + max(0, len(pads) - latency)
    bursts, accepted, last_beat, beat_cycles = [], None, -1, []
    for j, (addr, beats) in enumerate(_bursts(shape.dram_base, shape, elem, bus)):
        presented, accepted = grant_schedule(q0, list(waits), j, accepted)
        bursts.append((presented, accepted, addr, beats))
        first = max(accepted + latency, last_beat + 1)
        last_beat = first + beats - 1
        beat_cycles += range(first, last_beat + 1)
    values = _elements(dram, elem, shape)
    for i, (y, x) in enumerate((y, x) for y in range(shape.y_size) for x in range(shape.x_size)):
        complete = beat_cycles[(i + 1) * k - 1]
        addr = shape.sram_base + (shape.y_pad_0 + y) * width + shape.x_pad_0 + x
        writes.append((complete + 1, addr, values[y, x].tobytes()))
    if beat_cycles:
        e = beat_cycles[-1]
    else:
        e = s1 + len(pads) - 1 if pads else s1
    return bursts, sorted(writes), e


def _footprint(elem: int, shape: Shape, dram: np.ndarray) -> dict[int, bytes]:
    """The numpy model of the SRAM a LOAD leaves: entry address -> E bytes (pads zero)."""
    if shape.x_size == 0:
        return {}
    width = shape.x_pad_0 + shape.x_size + shape.x_pad_1
    height = shape.y_pad_0 + shape.y_size + shape.y_pad_1
    image = np.zeros((height, width, elem), np.uint8)
    image[shape.y_pad_0:shape.y_pad_0 + shape.y_size, shape.x_pad_0:shape.x_pad_0 + shape.x_size] = (
        _elements(dram, elem, shape))
    return {shape.sram_base + i: image.reshape(-1, elem)[i].tobytes() for i in range(height * width)}


def _check_load(config: VTAConfig, elem: int, shape: Shape, seed: int = 0, waits=()) -> list:
    dram = _random_dram(seed)
    writes, finishes, slave = _run_load(config, elem, shape, dram, waits)
    bursts, expected_writes, e = _load_expectation(config, elem, shape, dram, waits)
    step = min(elem, config.bus_bytes)
    assert [(b.presented, b.accepted, b.addr, b.beats) for b in slave.bursts] == bursts, shape
    assert all(1 << b.size == step for b in slave.bursts)
    assert slave.idle
    # the data: every footprint entry written exactly once, equal to the numpy model (pads zero)
    image = {addr: data for _, addr, data in writes}
    assert len(image) == len(writes) and image == _footprint(elem, shape, dram), shape
    # the timing: each write in its cycle, and the single finish in e
    assert writes == expected_writes, shape
    assert finishes == [e], (shape, finishes, e)
    return writes


def _random_shape(rng: np.random.Generator, elem: int) -> Shape:
    x_size, y_size = int(rng.integers(0, 7)), int(rng.integers(0, 4))
    x_stride = x_size + int(rng.integers(0, 4))
    pads = [int(v) for v in rng.integers(0, 3, 4)]
    # half of the shapes put one row across a 4 KiB boundary (where the row has room to be cut)
    page = int(rng.integers(1, 8)) * 4096
    row = int(rng.integers(0, max(y_size, 1)))
    inside = int(rng.integers(1, x_size)) if x_size > 1 and rng.random() < 0.5 else 0
    dram_base = (page - row * x_stride * elem) // elem - inside
    return Shape(sram_base=int(rng.integers(0, 40)), dram_base=dram_base, y_size=y_size, x_size=x_size,
                 x_stride=x_stride, y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2], x_pad_1=pads[3])


def _crosses_4kib(shape: Shape, elem: int) -> bool:
    rows = [(shape.dram_base + y * shape.x_stride) * elem for y in range(shape.y_size if shape.x_size else 0)]
    return any(a // 4096 != (a + shape.x_size * elem - 1) // 4096 for a in rows)


def _random_shapes(seed: int, elem: int, pads: bool = True, count: int = 8) -> list[Shape]:
    """``count`` random shapes, among them (checked) a row across 4 KiB, y_size 0, x_size 0 and pads on each side
    (none with ``pads`` false: a STORE's shapes)."""
    rng = np.random.default_rng(seed)
    shapes = [_random_shape(rng, elem) for _ in range(count)]
    if not pads:
        shapes = [Shape(**{**vars(s), "y_pad_0": 0, "y_pad_1": 0, "x_pad_0": 0, "x_pad_1": 0}) for s in shapes]
    assert any(_crosses_4kib(s, elem) for s in shapes) and any(s.x_size and s.y_size for s in shapes)
    assert any(s.y_size == 0 for s in shapes) and any(s.x_size == 0 for s in shapes)
    assert not pads or all(any(getattr(s, pad) and s.x_size and s.y_size for s in shapes)
                           for pad in ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1"))
    return shapes


# (bus bits, element bytes): narrow transfers (E < B), one full beat (E = B), several beats (E > B)
BUS_ELEMS = [(64, 4), (64, 8), (64, 16), (128, 4), (128, 16), (32, 16)]
#: a seed per case whose shapes cover what _random_shapes checks
SEEDS = {(64, 4): 6404, (64, 8): 6408, (64, 16): 6416, (128, 4): 12804, (128, 16): 12818, (32, 16): 3216}


@pytest.mark.parametrize("bus,elem", BUS_ELEMS, ids=[f"B{b // 8}-E{e}" for b, e in BUS_ELEMS])
def test_load_random_shapes(bus, elem):
    config = VTAConfig.small(bus_width=bus, dram_latency=6)
    for seed, shape in enumerate(_random_shapes(SEEDS[bus, elem], elem)):
        _check_load(config, elem, shape, seed)


@pytest.mark.parametrize("latency", [2, 32])
def test_load_pads_on_every_side_then_data(latency):
    """Pads in address order from s' = s + 2, one per cycle; requests once at most L pad writes remain, so
    with a short latency the first request overlaps the pads, and data never lands before the last pad."""
    config = VTAConfig.small(dram_latency=latency)
    shape = Shape(sram_base=5, dram_base=0x123, y_size=3, x_size=2, x_stride=7, y_pad_0=1, y_pad_1=2, x_pad_0=2,
                  x_pad_1=1)
    writes = _check_load(config, 4, shape)
    s1 = START + 1 + LOAD_PREP_CYCLES
    pads = 6 * 5 - 6
    # nothing happens in the two preparation cycles; the first pad lands the cycle after s'
    assert writes[0][0] == s1 + 1 and [c for c, _, _ in writes[:pads]] == list(range(s1 + 1, s1 + 1 + pads))
    assert all(data == bytes(4) for _, _, data in writes[:pads])
    assert [a for _, a, _ in writes[:pads]] == sorted(a for _, a, _ in writes[:pads])


def test_load_request_waits_for_the_grant_and_holds():
    """A burst presented while the grant goes elsewhere stays presented, unchanged (ReadPortSlave checks), and the
    next one is presented the cycle after the acceptance."""
    config = VTAConfig.small(dram_latency=4)
    shape = Shape(dram_base=(0x3000 - 8) // 8, y_size=3, x_size=3, x_stride=5)   # row 0 split at 4 KiB
    _check_load(config, 8, shape, waits=[3, 0, 5, 1])
    _check_load(config, 8, shape, waits=[])


@pytest.mark.parametrize("elem,x_size,base,beats", [(4, 300, 0x2000, [256, 44]), (8, 300, 0x2F00, [32, 256, 12]),
                                                    (16, 140, 0x5000, [256, 24])],
                         ids=["256-beat-cut", "4KiB-then-256", "two-beat-elements"])
def test_load_long_rows_cut_at_256_beats_and_4kib(elem, x_size, base, beats):
    """One long row: bursts of the rest of the row, at most 256 beats, none across 4 KiB, back to back."""
    config = VTAConfig.small(dram_latency=8)
    shape = Shape(dram_base=base // elem, y_size=1, x_size=x_size, x_stride=x_size, x_pad_0=1)
    assert [b for _, b in _bursts(shape.dram_base, shape, elem, config.bus_bytes)] == beats
    writes = _check_load(config, elem, shape)
    # after the first burst's latency the row streams one beat per cycle: one element every k cycles
    data = [cycle for cycle, _, _ in writes[1:]]
    k = max(1, elem // config.bus_bytes)
    assert np.array_equal(np.diff(data), np.full(x_size - 1, k))


@pytest.mark.parametrize("shape,e", [
    (Shape(y_size=0, x_size=3, y_pad_0=1, y_pad_1=1, x_pad_0=1), "pads"),       # y_size 0: the pads alone
    (Shape(y_size=0, x_size=3, x_pad_0=2, x_pad_1=1), "prep"),                 # y_size 0, no y pads: e = s'
    (Shape(y_size=2, x_size=0, y_pad_0=2, x_pad_1=3), "s"),                    # x_size 0: no-op, even the pads
    (Shape(y_size=0, x_size=0), "s"),
])
def test_load_empty_shapes(shape, e):
    config = VTAConfig.small()
    writes = _check_load(config, 4, shape)
    s = START + 1
    width = shape.x_pad_0 + shape.x_size + shape.x_pad_1
    pads = (shape.y_pad_0 + shape.y_pad_1) * width if shape.x_size else 0
    assert len(writes) == pads
    expected_e = {"pads": s + LOAD_PREP_CYCLES + pads - 1, "prep": s + LOAD_PREP_CYCLES, "s": s}[e]
    _, _, got_e = _load_expectation(config, 4, shape, _random_dram(0))
    assert got_e == expected_e


def test_back_to_back_loads_share_nothing():
    """A second LOAD started after the first finished sees only its own fields (the engine keeps no state)."""
    config = VTAConfig.small(dram_latency=3)
    first = Shape(sram_base=0, dram_base=0x40, y_size=2, x_size=3, x_stride=4, x_pad_1=1, y_pad_0=1)
    second = Shape(sram_base=50, dram_base=0x700, y_size=1, x_size=2, x_stride=2, x_pad_0=2)
    dram = _random_dram(3)
    dut = DmaLoad2D(bus_width=config.bus_width, data_width=32, dram_latency=config.dram_latency)
    slave = ReadPortSlave(dut.mem, dram, config)
    writes, finishes = [], []

    async def bench(ctx):
        ctx.set(dut.log_elem, 2)
        shape = first
        for cycle in range(80):
            if finishes and cycle == finishes[0] + 3:     # the sequencer's retire, take, pop cycles
                shape = second
            for name, value in vars(shape).items():
                ctx.set(getattr(dut, name), value)
            ctx.set(dut.start, cycle == START or (finishes != [] and cycle == finishes[0] + 3))
            slave.step(ctx, cycle)
            if ctx.get(dut.wr_en):
                writes.append((ctx.get(dut.wr_addr), (ctx.get(dut.wr_data) & 0xFFFFFFFF).to_bytes(4, "little")))
            if ctx.get(dut.finish):
                finishes.append(cycle)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(finishes) == 2
    assert dict(writes) == {**_footprint(4, first, dram), **_footprint(4, second, dram)}
    assert len(writes) == 3 * 4 + 4


# ---------------------------------------------------------------------------- store
def _run_store(config: VTAConfig, elem: int, shape: Shape, sram: list[int], dram: np.ndarray):
    """Simulate one STORE: (AW as (cycle, addr, beats, size), W as (cycle, last), finish cycles); ``dram`` is
    written through the harness DRAM model."""
    dut = DmaStore2D(bus_width=config.bus_width, elem_bytes=elem)
    model = DramModel(dram, config)
    bus = config.bus_bytes
    aw, w, finishes = [], [], []
    beats_total = shape.x_size * shape.y_size * max(1, elem // bus)

    async def bench(ctx):
        for name, value in vars(shape).items():
            ctx.set(getattr(dut, name), value)
        ctx.set(dut.mem.aw.ready, 1)
        ctx.set(dut.mem.w.ready, 1)
        read_data, b_next = 0, False
        bursts = []                     # accepted, not yet fully written: [addr, size, beat]
        for cycle in range(START + beats_total + 12):
            ctx.set(dut.start, cycle == START)
            ctx.set(dut.rd_data, read_data)
            ctx.set(dut.mem.b.valid, b_next)
            b_next = False
            if ctx.get(dut.mem.aw.valid):
                addr, length, size = (ctx.get(dut.mem.aw.payload.addr), ctx.get(dut.mem.aw.payload.len),
                                      ctx.get(dut.mem.aw.payload.size))
                aw.append((cycle, addr, length + 1, size))
                model.write_request(addr, length, size)
                bursts.append([addr, size, 0])
            if ctx.get(dut.mem.w.valid):
                last = bool(ctx.get(dut.mem.w.payload.last))
                burst = bursts[0]
                step = 1 << burst[1]
                lane = (burst[0] + burst[2] * step) % bus
                assert ctx.get(dut.mem.w.payload.strb) == ((1 << step) - 1) << lane, cycle   # the element's lanes
                burst[2] += 1
                model.write_beat(ctx.get(dut.mem.w.payload.data), last)
                w.append((cycle, last))
                if last:
                    bursts.pop(0)
                    b_next = True       # the slave answers in the cycle after the last beat
            if ctx.get(dut.finish):
                finishes.append(cycle)
            if ctx.get(dut.rd_en):      # a synchronous SRAM: data the next cycle
                read_data = sram[ctx.get(dut.rd_addr)]
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return aw, w, finishes


def _check_store(config: VTAConfig, elem: int, shape: Shape, seed: int = 0):
    rng = np.random.default_rng(seed)
    dram = _random_dram(seed + 100)
    sram_bytes = rng.integers(0, 256, (512, elem), dtype=np.uint8)
    sram = [int.from_bytes(row.tobytes(), "little") for row in sram_bytes]
    expected = dram.copy()
    if shape.x_size and shape.y_size:
        index = (shape.dram_base + np.arange(shape.y_size)[:, None] * shape.x_stride
                 + np.arange(shape.x_size)[None, :])
        expected.reshape(-1, elem)[index] = sram_bytes[shape.sram_base:shape.sram_base + shape.y_size * shape.x_size
                                                       ].reshape(shape.y_size, shape.x_size, elem)
    aw, w, finishes = _run_store(config, elem, shape, sram, dram)
    s = START + 1
    bursts = _bursts(shape.dram_base, shape, elem, config.bus_bytes)
    step = min(elem, config.bus_bytes)
    total = sum(b for _, b in bursts)
    assert total == shape.x_size * shape.y_size * elem // step
    assert aw == [(s + j, addr, beats, step.bit_length() - 1) for j, (addr, beats) in enumerate(bursts)], shape
    ends = set(np.cumsum([b for _, b in bursts]) - 1)
    assert w == [(s + i, i in ends) for i in range(total)], shape
    assert finishes == [s + total], shape
    assert np.array_equal(dram, expected), shape


@pytest.mark.parametrize("bus,elem", BUS_ELEMS, ids=[f"B{b // 8}-E{e}" for b, e in BUS_ELEMS])
def test_store_random_shapes(bus, elem):
    config = VTAConfig.small(bus_width=bus)
    for seed, shape in enumerate(_random_shapes(SEEDS[bus, elem], elem, pads=False)):
        _check_store(config, elem, shape, seed)


@pytest.mark.parametrize("elem,shape", [
    (4, Shape(dram_base=(0x2000 - 12) // 4, y_size=2, x_size=6, x_stride=1024 + 9)),   # rows across 4 KiB
    (4, Shape(dram_base=0x800, y_size=1, x_size=300, x_stride=300)),                   # 256 + 44 beats
    (16, Shape(sram_base=3, dram_base=0x2F0, y_size=2, x_size=5, x_stride=8)),          # 2-beat elements at 4 KiB
    (4, Shape(y_size=0, x_size=4)),
    (4, Shape(y_size=3, x_size=0)),
], ids=["4KiB", "256", "E16-4KiB", "y0", "x0"])
def test_store_burst_cutting_and_empty(elem, shape):
    _check_store(VTAConfig.small(), elem, shape, seed=7)
