"""The race detector against a brute-force per-location model, on seeded random access sequences.

:class:`vtakit.sim.hb.RaceDetector` takes shortcuts: per-module latest epochs to skip checks,
logs of range records scanned instead of per-entry epochs, records dropped once both other
modules' clocks cover them, bounding ranges for strided DMA rows and index arrays, Python
tests for small footprints. The reference here takes none: a dict from (space, entry, module,
kind) to the latest epoch, checked entry by entry in access order. Both must raise the same
RaceError (same first offending entry, same message) at the same access, or neither; the
sequences are also run with tiny logs and numpy tests only, so every path is taken.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from vtakit.errors import RaceError
from vtakit.hw.config import VTAConfig
from vtakit.sim import hb
from vtakit.sim.hb import MODULES, RaceDetector
from vtakit.sim.machine import DramRows

CFG = VTAConfig.small()
DEPTHS = {"inp": CFG.inp_depth, "wgt": CFG.wgt_depth, "out": CFG.out_depth}


def _describe(module: int, epoch: int) -> str:
    return f"instruction {epoch} of {MODULES[module]}"


class _Reference:
    """The race rule of docs/architecture.md §2 spelled out per location, with nothing skipped."""

    def __init__(self, granule: int) -> None:
        self.clocks = [[0, 0, 0] for _ in MODULES]
        self.module = 0
        self.granule = granule
        self.latest: dict[tuple[str, int, int, int], int] = {}

    def begin(self, module: int) -> None:
        self.module = module
        self.clocks[module][module] += 1

    def snapshot(self, module: int) -> tuple[int, int, int]:
        return tuple(self.clocks[module])

    def join(self, module: int, stamp: tuple[int, int, int]) -> None:
        self.clocks[module] = [max(a, b) for a, b in zip(self.clocks[module], stamp)]

    def access(self, space: str, write: bool, entries: list[int]) -> None:
        me = self.module
        clock = self.clocks[me]
        for other in range(len(MODULES)):
            if other == me:
                continue
            for kind in ((0, 1) if write else (1,)):
                for entry in entries:
                    epoch = self.latest.get((space, entry, other, kind), 0)
                    if epoch > clock[other]:
                        g = self.granule
                        name = (f"DRAM bytes [{entry * g:#x}, {(entry + 1) * g:#x})" if space == "dram"
                                else f"{space.upper()} entry {entry}")
                        raise RaceError(
                            f"data race on {name}: {_describe(me, clock[me])} {'writes' if write else 'reads'} it, "
                            f"and {_describe(other, epoch)} {'writes' if kind else 'reads'} it, with no "
                            f"happens-before order between them (no chain of token pushes and pops orders "
                            f"{MODULES[other]} before {MODULES[me]} here)")
        for entry in entries:
            self.latest[(space, entry, me, int(write))] = clock[me]

    def dram(self, write: bool, rows: DramRows) -> None:
        g = self.granule
        self.access("dram", write, [rows.start // g + r * (rows.stride // g) + c
                                    for r in range(rows.rows) for c in range(rows.row_bytes // g)])


def _random_access(rng: random.Random, g: int):
    """One random access: ("sram", space, write, index) or ("dram", write, DramRows)."""
    write = rng.random() < 0.5
    shape = rng.random()
    if shape < 0.55:
        space = rng.choice(sorted(DEPTHS))
        depth = DEPTHS[space]
        size = rng.choice([0, 1, 1, 2, 4, 16, 32, 65, 100])
        size = min(size, depth)
        if rng.random() < 0.5:
            start = rng.randrange(depth - size + 1)
            return ("sram", space, write, slice(start, start + size, rng.choice([None] * 8 + [1, 3])))
        # GEMM-style index arrays: unsorted, with repeats
        return ("sram", space, write, np.array([rng.randrange(depth) for _ in range(size)], dtype=np.int64))
    # DMA rows: single, contiguous, overlapping (stride < row, even 0), gapped, negative stride
    n = rng.choice([0, 1, 1, 2, 3, 8, 20])
    row = rng.choice([0, 1, 1, 2, 3, 8, 24]) * g
    stride = rng.choice([row, row, 0, g, row + g, 2 * row + 3 * g, 40 * g, -row - g]) if n > 1 else rng.choice([0, row])
    start = rng.randrange(0, 256) * g
    if stride < 0:
        start += (n - 1) * -stride
    return ("dram", write, DramRows(start, row, n, stride))


def _run(seed: int) -> tuple[int, str | None]:
    """Drive both detectors through one random schedule; returns (steps taken, race message or None)."""
    rng = random.Random(seed)
    g = RaceDetector(CFG, _describe).granule
    fast, ref = RaceDetector(CFG, _describe), _Reference(g)
    sync = rng.choice([0.5, 0.8, 0.95, 0.99])   # how often a module learns the others' clocks
    queues: dict[tuple[int, int], list] = {}
    for step in range(rng.choice([20, 80, 300])):
        m = rng.randrange(3)
        action = rng.random()
        if action < 0.2:
            assert fast.begin(m) == ref.clocks[m][m] + 1
            ref.begin(m)
            continue
        if action < 0.35:   # a token from m to another module
            to = rng.choice([k for k in range(3) if k != m])
            stamp = fast.snapshot(m)
            assert stamp == ref.snapshot(m)
            queues.setdefault((m, to), []).append(stamp)
            continue
        if action < 0.5:
            src = rng.choice([k for k in range(3) if k != m])
            if queues.get((src, m)):
                stamp = queues[(src, m)].pop(0)
                fast.join(m, stamp)
                ref.join(m, stamp)
            elif rng.random() < sync:   # a direct full sync, as a chain of tokens would give
                stamp = fast.snapshot(src)
                fast.join(m, stamp)
                ref.join(m, stamp)
            continue
        fast.module = ref.module = m
        access = _random_access(rng, g)
        outcomes = []
        for detector in (fast, ref):
            try:
                if access[0] == "sram":
                    _, space, write, index = access
                    if detector is ref:
                        entries = (list(range(DEPTHS[space]))[index] if isinstance(index, slice)
                                   else index.tolist())
                        ref.access(space, write, entries)
                    elif isinstance(index, slice) and index.step is None and rng.random() < 0.5:
                        fast.sram_range(space, write, index.start, index.stop)
                    else:
                        fast.sram(space, write, index)
                else:
                    detector.dram(access[1], access[2])
                outcomes.append(None)
            except RaceError as error:
                outcomes.append(str(error))
        assert outcomes[0] == outcomes[1], f"seed {seed} step {step}: {access}"
        if outcomes[0] is not None:
            return step, outcomes[0]
        assert fast.clocks == ref.clocks
    return step, None


@pytest.mark.parametrize("block", range(8))
@pytest.mark.parametrize("log, small", [(None, None), (2, 4), (5, 0)])
def test_detector_matches_per_location_reference(block, log, small, monkeypatch):
    """Also with tiny logs (records go into the dense arrays all the time) and numpy tests of every footprint."""
    if log is not None:
        monkeypatch.setattr(hb, "_LOG", log)
        monkeypatch.setattr(hb, "_SMALL", small)
    results = [_run(seed) for seed in range(block * 60, (block + 1) * 60)]
    # the sequences must exercise both outcomes, and races found late in long runs
    assert any(message is None for _, message in results)
    assert any(message is not None and step > 30 for step, message in results)


def test_strided_dram_rows_report_first_row_major_entry():
    """Gapped DMA rows: the race names the first late granule in row order, not in address order."""
    detector = RaceDetector(CFG, _describe)
    g = detector.granule
    detector.begin(0)
    detector.dram(True, DramRows(0, 64 * g, 1, 64 * g))      # load writes granules [0, 64)
    detector.begin(2)
    with pytest.raises(RaceError, match=rf"DRAM bytes \[{40 * g:#x}, {41 * g:#x}\)"):
        detector.dram(False, DramRows(40 * g, 2 * g, 3, -20 * g))   # rows at 40, 20, 0: 40 comes first


def test_gap_between_dram_rows_is_not_a_race():
    """A bounding-range hit between two DMA rows is no race."""
    detector = RaceDetector(CFG, _describe)
    g = detector.granule
    detector.begin(0)
    detector.dram(True, DramRows(4 * g, 2 * g, 1, 0))         # granules 4, 5
    detector.begin(2)
    detector.dram(False, DramRows(0, 4 * g, 3, 6 * g))         # granules 0-3, 6-9, 12-15: around 4, 5
    with pytest.raises(RaceError, match=rf"DRAM bytes \[{5 * g:#x}, {6 * g:#x}\).*reads it, and instruction 1 "
                                        rf"of load writes it"):
        detector.dram(False, DramRows(5 * g, g, 2, 3 * g))
