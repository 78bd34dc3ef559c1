"""``Device``: one accelerator with its DRAM, as the host sees it (docs/architecture.md §4).

This is VTA's driver API (``VTAMemAlloc``, ``VTAMemCopyFromHost``, ``VTADeviceRun``) in Python:
a DRAM image the simulators execute in place, an allocator handing out physical addresses,
device arrays that copy host data in and out, and ``run`` that places a program (instruction
stream, micro-op image, data segments) and launches it on a pluggable backend.
"""

from __future__ import annotations

import math
import time
import weakref
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from vtakit.errors import AllocationError, ProgramError, VtakitError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.runtime.allocator import Allocator
from vtakit.sim.backend import BACKENDS, Launch, get_backend
from vtakit.sim.program import MAX_DRAM_SIZE, Program
from vtakit.sim.stats import RunStats

__all__ = ["Device", "DeviceArray", "DEFAULT_DRAM_SIZE", "default_alignment", "dram_dtype"]

DEFAULT_DRAM_SIZE = 32 << 20   # VTA's driver caps one CMA buffer at 32 MiB (VTA_MAX_XFER)
_MIN_ALIGNMENT = 64


def default_alignment(config: VTAConfig) -> int:
    """An alignment that suits every element size of ``config`` (they are all powers of two)."""
    return max(_MIN_ALIGNMENT, config.inp_elem_bytes, config.wgt_elem_bytes, config.acc_elem_bytes,
               config.out_elem_bytes, config.uop_elem_bytes)


def dram_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as a numpy dtype that can live in DRAM (numeric); an :class:`AllocationError` otherwise."""
    try:
        dtype = np.dtype(dtype)
    except TypeError as exc:
        raise AllocationError(f"dtype {dtype!r} is not a numpy data type") from exc
    if dtype.kind not in "biuf":
        raise AllocationError(f"dtype {dtype} cannot live in device DRAM; expected a numeric type (int8, int32, ...)")
    return dtype


class DeviceArray:
    """An n-dimensional array in device DRAM at physical address ``phys_addr``."""

    def __init__(self, device: "Device", phys_addr: int, shape: tuple[int, ...], dtype: np.dtype,
                 name: str = "") -> None:
        self.device = device
        self.phys_addr = phys_addr
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self._finalizer = weakref.finalize(self, device._allocator.free, phys_addr)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def freed(self) -> bool:
        return not self._finalizer.alive

    def _check_live(self) -> None:
        if self.freed:
            raise AllocationError(f"device array {self.name or ''} at {self.phys_addr:#x} was freed")

    def _bytes(self) -> np.ndarray:
        return self.device.dram[self.phys_addr:self.phys_addr + self.nbytes]

    def numpy(self) -> np.ndarray:
        """A host copy of the array's current device contents."""
        self._check_live()
        return self._bytes().view(self.dtype).reshape(self.shape).copy()

    def copyfrom(self, data: Any) -> "DeviceArray":
        """Copy host data (same shape; converted to this dtype) into the device array."""
        self._check_live()
        host = np.asarray(data)
        if host.shape != self.shape:
            raise VtakitError(f"cannot copy an array of shape {host.shape} into device array "
                              f"{self.name or hex(self.phys_addr)} of shape {self.shape}")
        self._bytes()[:] = np.ascontiguousarray(host, dtype=self.dtype).reshape(-1).view(np.uint8)
        return self

    def free(self) -> None:
        """Return the memory to the device; a second free is an ``AllocationError``."""
        if self.freed:
            raise AllocationError(f"double free of device array {self.name or ''} at {self.phys_addr:#x}")
        self._finalizer()

    def __repr__(self) -> str:
        state = " freed" if self.freed else ""
        return (f"DeviceArray({self.name + ' ' if self.name else ''}{self.shape} {self.dtype} "
                f"@ {self.phys_addr:#x}{state})")


