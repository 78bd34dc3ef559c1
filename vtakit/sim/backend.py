"""The contract between the runtime and the simulators: a ``Launch`` in, ``RunStats`` out.

The runtime places the program (instruction stream, micro-op image, data segments) in the
device's DRAM image and hands the backend a :class:`Launch`; the backend executes it in place,
mutating ``dram``, and reports :class:`RunStats`. Backends register by name so that ``cycle`` and
``rtl`` slot in beside ``fsim`` without the runtime knowing them; heavy ones import lazily.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from vtakit.errors import VtakitError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import Instruction
from vtakit.sim.stats import RunStats

__all__ = ["Launch", "BACKENDS", "get_backend"]


@dataclass
class Launch:
    """One program run: the instructions, where they sit in DRAM, and the DRAM image itself."""

    config: VTAConfig
    insns: list[Instruction]
    dram: np.ndarray          # uint8, the whole device DRAM; mutated by the run
    insn_addr: int = 0        # byte address of the encoded instruction stream (read by fetch)
    trace: Path | None = None  # waveform (.vcd, rtl) or timeline (.json, cycle), when asked
    encoded: bytes | None = None  # the instruction stream as placed at insn_addr (None: encode insns when needed)


# name -> "module:function"; the function takes a Launch and returns RunStats.
BACKENDS: dict[str, str] = {
    "fsim": "vtakit.sim.fsim:execute",
    "cycle": "vtakit.sim.cycle:execute",
    "rtl": "vtakit.sim.rtl:execute",
    "verilator": "vtakit.sim.verilator:execute",
}


_modules: dict[str, tuple[str, object]] = {}   # name -> (its BACKENDS entry, imported module)


def get_backend(name: str) -> Callable[[Launch], RunStats]:
    """The execute function of backend ``name`` (its module is imported on first use)."""
    target = BACKENDS.get(name) if isinstance(name, str) else None
    if target is None:
        raise VtakitError(f"unknown backend {name!r}; expected one of {sorted(BACKENDS)}")
    module_name, func = target.split(":")
    hit = _modules.get(name)
    if hit is not None and hit[0] == target:      # re-registering a name under another module re-imports
        return getattr(hit[1], func)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise VtakitError(f"backend {name!r} is not available in this build ({module_name} missing)") from exc
        raise
    _modules[name] = (target, module)
    return getattr(module, func)
