"""The memory side of one DMA read port, for component tests of the read engines (DMA load, fetch).

:class:`ReadPortSlave` stands where the memory master and the harness DRAM stand in the core
(docs/timing.md §5): a request is accepted in the cycle after the first one it is presented in (the
registered grant), or ``waits[j]`` cycles later still for the j-th burst (as if higher-priority
requesters took the grant), and its beats come from the harness's own :class:`DramModel`. It checks
the AXI rules a requester must keep: a presented request stays presented, unchanged, until accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vtakit.hw.config import VTAConfig
from vtakit.sim.rtl import DramModel

__all__ = ["Burst", "ReadPortSlave", "grant_schedule"]


@dataclass(frozen=True)
class Burst:
    """A read request: first presented in ``presented``, accepted in ``accepted``."""

    presented: int
    accepted: int
    addr: int
    beats: int
    size: int


def grant_schedule(first_presented: int, waits: list[int], j: int, previous_accept: int | None) -> tuple[int, int]:
    """(presentation, acceptance) cycles of burst ``j`` of a requester that presents each request from
    ``first_presented`` and from the cycle after its previous acceptance (the expectation side)."""
    presented = first_presented if previous_accept is None else max(first_presented, previous_accept + 1)
    return presented, presented + 1 + (waits[j] if j < len(waits) else 0)


@dataclass
class ReadPortSlave:
    port: object                     # a ReadPortSignature port, engine side
    dram: np.ndarray                 # uint8 DRAM image
    config: VTAConfig                # DRAM_LATENCY and the bus width
    waits: list[int] = field(default_factory=list)
    bursts: list[Burst] = field(default_factory=list)
    beats: list[tuple[int, bool]] = field(default_factory=list)    # (cycle, last) of each R beat

    def __post_init__(self) -> None:
        self.model = DramModel(self.dram, self.config)
        self._pending: tuple[int, tuple[int, int, int]] | None = None   # (first cycle, payload)

    def step(self, ctx, cycle: int) -> None:
        """Drive R and ARREADY for ``cycle`` (call before sampling the engine's other outputs)."""
        beat = self.model.read_beat(cycle)
        r = self.port.r
        ctx.set(r.valid, beat is not None)
        ctx.set(r.payload.data, beat[0] if beat else 0)
        ctx.set(r.payload.last, bool(beat and beat[2]))
        if beat:
            self.beats.append((cycle, beat[2]))
        ar = self.port.ar
        ready = False
        if ctx.get(ar.valid):
            payload = (ctx.get(ar.payload.addr), ctx.get(ar.payload.len), ctx.get(ar.payload.size))
            if self._pending is None:
                self._pending = (cycle, payload)
            first, held = self._pending
            assert payload == held, f"cycle {cycle}: AR payload changed while presented ({held} -> {payload})"
            j = len(self.bursts)
            ready = cycle >= first + 1 + (self.waits[j] if j < len(self.waits) else 0)
            if ready:
                addr, length, size = payload
                self.bursts.append(Burst(first, cycle, addr, length + 1, size))
                self.model.read_request(cycle, addr, length, size, 0)
                self._pending = None
        else:
            assert self._pending is None, f"cycle {cycle}: read request withdrawn before it was accepted"
        ctx.set(ar.ready, ready)

    @property
    def idle(self) -> bool:
        return not self.model.reads and self._pending is None
