"""Store tokens: each compute -> store push moves to the last compute instruction its stores need
(:func:`hoist_store_pushes`), each store -> compute pop to the first compute instruction that needs
it (:func:`sink_store_pops`).

Dependence tokens are placed on the IR before virtual-thread injection (:mod:`.coproc_sync`), so a
thread's "tile done, store it" token sits after the *program-order* end of the tile's epilogue,
which interleaving puts after the other threads' last GEMMs::

    GEMM(t0, last chunk)   GEMM(t1, last chunk) [push -> store]   no-op [push -> store]
    STORE(t0)   STORE(t1)

When the epilogue is fused into the GEMMs (GEMM_OUT_REQUANT, :mod:`.gemm_epilogue`) the first
GEMM already finishes thread 0's tile, yet its store waits for thread 1's whole GEMM, and the
next tile's reset of thread 0 then waits for that store: ResNet-18 C2 lost 1,570 + 724 cycles at
each of the 7 boundaries between its 8 tiles so.

This pass runs on the generated instruction stream. The k-th compute -> store push releases the
store module's instructions from its k-th pop up to its (k + 1)-th: a *group* that reads OUT
entries and writes DRAM. Among the compute instructions after the new place of push k - 1 (tokens
pair in order) up to the push itself, the push moves to the latest one the group must follow, else
to the earliest of them. The group must follow an instruction that

* writes an OUT entry the group reads (GEMM and ALU write OUT at their destinations; micro-op
  contents are tracked through the program's LOAD UOPs, so footprints are exact; a micro-op the
  program never loads leaves the whole program unchanged),
* reads DRAM (a compute LOAD of ACC data: a store might overwrite it), or
* pops a load -> compute token while some LOAD of the program reads a tensor the group writes, or
  a store's tensor is unknown (a write-after-read the moved token could otherwise undo).

An instruction retires before it pushes, so the push may sit on the instruction the group follows.
Tokens are never added or removed, only moved earlier in compute's program order, and the store
module can always drain its queue, so no deadlock arises; the code generator checks the schedule
again anyway. Without a fused epilogue the last OUT writer of a tile is its ALU pass, which already
carries the push, so the pass changes nothing there.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from vtakit.hw import isa
from vtakit.hw.isa import AluInsn, GemmInsn, MemId, MemInsn, Opcode, Stage

__all__ = ["hoist_store_pushes", "sink_store_pops"]

_COMPUTE_DRAM_LOADS = (MemId.ACC, MemId.ACC_8BIT)


class _Unknown(Exception):
    """A footprint the pass cannot know (a micro-op not loaded by the program): leave it unchanged."""


class _Footprints:
    """The OUT entries each compute GEMM/ALU writes, computed when first asked for, from the micro-op
    cache as the program's LOAD UOPs leave it before that instruction (replayed once, in order)."""

    def __init__(self, insns: Sequence[isa.Instruction], uops: Sequence[isa.Uop], uop_base: int,
                 uop_depth: int, out_depth: int) -> None:
        self.insns, self.depth = insns, out_depth
        image = np.array([u.dst_idx for u in uops], dtype=np.int64)
        cache = np.full(uop_depth, -1, dtype=np.int64)            # dst_idx per cache entry, -1: never loaded
        self.dst: dict[int, np.ndarray] = {}                       # instruction -> its micro-ops' dst_idx
        for n, insn in enumerate(insns):
            if isinstance(insn, MemInsn):
                if insn.opcode == Opcode.LOAD and insn.memory_type == MemId.UOP and insn.x_size > 0:
                    first = insn.dram_base - uop_base
                    if (insn.y_size != 1 or not 0 <= first <= len(uops) - insn.x_size
                            or insn.sram_base + insn.x_size > uop_depth):
                        raise _Unknown
                    cache[insn.sram_base:insn.sram_base + insn.x_size] = image[first:first + insn.x_size]
            elif isinstance(insn, (GemmInsn, AluInsn)) and insn.uop_end > insn.uop_bgn:
                dst = cache[insn.uop_bgn:insn.uop_end]
                if insn.uop_end > uop_depth or (dst < 0).any():      # a micro-op this program never loaded
                    raise _Unknown
                self.dst[n] = dst.copy()
        self._done: dict[int, np.ndarray] = {}

    def writes(self, n: int) -> np.ndarray | None:
        """The OUT entries instruction ``n`` writes (None: it writes none)."""
        if n not in self.dst:
            return None
        if n not in self._done:
            insn = self.insns[n]
            i = np.arange(insn.iter_out, dtype=np.int64)[:, None, None] * insn.dst_factor_out
            j = np.arange(insn.iter_in, dtype=np.int64)[None, :, None] * insn.dst_factor_in
            self._done[n] = ((self.dst[n][None, None, :] + i + j) % self.depth).ravel()
        return self._done[n]


def _params_by_insn(relocations: Sequence[object]) -> dict[int, set[int]]:
    params: dict[int, set[int]] = {}
    for r in relocations:
        params.setdefault(r.insn, set()).add(r.param)
    return params


