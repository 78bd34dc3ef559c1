"""Happens-before tracking and data-race detection for the three VTA modules (docs/architecture.md §2).

The order a program guarantees is program order within each module plus "the k-th push to a
token queue happens before the k-th pop from it"; stalls on full queues order nothing. This is
tracked with vector clocks: module m's clock counts its own instructions (the epoch of its
current instruction) and learns the others' epochs from the clock snapshots tokens carry.

:class:`RaceDetector` is an :class:`vtakit.sim.machine.AccessObserver`. For every shared location
(INP, WGT, OUT entries; DRAM in granules of the largest size dividing every element) it keeps,
per module, the epoch of that module's latest read and latest write. An access by module m is a
race when another module's latest conflicting access (a write, or any access if m writes) is not
covered by m's clock. Keeping only the latest epoch per module suffices because each module's
accesses are totally ordered by program order. Host-written initial DRAM contents precede
everything, so they need no record.

The detector sees every access of every simulated instruction, and typical accesses are tiny (a
few SRAM entries, a few DRAM rows), so its cost is per-call overhead, not data volume. Hence:

* Per module and space, the latest epoch of any access and of any write: an access whose clock
  covers the other modules' latest conflicting epochs (the usual case) checks nothing.
* Accesses are recorded as (epoch, range, shape) records appended to a per-module, per-kind log;
  per-entry epochs live in a dense array that only older records are written into. A check
  scans the other module's late records (newer than the checker's clock: a handful) for one
  whose range meets the access's; only then, or when the dense array itself holds late epochs,
  does it look at entries (after writing the log into the dense array).
* A record of module m no later than both other modules' clocks of m can never be late again;
  it is dropped instead of written into the dense array.
* Entries are looked at in Python for small footprints (one ``tolist``, one sort) and with one
  numpy reduction for large ones. The exact footprint, in the access's own entry order, is
  built only to name the first offending entry of a race (a strided DMA's bounding range may
  show a late entry in a gap between its rows; the exact pass then finds none and the check
  goes on).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from vtakit.errors import RaceError
from vtakit.hw.config import VTAConfig
from vtakit.sim.machine import DramRows
from vtakit.sim.stats import STAGE_MODULES

__all__ = ["RaceDetector", "MODULES"]

MODULES = STAGE_MODULES
assert len(MODULES) == 3, "the clock code below is unrolled for three modules"

# Footprints up to this many entries are looked at in Python; a numpy reduction costs ~1 us.
_SMALL = 64
# Records a log keeps before its older half goes into the dense array.
_LOG = 32

# The other two modules of each module.
_OTHERS = ((1, 2), (0, 2), (0, 1))

# Per module and access kind (0 read, 1 write), the (other module, kind, slot) triples it is
# checked against, in reporting order: per other module, its reads then its writes for a write,
# its writes only for a read. A module's records of a kind live in slot 2 * module + kind.
_CHECKS = tuple((tuple((o, 1, 2 * o + 1) for o in others),
                 tuple((o, kind, 2 * o + kind) for o in others for kind in (0, 1)))
                for others in _OTHERS)

# A record says an access of one epoch covered entries in [low, high): all of them,
# ``(epoch, low, high)``; rows of ``row`` entries ``step`` apart from ``low``,
# ``(epoch, low, high, step, row)``; or those of an int array of SRAM entries,
# ``[epoch, low, high, index]``, a list whose bounds are filled in when a scan first needs them
# (until then low = high = -1).
_Record = tuple | list


# (``sorted`` of a short list of ints beats ``min`` and ``max``: it compares machine-size ints directly.)
def _bounds(index: np.ndarray) -> tuple[int, int]:
    """[low, high) around an int array's entries."""
    if index.size <= _SMALL:
        entries = sorted(index.tolist())
        return entries[0], entries[-1] + 1
    return int(index.min()), int(index.max()) + 1


def _any_late(found: np.ndarray, seen: int) -> bool:
    """Whether any of the epochs ``found`` exceeds ``seen``."""
    n = found.size
    if n <= _SMALL:
        return n > 0 and sorted(found.tolist())[-1] > seen
    return int(found.max()) > seen


