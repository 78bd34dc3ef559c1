"""Chrome trace-event timelines of a cycle-model run (open the ``.json`` in https://ui.perfetto.dev).

Where did the cycles go? One track per module shows, without overlap, each instruction's
execution (named by its disassembly), the cycles it waited for a token before starting or for room
in a token queue after finishing, and the cycles a DMA instruction waited for DRAM in between; the
fetch track shows when fetch waited for instruction bytes or for a full command queue, the
DRAM track shows every read burst on the shared data channel, and one counter track per token
queue shows how many tokens it holds.

Time axis: one cycle is one microsecond of trace time (``ts`` and ``dur`` are whole cycles), so
Perfetto's time readout is a cycle count. Cycle ``c`` covers ``[c, c + 1)``; an instruction's
execution slice covers its EXEC cycles and ends at its retire cycle when it pushes without
waiting, so the last slice (FINISH's) ends exactly at ``RunStats.cycles``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from vtakit.errors import SimError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.sim.machine import POP_QUEUES, PUSH_QUEUES, QUEUE_NAMES
from vtakit.sim.stats import RunStats

if TYPE_CHECKING:
    from vtakit.sim.cycle import InsnTiming

__all__ = ["write_trace", "trace_events", "TRACKS"]

#: Track (thread) ids, in display order.
TRACKS = {"fetch": 0, "load": 1, "compute": 2, "store": 3, "dram": 4}
_MODULE_TRACKS = ("load", "compute", "store")
_STAGES = (isa.Stage.LOAD, isa.Stage.COMPUTE, isa.Stage.STORE)


def _slice(events: list, track: str, name: str, begin: int, end: int, cat: str, **args) -> None:
    if end > begin:
        events.append({"name": name, "cat": cat, "ph": "X", "ts": begin, "dur": end - begin, "pid": 0,
                       "tid": TRACKS[track], "args": args})


def _exec_slices(events: list, track: str, name: str, index: int, t: "InsnTiming") -> None:
    """The EXEC cycles of one instruction, with its DRAM waits cut out as their own slices."""
    s, end = t.started + 1, t.finished + 1
    gaps = []
    if t.beats:
        cursor = s + t.pads
        for first, last in t.beats:
            gaps.append((cursor, first))
            cursor = last + 1
    elif t.write_beats:
        gaps.append((s + t.write_beats, end))   # waiting for the last write response
    cursor = s
    for gap_begin, gap_end in gaps:
        if gap_end > gap_begin:
            _slice(events, track, name, cursor, gap_begin, "exec", index=index)
            _slice(events, track, "DRAM wait", gap_begin, gap_end, "memory", index=index)
            cursor = gap_end
    _slice(events, track, name, cursor, end, "exec", index=index)


def trace_events(config: VTAConfig, insns: list[isa.Instruction], timing: list["InsnTiming"],
                 stats: RunStats, dram_bursts: list[tuple[str, int, int]] = (),
                 token_log: list[tuple[int, int, int]] | None = None) -> dict:
    """The trace as a JSON-ready dict (``traceEvents`` plus metadata)."""
    events: list = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"vtakit core {config.model}"}}]
    for track, tid in TRACKS.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": track}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid, "args": {"sort_index": tid}})
    head_since = 1
    for index, (insn, t) in enumerate(zip(insns, timing)):
        track = _MODULE_TRACKS[t.module]
        text = isa.disasm(insn)
        stage = _STAGES[t.module]
        pops = [q for flag, q in POP_QUEUES[stage] if getattr(insn, flag)]
        pushes = [q for flag, q in PUSH_QUEUES[stage] if getattr(insn, flag)]
        _slice(events, track, "token wait: " + ", ".join(QUEUE_NAMES[q] for q in pops), t.taken + 1, t.started,
               "token", index=index)
        _exec_slices(events, track, text, index, t)
        _slice(events, track, "token wait: " + ", ".join(QUEUE_NAMES[q] for q in pushes), t.finished + 1,
               t.retired, "token", index=index)
        _slice(events, "fetch", "DRAM wait", head_since, t.fetched + 1, "memory", index=index)
        _slice(events, "fetch", f"{track} command queue full", max(head_since, t.fetched + 1), t.dispatched,
               "queue", index=index)
        head_since = t.dispatched + 1
    for requester, first, last in dram_bursts:
        _slice(events, "dram", requester, first, last + 1, "dram", beats=last - first + 1)
    for name in QUEUE_NAMES:   # token-queue occupancy as counter tracks, starting empty
        events.append({"name": f"tokens {name}", "ph": "C", "ts": 0, "pid": 0, "args": {"tokens": 0}})
    for cycle, queue, count in token_log or ():
        events.append({"name": f"tokens {QUEUE_NAMES[queue]}", "ph": "C", "ts": cycle, "pid": 0,
                       "args": {"tokens": count}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"time_unit": "1 us of trace time = 1 cycle", "config": config.model,
                          "cycles": stats.cycles, "utilization": stats.utilization}}


def write_trace(path: Path, config: VTAConfig, insns: list[isa.Instruction], timing: list["InsnTiming"],
                stats: RunStats, dram_bursts: list[tuple[str, int, int]] = (),
                token_log: list[tuple[int, int, int]] | None = None) -> None:
    """Write the timeline of a run to ``path`` (must end in ``.json``)."""
    path = Path(path)
    if path.suffix != ".json":
        raise SimError(f"the cycle backend writes Chrome trace-event JSON; trace path {str(path)!r} must end "
                          "in .json (use the rtl backend for a .vcd waveform)")
    path.write_text(json.dumps(trace_events(config, insns, timing, stats, dram_bursts, token_log)))
