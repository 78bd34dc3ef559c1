"""CPU kernels as relocatable object code: compile once, store on disk, load without compiling.

:mod:`.llvm` JIT-compiles a kernel into memory, which is gone with the process. A network build
wants more: its kernels stored in a persistent cache and in a saved module, and loaded later
without running LLVM's optimiser again. ``compile_object`` lowers a PrimFunc to an optimised
object file for a CPU target; ``load_object`` links such a file into the process (MCJIT resolves
the parallel runtime's symbols) and returns an :class:`ObjectKernel`, a callable that the graph
executor can also *bind* to fixed arrays once, so each later call is a single C call.

Kernels here have static shapes and call no Python externs (graph kernels never do); that is
checked when compiling.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable

import llvmlite.binding as llvm
import numpy as np

from vtakit.compiler import ir
from vtakit.compiler.backend import llvm_runtime as rt
from vtakit.compiler.backend.llvm_codegen import generate
from vtakit.errors import ArgumentError, CompileError

__all__ = ["KernelObject", "ObjectKernel", "compile_object", "load_object", "target_id"]

_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


@dataclass(frozen=True)
class KernelObject:
    """A compiled kernel: object code, its entry symbol, and its parameters (shape, dtype, written)."""

    symbol: str
    code: bytes
    params: tuple[tuple[tuple[int, ...], str, bool], ...]
    target: str  # target_id() of the CPU it was compiled for

    def to_json(self) -> dict[str, Any]:
        return {"symbol": self.symbol, "params": [[list(s), d, w] for s, d, w in self.params], "target": self.target}

    @classmethod
    def from_json(cls, meta: dict[str, Any], code: bytes) -> "KernelObject":
        return cls(meta["symbol"], code, tuple((tuple(s), d, bool(w)) for s, d, w in meta["params"]), meta["target"])


def target_id(target: str | rt.CPUTarget = "llvm") -> str:
    """The identity of a CPU target for caches and saved modules: triple, CPU name and features."""
    cpu = rt.parse_target(target)
    return f"{cpu.triple}|{cpu.cpu}|{cpu.features}"


def compile_object(func: ir.PrimFunc, symbol: str, target: str | rt.CPUTarget = "llvm") -> KernelObject:
    """Optimised object code for ``func`` (static shapes, no externs) with entry point ``symbol``."""
    cpu = rt.parse_target(target)
    params = []
    written = _written(func)
    for buf in func.params:
        if not all(isinstance(e, ir.IntImm) for e in buf.shape) or buf.strides:
            raise CompileError(f"{func.name}: parameter {buf.name!r} has a symbolic shape or strides; object "
                               "kernels take static, contiguous arrays")
        params.append((tuple(e.value for e in buf.shape), np.dtype(buf.dtype).name, buf.data in written))
    with rt.LLVM_LOCK:
        data_layout = str(rt.target_machine(cpu).target_data)
    generated = generate(func, symbol, cpu.triple, data_layout, {}, frozenset())
    with rt.LLVM_LOCK:
        try:
            module = llvm.parse_assembly(generated.llvm_ir)
            module.verify()
        except RuntimeError as exc:
            raise CompileError(f"LLVM rejected the code generated for {func.name!r}: {exc}") from None
        rt.optimize(module, cpu)
        code = rt.target_machine(cpu).emit_object(module)
    return KernelObject(generated.entry, bytes(code), tuple(params), target_id(cpu))


def _written(func: ir.PrimFunc) -> set[ir.Var]:
    written: set[ir.Var] = set()
    ir.walk(func.body, lambda n: isinstance(n, ir.BufferStore) and written.add(n.buffer.data))
    return written


_load_lock = threading.Lock()


def load_object(kernel: KernelObject) -> "ObjectKernel":
    """Link ``kernel``'s object code into this process (it must have been compiled for this CPU)."""
    host = target_id()
    if kernel.target != host:
        raise CompileError(f"kernel {kernel.symbol} was compiled for {kernel.target!r}, this CPU is {host!r}")
    with _load_lock, rt.LLVM_LOCK:
        engine = rt.jit(llvm.parse_assembly(""), rt.host_target())
        try:
            engine.add_object_file(llvm.ObjectFileRef.from_data(kernel.code))
            engine.finalize_object()
            address = engine.get_function_address(kernel.symbol)
        except RuntimeError as exc:
            raise CompileError(f"cannot load the object code of kernel {kernel.symbol}: {exc}") from None
    if not address:
        raise CompileError(f"the object code of kernel {kernel.symbol} has no entry symbol {kernel.symbol!r}")
    return ObjectKernel(kernel, engine, _ENTRY(address))


class ObjectKernel:
    """A loaded kernel: call it with one C-contiguous array per parameter, or ``bind`` arrays once."""

    def __init__(self, kernel: KernelObject, engine: Any, entry: Any) -> None:
        self.kernel = kernel
        self._engine = engine  # owns the machine code
        self._entry = entry
        self._no_shapes = (ctypes.c_int64 * 1)()

    @property
    def name(self) -> str:
        return self.kernel.symbol

    def __repr__(self) -> str:
        return f"<ObjectKernel {self.name} ({len(self.kernel.params)} params)>"

    def _pointers(self, arrays: tuple[np.ndarray, ...]) -> list[int]:
        params = self.kernel.params
        if len(arrays) != len(params):
            raise ArgumentError(f"{self.name} takes {len(params)} arrays, got {len(arrays)}")
        for k, ((shape, dtype, written), a) in enumerate(zip(params, arrays)):
            if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype.name != dtype \
                    or not a.flags.c_contiguous or (written and not a.flags.writeable):
                got = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
                raise ArgumentError(f"{self.name}: argument {k} must be a C-contiguous{' writeable' * written} "
                                    f"{dtype}{list(shape)} array, got {got}")
        return [a.ctypes.data for a in arrays]

    def __call__(self, *arrays: np.ndarray) -> None:
        self._entry((ctypes.c_void_p * max(1, len(arrays)))(*self._pointers(arrays)), self._no_shapes, None)

    def bind(self, *arrays: np.ndarray) -> Callable[[], Any]:
        """A no-argument callable running the kernel on ``arrays`` (which must outlive it)."""
        argv = (ctypes.c_void_p * max(1, len(arrays)))(*self._pointers(arrays))
        call = functools.partial(self._entry, argv, self._no_shapes, None)
        call.keepalive = (self, arrays)  # type: ignore[attr-defined]
        return call
