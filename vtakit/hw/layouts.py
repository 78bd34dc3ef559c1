"""``lib.data`` layouts of the instruction word, the micro-op and the queue entries.

They are generated from the ISA field table (:func:`vtakit.hw.isa.layout`), never written by
hand, so the RTL decodes exactly what the assembler encodes for every configuration. Enumerated
fields stay plain unsigned integers compared against :mod:`vtakit.hw.isa` enum values, which
keeps the layouts a pure function of the table.
"""

from __future__ import annotations

from functools import lru_cache

from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from vtakit.hw import isa
from vtakit.hw.config import INSN_BITS, UOP_BITS, VTAConfig

__all__ = ["insn_layout", "uop_layout", "command_layout", "INDEX_BITS"]

#: Width of the program index that travels with every instruction (retire events use it).
INDEX_BITS = 32


def _flexible(size: int, fields: tuple[isa.Field, ...]) -> data.FlexibleLayout:
    return data.FlexibleLayout(size, {
        f.name: data.Field(signed(f.width) if f.signed else unsigned(f.width), f.offset) for f in fields})


@lru_cache(maxsize=None)
def insn_layout(opcode: isa.Opcode, config: VTAConfig) -> data.FlexibleLayout:
    """The 128-bit instruction word seen as ``opcode``'s fields (LOAD and STORE share one)."""
    return _flexible(INSN_BITS, isa.layout(opcode, config))


@lru_cache(maxsize=None)
def uop_layout(config: VTAConfig) -> data.FlexibleLayout:
    """The 32-bit micro-op: dst_idx, src_idx, wgt_idx."""
    return _flexible(UOP_BITS, isa.uop_layout(config))


@lru_cache(maxsize=None)
def command_layout(config: VTAConfig) -> data.StructLayout:
    """A command-queue entry: the raw instruction word and its index in the program."""
    return data.StructLayout({"insn": unsigned(INSN_BITS), "index": unsigned(INDEX_BITS)})
