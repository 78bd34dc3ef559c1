"""2-D DMA engines: DRAM -> SRAM loads with zero padding, SRAM -> DRAM stores.

Both walk VTA's 2-D pattern (``y_size`` rows of ``x_size`` elements, rows ``x_stride`` elements
apart in DRAM) and cut every row into AXI4 INCR bursts (at most 256 beats, never across 4 KiB).
Their timing is part of the contract in docs/timing.md and is kept deliberately simple:

* Load: the footprint's geometry is computed in :data:`LOAD_PREP_CYCLES` registered steps (the
  start cycle and the first execution cycles), so that no step is a long chain of adders; then
  zero-padding entries are written, one per cycle (``P`` = footprint - data entries), by a walker
  that jumps over the data runs; read requests start as soon as at most DRAM_LATENCY pad writes
  remain, so data can never arrive while pads are still being written. R beats are always
  accepted: each element is complete in the cycle its last beat arrives and is written to SRAM
  in the next (the write port is registered). A load with
  ``x_size`` 0 finishes in its first execution cycle.
* Store: AW requests stream one per cycle; OUT is read one element ahead so W beats stream one
  per cycle; the instruction finishes in the cycle its last B response arrives.

``start`` is pulsed in the cycle before the first execution cycle with the instruction fields
valid; ``finish`` is high in the engine's last active cycle (its last pad cycle, last beat or last B
response, or its first execution cycle when there is nothing to do).

Multiplies are kept out of the engines where the structure allows, so that DSP blocks go to the
GEMM core (docs/fpga.md): row addresses accumulate the stride, completion is counted in rows and
elements, and the pad counts are products by a 4- or 5-bit padding, built from shifts and adds.
The one product left is ``x_size * y_size`` in the load's pad walker, which jumps over an unpadded
data block in one step.
"""

from __future__ import annotations

from amaranth.hdl import Assert, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from vtakit.hw.bus import ADDR_BITS, MAX_BURST_BEATS, ReadPortSignature, WritePortSignature
from vtakit.hw.pipeline import LOAD_PREP_CYCLES

__all__ = ["DmaLoad2D", "DmaStore2D", "SRAM_ADDR_BITS", "LOAD_PREP_CYCLES", "mem_fields"]

#: Width of SRAM addresses inside the engines (callers keep the low bits their SRAM needs).
SRAM_ADDR_BITS = 20
_COUNT_BITS = 34


def mem_fields() -> dict:
    """The LOAD/STORE instruction fields an engine reads, as input ports."""
    return {"sram_base": In(16), "dram_base": In(32), "y_size": In(16), "x_size": In(16),
            "x_stride": In(16), "y_pad_0": In(4), "y_pad_1": In(4), "x_pad_0": In(4), "x_pad_1": In(4)}


def _narrow_product(narrow, wide):
    """``narrow * wide`` for a narrow unsigned ``narrow`` (a padding, 4-5 bits) as a sum of shifted
    ``wide``: a few adders instead of a DSP block."""
    terms = [Mux(narrow[k], wide << k, 0) for k in range(len(narrow))]
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def _sum_at_most(terms, limit: int):
    """``sum(terms) <= limit`` for unsigned ``terms``, without the wide sum: every term is below the next
    power of two above ``limit`` (a wide OR each), and the sum of their low bits is at most ``limit``."""
    bits = limit.bit_length()
    low_sum = sum(term[:bits] for term in terms)
    small = [term[bits:] == 0 for term in terms]
    out = low_sum <= limit
    for flag in small:
        out = out & flag
    return out