def _latest(dense: np.ndarray, entries: np.ndarray) -> np.ndarray:
    """``dense[entries]``, with entries past the end of a (DRAM) array reading 0 (never accessed)."""
    if entries.size and int(entries.max()) >= len(dense):
        out = np.zeros(entries.shape, dtype=np.int32)
        inside = entries < len(dense)
        out[inside] = dense[entries[inside]]
        return out
    return dense[entries]


class _Space:
    """The three modules' accesses to one address space.

    ``written[m]`` and ``touched[m]`` are the latest epochs of module m's writes and of its
    accesses of either kind (epochs only grow; 0: none). Per slot (2 * module + kind) there is a
    log of the latest records in program order and, below it, ``dense``: per-entry epochs that
    older records were written into (``None`` until one is), the largest of which is ``applied``.
    ``size`` is the SRAM depth, or 0 for DRAM, whose dense arrays grow as they need (entries
    never accessed read as epoch 0).
    """

    __slots__ = ("written", "touched", "log", "dense", "applied", "size")

    def __init__(self, size: int) -> None:
        self.written = [0, 0, 0]
        self.touched = [0, 0, 0]
        self.log: list[list[_Record]] = [[], [], [], [], [], []]
        self.dense: list[np.ndarray | None] = [None] * 6
        self.applied = [0] * 6
        self.size = size

    def apply(self, slot: int, records: list[_Record], floor: int) -> None:
        """Write ``records`` (oldest first) into the slot's dense array, dropping those up to ``floor``.

        ``floor`` is the latest epoch of the slot's module that both other modules' clocks cover:
        a record no later than that can never be late for a check again.
        """
        dense = self.dense[slot]
        top = self.applied[slot]
        for record in records:
            epoch = record[0]
            if epoch <= floor:
                continue
            top = epoch
            fields = len(record)
            if fields == 4:              # SRAM entries: the array has the SRAM's depth
                if dense is None:
                    dense = self._grown(slot, 0)
                dense[record[3]] = epoch
                continue
            low, high = record[1], record[2]
            if dense is None or len(dense) < high:
                dense = self._grown(slot, high)
            if fields == 3:
                dense[low:high] = epoch
                continue
            step, row = record[3], record[4]
            if row <= (high - low) // step:    # fewer columns than rows: one strided slice per column
                for column in range(low, low + row):
                    dense[column:high:step] = epoch
            else:                                 # one slice per row
                for first in range(low, high, step):
                    dense[first:first + row] = epoch
        self.applied[slot] = top

    def _grown(self, slot: int, size: int) -> np.ndarray:
        """The slot's dense array, allocated or grown (with zeros) to at least ``size`` entries."""
        dense = self.dense[slot]
        if dense is None:
            dense = np.zeros(max(size, self.size or 1024), dtype=np.int32)
        else:
            dense = np.concatenate([dense, np.zeros(max(size, 2 * len(dense)) - len(dense), dtype=np.int32)])
        self.dense[slot] = dense
        return dense


# Per configuration (by identity; the entry keeps it alive): SRAM depths and the DRAM granule.
_GEOMETRY: dict[int, tuple[VTAConfig, dict[str, int], int]] = {}


def _geometry(config: VTAConfig) -> tuple[VTAConfig, dict[str, int], int]:
    entry = _GEOMETRY.get(id(config))
    if entry is None or entry[0] is not config:
        c = config
        # every DRAM element, hence every DMA row, is granule-aligned
        granule = math.gcd(c.uop_elem_bytes, c.inp_elem_bytes, c.wgt_elem_bytes, c.acc_elem_bytes,
                           c.acc8_elem_bytes, c.out_elem_bytes)
        entry = _GEOMETRY[id(config)] = (config, {"inp": c.inp_depth, "wgt": c.wgt_depth, "out": c.out_depth},
                                         granule)
    return entry


