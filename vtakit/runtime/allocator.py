"""The device DRAM allocator.

VTA's instructions address DRAM in units of the element they move (an INP row, a WGT tile, ...),
so every buffer must start on a multiple of its element size; VTA's driver got this from 4 KiB CMA
pages. ``Allocator`` is a first-fit free list over one contiguous physical range with per-call
alignment, coalescing on free, fixed-address reservations (for programs that bring their own DRAM
layout) and precise errors for exhaustion, double free and unknown addresses.
"""

from __future__ import annotations

import bisect

from vtakit.errors import AllocationError

__all__ = ["Allocator"]


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


class Allocator:
    """First-fit allocator over the byte range ``[0, size)``."""

    def __init__(self, size: int, alignment: int = 64) -> None:
        if size <= 0:
            raise AllocationError(f"DRAM size {size} must be positive")
        if not _is_power_of_two(alignment):
            raise AllocationError(f"alignment {alignment} must be a power of two")
        self.size = size
        self.alignment = alignment
        self._free: list[tuple[int, int]] = [(0, size)]   # sorted, disjoint, coalesced [start, end)
        self._live: dict[int, int] = {}                   # start -> nbytes
        self._freed: set[int] = set()                     # starts freed and not reused (double-free check)

    # ------------------------------------------------------------------ queries
    @property
    def used(self) -> int:
        """Bytes held by live blocks."""
        return sum(self._live.values())

    @property
    def available(self) -> int:
        """Bytes not held by live blocks (possibly fragmented)."""
        return self.size - self.used

    def blocks(self) -> dict[int, int]:
        """Live blocks as ``{start: nbytes}``."""
        return dict(self._live)

    def owner(self, addr: int, nbytes: int) -> int | None:
        """Start of the live block that contains ``[addr, addr + nbytes)``, or None."""
        for start, size in self._live.items():
            if start <= addr and addr + nbytes <= start + max(size, 1):
                return start
        return None

    # ------------------------------------------------------------------ alloc / free
    def alloc(self, nbytes: int, alignment: int | None = None) -> int:
        """Reserve ``nbytes`` (at least 1) at an address aligned to ``alignment``; return it."""
        align = self.alignment if alignment is None else alignment
        if not _is_power_of_two(align):
            raise AllocationError(f"alignment {align} must be a power of two")
        if nbytes < 0:
            raise AllocationError(f"cannot allocate a negative size ({nbytes} bytes)")
        need = max(nbytes, 1)
        for index, (start, end) in enumerate(self._free):
            addr = -(-start // align) * align
            if addr + need <= end:
                self._take(index, addr, addr + need)
                self._live[addr] = nbytes
                self._freed.discard(addr)
                return addr
        largest = max((end - start for start, end in self._free), default=0)
        raise AllocationError(f"out of device memory: cannot allocate {nbytes} bytes aligned to {align} "
                              f"({self.available} of {self.size} bytes free, largest free block {largest})")

    def reserve(self, addr: int, nbytes: int) -> None:
        """Claim the fixed range ``[addr, addr + nbytes)``, which must be free."""
        need = max(nbytes, 1)
        if addr < 0 or addr + need > self.size:
            raise AllocationError(f"cannot reserve [{addr:#x}, {addr + need:#x}): outside device DRAM "
                                  f"[0, {self.size:#x})")
        index = bisect.bisect_right(self._free, (addr, float("inf"))) - 1
        if index < 0 or not (self._free[index][0] <= addr and addr + need <= self._free[index][1]):
            clash = sorted(s for s, n in self._live.items() if s < addr + need and addr < s + max(n, 1))
            raise AllocationError(f"cannot reserve [{addr:#x}, {addr + need:#x}): it overlaps live "
                                  f"buffer(s) at {[hex(s) for s in clash]}")
        self._take(index, addr, addr + need)
        self._live[addr] = nbytes
        self._freed.discard(addr)

    def free(self, addr: int) -> None:
        """Release the block starting at ``addr``."""
        if addr not in self._live:
            if addr in self._freed:
                raise AllocationError(f"double free of device buffer at {addr:#x}")
            raise AllocationError(f"free of {addr:#x}, which is not the start of a live device buffer")
        nbytes = self._live.pop(addr)
        self._freed.add(addr)
        self._give(addr, addr + max(nbytes, 1))

    # ------------------------------------------------------------------ free list
    def _take(self, index: int, lo: int, hi: int) -> None:
        start, end = self._free.pop(index)
        pieces = [(s, e) for s, e in ((start, lo), (hi, end)) if e > s]
        self._free[index:index] = pieces

    def _give(self, lo: int, hi: int) -> None:
        index = bisect.bisect_left(self._free, (lo, hi))
        if index > 0 and self._free[index - 1][1] == lo:
            index -= 1
            lo = self._free.pop(index)[0]
        if index < len(self._free) and self._free[index][0] == hi:
            hi = self._free.pop(index)[1]
        self._free.insert(index, (lo, hi))