def _page_index_at(addr, k: int, plus256: bool = False):
    """Of beats of ``2**k`` bytes from ``addr`` (aligned to ``2**k``), or, with ``plus256``, from 256 beats
    after it (the caller knows that address to be in the same page): (whether the 4 KiB boundary comes
    within 256 beats, the low 8 bits ``j`` of the beat's index in its page, padded with ones above a
    page's beats), so that min(256, beats to the boundary) is ``256 - j`` there and 256 otherwise. Built
    from ``addr``'s bits, without subtracting it from the boundary: the boundary is within 256 beats
    exactly when the index's bits above the low 8 are all ones (one less with ``plus256``)."""
    n = 12 - k                       # bits of the beat index within the page
    index = addr[k:12]
    if n <= 8:                       # a page holds at most 256 beats: the boundary is always within reach
        return Const(1, 1), Cat(index, Const((1 << (8 - n)) - 1, 8 - n))
    ones = (1 << (n - 8)) - 1
    return index[8:] == (ones - 1 if plus256 else ones), index[:8]


def _page_start_cap(k: int):
    """``_page_cap`` of an address on a 4 KiB boundary (the one after a burst that ends there)."""
    n = 12 - k
    beats = 1 << n if n <= 8 else MAX_BURST_BEATS
    return Const(int(n <= 8), 1), Const(beats, 9), Const(beats - 1, 8)


def _by_log_size(log_size, max_log_size: int, build):
    """``build(k)`` (a tuple of values) for the beat size ``2**log_size``: ``log_size`` a Python int, or a
    value in ``0 .. max_log_size`` (then every possible size is built and the result selected by it)."""
    if isinstance(log_size, int):
        return build(log_size)
    sizes = range(max_log_size + 1)
    out = build(sizes[-1])
    for k in reversed(sizes[:-1]):
        cand = build(k)
        out = tuple(Mux(log_size == k, c, o) for c, o in zip(cand, out))
    return out


def _page_cap(addr, log_size, max_log_size: int, plus256: bool = False):
    """(at_boundary, cap, cap - 1) of ``addr`` for a constant or a variable beat size (see
    ``_page_index_at``): one 9-bit subtraction after the selection by the beat size, and ``cap - 1`` =
    ``255 - j`` is ``j`` inverted."""
    at_boundary, index = _by_log_size(log_size, max_log_size, lambda k: _page_index_at(addr, k, plus256))
    low = Mux(at_boundary, index, 0)
    return at_boundary, (Const(MAX_BURST_BEATS, 9) - low)[:9], ~low


