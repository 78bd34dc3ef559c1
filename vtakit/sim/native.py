"""The simulators' compiled cores: which are built, whether to use them, and what they are given.

The cycle and functional simulators spend their time in per-instruction work (data movement,
race checks, timing recurrences). On short programs, Python's per-instruction overhead alone
exceeds what a simulator ~1000x faster than the RTL may spend, so that work also exists as C
extensions built at install (``vtakit/sim/csrc``, listed in pyproject.toml as optional: a build
without a C compiler still works, on the Python engines). The Python engines stay the reference:
the tests run both and compare.

A compiled core only runs programs it vouches for; anything else (an error of any kind, a trace,
an unusual instruction) makes it decline, leaving DRAM untouched, and the Python engine runs the
program and reports the error with its usual message. So results and errors never depend on
whether a core is built. Both cores answer Ctrl-C within about 50 ms: between slices of work they
let Python run its signal handlers, and a handler's exception (KeyboardInterrupt) ends the run,
DRAM as it was before it (the functional core releases the GIL while it runs, the timing core
holds it).

Environment: ``VTAKIT_NATIVE=0`` turns the compiled cores off (A/B measurements, debugging);
``VTAKIT_REQUIRE_NATIVE=1`` makes a missing core an ImportError instead of a silent fallback (CI
sets it, so a build that lost its extensions fails loudly).
"""

from __future__ import annotations

import importlib
import os
from functools import lru_cache
from types import ModuleType

import numpy as np

from vtakit.hw import isa
from vtakit.hw.config import VTAConfig

__all__ = ["core", "enabled", "FIELDS", "layout_table", "encoded_stream"]

#: Field ids of csrc/vta_insn.h (VTA_F_*), in its order.
FIELDS = ("opcode", "pop_prev", "pop_next", "push_prev", "push_next",
          "memory_type", "sram_base", "dram_base", "y_size", "x_size", "x_stride",
          "y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1",
          "reset_reg", "uop_bgn", "uop_end", "iter_out", "iter_in",
          "dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in",
          "wgt_factor_out", "wgt_factor_in", "alu_opcode", "use_imm", "imm")
_OPCODES = 8      # VTA_NOPCODES: every 3-bit opcode has a row (unused ones stay all zero)


def enabled() -> bool:
    """Whether compiled cores may be used (``VTAKIT_NATIVE`` is not ``0``); read at every call."""
    return os.environ.get("VTAKIT_NATIVE", "1") != "0"


@lru_cache(maxsize=None)
def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"vtakit.sim.{name}")
    except ImportError:
        if os.environ.get("VTAKIT_REQUIRE_NATIVE") == "1":
            raise ImportError(f"compiled core vtakit.sim.{name} is not built (VTAKIT_REQUIRE_NATIVE=1); "
                              "reinstall with a C compiler: pip install -e .") from None
        return None


def core(name: str) -> ModuleType | None:
    """The compiled core ``vtakit.sim.<name>`` (e.g. ``_fsim_core``), or None when this build lacks it
    or ``VTAKIT_NATIVE=0``."""
    return _load(name) if enabled() else None


@lru_cache(maxsize=None)
def layout_table(config: VTAConfig) -> bytes:
    """csrc/vta_insn.h's ``vta_layout`` for ``config``: int32 (offset, width, signed) per opcode and field."""
    table = np.zeros((_OPCODES, len(FIELDS), 3), dtype=np.int32)
    index = {name: k for k, name in enumerate(FIELDS)}
    for opcode in isa.Opcode:
        for field in isa.layout(opcode, config):
            if field.name in index:   # (GEMM's epilogue bit is read at its fixed place, isa.GEMM_EPILOGUE_BIT)
                table[int(opcode), index[field.name]] = (field.offset, field.width, int(field.signed))
    return table.tobytes()


def encoded_stream(insns: list, config: VTAConfig, encoded: bytes | None) -> bytes:
    """The encoded instruction stream of a launch: the bytes the runtime placed (``Launch.encoded``)
    when it passed them, else ``isa.encode(insns)``."""
    if encoded is not None and len(encoded) == isa.INSN_BYTES * len(insns):
        return encoded
    return isa.encode(insns, config)