class RaceDetector:
    """Vector clocks for the load/compute/store modules and race checks on their shared accesses.

    The scheduler calls :meth:`begin` when a module starts an instruction, :meth:`snapshot` to
    put a clock on a pushed token and :meth:`join` when a module pops one; in between, the
    machine reports the instruction's accesses through :meth:`sram` (or :meth:`sram_range`)
    and :meth:`dram`; they are attributed to :attr:`module`.
    ``describe(module, epoch)`` names the instruction a module ran at an epoch, for messages.
    """

    def __init__(self, config: VTAConfig, describe: Callable[[int, int], str]) -> None:
        self.clocks = [[0, 0, 0], [0, 0, 0], [0, 0, 0]]
        self.module = 0
        self._describe = describe
        _, depths, self.granule = _geometry(config)
        self._sram = {space: _Space(depth) for space, depth in depths.items()}
        self._dram = _Space(0)

    # ------------------------------------------------------------------ clocks
    def begin(self, module: int) -> int:
        """Module ``module`` starts its next instruction; returns that instruction's epoch (1-based)."""
        self.module = module
        clock = self.clocks[module]
        clock[module] += 1
        return clock[module]

    def snapshot(self, module: int) -> tuple[int, int, int]:
        clock = self.clocks[module]
        return clock[0], clock[1], clock[2]

    def join(self, module: int, stamp: tuple[int, int, int]) -> None:
        clock = self.clocks[module]
        a, b, c = stamp
        if a > clock[0]:
            clock[0] = a
        if b > clock[1]:
            clock[1] = b
        if c > clock[2]:
            clock[2] = c

    def happened_before(self, module: int, epoch: int, observer: int) -> bool:
        """Whether ``module``'s instruction at ``epoch`` happens before ``observer``'s current one."""
        return self.clocks[observer][module] >= epoch

    # ------------------------------------------------------------------ accesses (AccessObserver)
    # Each access checks the others only if one of them accessed the space (wrote it, for a read)
    # after the epoch this module's clock has of it; then it appends its record to its log (the
    # older half of a long log goes into the dense array) and bumps its latest epochs.
    def sram(self, space: str, write: bool, index: slice | np.ndarray) -> None:
        """The current module accesses SRAM ``space`` entries ``index`` (a slice or a 1-D int array)."""
        sp = self._sram[space]
        me = self.module
        clock = self.clocks[me]
        epoch = clock[me]
        o1, o2 = _OTHERS[me]
        late = sp.touched if write else sp.written
        if type(index) is slice:
            if index.step is not None:   # the machine's slices have none; any other: as the entries it selects
                self.sram(space, write, np.arange(sp.size)[index])
                return
            low = index.start
            high = index.stop
            if high <= low:
                return
            if late[o1] > clock[o1] or late[o2] > clock[o2]:
                self._check(sp, write, low, high, None, space)
            record = (epoch, low, high)
        else:
            if type(index) is not np.ndarray:
                index = np.asarray(index, dtype=np.intp)
            if not index.size:
                return
            if late[o1] > clock[o1] or late[o2] > clock[o2]:
                self._check(sp, write, -1, -1, index, space)
            record = [epoch, -1, -1, index]
        log = sp.log[2 * me + write]
        log.append(record)
        if len(log) > _LOG:
            self._settle(sp, 2 * me + write, me)
        if write:
            sp.written[me] = epoch
        sp.touched[me] = epoch

    def sram_range(self, space: str, write: bool, start: int, stop: int) -> None:
        """The current module accesses SRAM ``space`` entries ``[start, stop)``: :meth:`sram` with a slice."""
        self.sram(space, write, slice(start, stop))

    def dram(self, write: bool, rows: DramRows) -> None:
        """The current module's DMA accesses DRAM ``rows`` (byte addresses, granule-aligned)."""
        n = rows.rows
        row = rows.row_bytes
        if n == 0 or row == 0:
            return
        g = self.granule
        start = rows.start // g
        row //= g
        if n == 1:
            stride = step = row
            low = start
        else:
            stride = rows.stride // g
            # the rows as a set: from the lowest one up, ``step`` apart
            step = stride if stride >= 0 else -stride
            low = start if stride >= 0 else start + (n - 1) * stride
        high = low + (n - 1) * step + row      # rows closer than their length (step <= row) leave no gaps
        sp = self._dram
        me = self.module
        clock = self.clocks[me]
        epoch = clock[me]
        o1, o2 = _OTHERS[me]
        late = sp.touched if write else sp.written
        if late[o1] > clock[o1] or late[o2] > clock[o2]:
            self._check(sp, write, low, high, (start, stride, n, row), None)
        log = sp.log[2 * me + write]
        log.append((epoch, low, high, step, row) if step > row else (epoch, low, high))
        if len(log) > _LOG:
            self._settle(sp, 2 * me + write, me)
        if write:
            sp.written[me] = epoch
        sp.touched[me] = epoch

    def _settle(self, sp: _Space, slot: int, module: int) -> None:
        """Shorten a long log: drop the records no check can find late, write the older half into the dense array."""
        log = sp.log[slot]
        floor = self._floor(module)
        drop = 0
        for record in log:
            if record[0] > floor:
                break
            drop += 1
        if drop < _LOG // 2:
            sp.apply(slot, log[drop:_LOG // 2], floor)
            drop = _LOG // 2
        del log[:drop]

    def _floor(self, module: int) -> int:
        """The latest epoch of ``module`` that both other modules' clocks cover."""
        o1, o2 = _OTHERS[module]
        a = self.clocks[o1][module]
        b = self.clocks[o2][module]
        return a if a < b else b

    def _check(self, sp: _Space, write: bool, low: int, high: int,
               shape: np.ndarray | tuple[int, int, int, int] | None, space: str | None) -> None:
        """Race checks of an access within [low, high) (-1, -1: not known yet) against the others' records.

        ``shape`` is None for all of [low, high) (an SRAM range), an int array of SRAM entries
        (``space`` names the SRAM), or DRAM rows (start, stride, rows, row) in granules.
        """
        me = self.module
        clock = self.clocks[me]
        for other, kind, slot in _CHECKS[me][write]:
            seen = clock[other]
            log = sp.log[slot]
            if (log[-1][0] if log else sp.applied[slot]) <= seen:   # the slot's latest epoch
                continue
            for record in reversed(log):
                if record[0] <= seen:
                    break
                if low < 0:
                    low, high = _bounds(shape)
                if record[1] < 0:
                    record[1:3] = _bounds(record[3])
                if record[1] < high and low < record[2]:   # a late record meets the access's range
                    sp.apply(slot, log, self._floor(other))
                    log.clear()
                    break
            if sp.applied[slot] <= seen:
                continue
            dense = sp.dense[slot]
            if type(shape) is np.ndarray:
                if _any_late(dense[shape], seen):
                    self._race(dense, shape, seen, other, kind, write, space)
            elif _any_late(dense[low:high], seen):    # DRAM rows: their bounding range, clipped to the array
                if shape is None:
                    entries = np.arange(low, high)
                else:
                    start, stride, n, row = shape
                    entries = (start + stride * np.arange(n)[:, None] + np.arange(row)).ravel()
                self._race(dense, entries, seen, other, kind, write, space)

    def _race(self, dense: np.ndarray, entries: np.ndarray, seen: int, other: int, kind: int, write: bool,
              space: str | None) -> None:
        """Raise the race on the first of ``entries`` (in access order) that ``other`` touched after ``seen``.

        Returns when there is none (a bounding range can show late entries between DMA rows).
        """
        found = _latest(dense, entries)
        late = np.flatnonzero(found > seen)
        if not late.size:
            return
        pos = int(late[0])
        entry = int(entries[pos])
        if space is None:
            g = self.granule
            name = f"DRAM bytes [{entry * g:#x}, {(entry + 1) * g:#x})"
        else:
            name = f"{space.upper()} entry {entry}"
        me = self.module
        raise RaceError(
            f"data race on {name}: {self._describe(me, self.clocks[me][me])} "
            f"{'writes' if write else 'reads'} it, and {self._describe(other, int(found[pos]))} "
            f"{'writes' if kind else 'reads'} it, with no happens-before order between them (no chain "
            f"of token pushes and pops orders {MODULES[other]} before {MODULES[me]} here)")
