"""Hand assembly for the corpus: VTA's DRAM data layouts and a bump allocator for test programs.

The corpus is written at the instruction level, independent of the runtime's ``ProgramBuilder``,
so these helpers only pack numpy arrays into VTA's element layouts and place them in DRAM.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import Instruction, Uop
from vtakit.sim.program import Program, Segment

__all__ = ["Asm", "Region", "pack_inp", "pack_wgt", "pack_acc", "wrap_i32"]


def wrap_i32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.int64).astype(np.int32)


def pack_inp(a: np.ndarray, config: VTAConfig) -> np.ndarray:
    """[M, K] int8 -> INP elements [M/batch][K/block_in], each [batch][block_in]."""
    m, k = a.shape
    b, bi = config.batch, config.block_in
    return a.reshape(m // b, b, k // bi, bi).transpose(0, 2, 1, 3).astype(np.int8)


def pack_wgt(w: np.ndarray, config: VTAConfig) -> np.ndarray:
    """[N, K] int8 -> WGT elements [N/block_out][K/block_in], each [block_out][block_in]."""
    n, k = w.shape
    bo, bi = config.block_out, config.block_in
    return w.reshape(n // bo, bo, k // bi, bi).transpose(0, 2, 1, 3).astype(np.int8)


def pack_acc(c: np.ndarray, config: VTAConfig) -> np.ndarray:
    """[M, N] int32 -> ACC elements [M/batch][N/block_out], each [batch][block_out] (little-endian)."""
    m, n = c.shape
    b, bo = config.batch, config.block_out
    return c.reshape(m // b, b, n // bo, bo).transpose(0, 2, 1, 3).astype("<i4")


@dataclass
class Region:
    """A placed DRAM region: its byte address and the element size its instructions count in."""

    addr: int
    nbytes: int
    elem_bytes: int

    @property
    def elem(self) -> int:
        """The address in element units (what dram_base holds)."""
        assert self.addr % self.elem_bytes == 0
        return self.addr // self.elem_bytes


@dataclass
class Asm:
    """A program under construction: DRAM regions, micro-ops and instructions."""

    config: VTAConfig
    name: str = ""
    insns: list[Instruction] = field(default_factory=list)
    uops: list[Uop] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    top: int = 0

    def __post_init__(self) -> None:
        # The micro-op image sits at DRAM address 0, so micro-op k is DRAM element k (a LOAD UOP
        # of [begin, end) has dram_base=begin); data follows the room for a full micro-op cache.
        self.top = max(self.top, self.config.uop_depth * self.config.uop_elem_bytes)

    @property
    def align(self) -> int:
        c = self.config
        return max(c.inp_elem_bytes, c.wgt_elem_bytes, c.acc_elem_bytes, c.out_elem_bytes, 16)

    def _reserve(self, nbytes: int) -> int:
        addr = -(-self.top // self.align) * self.align
        self.top = addr + nbytes
        return addr

    def data(self, name: str, array: np.ndarray, elem_bytes: int) -> Region:
        """Place initial data (any dtype, bytes as laid out in memory)."""
        raw = np.ascontiguousarray(array).tobytes()
        addr = self._reserve(len(raw))
        self.segments.append(Segment(addr, raw, name))
        return Region(addr, len(raw), elem_bytes)

    def space(self, nbytes: int, elem_bytes: int) -> Region:
        """Reserve zero-initialised DRAM (an output area)."""
        return Region(self._reserve(nbytes), nbytes, elem_bytes)

    def emit(self, *insns: Instruction) -> None:
        self.insns.extend(insns)

    def uop_block(self, uops: list[Uop]) -> tuple[int, int]:
        """Append micro-ops; returns their [begin, end) positions in the image (= DRAM element address)."""
        begin = len(self.uops)
        self.uops.extend(uops)
        return begin, len(self.uops)

    def program(self) -> Program:
        return Program(config=self.config, insns=list(self.insns), uops=list(self.uops), uop_addr=0,
                       segments=list(self.segments), dram_size=self.top, name=self.name)
