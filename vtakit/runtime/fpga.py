"""The FPGA host driver: runs a :class:`~vtakit.sim.program.Program` on the accelerator through its
AXI4-Lite register map (docs/registers.md) and one physically contiguous DMA buffer (docs/fpga_driver.md).

The driver talks to two small interfaces, so the same code runs on a board and in tests:

- :class:`MMIO`: ``read32(offset)`` / ``write32(offset, value)`` at a byte offset of the register map.
  On a PYNQ board, :class:`PynqMMIO` (``pynq.MMIO``); in tests,
  :class:`vtakit.sim.shell_sim.SimulatedShell` (AXI4-Lite transactions on the simulated shell).
- :class:`DmaBuffer`: ``phys_addr`` (the bus address the accelerator sees), ``array`` (a 1-D uint8
  numpy view of the CPU mapping), ``flush()`` (write CPU caches back before the device reads) and
  ``invalidate()`` (drop stale cache lines after the device wrote). On PYNQ, :class:`PynqBuffer`
  (``pynq.allocate``); in tests, :class:`vtakit.sim.shell_sim.SimBuffer`.

A program's DRAM addresses are byte offsets into its own image (from 0); the driver puts the image
at the start of the buffer and relocates every LOAD/STORE by the buffer's physical address, then
places the instruction stream after the image. ``pynq`` is imported only by :func:`open_pynq`,
:class:`PynqMMIO` and :class:`PynqBuffer`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

import numpy as np

from vtakit.errors import ConfigError, DeadlockError, DeviceError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.shell import REGISTERS, SHELL_ID, config_words
from vtakit.sim.program import Program

__all__ = ["MMIO", "DmaBuffer", "FPGADevice", "FPGAStats", "PynqMMIO", "PynqBuffer", "open_pynq", "REG",
           "relocate", "program_extent", "INSN_ALIGN", "DEFAULT_TIMEOUT"]

#: Register offsets by name (docs/registers.md).
REG = {reg.name: reg.offset for reg in REGISTERS}
CONTROL_START, CONTROL_DONE, CONTROL_RUNNING, CONTROL_DEADLOCK = 1, 2, 4, 8
#: Alignment of the instruction stream the driver places (the shell needs 16 bytes; 64 is a cache line).
INSN_ALIGN = 64
#: Seconds :meth:`FPGADevice.run` waits for done by default.
DEFAULT_TIMEOUT = 10.0
_COUNTERS = ("CYCLES", "BUSY_FETCH", "BUSY_LOAD", "BUSY_COMPUTE", "BUSY_STORE", "GEMM_UOPS", "ALU_UOPS")


@runtime_checkable
class MMIO(Protocol):
    """32-bit register access at a byte offset of the shell's AXI4-Lite window."""

    def read32(self, offset: int) -> int: ...

    def write32(self, offset: int, value: int) -> None: ...


@runtime_checkable
class DmaBuffer(Protocol):
    """A physically contiguous buffer shared by the CPU and the accelerator."""

    phys_addr: int
    array: np.ndarray       # 1-D uint8 view of the buffer as the CPU sees it

    def flush(self) -> None: ...

    def invalidate(self) -> None: ...


@dataclass
class FPGAStats:
    """The shell's counters after a run (docs/registers.md) and the host's view of it."""

    cycles: int
    busy_fetch: int
    busy_load: int
    busy_compute: int
    busy_store: int
    gemm_uops: int
    alu_uops: int
    insn_addr: int = 0          # physical address of the instruction stream
    insn_count: int = 0
    polls: int = 0              # CONTROL reads while waiting for done
    wall_seconds: float = 0.0

    @property
    def busy_cycles(self) -> dict[str, int]:
        return {"fetch": self.busy_fetch, "load": self.busy_load, "compute": self.busy_compute,
                "store": self.busy_store}

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "busy_cycles": self.busy_cycles}


