"""The vtakit exception hierarchy (docs/architecture.md §1).

Every error a user can reach derives from :class:`VtakitError`, so callers can catch the
whole family, and each message names the offending value and what was expected.
"""

from __future__ import annotations

__all__ = [
    "VtakitError",
    "ConfigError",
    "ISAError",
    "SimError",
    "DeadlockError",
    "MemoryAccessError",
    "RaceError",
    "ProgramError",
    "AllocationError",
    "ScheduleError",
    "CompileError",
    "ArgumentError",
    "GraphError",
    "UnsupportedOperatorError",
    "TuningError",
    "DSEError",
    "DeviceError",
    "EmulationError",
    "SharedMemoryRaceError",
    "GlobalMemoryRaceError",
    "DivergentBarrierError",
]


class VtakitError(Exception):
    """Base class of every error raised by vtakit."""


class ConfigError(VtakitError):
    """A VTA configuration is malformed or cannot be realised."""


class ISAError(VtakitError):
    """An instruction or micro-op cannot be encoded or decoded."""


class SimError(VtakitError):
    """A simulator rejected a program while running it."""


class DeadlockError(SimError):
    """No module can make progress and the program has not finished."""


class MemoryAccessError(SimError):
    """An SRAM or DRAM access is out of range, or reads uninitialised data."""


class RaceError(SimError):
    """Two modules access the same location without a happens-before order."""


class ProgramError(SimError):
    """A program is malformed: illegal flags or pairs, FINISH rules, unbalanced tokens, bad files."""


class AllocationError(VtakitError):
    """Device memory cannot be allocated or freed as asked."""


class ScheduleError(VtakitError):
    """A schedule primitive was applied in a way that cannot be honoured."""


class CompileError(VtakitError):
    """Lowering or code generation failed."""


class ArgumentError(VtakitError, ValueError):
    """A built module was called with arguments that do not match its parameters."""


class GraphError(VtakitError):
    """A network graph (or the model it was imported from) is malformed or cannot be compiled."""


class UnsupportedOperatorError(GraphError):
    """A model uses operators vtakit does not support; the message lists every one of them at once."""


class TuningError(VtakitError):
    """A tuning task, config space, log or measurement farm cannot be used as asked."""


class DSEError(TuningError):
    """The co-design search (vtakit.dse) cannot run as asked: an unknown network, nothing in the
    space fits the part's budget (the message names the binding resource), an unreadable log."""


class DeviceError(VtakitError):
    """The FPGA driver (vtakit.runtime.fpga) cannot do as asked: the accelerator is busy or did not
    finish in time, an instruction address lies outside the DMA buffer or is misaligned, the
    register window is not a vtakit shell, or the board adapter's ``pynq`` is missing; or a cuda module
    is called where no CUDA driver or GPU exists (``mod.emulate`` runs it on the CPU instead)."""


class EmulationError(SimError):
    """The GPU emulator found a kernel whose behaviour on a real GPU is undefined."""


class SharedMemoryRaceError(EmulationError):
    """Two threads of a block touch the same shared-memory element between two barriers, one writing."""


class GlobalMemoryRaceError(EmulationError):
    """Two threads of one kernel launch write the same global-memory element with nothing ordering
    the writes (different blocks, or one block with no barrier between them)."""


class DivergentBarrierError(EmulationError):
    """A barrier is reached by some threads of a block but not others (or at different barriers)."""