class _BurstGenerator:
    """Request-side walk: rows of ``row_beats`` beats cut into AXI4 INCR bursts (the rest of the row,
    capped at 256 beats and at the 4 KiB boundary), one request per cycle at most.

    Call :meth:`start` in the start cycle; ``enable`` gates when requests may be presented.
    ``log_size`` is a Python int (a store's fixed beat size) or a value stable during the walk, in
    ``0 .. max_log_size``. ``spare_cycle``: the requester is accepted at most every other cycle, and
    not in the cycle after the start (a read requester behind the registered grant, docs/timing.md §5).

    The burst cutting is kept shallow for ECP5 (docs/fpga.md §6): whether the 4 KiB boundary is within
    256 beats, the cap min(256, beats to it) and ``cap - 1`` are registers beside the address, and so
    are the low bits of ``rem - 1``, so the burst ends the row (``row_end``: one 9-bit comparison) and
    its length come from registers; the values those registers take after a burst are built from
    registers too (the next row's address, or the current address's bits: ``_page_cap``), so that the
    acceptance and ``row_end`` only select between them. With ``spare_cycle``, ``row_end`` is also kept
    in a register, computed in the cycle before an acceptance (the walk does not move there), so that
    its comparison is not behind the selection of every next-state register.
    """

    def __init__(self, m: Module, req, *, log_size, enable, max_log_size: int = 0, spare_cycle: bool = False):
        self.active = Signal()
        self.rows_left = Signal(16)
        self.next_row = Signal(ADDR_BITS)   # the next row's first address, kept ahead (no adder behind the grant)
        self.addr = Signal(ADDR_BITS)
        self.rem = Signal(_COUNT_BITS)      # beats left in the current row
        self.rem_m1 = Signal(8)             # (rem - 1) mod 256: the burst length when the burst ends the row
        self.row_beats = Signal(_COUNT_BITS)
        self.row_beats_m1 = Signal(8)
        self.stride_bytes = Signal(ADDR_BITS)
        self.last_row = Signal()            # rows_left == 1, kept as a register
        self.log_size = log_size
        self.max_log_size = max_log_size
        self.at_boundary = Signal()
        self.cap = Signal(range(MAX_BURST_BEATS + 1))
        self.cap_m1 = Signal(8)

        low = exact_log2(MAX_BURST_BEATS) + 1
        row_end = (self.rem[low:] == 0) & (self.rem[:low] <= self.cap)
        m.d.comb += [
            req.valid.eq(self.active & enable),
            req.payload.addr.eq(self.addr),
            req.payload.len.eq(Mux(row_end, self.rem_m1, self.cap_m1)),
            req.payload.size.eq(log_size),
        ]
        self.fire = req.valid & req.ready
        if spare_cycle:
            step_row_end = Signal()
            m.d.sync += [step_row_end.eq(row_end),
                         Assert(~self.fire | (step_row_end == row_end), "DMA burst walk: accepted with no spare cycle")]
        else:
            step_row_end = row_end
        # after a burst that does not end the row: the boundary (a whole page on), or 256 beats on
        after = Mux(self.at_boundary, Cat(Const(0, 12), self.addr[12:] + 1),
                    self.addr + (Const(MAX_BURST_BEATS, low) << log_size))[:ADDR_BITS]
        at_page = _by_log_size(log_size, max_log_size, _page_start_cap)
        on_256 = _page_cap(self.addr, log_size, max_log_size, plus256=True)
        after_cap = [Mux(self.at_boundary, p, q) for p, q in zip(at_page, on_256)]
        with m.If(self.fire):
            with m.If(step_row_end):
                self._set_page(m, _page_cap(self.next_row, log_size, max_log_size))
                m.d.sync += [self.addr.eq(self.next_row),
                             self.next_row.eq(self.next_row + self.stride_bytes), self.rem.eq(self.row_beats),
                             self.rem_m1.eq(self.row_beats_m1),
                             self.rows_left.eq(self.rows_left - 1), self.last_row.eq(self.rows_left == 2)]
                with m.If(self.last_row):
                    m.d.sync += self.active.eq(0)
            with m.Else():
                m.d.sync += [self.addr.eq(after), self.rem.eq(self.rem - self.cap),
                             self.rem_m1.eq(self.rem_m1 - self.cap)]
                self._set_page(m, after_cap)

    def _set_page(self, m: Module, page) -> None:
        at_boundary, cap, cap_m1 = page
        m.d.sync += [self.at_boundary.eq(at_boundary), self.cap.eq(cap), self.cap_m1.eq(cap_m1)]

    def start(self, m: Module, *, base, stride_bytes, rows, row_beats):
        self._set_page(m, _page_cap(base, self.log_size, self.max_log_size))
        m.d.sync += [self.active.eq((rows != 0) & (row_beats != 0)), self.rows_left.eq(rows),
                     self.last_row.eq(rows == 1),
                     self.next_row.eq(base + stride_bytes), self.addr.eq(base),
                     self.rem.eq(row_beats), self.rem_m1.eq(row_beats - 1), self.row_beats_m1.eq(row_beats - 1),
                     self.row_beats.eq(row_beats), self.stride_bytes.eq(stride_bytes)]