def _elem_bytes(insn: isa.MemInsn, config: VTAConfig) -> int:
    if insn.opcode == isa.Opcode.STORE:
        return config.out_elem_bytes
    return {isa.MemId.UOP: config.uop_elem_bytes, isa.MemId.WGT: config.wgt_elem_bytes,
            isa.MemId.INP: config.inp_elem_bytes, isa.MemId.ACC: config.acc_elem_bytes,
            isa.MemId.ACC_8BIT: config.acc8_elem_bytes}.get(insn.memory_type, 0)


def _is_dma(insn: isa.Instruction) -> bool:
    return isinstance(insn, isa.MemInsn) and insn.opcode in (isa.Opcode.LOAD, isa.Opcode.STORE)


def program_extent(program: Program) -> int:
    """Bytes of DRAM the program touches from address 0: its image and every LOAD/STORE's span."""
    end = program.dram_size
    for insn in program.insns:
        if _is_dma(insn) and insn.x_size and insn.y_size:
            elem = _elem_bytes(insn, program.config)
            if elem:
                end = max(end, (insn.dram_base + (insn.y_size - 1) * insn.x_stride + insn.x_size) * elem)
    return end


def relocate(insns: list[isa.Instruction], config: VTAConfig, base: int) -> list[isa.Instruction]:
    """``insns`` with every LOAD/STORE's ``dram_base`` moved by ``base`` bytes (a multiple of each element size)."""
    if not base:
        return list(insns)
    out = []
    for insn in insns:
        if _is_dma(insn):
            elem = _elem_bytes(insn, config)
            if elem:
                if base % elem:
                    raise DeviceError(f"buffer physical address {base:#x} is not a multiple of the {elem}-byte "
                                      f"DRAM element of {isa.disasm(insn)}")
                insn = dataclasses.replace(insn, dram_base=insn.dram_base + base // elem)
        out.append(insn)
    return out


class FPGADevice:
    """The accelerator on an FPGA: ``mmio`` is the shell's register window, ``buffer`` its DMA memory.

    Construction reads the ID and CONFIG registers and raises :class:`~vtakit.errors.DeviceError`
    if the window is not a vtakit shell, :class:`~vtakit.errors.ConfigError` if its configuration
    differs from ``config``. ``clock`` and ``sleep`` (seconds) are for the poll loop; ``poll_interval``
    is the pause between CONTROL reads.
    """

    def __init__(self, mmio: MMIO, buffer: DmaBuffer, config: VTAConfig, *, timeout: float = DEFAULT_TIMEOUT,
                 poll_interval: float = 0.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, check: bool = True):
        if not isinstance(config, VTAConfig):
            raise ConfigError(f"config must be a VTAConfig, got {type(config).__name__}")
        array = getattr(buffer, "array", None)
        if not (isinstance(array, np.ndarray) and array.dtype == np.uint8 and array.ndim == 1):
            raise DeviceError(f"the DMA buffer's array must be a 1-D uint8 numpy array, got "
                              f"{type(array).__name__} {getattr(array, 'dtype', '')}{getattr(array, 'shape', '')}")
        phys = getattr(buffer, "phys_addr", None)
        if not isinstance(phys, (int, np.integer)) or phys < 0 or phys + array.size > 1 << 32 or phys % INSN_ALIGN:
            raise DeviceError(f"the DMA buffer's physical address {phys!r} must be a {INSN_ALIGN}-byte aligned "
                              "address with the whole buffer below 4 GiB (the accelerator's 32-bit bus)")
        self.mmio, self.buffer, self.config = mmio, buffer, config
        self.timeout, self.poll_interval = timeout, poll_interval
        self._clock, self._sleep = clock, sleep
        if check:
            self.check_hardware()

    @property
    def phys_addr(self) -> int:
        return int(self.buffer.phys_addr)

    @property
    def size(self) -> int:
        return self.buffer.array.size

    # ------------------------------------------------------------------ registers
    def check_hardware(self) -> None:
        """Raise unless the register window holds a vtakit shell of this device's configuration."""
        ident = self.mmio.read32(REG["ID"])
        if ident != SHELL_ID:
            raise DeviceError(f"register ID reads {ident:#010x}, not {SHELL_ID:#010x} (\"VTAK\"): the MMIO window "
                              "is not a vtakit shell (wrong base address or bitstream not loaded)")
        words = (self.mmio.read32(REG["CONFIG0"]), self.mmio.read32(REG["CONFIG1"]))
        expected = config_words(self.config)
        if words != expected:
            raise ConfigError(f"the bitstream's configuration (CONFIG0/1 = {words[0]:#x}/{words[1]:#x}) differs "
                              f"from {self.config.model} ({expected[0]:#x}/{expected[1]:#x}); rebuild the bitstream "
                              "or use the matching VTAConfig")

    def status(self) -> dict[str, bool]:
        """CONTROL's flags."""
        word = self.mmio.read32(REG["CONTROL"])
        return {"done": bool(word & CONTROL_DONE), "running": bool(word & CONTROL_RUNNING),
                "deadlock": bool(word & CONTROL_DEADLOCK)}

    def counters(self) -> FPGAStats:
        """The shell's counters as they are now."""
        values = [self.mmio.read32(REG[name]) for name in _COUNTERS]
        return FPGAStats(*values)

    # ------------------------------------------------------------------ runs
    def load(self, program: Program) -> tuple[int, int]:
        """Place ``program`` in the buffer (image at the start, relocated instructions after it) and
        flush; returns the instruction stream's physical address and count. Does not start."""
        if not isinstance(program, Program):
            raise DeviceError(f"FPGADevice runs a Program, got {type(program).__name__}")
        if program.config is not self.config and program.config != self.config:
            raise ConfigError(program.config.mismatch(self.config, f"program {program.name!r}", "this FPGA device"))
        if not program.insns:
            raise DeviceError(f"program {program.name!r} has no instructions")
        extent = program_extent(program)
        insns = relocate(program.insns, self.config, self.phys_addr)
        code = isa.encode(insns, self.config)
        offset = -(-extent // INSN_ALIGN) * INSN_ALIGN
        if offset + len(code) > self.size:
            raise DeviceError(f"program {program.name!r} needs {offset + len(code)} bytes (DRAM image and "
                              f"instruction stream), the DMA buffer has {self.size}")
        array = self.buffer.array
        program.place(array)
        array[program.dram_size:offset] = 0     # outputs beyond the image start from zero, as on a fresh Device
        array[offset:offset + len(code)] = np.frombuffer(code, dtype=np.uint8)
        self.buffer.flush()
        return self.phys_addr + offset, len(insns)

    def start(self, insn_addr: int, insn_count: int) -> None:
        """Launch ``insn_count`` instructions at physical ``insn_addr`` (inside the buffer, 16-byte aligned)."""
        if not isinstance(insn_addr, (int, np.integer)) or insn_addr % isa.INSN_BYTES:
            raise DeviceError(f"instruction address {insn_addr!r} is not {isa.INSN_BYTES}-byte aligned")
        if not isinstance(insn_count, (int, np.integer)) or not 0 < insn_count < 1 << 32:
            raise DeviceError(f"instruction count {insn_count!r} must be a positive 32-bit integer")
        lo, hi = self.phys_addr, self.phys_addr + self.size
        if not (lo <= insn_addr and insn_addr + insn_count * isa.INSN_BYTES <= hi):
            raise DeviceError(f"instruction stream of {insn_count} instructions at {insn_addr:#x} is outside the "
                              f"DMA buffer [{lo:#x}, {hi:#x})")
        if self.status()["running"]:
            raise DeviceError("the accelerator is still running a program (CONTROL.running is set); wait for done "
                              "before starting another")
        self.mmio.write32(REG["INSN_COUNT"], int(insn_count))
        self.mmio.write32(REG["INSN_ADDR"], int(insn_addr))
        self.mmio.write32(REG["CONTROL"], CONTROL_START)

    def wait(self, timeout: float | None = None) -> int:
        """Poll CONTROL until done; returns the number of polls. Raises :class:`~vtakit.errors.DeadlockError`
        when the shell reports a deadlock, :class:`~vtakit.errors.DeviceError` after ``timeout`` seconds."""
        timeout = self.timeout if timeout is None else timeout
        deadline = self._clock() + timeout
        polls = 0
        while True:
            word = self.mmio.read32(REG["CONTROL"])
            polls += 1
            if word & CONTROL_DONE:
                return polls
            if word & CONTROL_DEADLOCK:
                raise DeadlockError("the accelerator reports a deadlock (CONTROL.deadlock): every module is blocked "
                                    "and the program can never finish; run it on the rtl backend for the report")
            if self._clock() >= deadline:
                raise DeviceError(f"the accelerator did not finish within {timeout} s ({polls} polls of CONTROL); "
                                  "it is still running")
            if self.poll_interval:
                self._sleep(self.poll_interval)

    def run(self, program: Program, timeout: float | None = None) -> FPGAStats:
        """Place, flush, start, wait for done, invalidate; return the shell's counters.

        Results are in :attr:`buffer` at the program's own addresses (:meth:`read`)."""
        began = time.perf_counter()
        insn_addr, count = self.load(program)
        self.start(insn_addr, count)
        polls = self.wait(timeout)
        self.buffer.invalidate()
        stats = self.counters()
        stats.insn_addr, stats.insn_count, stats.polls = insn_addr, count, polls
        stats.wall_seconds = time.perf_counter() - began
        return stats

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        """A copy of ``nbytes`` at program address ``addr`` (a byte offset into the buffer)."""
        if addr < 0 or nbytes < 0 or addr + nbytes > self.size:
            raise DeviceError(f"range [{addr:#x}, {addr + nbytes:#x}) is outside the {self.size}-byte DMA buffer")
        return self.buffer.array[addr:addr + nbytes].copy()


# ---------------------------------------------------------------------- PYNQ adapters
def _pynq():
    try:
        import pynq
    except ImportError as exc:
        raise DeviceError("the PYNQ adapter needs the `pynq` package (on the board: `pip install pynq`); "
                          "for tests use vtakit.sim.shell_sim.SimulatedShell") from exc
    return pynq


class PynqMMIO:
    """:class:`MMIO` over ``pynq.MMIO(base_addr, length)`` (the shell's GP0 window)."""

    def __init__(self, base_addr: int, length: int = 0x1000):
        self._mmio = _pynq().MMIO(base_addr, length)

    def read32(self, offset: int) -> int:
        return int(self._mmio.read(offset)) & 0xFFFF_FFFF

    def write32(self, offset: int, value: int) -> None:
        self._mmio.write(offset, int(value) & 0xFFFF_FFFF)


class PynqBuffer:
    """:class:`DmaBuffer` over ``pynq.allocate((size,), np.uint8)`` (contiguous, CMA)."""

    def __init__(self, size: int):
        self._buf = _pynq().allocate(shape=(size,), dtype=np.uint8)
        self.phys_addr = int(self._buf.physical_address)
        self.array = np.asarray(self._buf).view(np.uint8).reshape(-1)

    def flush(self) -> None:
        self._buf.flush()

    def invalidate(self) -> None:
        self._buf.invalidate()

    def free(self) -> None:
        self._buf.freebuffer()


def open_pynq(config: VTAConfig, *, base_addr: int = 0x43C0_0000, buffer_size: int = 64 << 20,
              bitstream: str | None = None, **kwargs) -> FPGADevice:
    """The accelerator of a PYNQ board: loads ``bitstream`` (a .bit with its .hwh) when given, maps the
    shell at ``base_addr`` (GP0, as vtakit.hw.vivado's address map puts it) and allocates the buffer."""
    pynq = _pynq()
    if bitstream is not None:
        pynq.Overlay(bitstream)
    return FPGADevice(PynqMMIO(base_addr), PynqBuffer(buffer_size), config, **kwargs)
