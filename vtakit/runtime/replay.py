"""Running a self-contained program on fresh devices, and comparing backends on it.

Every backend must leave byte-identical DRAM for every program the functional simulator accepts
(docs/architecture.md §2). ``run_fresh`` runs one program on a new device sized for it and returns the final
bytes of the program's DRAM range; ``compare_backends`` does that for several backends, and when
one raises or disagrees it saves the program (for ``vtakit run-program``) and says where.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vtakit.errors import SimError, VtakitError
from vtakit.hw import isa
from vtakit.runtime.device import Device, default_alignment
from vtakit.sim.program import Program
from vtakit.sim.stats import RunStats

__all__ = ["run_fresh", "compare_backends"]

_PAGE = 4096


def run_fresh(program: Program, backend: str = "fsim", trace: str | Path | None = None) -> tuple[RunStats, np.ndarray]:
    """Run ``program`` on a new device; return its stats and DRAM bytes ``[0, program.dram_size)``."""
    need = program.dram_size + isa.INSN_BYTES * len(program.insns) + 2 * default_alignment(program.config)
    device = Device(program.config, backend, dram_size=-(-need // _PAGE) * _PAGE)
    stats = device.run(program, trace=trace)
    return stats, device.read(0, program.dram_size)


def compare_backends(program: Program, backends: tuple[str, ...] = ("fsim",),
                     save_dir: str | Path | None = None) -> dict[str, RunStats]:
    """Run ``program`` on each backend and require identical final DRAM.

    A backend error is re-raised, and a mismatch raised as :class:`SimError`, with the path of the
    saved program appended when ``save_dir`` is given.
    """
    results: dict[str, RunStats] = {}
    reference: tuple[str, np.ndarray] | None = None
    for backend in backends:
        try:
            stats, dram = run_fresh(program, backend)
        except VtakitError as exc:
            raise type(exc)(f"{exc}{_saved(program, save_dir)}") from exc
        results[backend] = stats
        if reference is None:
            reference = (backend, dram)
            continue
        diff = np.flatnonzero(dram != reference[1])
        if diff.size:
            raise SimError(f"program {program.name!r}: backend {backend!r} leaves DRAM different from "
                           f"{reference[0]!r} at {diff.size} bytes, first at {int(diff[0]):#x} "
                           f"({int(dram[diff[0]])} != {int(reference[1][diff[0]])}){_saved(program, save_dir)}")
    return results


def _saved(program: Program, save_dir: str | Path | None) -> str:
    if save_dir is None:
        return ""
    from vtakit.runtime.random_program import save_failure

    return f"; program saved to {save_failure(program, save_dir)} (replay: vtakit run-program FILE --backend B)"
