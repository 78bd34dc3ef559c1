"""Happens-before tracking and data-race detection for the three VTA modules (DESIGN §2.3).

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


class _Shadow:
    """Per-location epochs of one module's latest reads and writes in one address space.

    The arrays grow on demand (DRAM shadows start empty), so a module that never reads or never
    writes a space costs nothing there.
    """

    __slots__ = ("epochs", "last")

    def __init__(self, size: int) -> None:
        self.epochs = [np.zeros(size, dtype=np.int32), np.zeros(size, dtype=np.int32)]   # [read, write]
        self.last = [0, 0]   # the largest epoch recorded in each array (epochs only grow)

    def array(self, write: bool, size: int) -> np.ndarray:
        """The read or write epochs, grown (with zeros: never accessed) to at least ``size`` entries."""
        epochs = self.epochs[write]
        if size > len(epochs):
            epochs = np.concatenate([epochs, np.zeros(max(size, 2 * len(epochs)) - len(epochs), dtype=np.int32)])
            self.epochs[write] = epochs
        return epochs


class RaceDetector:
    """Vector clocks for the load/compute/store modules and race checks on their shared accesses.

    The scheduler calls :meth:`begin` when a module starts an instruction, :meth:`snapshot` to
    put a clock on a pushed token and :meth:`join` when a module pops one; in between, the
    machine reports the instruction's accesses through :meth:`sram` and :meth:`dram`.
    ``describe(module, epoch)`` names the instruction a module ran at an epoch, for messages.
    """

    def __init__(self, config: VTAConfig, describe: Callable[[int, int], str]) -> None:
        self.clocks = [[0, 0, 0] for _ in MODULES]
        self.module = 0
        self._describe = describe
        depths = {"inp": config.inp_depth, "wgt": config.wgt_depth, "out": config.out_depth}
        self._sram = {space: [_Shadow(depth) for _ in MODULES] for space, depth in depths.items()}
        sizes = (config.uop_elem_bytes, config.inp_elem_bytes, config.wgt_elem_bytes, config.acc_elem_bytes,
                 config.acc8_elem_bytes, config.out_elem_bytes)
        self.granule = math.gcd(*sizes)   # every DRAM element, hence every DMA row, is granule-aligned
        self._dram = [_Shadow(0) for _ in MODULES]   # grown as DMAs reach further

    # ------------------------------------------------------------------ clocks
    def begin(self, module: int) -> int:
        """Module ``module`` starts its next instruction; returns that instruction's epoch (1-based)."""
        self.module = module
        self.clocks[module][module] += 1
        return self.clocks[module][module]

    def snapshot(self, module: int) -> tuple[int, int, int]:
        clock = self.clocks[module]
        return clock[0], clock[1], clock[2]

    def join(self, module: int, stamp: tuple[int, int, int]) -> None:
        clock = self.clocks[module]
        for k in range(len(MODULES)):
            if stamp[k] > clock[k]:
                clock[k] = stamp[k]

    def happened_before(self, module: int, epoch: int, observer: int) -> bool:
        """Whether ``module``'s instruction at ``epoch`` happens before ``observer``'s current one."""
        return self.clocks[observer][module] >= epoch

    # ------------------------------------------------------------------ accesses (AccessObserver)
    def sram(self, space: str, write: bool, index: slice | np.ndarray) -> None:
        self._access(self._sram[space], write, index, 0, lambda i: f"{space.upper()} entry {i}")

    def dram(self, write: bool, rows: DramRows) -> None:
        if rows.rows == 0 or rows.row_bytes == 0:
            return
        g = self.granule
        start, row, stride = rows.start // g, rows.row_bytes // g, rows.stride // g
        end = start + (rows.rows - 1) * stride + row
        if rows.rows == 1 or stride == row:
            index: slice | np.ndarray = slice(start, start + rows.rows * row)
        else:
            index = (start + stride * np.arange(rows.rows)[:, None] + np.arange(row)).ravel()
        self._access(self._dram, write, index, end, lambda i: f"DRAM bytes [{i * g:#x}, {(i + 1) * g:#x})")

    def _access(self, shadows: list[_Shadow], write: bool, index: slice | np.ndarray, end: int,
                name: Callable[[int], str]) -> None:
        """Check one access by the current module against the others' latest accesses, then record it."""
        me = self.module
        clock = self.clocks[me]
        for other, shadow in enumerate(shadows):
            if other == me:
                continue
            seen = clock[other]
            # a write conflicts with the other module's reads and writes, a read only with its writes
            for kind in ((False, True) if write else (True,)):
                if shadow.last[kind] <= seen:
                    continue  # everything that module did so far happens before this access
                epochs = shadow.array(kind, end)[index]
                late = epochs > seen
                if late.any():
                    pos = int(np.flatnonzero(late)[0])
                    entry = index.start + pos if isinstance(index, slice) else int(index[pos])
                    raise RaceError(
                        f"data race on {name(entry)}: {self._describe(me, clock[me])} "
                        f"{'writes' if write else 'reads'} it, and {self._describe(other, int(epochs[pos]))} "
                        f"{'writes' if kind else 'reads'} it, with no happens-before order between them (no chain "
                        f"of token pushes and pops orders {MODULES[other]} before {MODULES[me]} here)")
        mine = shadows[me]
        mine.array(write, end)[index] = clock[me]
        mine.last[write] = clock[me]