class DmaLoad2D(wiring.Component):
    """2-D strided DRAM -> SRAM copy with on-the-fly zero padding.

    Parameters
    ----------
    bus_width : int
        Memory bus width in bits.
    data_width : int
        Width of ``wr_data`` (the widest element this engine writes, in bits).
    dram_latency : int
        DRAM_LATENCY; read requests start once at most this many pad writes remain.

    Interface attributes
    --------------------
    start, <instruction fields>, log_elem : in
        ``log_elem`` is log2 of the DRAM element size in bytes.
    wr_en, wr_addr, wr_data : out
        One SRAM write per cycle at most (pad entries are written with zeros), registered: it comes
        the cycle after the pad cycle or the last beat that docs/timing.md §4 counts.
    finish, active : out
    mem : ReadPortSignature
    """

    def __init__(self, *, bus_width: int, data_width: int, dram_latency: int):
        self._bus_width = bus_width
        self._data_width = data_width
        self._latency = dram_latency
        super().__init__({
            "start": In(1), **mem_fields(), "log_elem": In(4),
            "wr_en": Out(1), "wr_addr": Out(SRAM_ADDR_BITS), "wr_data": Out(data_width),
            "finish": Out(1), "active": Out(1),
            "mem": Out(ReadPortSignature(bus_width)),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self._bus_width
        log_bus = exact_log2(bus // 8)
        # Geometry of the footprint, in LOAD_PREP_CYCLES = 2 registered steps before the walk ("go"):
        # the start cycle latches the fields with W and the x padding; the first execution cycle forms
        # the pad products (shift-and-add, at most three adder levels) and X * Y; "go" (the second)
        # adds them up and sets the walk.
        assert LOAD_PREP_CYCLES == 2
        p1, p2 = Signal(), Signal()                   # the step in its cycle: after the start, go
        f = {name: Signal(len(getattr(self, name)), name=f"f_{name}")
             for name in ("sram_base", "dram_base", "y_size", "x_size", "x_stride", "y_pad_0", "y_pad_1", "x_pad_0",
                          "x_pad_1", "log_elem")}
        width = Signal(18)
        mid = Signal(5)              # x_pad_1 + x_pad_0: the pad run (SRAM entries) between two data rows
        top, bottom, across = Signal(_COUNT_BITS), Signal(_COUNT_BITS), Signal(_COUNT_BITS)
        n_data = Signal(32)
        y_zero = Signal()            # y_size == 0, a register for go's selects
        base_bytes = Signal(ADDR_BITS)
        stride_bytes = Signal(ADDR_BITS)
        m.d.sync += [p1.eq(self.start & (self.x_size != 0)), p2.eq(p1)]
        with m.If(self.start):
            m.d.sync += [reg.eq(getattr(self, name)) for name, reg in f.items()]
            m.d.sync += [width.eq(self.x_pad_0 + self.x_size + self.x_pad_1), mid.eq(self.x_pad_0 + self.x_pad_1)]
        with m.If(p1):
            m.d.sync += [
                y_zero.eq(f["y_size"] == 0),
                top.eq(_narrow_product(f["y_pad_0"], width)),      # entries of the top and bottom pad rows
                bottom.eq(_narrow_product(f["y_pad_1"], width)),
                across.eq(_narrow_product(mid, f["y_size"])),      # the pads beside the data rows
                n_data.eq(f["x_size"] * f["y_size"]),
                base_bytes.eq(f["dram_base"] << f["log_elem"]),
                stride_bytes.eq(f["x_stride"] << f["log_elem"]),
            ]
        go = p2
        # log_elem from the latched field: the walk runs after the start cycle
        narrow = f["log_elem"] <= log_bus
        log_size = Mux(narrow, f["log_elem"], log_bus)
        log_k = Mux(narrow, 0, (f["log_elem"] - log_bus)[:4])
        # H*W - X*Y, as (y_pad_0 + y_pad_1) * W + Y * (x_pad_0 + x_pad_1) (x_size != 0 on this path)
        n_pads = top + bottom + across
        run0 = top + f["x_pad_0"]

        # Latched per-instruction values.
        active = Signal()
        x_size = f["x_size"]
        data_jump = Signal(33)       # entries jumped after a pad run: x_size, or all data if mid == 0
        last_run = Signal(_COUNT_BITS)
        m.d.comb += [self.active.eq(active)]

        # ---- pad walker: P_left pad writes remain; cur/left walk the runs of pad entries.
        pads_left = Signal(_COUNT_BITS)
        cur = Signal(SRAM_ADDR_BITS)
        left = Signal(_COUNT_BITS)
        runs_left = Signal(16)
        pad_we = Signal()            # active and pads_left != 0, kept as a register (no wide OR before the writes)
        # pads_left <= DRAM_LATENCY (requests may start), kept as a register beside pads_left: no comparison
        # between the counter and the request's valid, which the memory master's registered pick depends on
        near = Signal(init=1)
        pad_last = Signal()          # pads_left == 1, kept as a register (finish does not wait on a wide compare)
        with m.If(pad_we):
            m.d.sync += [pads_left.eq(pads_left - 1), near.eq(pads_left <= self._latency + 1),
                         pad_last.eq(pads_left == 2)]
            with m.If(pad_last):
                m.d.sync += pad_we.eq(0)
            with m.If(left > 1):
                m.d.sync += [cur.eq(cur + 1), left.eq(left - 1)]
            with m.Elif((mid != 0) & (runs_left != 0)):
                m.d.sync += [cur.eq(cur + 1 + x_size), left.eq(mid), runs_left.eq(runs_left - 1)]
            with m.Else():
                m.d.sync += [cur.eq(cur + 1 + data_jump), left.eq(last_run), runs_left.eq(0)]

        # ---- request side
        row_beats = Signal(_COUNT_BITS)
        m.d.comb += row_beats.eq(f["x_size"] << log_k)
        reqs = _BurstGenerator(m, self.mem.ar, log_size=log_size, max_log_size=log_bus, spare_cycle=True,
                               enable=active & near)

        # ---- data side: R beats, always accepted, assembled into elements.
        beat = Signal(range(1 << 10))
        beats_per_elem_m1 = Signal(10)
        rows_left = Signal(16)       # data rows not yet complete
        x_left = Signal(16)
        # beat == beats_per_elem_m1 and x_left == 1, kept as registers: no comparison between the R beat
        # and the SRAM write and the data walk's selects
        beat_last = Signal()
        x_last = Signal()
        d_addr = Signal(SRAM_ADDR_BITS)
        lane = Signal(max(log_bus, 1))
        row_lane = Signal(max(log_bus, 1))
        stride_lanes = Signal(max(log_bus, 1))
        elem_bytes = Signal(max(log_bus, 1))
        buf = Signal(self._data_width if self._data_width >= bus else bus)
        beat_in = self.mem.r.valid
        data_we = Signal()
        assembled = Signal.like(buf)
        narrow_l = Signal()
        m.d.comb += [
            data_we.eq(beat_in & beat_last),
            assembled.eq(buf),
            assembled.word_select(beat, bus).eq(self.mem.r.payload.data),
        ]
        with m.If(beat_in):
            m.d.sync += buf.word_select(beat, bus).eq(self.mem.r.payload.data)
            with m.If(data_we):
                m.d.sync += [beat.eq(0), beat_last.eq(beats_per_elem_m1 == 0)]
                with m.If(x_last):
                    m.d.sync += [x_left.eq(x_size), x_last.eq(x_size == 1), d_addr.eq(d_addr + 1 + mid),
                                 rows_left.eq(rows_left - 1),
                                 row_lane.eq(row_lane + stride_lanes), lane.eq(row_lane + stride_lanes)]
                with m.Else():
                    m.d.sync += [x_left.eq(x_left - 1), x_last.eq(x_left == 2), d_addr.eq(d_addr + 1),
                                 lane.eq(lane + elem_bytes)]
            with m.Else():
                m.d.sync += [beat.eq(beat + 1), beat_last.eq(beat + 1 == beats_per_elem_m1)]

        # ---- go: set the walk up
        near_now = _sum_at_most([top, bottom, across], self._latency)     # n_pads <= DRAM_LATENCY
        m.d.sync += Assert(~go | (near_now == (n_pads <= self._latency)), "DMA load: near out of step")
        with m.If(go):
            jump_now = Mux(mid != 0, f["x_size"], n_data)
            last_now = f["x_pad_1"] + bottom
            y_size = f["y_size"]
            m.d.sync += [
                active.eq(1),
                data_jump.eq(jump_now), last_run.eq(last_now), pads_left.eq(n_pads), near.eq(near_now),
                # n_pads != 0 without the sum: x_size != 0 here, so W != 0
                pad_we.eq((f["y_pad_0"] != 0) | (f["y_pad_1"] != 0) | ((mid != 0) & ~y_zero)),
                beat.eq(0), beats_per_elem_m1.eq((Const(1, 1) << log_k) - 1), narrow_l.eq(narrow),
                beat_last.eq(log_k == 0), x_last.eq(f["x_size"] == 1),
                rows_left.eq(y_size), x_left.eq(f["x_size"]), d_addr.eq(f["sram_base"] + run0),
                lane.eq(base_bytes), row_lane.eq(base_bytes), stride_lanes.eq(stride_bytes),
                elem_bytes.eq(Mux(narrow, Const(1, 1) << f["log_elem"], 0)),
            ]
            # n_pads == 1 without the sum (its three terms are not negative)
            zero = [(top == 0), (bottom == 0), (across == 0)]
            m.d.sync += pad_last.eq((top == 1) & zero[1] & zero[2] | zero[0] & (bottom == 1) & zero[2]
                                    | zero[0] & zero[1] & (across == 1))
            # The first pad run; an empty first run starts at the next non-empty one. run0 != 0 without the
            # sum: top = y_pad_0 * W and W != 0 (x_size != 0 here)
            with m.If(y_zero | (f["y_pad_0"] != 0) | (f["x_pad_0"] != 0)):
                m.d.sync += [cur.eq(f["sram_base"]), left.eq(Mux(y_zero, n_pads, run0)),
                             runs_left.eq(Mux(y_zero, 0, y_size - 1))]
            with m.Elif((mid != 0) & (y_size > 1)):
                m.d.sync += [cur.eq(f["sram_base"] + f["x_size"]), left.eq(mid), runs_left.eq(y_size - 2)]
            with m.Else():
                m.d.sync += [cur.eq(f["sram_base"] + jump_now), left.eq(last_now), runs_left.eq(0)]
            reqs.start(m, base=base_bytes, stride_bytes=stride_bytes, rows=y_size, row_beats=row_beats)

        finish = Signal()
        data_done = (rows_left == 0) | ((rows_left == 1) & x_last & data_we)
        empty = Signal()             # x_size 0: nothing to do, done in the first execution cycle
        m.d.sync += empty.eq(self.start & (self.x_size == 0))
        m.d.comb += finish.eq(empty | (active & (~pad_we | pad_last) & data_done))
        with m.If(finish):
            m.d.sync += active.eq(0)
        m.d.comb += self.finish.eq(finish)

        # ---- SRAM write port
        narrow_data = (self.mem.r.payload.data >> (lane << 3))
        # registered: each write lands in the SRAM the cycle after its pad cycle or last beat (before any
        # later instruction can read it: the earliest reads follow this one's retire cycle)
        m.d.sync += [
            self.wr_en.eq(pad_we | data_we),
            self.wr_addr.eq(Mux(pad_we, cur, d_addr)),
            self.wr_data.eq(Mux(pad_we, 0, Mux(narrow_l, narrow_data, assembled))),
        ]
        m.d.sync += [
            Assert(~(pad_we & data_we), "DMA load: pad and data write in the same cycle"),
            Assert(~beat_in | active, "DMA load: read beat while idle"),
            Assert(~pad_we | (pad_last == (pads_left == 1)), "DMA load: pad_last out of step"),
            Assert(~active | (beat_last == (beat == beats_per_elem_m1)) & (x_last == (x_left == 1)),
                   "DMA load: beat_last or x_last out of step"),
        ]
        return m


class DmaStore2D(wiring.Component):
    """2-D SRAM -> DRAM copy (no padding) of elements of ``elem_bytes`` bytes.

    Interface attributes
    --------------------
    start, <instruction fields> : in
    rd_addr, rd_en : out; rd_data : in
        A synchronous SRAM read port (data the cycle after ``rd_en``).
    finish, active : out
    mem : WritePortSignature
    """

    def __init__(self, *, bus_width: int, elem_bytes: int):
        self._bus_width = bus_width
        self._elem_bytes = elem_bytes
        super().__init__({
            "start": In(1), **mem_fields(),
            "rd_addr": Out(SRAM_ADDR_BITS), "rd_en": Out(1), "rd_data": In(elem_bytes * 8),
            "finish": Out(1), "active": Out(1),
            "mem": Out(WritePortSignature(bus_width)),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self._bus_width
        log_bus = exact_log2(bus // 8)
        log_elem = exact_log2(self._elem_bytes)
        narrow = log_elem <= log_bus
        log_size = min(log_elem, log_bus)
        beats_per_elem = 1 if narrow else 1 << (log_elem - log_bus)

        active = Signal()
        m.d.comb += self.active.eq(active)
        reqs = _BurstGenerator(m, self.mem.aw, log_size=log_size, enable=active)

        # W side: its own walk, beat by beat, marking the last beat of every burst. A burst ends at the
        # first beat that ends its row, comes before a 4 KiB boundary, or is its 256th, which is where
        # the AW walk cuts it (the rest of the row, capped at 256 beats and at the boundary); each of
        # the three is kept as a register flag, so WLAST is their OR. Only the address's low 12 bits
        # matter here (the lane and the position in the 4 KiB page).
        w_valid = Signal()
        w_addr = Signal(12)
        w_next_row = Signal(12)             # the next row's first address, kept ahead
        w_rem = Signal(_COUNT_BITS)         # beats left in the row, this one included
        w_row_beats = Signal(_COUNT_BITS)
        w_stride = Signal(12)
        w_rows_left = Signal(16)
        w_count = Signal(8)                 # beats of the burst before this one (mod 256)
        end_row = Signal()                  # this beat ends its row (w_rem == 1)
        end_page = Signal()                 # this beat comes before a 4 KiB boundary
        end_256 = Signal()                  # this beat is its burst's 256th
        last_row = Signal()                 # w_rows_left == 1
        one_beat_rows = Signal()            # w_row_beats == 1
        beat = Signal(range(max(beats_per_elem, 2)))
        rd_addr = Signal(SRAM_ADDR_BITS)
        b_left = Signal(_COUNT_BITS)        # bursts accepted whose B response has not come
        b_none = Signal(init=1)             # b_left == 0, kept as a register
        b_one = Signal()                    # b_left == 1

        def page_end(addr):
            """The beat at ``addr`` is the last before a 4 KiB boundary (its beat index all ones)."""
            return addr[log_size:12] == (1 << (12 - log_size)) - 1

        w_last = end_row | end_page | end_256
        if narrow:
            lane = w_addr[:log_bus] if log_bus else Const(0, 1)
            data = self.rd_data << (lane << 3)
            strb = Const((1 << self._elem_bytes) - 1, bus // 8) << lane
        else:
            data = self.rd_data.word_select(beat, bus)
            strb = Const((1 << (bus // 8)) - 1, bus // 8)
        m.d.comb += [
            self.mem.w.valid.eq(w_valid),
            self.mem.w.payload.data.eq(data),
            self.mem.w.payload.strb.eq(strb),
            self.mem.w.payload.last.eq(w_last),
            self.rd_addr.eq(rd_addr),
        ]
        w_fire = self.mem.w.valid & self.mem.w.ready
        with m.If(w_fire):
            m.d.sync += [w_count.eq(Mux(w_last, 0, w_count + 1)), end_256.eq(~w_last & (w_count == 254))]
            with m.If(end_row):
                m.d.sync += [w_addr.eq(w_next_row), w_next_row.eq(w_next_row + w_stride),
                             w_rem.eq(w_row_beats), w_rows_left.eq(w_rows_left - 1),
                             end_row.eq(one_beat_rows), end_page.eq(page_end(w_next_row)),
                             last_row.eq(w_rows_left == 2)]
            with m.Else():
                m.d.sync += [w_addr.eq(w_addr + (1 << log_size)), w_rem.eq(w_rem - 1), end_row.eq(w_rem == 2),
                             end_page.eq(w_addr[log_size:12] == (1 << (12 - log_size)) - 2)]
            if beats_per_elem > 1:
                m.d.sync += beat.eq(beat + 1)
            with m.If(beat == beats_per_elem - 1):
                # Element done: read the next one (its data is there next cycle), or stop.
                with m.If(last_row & end_row):    # the last beat of the last row
                    m.d.sync += w_valid.eq(0)
                with m.Else():
                    m.d.comb += self.rd_en.eq(1)
                    m.d.sync += [rd_addr.eq(rd_addr + 1)]
                    m.d.comb += self.rd_addr.eq(rd_addr + 1)

        b_in = self.mem.b.valid
        m.d.comb += self.mem.b.ready.eq(1)
        with m.If(reqs.fire & ~b_in):
            m.d.sync += [b_left.eq(b_left + 1), b_none.eq(0), b_one.eq(b_none)]
        with m.If(~reqs.fire & b_in):
            m.d.sync += [b_left.eq(b_left - 1), b_none.eq(b_one), b_one.eq(b_left == 2)]

        with m.If(self.start):
            rows = Mux(self.x_size == 0, 0, self.y_size)
            base_bytes = (self.dram_base << log_elem)[:ADDR_BITS]
            stride_bytes = (self.x_stride << log_elem)[:ADDR_BITS]
            row_beats = self.x_size * beats_per_elem
            reqs.start(m, base=base_bytes, stride_bytes=stride_bytes, rows=rows, row_beats=row_beats)
            m.d.sync += [
                active.eq(1), w_valid.eq(rows != 0), w_addr.eq(base_bytes[:12]),
                w_next_row.eq((base_bytes + stride_bytes)[:12]),
                w_rem.eq(row_beats), w_row_beats.eq(row_beats), w_stride.eq(stride_bytes[:12]),
                w_count.eq(0), end_256.eq(0), end_row.eq(row_beats == 1), one_beat_rows.eq(row_beats == 1),
                end_page.eq(page_end(base_bytes)), last_row.eq(rows == 1), w_rows_left.eq(rows), beat.eq(0),
                rd_addr.eq(self.sram_base), b_left.eq(0), b_none.eq(1), b_one.eq(0),
            ]
        with m.If(~active):
            # idle: read the first element at the instruction's base every cycle (the start cycle's read is
            # the one used), so the SRAM address does not wait on start
            m.d.comb += [self.rd_en.eq(1), self.rd_addr.eq(self.sram_base)]

        finish = Signal()
        # every B response in: b_left == b_in
        m.d.comb += finish.eq(active & ~reqs.active & ~w_valid & Mux(b_in, b_one, b_none))
        with m.If(finish):
            m.d.sync += active.eq(0)
        m.d.comb += [
            self.finish.eq(finish),
        ]
        m.d.sync += [Assert(~b_in | active, "DMA store: B response while idle"),
                     Assert((b_none == (b_left == 0)) & (b_one == (b_left == 1)), "DMA store: B flags out of step")]
        return m
