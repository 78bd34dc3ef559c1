"""Static memory planning: place every run-time tensor in one arena so that tensors whose
lifetimes do not overlap share storage.

The plan is made over the build's steps (one per kernel, in execution order). A tensor lives from
the step that writes it (graph inputs: from the start) to the last step that reads it (graph
outputs: to the end); a view (``Reshape``, ``Flatten``: no kernel) extends its base's life and
shares its bytes. Lifetimes are closed intervals, so a kernel's inputs and outputs never share
bytes (kernels are compiled as non-aliasing). Tensors are placed largest first at the lowest
aligned offset free for their whole lifetime (TVM's and onnxruntime's greedy-by-size planning).
The result reports the arena size (the peak) and the liveness lower bound: the largest total
size of the tensors live at one step, which no placement can beat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

__all__ = ["MemoryPlan", "plan_memory", "ALIGN"]

ALIGN = 64  # bytes: a cache line, and every vector load aligned for every dtype


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offsets of the planned tensors, the arena's size and the liveness lower bound."""

    offsets: dict[str, int]
    arena_bytes: int
    lower_bound: int

    @property
    def ratio(self) -> float:
        return self.arena_bytes / self.lower_bound if self.lower_bound else 1.0


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_memory(steps: Sequence[tuple[Sequence[str], Sequence[str]]], sizes: Mapping[str, int],
                inputs: Sequence[str], outputs: Sequence[str], views: Mapping[str, str] | None = None
                ) -> MemoryPlan:
    """Place the tensors of ``sizes`` (bytes) used by ``steps`` (each ``(reads, writes)``).

    ``views`` maps a view's name to the tensor whose bytes it reuses (a chain resolves to its root);
    names in ``sizes`` that no step touches and that are not inputs or outputs are not placed."""
    views = dict(views or {})

    def root(name: str) -> str:
        while name in views:
            name = views[name]
        return name

    end = len(steps)
    first: dict[str, int] = {}
    last: dict[str, int] = {}

    def touch(name: str, at: int) -> None:
        r = root(name)
        if r not in sizes:
            return
        first.setdefault(r, at)
        first[r] = min(first[r], at)
        last[r] = max(last.get(r, at), at)

    for name in inputs:
        touch(name, -1)
    for k, (reads, writes) in enumerate(steps):
        for name in (*reads, *writes):
            touch(name, k)
    for name in outputs:
        touch(name, end)
    live = {r: (first[r], last[r]) for r in first}
    lower = 0
    for k in range(-1, end + 1):
        lower = max(lower, sum(sizes[r] for r, (a, b) in live.items() if a <= k <= b))
    offsets: dict[str, int] = {}
    placed: list[tuple[int, int, int, int]] = []  # (offset, end offset, first, last)
    for r in sorted(live, key=lambda r: (-sizes[r], live[r])):
        a, b = live[r]
        size = _aligned(max(sizes[r], 1))
        busy = sorted((o, e) for o, e, pa, pb in placed if pa <= b and a <= pb)
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[r] = offset
        placed.append((offset, offset + size, a, b))
    for name in views:
        if root(name) in offsets:
            offsets[name] = offsets[root(name)]
    arena = max((e for _, e, _, _ in placed), default=0)
    return MemoryPlan(offsets, arena, lower)
