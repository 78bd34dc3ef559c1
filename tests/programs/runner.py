"""Run a corpus :class:`~vtakit.sim.program.Program` on a named backend, without the runtime.

The DRAM image is the program's own (segments and micro-op image) with the encoded instruction
stream placed after it, 16-byte aligned, exactly what ``Launch`` describes.
"""

from __future__ import annotations

import numpy as np

from vtakit.hw import isa
from vtakit.sim.backend import Launch, get_backend
from vtakit.sim.program import Program
from vtakit.sim.stats import RunStats

__all__ = ["run_program", "insn_address"]


def insn_address(program: Program) -> int:
    """Where the instruction stream goes: the first 16-byte boundary after the program's data."""
    return -(-program.dram_size // isa.INSN_BYTES) * isa.INSN_BYTES


def run_program(program: Program, backend: str = "fsim") -> tuple[np.ndarray, RunStats]:
    """Run ``program`` on ``backend``; returns the final DRAM image and the run's statistics."""
    execute = get_backend(backend)
    encoded = program.encoded_insns()     # cached by the program while its instructions are unchanged
    insn_addr = insn_address(program)
    dram = program.initial_dram(insn_addr + len(encoded))
    memoryview(dram)[insn_addr:insn_addr + len(encoded)] = encoded
    stats = execute(Launch(program.config, list(program.insns), dram, insn_addr, encoded=encoded))
    return dram, stats
