"""Relocatable accelerator programs: what the compiler emits and what a saved network carries.

The ``vta`` code generator produces a :class:`ProgramTemplate`: instructions whose DRAM addresses
are relative to the function's parameters, plus a micro-op image. :func:`instantiate` turns a
template into a runnable :class:`~vtakit.sim.program.Program` for concrete parameter addresses on
one :class:`~vtakit.runtime.device.Device`: it adds each parameter's base to the instructions
that address it, places the micro-op image in the device's DRAM and registers the program there,
so that it runs on the device's memory as it is at each run. This lives in the runtime because
both the compiler's modules and the graph executor (which may not import the compiler) relocate
templates, and a template is plain data that serialises with :meth:`ProgramTemplate.to_json`.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from vtakit.errors import ArgumentError, ProgramError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import MemId
from vtakit.runtime.builder import elem_bytes
from vtakit.sim.program import Program, Segment

__all__ = ["Relocation", "ProgramTemplate", "instantiate"]


@dataclass(frozen=True)
class Relocation:
    """Instruction ``insn`` addresses parameter ``param``: add its base in ``mem`` elements."""

    insn: int
    param: int
    mem: MemId


@dataclass
class ProgramTemplate:
    """Instructions and micro-ops with DRAM addresses relative to the parameters and the image."""

    insns: list[isa.Instruction]
    uops: list[isa.Uop]
    relocations: list[Relocation]
    uop_loads: list[int]               # LOAD UOP instructions: add the image base (in micro-ops)

    def disasm(self) -> str:
        lines = [f"{i:5d}  {isa.disasm(insn)}" for i, insn in enumerate(self.insns)]
        return "\n".join(lines)

    def to_json(self, config: VTAConfig) -> dict[str, Any]:
        """The template as JSON data (instructions and micro-ops in their binary encodings, base64)."""
        return {"insns": base64.b64encode(isa.encode(self.insns, config)).decode("ascii"),
                "uops": base64.b64encode(isa.encode_uops(self.uops, config)).decode("ascii"),
                "relocations": [[r.insn, r.param, int(r.mem)] for r in self.relocations],
                "uop_loads": list(self.uop_loads)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], config: VTAConfig) -> "ProgramTemplate":
        """The inverse of :meth:`to_json`; malformed data is a :class:`ProgramError`."""
        try:
            insns = isa.decode(base64.b64decode(data["insns"], validate=True), config)
            uops = isa.decode_uops(base64.b64decode(data["uops"], validate=True), config)
            relocations = [Relocation(int(i), int(p), MemId(int(m))) for i, p, m in data["relocations"]]
            uop_loads = [int(i) for i in data["uop_loads"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ProgramError(f"malformed program template: {exc}") from None
        bad = [r.insn for r in relocations if not 0 <= r.insn < len(insns)] + \
              [i for i in uop_loads if not 0 <= i < len(insns)]
        if bad:
            raise ProgramError(f"malformed program template: instruction index {bad[0]} outside its "
                               f"{len(insns)} instructions")
        return cls(insns, uops, relocations, uop_loads)


def _rebase(insn: isa.Instruction, base: int) -> isa.Instruction:
    return dataclasses.replace(insn, dram_base=insn.dram_base + base)


def instantiate(template: ProgramTemplate, device: Any, addresses: Sequence[int], name: str = "main",
                params: Sequence[str] = (), segments: Sequence[Segment] = ()) -> Program:
    """The program of ``template`` for parameters at byte ``addresses`` of ``device``'s DRAM,
    registered on ``device`` (its micro-op image placed there, freed with the program).

    ``segments`` are data the program carries (a replayable snapshot); the graph executor passes
    none, so the program runs on the device's memory as it is."""
    config = device.config
    insns = list(template.insns)
    for r in template.relocations:
        if not 0 <= r.param < len(addresses):
            raise ArgumentError(f"{name}: the template addresses parameter {r.param}, but {len(addresses)} "
                                "addresses were given")
        addr = addresses[r.param]
        size = elem_bytes(config, r.mem)
        if addr % size:
            what = params[r.param] if r.param < len(params) else f"parameter {r.param}"
            raise ArgumentError(f"{name}: argument {r.param} ({what}) at {addr:#x} is not aligned to its "
                                f"{size}-byte DMA element")
        insns[r.insn] = _rebase(insns[r.insn], addr // size)
    uop_bytes = isa.encode_uops(template.uops, config)
    region = device.allocator.alloc(len(uop_bytes)) if template.uops else None
    if region is not None:
        device.write(region, uop_bytes)
        for i in template.uop_loads:
            insns[i] = _rebase(insns[i], region // isa.UOP_BYTES)
    program = Program(config, insns, list(template.uops), region or 0, list(segments), name=name)
    device.register_program(program, region)
    return program