class Device:
    """An accelerator instance: configuration, DRAM image, allocator and a backend to run on."""

    def __init__(self, config: VTAConfig | None = None, backend: str = "fsim",
                 dram_size: int = DEFAULT_DRAM_SIZE) -> None:
        self.config = VTAConfig() if config is None else config
        if not isinstance(self.config, VTAConfig):
            raise VtakitError(f"config must be a VTAConfig, got {type(self.config).__name__}")
        if backend not in BACKENDS:
            raise VtakitError(f"unknown backend {backend!r}; expected one of {sorted(BACKENDS)}")
        self.backend = backend
        self.alignment = default_alignment(self.config)
        if not isinstance(dram_size, (int, np.integer)) or isinstance(dram_size, bool) \
                or not 0 < dram_size <= MAX_DRAM_SIZE:
            raise AllocationError(f"DRAM size {dram_size!r} must be positive: an integer number of bytes, at most "
                                  f"{MAX_DRAM_SIZE} (the 32-bit DRAM address space)")
        self._allocator = Allocator(int(dram_size), self.alignment)
        try:
            self.dram = np.zeros(int(dram_size), dtype=np.uint8)
        except MemoryError as exc:
            raise AllocationError(f"cannot reserve {dram_size} bytes of host memory for the device DRAM") from exc
        self._resident: dict[int, weakref.ref] = {}   # id -> programs built against this device
        # The last bare instruction list / stream run, wrapped in a Program: re-running the same
        # instructions reuses its cached encoding (and a stream's decoding).
        self._bare: Program | None = None
        self._stream: tuple[bytes, Program] | None = None

    @property
    def dram_size(self) -> int:
        return self.dram.size

    @property
    def allocator(self) -> Allocator:
        return self._allocator

    # ------------------------------------------------------------------ memory
    def empty(self, shape: int | Sequence[int], dtype: Any = np.int8, *, alignment: int | None = None,
              name: str = "") -> DeviceArray:
        """An uninitialised device array."""
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape):
            raise AllocationError(f"array shape {shape} must be a tuple of integers")
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise AllocationError(f"array shape {shape} has a negative dimension")
        dtype = dram_dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize     # Python ints: no overflow to a small size
        addr = self._allocator.alloc(nbytes, alignment)
        return DeviceArray(self, addr, shape, dtype, name)

    def array(self, data: Any, dtype: Any = None, *, alignment: int | None = None, name: str = "") -> DeviceArray:
        """A device array holding a copy of ``data``."""
        host = np.asarray(data, dtype=dtype)
        return self.empty(host.shape, host.dtype, alignment=alignment, name=name).copyfrom(host)

    def free(self, array: DeviceArray) -> None:
        if array.device is not self:
            raise AllocationError(f"{array!r} belongs to another device")
        array.free()

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        """A copy of ``nbytes`` DRAM bytes at ``addr``."""
        self._check_range(addr, nbytes)
        return self.dram[addr:addr + nbytes].copy()

    def write(self, addr: int, data: bytes | np.ndarray) -> None:
        """Write raw bytes into DRAM at ``addr``."""
        raw = np.frombuffer(bytes(data), dtype=np.uint8) if isinstance(data, (bytes, bytearray)) \
            else np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self._check_range(addr, raw.size)
        self.dram[addr:addr + raw.size] = raw

    def _check_range(self, addr: int, nbytes: int) -> None:
        if addr < 0 or nbytes < 0 or addr + nbytes > self.dram_size:
            raise AllocationError(f"DRAM range [{addr:#x}, {addr + nbytes:#x}) is outside the device's "
                                  f"{self.dram_size:#x} bytes")

    # ------------------------------------------------------------------ programs
    def _as_program(self, program: Program | Sequence[isa.Instruction] | bytes) -> Program:
        if isinstance(program, Program):
            if program.config is not self.config and program.config != self.config:
                raise ProgramError(program.config.mismatch(self.config, f"program {program.name!r}", "this device"))
            return program
        if isinstance(program, (bytes, bytearray, memoryview)):
            data = bytes(program)
            if self._stream is None or self._stream[0] != data:
                self._stream = (data, Program(self.config, isa.decode(data, self.config)))
            return self._stream[1]
        if isinstance(program, (list, tuple)):
            if self._bare is None:
                self._bare = Program(self.config, list(program))
            else:
                self._bare.insns = list(program)   # the encoding is reused only for the very same instructions
            return self._bare
        raise ProgramError(f"cannot run a {type(program).__name__}; expected a Program, a list of "
                           "instructions or an encoded instruction stream (bytes)")

    def register_program(self, program: Program, uop_addr: int | None = None) -> None:
        """Record that ``program`` was built against this device (``ProgramBuilder(config, device)``).

        Its segments are snapshots of this device's arrays, so runs use the arrays' current
        contents instead; its micro-op image, allocated at ``uop_addr``, is freed with the program.
        """
        key = id(program)
        self._resident[key] = weakref.ref(program)
        weakref.finalize(program, self._forget, key, uop_addr)

    def _forget(self, key: int, uop_addr: int | None) -> None:
        self._resident.pop(key, None)
        if uop_addr is not None:
            self._allocator.free(uop_addr)

    def _is_resident(self, program: Program) -> bool:
        ref = self._resident.get(id(program))
        return ref is not None and ref() is program

    def _place(self, program: Program) -> list[int]:
        """Put the program's DRAM image in place; return the temporary blocks to free after the run."""
        if self._is_resident(program):
            for seg in program.segments:
                if self._allocator.owner(seg.addr, len(seg.data)) is None:
                    raise AllocationError(f"program {program.name!r} reads the device array at {seg.addr:#x} "
                                          f"({seg.name or 'unnamed'}), which has been freed")
            return []
        if not program.segments and not program.uops and program.dram_size == 0:
            return []                     # bare instructions: they run on DRAM as it is
        if program.dram_size > self.dram_size:
            raise AllocationError(f"program {program.name!r} needs {program.dram_size} bytes of DRAM, the device "
                                  f"has {self.dram_size}")
        try:
            self._allocator.reserve(0, program.dram_size)
        except AllocationError as exc:
            raise AllocationError(f"program {program.name!r} brings its own DRAM layout [0, {program.dram_size:#x}) "
                                  f"but this device has buffers there; run it on a fresh Device ({exc})") from exc
        program.place(self.dram)
        return [0]

    def run(self, program: Program | Sequence[isa.Instruction] | bytes, trace: str | Path | None = None) -> RunStats:
        """Place ``program`` in DRAM, run it on this device's backend and return its statistics.

        A program built against this device (``ProgramBuilder(config, device)``) runs on the
        device's arrays as they are now; any other program is placed at the addresses it was
        built for, which must be free.
        """
        program = self._as_program(program)
        execute = get_backend(self.backend)
        temporary = self._place(program)
        try:
            code = program.encoded_insns()     # cached by the program while its instructions are unchanged
            insn_addr = self._allocator.alloc(len(code))
            temporary.append(insn_addr)
            memoryview(self.dram)[insn_addr:insn_addr + len(code)] = code
            launch = Launch(self.config, list(program.insns), self.dram, insn_addr,
                            None if trace is None else Path(trace), code)
            start = time.perf_counter()
            stats = execute(launch)
            elapsed = time.perf_counter() - start
        finally:
            for addr in temporary:
                self._allocator.free(addr)
        if not stats.sim_seconds:
            stats.sim_seconds = elapsed
        return stats

    def __repr__(self) -> str:
        return (f"Device({self.config.model}, backend={self.backend!r}, dram={self.dram_size} bytes, "
                f"{self._allocator.used} used)")