def hoist_store_pushes(insns: Sequence[isa.Instruction], uops: Sequence[isa.Uop], uop_base: int,
                       relocations: Sequence[object], uop_depth: int,
                       out_depth: int) -> tuple[list[isa.Instruction], int]:
    """``insns`` with each compute -> store push moved as early as is sound (module docstring), and
    how many pushes moved. ``uop_base`` is the micro-op image's first index as the LOAD UOPs'
    ``dram_base`` counts it; ``relocations`` name the tensor (parameter) of each DMA instruction."""
    insns = list(insns)
    try:
        footprints = _Footprints(insns, uops, uop_base, uop_depth, out_depth)
    except _Unknown:
        return insns, 0
    stages = [isa.stage_of(i) for i in insns]
    compute = [n for n, s in enumerate(stages) if s == Stage.COMPUTE]
    pushes = [n for n in compute if insns[n].push_next]
    pops = [n for n, s in enumerate(stages) if s == Stage.STORE and insns[n].pop_prev]
    if len(pushes) != len(pops) or not pushes:
        return insns, 0
    params = _params_by_insn(relocations)
    loaded = set()                                  # tensors some LOAD (any module) reads
    for n, insn in enumerate(insns):
        if insn.opcode == Opcode.LOAD and insn.memory_type != MemId.UOP:
            loaded |= params.get(n, set())
    store_insns = [n for n, s in enumerate(stages) if s == Stage.STORE]
    moved, prev = 0, -1
    for k, (push, pop) in enumerate(zip(pushes, pops)):
        end = pops[k + 1] if k + 1 < len(pops) else len(insns)
        group = [n for n in store_insns if pop <= n < end]
        reads = np.zeros(out_depth, dtype=bool)
        written_params: set[int] = set()
        unknown_target = False
        for n in group:
            s = insns[n]
            if s.x_size > 0 and s.y_size > 0:
                reads[np.arange(s.sram_base, s.sram_base + s.x_size * s.y_size) % out_depth] = True
                if n not in params:
                    unknown_target = True
                written_params |= params.get(n, set())
        # q: the latest compute instruction in (prev, push] that the group must follow (its push,
        # at its retire, still follows it), else the earliest one there
        candidates = [c for c in compute if prev < c <= push]
        q = candidates[0]
        for c in reversed(candidates):
            insn = insns[c]
            w = footprints.writes(c)
            if ((w is not None and reads[w].any())                     # the group reads what c writes
                    or (isinstance(insn, MemInsn) and insn.memory_type in _COMPUTE_DRAM_LOADS
                        and insn.x_size > 0)                            # a DRAM read the stores might overwrite
                    or (insn.pop_prev and (unknown_target or not loaded.isdisjoint(written_params)))):
                q = c                                                  # (a load's read ordered only through c)
                break
        if q != push:
            insns[push] = dataclasses.replace(insns[push], push_next=False)
            insns[q] = dataclasses.replace(insns[q], push_next=True)
            moved += 1
        prev = q
    return insns, moved


def sink_store_pops(insns: Sequence[isa.Instruction],
                    relocations: Sequence[object]) -> tuple[list[isa.Instruction], int]:
    """``insns`` with each store -> compute pop moved to the first compute instruction that needs it,
    and how many pops moved.

    A pop orders the compute instructions after it behind a store. The ones that need that are those
    that write OUT (a GEMM or ALU with micro-ops: the store reads OUT), push or pop a token of the
    store queue or push any token (a load or store they release would no longer follow the store),
    read DRAM that a store may write (a compute LOAD of ACC data from a tensor some STORE writes,
    or of an unknown tensor), or finish the program. The instructions before the first of them
    (typically a tile's bias load and requant register set, ahead of its bias reset) then run while
    the store drains; the pop moves onto that first instruction unless it already pops a store
    token, or is FINISH.
    """
    insns = list(insns)
    params = _params_by_insn(relocations)
    stored: set[int] = set()
    for n, insn in enumerate(insns):
        if insn.opcode == Opcode.STORE:
            stored |= params.get(n, set())
    compute = [n for n, insn in enumerate(insns) if isa.stage_of(insn) == Stage.COMPUTE]

    def needs(n: int) -> bool:
        insn = insns[n]
        if insn.opcode == Opcode.FINISH or insn.push_prev or insn.push_next or insn.pop_next:
            return True
        if isinstance(insn, (GemmInsn, AluInsn)):
            return insn.uop_end > insn.uop_bgn
        if isinstance(insn, MemInsn) and insn.memory_type in _COMPUTE_DRAM_LOADS and insn.x_size > 0:
            return n not in params or not stored.isdisjoint(params[n])
        return False

    moved = 0
    for k, a in enumerate(compute):
        if not insns[a].pop_next:
            continue
        first = insns[a]
        if first.push_prev or first.push_next or first.opcode == Opcode.FINISH or (
                isinstance(first, (GemmInsn, AluInsn)) and first.uop_end > first.uop_bgn):
            continue                                     # the popping instruction itself needs it
        if isinstance(first, MemInsn) and first.memory_type in _COMPUTE_DRAM_LOADS and first.x_size > 0 and (
                a not in params or not stored.isdisjoint(params[a])):
            continue
        b = next((c for c in compute[k + 1:] if needs(c)), None)
        if b is None or insns[b].pop_next or insns[b].opcode == Opcode.FINISH:
            continue
        insns[a] = dataclasses.replace(insns[a], pop_next=False)
        insns[b] = dataclasses.replace(insns[b], pop_next=True)
        moved += 1
    return insns, moved
