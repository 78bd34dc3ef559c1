"""The CPU backend (``target="llvm"``): a lowered PrimFunc in, a callable module out.

``build_llvm(func)`` generates LLVM IR (:mod:`.llvm_codegen`), optimises it at O3 for the host CPU
(or the CPU a target string names), JIT-compiles it and wraps it in a :class:`CPUModule` that is
called TVM-style with every argument, outputs included, as numpy arrays::

    mod = build_llvm(func)
    mod(a, b, c)            # c is written in place

Modules are cached by content (a fingerprint of the IR that distinguishes variables by identity,
not by name, plus the target), so rebuilding the same computation is free.

Intrinsics can be implemented by C functions or Python callbacks (:func:`register_extern`). An
exception raised by a Python callback cannot unwind through the compiled code, and ctypes would
only print it, so, as TVM does for ``call_packed`` (``TVMAPISetLastError`` + a -1 return code),
the callback runs inside a trampoline that catches it, records it against the call's status word
and sets the word; the compiled code returns as soon as it sees the word set, and the module call
re-raises the original exception. Nothing outlives the failed call: the module stays usable.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import statistics
import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Callable

import llvmlite.binding as llvm
import numpy as np

from vtakit.compiler import ir
from vtakit.compiler.backend import llvm_runtime as rt
from vtakit.compiler.targets import register_target
from vtakit.compiler.backend.llvm_codegen import generate
from vtakit.errors import ArgumentError, CompileError

__all__ = ["build_llvm", "CPUModule", "ArgumentError", "TimingResult", "fingerprint", "clear_cache",
           "llvm_target_builder", "register_extern"]


_ENTRY_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


@dataclass(frozen=True)
class TimingResult:
    """Seconds per call of each repeat (as TVM's ``time_evaluator`` reports them)."""

    results: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)


class CPUModule:
    """A compiled kernel: call it with one numpy array per parameter."""

    def __init__(self, func: ir.PrimFunc, target: rt.CPUTarget, llvm_ir: str, engine: llvm.ExecutionEngine,
                 entry: str, shape_vars: list[ir.Var], compile_seconds: float, checked: bool = False,
                 externs: tuple[Any, ...] = ()) -> None:
        self.func = func
        self.target = target
        self.llvm_ir = llvm_ir
        self.compile_seconds = compile_seconds
        self._engine = engine  # owns the machine code; keep it alive as long as the module
        self._entry = _ENTRY_TYPE(engine.get_function_address(entry))
        self._shape_vars = shape_vars
        self._checked = checked  # calls a Python callback: give each call a status word
        self._externs = externs  # the functions the machine code calls, alive while the module is
        self._written = _written_params(func)
        params = func.params
        # fast path of __call__: constant shapes, checked without building any message
        self._fixed = None if shape_vars or any(b.strides for b in params) else [
            (np.dtype(b.dtype), tuple(e.value for e in b.shape), b.data in self._written) for b in params]
        self._argv_type = ctypes.c_void_p * max(1, len(params))
        self._no_shapes = (ctypes.c_int64 * 1)()
        self._alias_pairs = [(j, k) for k in range(len(params)) for j in range(k)
                             if params[j].data in self._written or params[k].data in self._written]

    @property
    def name(self) -> str:
        return self.func.name

    def __repr__(self) -> str:
        return f"<CPUModule {self.name}({', '.join(b.name for b in self.func.params)}) for {self.target}>"

    def get_source(self, fmt: str = "ll") -> str:
        """The optimised LLVM IR (``"ll"``), the IR as generated (``"ll-raw"``) or assembly (``"asm"``)."""
        if fmt == "ll-raw":
            return self.llvm_ir
        if fmt not in ("ll", "asm"):
            raise CompileError(f"unknown source format {fmt!r}; expected 'll', 'll-raw' or 'asm'")
        with rt.LLVM_LOCK:
            module = llvm.parse_assembly(self.llvm_ir)
            rt.optimize(module, self.target)
            return str(module) if fmt == "ll" else rt.target_machine(self.target).emit_assembly(module)

    def __call__(self, *args: Any) -> None:
        pointers = self._fast_check(args)
        if pointers is None:
            pointers, shapes = self._check(args)
            shapev = (ctypes.c_int64 * max(1, len(shapes)))(*shapes)
        else:
            shapev = self._no_shapes
        if not self._checked:
            self._entry(self._argv_type(*pointers), shapev, None)  # ctypes releases the GIL for the call
            return
        status = ctypes.c_int32(0)
        if self._entry(self._argv_type(*pointers), shapev, ctypes.byref(status)):
            raise _take_failure(ctypes.addressof(status), self.name)

    def time_evaluator(self, number: int = 1, repeat: int = 3, min_repeat_ms: float = 0) -> Callable[..., TimingResult]:
        """A function that runs the module on its arguments ``repeat`` times ``number`` calls (more
        calls if a repeat would last less than ``min_repeat_ms``), as TVM's ``time_evaluator``."""
        if number < 1 or repeat < 1 or min_repeat_ms < 0:
            raise CompileError(f"time_evaluator needs number >= 1, repeat >= 1, min_repeat_ms >= 0; "
                               f"got {number}, {repeat}, {min_repeat_ms}")

        def evaluate(*args: Any) -> TimingResult:
            self(*args)  # checks the arguments once and warms up
            calls = number
            results = []
            for _ in range(repeat):
                while True:
                    start = time.perf_counter()
                    for _ in range(calls):
                        self(*args)
                    elapsed = time.perf_counter() - start
                    if elapsed * 1e3 >= min_repeat_ms:
                        break
                    calls = max(calls * 2, int(calls * min_repeat_ms / max(elapsed * 1e3, 1e-3)))
                results.append(elapsed / calls)
            return TimingResult(tuple(results))

        return evaluate

    def _fast_check(self, args: tuple[Any, ...]) -> list[int] | None:
        """The data pointers if every argument matches exactly, else None (then ``_check`` explains)."""
        fixed = self._fixed
        if fixed is None or len(args) != len(fixed):
            return None
        for (dtype, shape, written), a in zip(fixed, args):
            if type(a) is not np.ndarray or a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous \
                    or (written and not a.flags.writeable):
                return None
        pointers = [a.ctypes.data for a in args]
        for j, k in self._alias_pairs:
            if args[j].nbytes and args[k].nbytes and pointers[j] < pointers[k] + args[k].nbytes \
                    and pointers[k] < pointers[j] + args[j].nbytes:
                return None
        return pointers

    def _check(self, args: tuple[Any, ...]) -> tuple[list[int], list[int]]:
        params = self.func.params
        if len(args) != len(params):
            raise ArgumentError(f"{self.name} takes {len(params)} arguments "
                                f"({', '.join(b.name for b in params)}), got {len(args)}")
        bound: dict[ir.Var, int] = {}
        for k, (buf, arr) in enumerate(zip(params, args)):
            where = f"{self.name}: argument {k} ({buf.name!r})"
            if not isinstance(arr, np.ndarray):
                raise ArgumentError(f"{where} must be a numpy array, got {type(arr).__name__}")
            want = np.dtype(buf.dtype)
            if arr.dtype != want:
                raise ArgumentError(f"{where} has dtype {arr.dtype}, expected {want}")
            if arr.ndim != buf.ndim:
                raise ArgumentError(f"{where} has shape {arr.shape}, expected {_shape_str(buf)}")
            for axis, (extent, got) in enumerate(zip(buf.shape, arr.shape)):
                if isinstance(extent, ir.IntImm):
                    ok = extent.value == got
                elif isinstance(extent, ir.Var) and any(extent is v for v in self._shape_vars):
                    ok = bound.setdefault(extent, got) == got
                else:
                    raise ArgumentError(f"{where}: extent {extent} of axis {axis} must be a constant or a variable")
                if not ok:
                    raise ArgumentError(f"{where} has shape {arr.shape}, expected {_shape_str(buf, bound)}")
            if buf.strides:  # a strided view: constant strides must match, variables are bound
                got_strides = tuple(st // arr.itemsize if st % arr.itemsize == 0 else None for st in arr.strides)
                for e, got in zip(buf.strides, got_strides):
                    if isinstance(e, ir.Var) and any(e is v for v in self._shape_vars) and got is not None:
                        bound.setdefault(e, got)
                want_strides = tuple(_bound_value(e, bound) for e in buf.strides)
                if want_strides != got_strides:
                    expected = tuple(str(e) if w is None else w for e, w in zip(buf.strides, want_strides))
                    raise ArgumentError(f"{where} has element strides {got_strides}, expected {expected}")
            elif not arr.flags.c_contiguous:
                raise ArgumentError(f"{where} must be C-contiguous (use np.ascontiguousarray)")
            if buf.data in self._written and not arr.flags.writeable:
                raise ArgumentError(f"{where} is written by the kernel but the array is read-only")
        for k, a in enumerate(args):  # parameters are compiled as non-aliasing
            for j in range(k):
                written = params[k].data in self._written or params[j].data in self._written
                if written and a.size and args[j].size and np.may_share_memory(a, args[j]):
                    raise ArgumentError(f"{self.name}: arguments {j} ({params[j].name!r}) and {k} "
                                        f"({params[k].name!r}) overlap in memory and one is written; "
                                        "pass distinct arrays")
        missing = [v.name for v in self._shape_vars if v not in bound]
        if missing:
            raise ArgumentError(f"{self.name}: shape variables {missing} are not bound by any argument's shape")
        return [a.ctypes.data for a in args], [bound[v] for v in self._shape_vars]


def _bound_value(e: ir.PrimExpr, bound: dict[ir.Var, int]) -> int | None:
    if isinstance(e, ir.IntImm):
        return e.value
    return bound.get(e) if isinstance(e, ir.Var) else None


def _shape_str(buf: ir.Buffer, bound: dict[ir.Var, int] | None = None) -> str:
    bound = bound or {}
    return "(" + ", ".join(str(bound.get(e, e)) if isinstance(e, ir.Var) else str(e) for e in buf.shape) + \
        ("," if buf.ndim == 1 else "") + ")"


def _written_params(func: ir.PrimFunc) -> set[ir.Var]:
    """Data variables of the buffers the function stores to."""
    written: set[ir.Var] = set()
    ir.walk(func.body, lambda n: isinstance(n, ir.BufferStore) and written.add(n.buffer.data))
    return written


# ---------------------------------------------------------------------------- content cache
def fingerprint(func: ir.PrimFunc) -> str:
    """A digest of ``func`` that identifies variables and buffers by identity, not by name."""
    ids: dict[int, int] = {}
    out: list[str] = []

    def emit(node: Any) -> None:
        if isinstance(node, (ir.Var, ir.Buffer)):
            key = id(node)
            if key in ids:
                out.append(f"#{ids[key]}")
                return
            ids[key] = len(ids)
            out.append(f"#{ids[key]}=")
        if isinstance(node, (ir.PrimExpr, ir.Stmt, ir.Buffer, ir.PrimFunc)):
            out.append(type(node).__name__ + "(")
            for f in fields(node):
                out.append(f.name + ":")
                emit(getattr(node, f.name))
            out.append(")")
        elif isinstance(node, (tuple, list)):
            out.append("[")
            for item in node:
                emit(item)
                out.append(",")
            out.append("]")
        elif isinstance(node, dict):
            out.append("{")
            for key in sorted(node, key=repr):
                out.append(repr(key) + ":")
                emit(node[key])
            out.append("}")
        else:
            out.append(repr(node))
    emit(func)
    return hashlib.sha256("".join(out).encode()).hexdigest()


_cache: dict[str, CPUModule] = {}
_cache_lock = threading.Lock()

@dataclass(frozen=True)
class _Extern:
    keep_alive: Any  # the ctypes objects the address points into
    address: int
    checked: bool  # a Python callback behind a trampoline: takes the status word first


_externs: dict[str, _Extern] = {}  # intrinsic name -> its implementation
_failures: dict[int, BaseException] = {}  # status word address -> the first exception of that call


def register_extern(name: str, function: Any) -> None:
    """Implement the intrinsic ``name`` (``te.call_intrin(dtype, name, ...)``) with a C function:
    a ``ctypes`` function (``CFUNCTYPE`` callback or library symbol) or a raw address. Arguments are
    passed as the C scalars and pointers of the call (``access_ptr`` gives element pointers).

    A ``CFUNCTYPE`` callback written in Python may raise: the module call then stops at once and
    re-raises the exception (a raw address is taken to be C code that cannot raise)."""
    if not name.isidentifier():
        raise CompileError(f"extern name must be an identifier, got {name!r}")
    if isinstance(function, int):
        extern = _Extern(function, function, checked=False)
    elif callable(function) and hasattr(function, "restype"):  # a ctypes function pointer
        python_callable = _python_callable(function)
        if python_callable is None:
            extern = _Extern(function, ctypes.cast(function, ctypes.c_void_p).value or 0, checked=False)
        else:
            trampoline = _checked_trampoline(type(function), python_callable)
            extern = _Extern((function, trampoline), ctypes.cast(trampoline, ctypes.c_void_p).value or 0,
                             checked=True)
    else:
        raise CompileError(f"register_extern({name!r}): expected a ctypes function or an address, "
                           f"got {type(function).__name__}")
    if not extern.address:
        raise CompileError(f"register_extern({name!r}): the function has a null address")
    with _cache_lock:
        _externs[name] = extern


def _python_callable(function: Any) -> Any:
    """The Python callable behind a ctypes callback (``CFUNCTYPE(...)(f)``), else None (C code).
    ctypes keeps it in the callback's thunk, whose references are the argument converters, the
    callable and the result type."""
    thunk = (getattr(function, "_objects", None) or {}).get("0")
    if type(thunk).__name__ != "CThunkObject":
        return None
    referents = gc.get_referents(thunk)
    if len(referents) != 3 or not callable(referents[1]):
        raise CompileError(f"cannot find the Python function behind the ctypes callback {function!r}; "
                           "pass its address to register it as C code that never raises")
    return referents[1]


def _checked_trampoline(prototype: Any, python_callable: Callable[..., Any]) -> Any:
    """A ctypes callback with ``prototype``'s signature plus a leading status word: it calls
    ``python_callable`` unless the call has already failed, and records any exception it raises
    (or a result that ``prototype``'s result type cannot hold) instead of letting ctypes print it."""
    restype, argtypes = prototype._restype_, prototype._argtypes_ or ()
    failed_result = None if restype is None or restype is ctypes.c_void_p else 0

    def trampoline(status: int, *args: Any) -> Any:
        word = ctypes.c_int32.from_address(status)
        if word.value:  # an earlier callback of this call failed (maybe on another pool thread)
            return failed_result
        try:
            result = python_callable(*args)
            if restype is not None:
                restype(result)  # ctypes would convert it after we return, and only print a failure
            return result
        except BaseException as exc:  # noqa: BLE001 -- every exception is re-raised by the module call
            _failures.setdefault(status, exc)
            word.value = 1
            return failed_result

    return ctypes.CFUNCTYPE(restype, ctypes.c_void_p, *argtypes)(trampoline)


def _take_failure(status: int, module: str) -> BaseException:
    """The exception recorded against a failed call's status word (forgetting it)."""
    exc = _failures.pop(status, None)
    if exc is None:  # the compiled code reports failure only after a trampoline recorded one
        return CompileError(f"{module}: an extern callback failed without recording an exception")
    return exc


def _used_externs(func: ir.PrimFunc) -> tuple[dict[str, str], frozenset[str]]:
    """Registered intrinsics ``func`` calls -> unique C symbols bound to their addresses, and the
    names of those that are checked (Python callbacks)."""
    used: dict[str, str] = {}

    def visit(node: Any) -> None:
        if isinstance(node, ir.Call) and node.op in _externs and node.op not in used:
            extern = _externs[node.op]
            used[node.op] = f"vtakit_extern_{node.op}_{extern.address:x}{'_checked' if extern.checked else ''}"
            llvm.add_symbol(used[node.op], extern.address)
    ir.walk(func.body, visit)
    return used, frozenset(op for op in used if _externs[op].checked)


def _keep_alive(used: dict[str, str]) -> tuple[Any, ...]:
    """The objects behind the externs a module calls (re-registering a name must not free them)."""
    return tuple(_externs[op].keep_alive for op in used)


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def build_llvm(func: ir.PrimFunc, target: str | rt.CPUTarget = "llvm") -> CPUModule:
    """Compile ``func`` for a CPU (default: this host, all its features) and load it."""
    if not isinstance(func, ir.PrimFunc):
        raise CompileError(f"build_llvm expects an ir.PrimFunc, got {type(func).__name__}")
    cpu = rt.parse_target(target)
    externs, checked = _used_externs(func)
    key = hashlib.sha256(f"{fingerprint(func)}|{cpu.triple}|{cpu.cpu}|{cpu.features}|{cpu.vector_width}|{sorted(externs.items())}"
                         .encode()).hexdigest()
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    start = time.perf_counter()
    symbol = f"vtakit_{_c_name(func.name)}_{key[:12]}"
    with rt.LLVM_LOCK:
        data_layout = str(rt.target_machine(cpu).target_data)
    generated = generate(func, symbol, cpu.triple, data_layout, externs, checked, cpu.vector_width)
    with rt.LLVM_LOCK:
        try:
            module = llvm.parse_assembly(generated.llvm_ir)
            module.verify()
        except RuntimeError as exc:  # a code generator bug, reported with the IR that caused it
            raise CompileError(f"LLVM rejected the code generated for {func.name!r}: {exc}\n{func}") from None
        rt.optimize(module, cpu)
        engine = rt.jit(module, cpu)
    result = CPUModule(func, cpu, generated.llvm_ir, engine, generated.entry, generated.shape_vars,
                       time.perf_counter() - start, checked=bool(checked), externs=_keep_alive(externs))
    with _cache_lock:
        return _cache.setdefault(key, result)


def _c_name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name) or "func"


def llvm_target_builder(s: Any, args: Any, name: str, config: Any = None, target: str = "llvm") -> CPUModule:
    """``vtakit.build(s, args, target="llvm ...")``: lower the schedule (unless already lowered) and compile."""
    if isinstance(s, ir.PrimFunc):
        func = s
    else:
        from vtakit.compiler.lower import lower  # noqa: PLC0415 (lowering imports te, which is heavier)

        func = lower(s, args, name=name)
    return build_llvm(func, target)


register_target("llvm", llvm_target_builder)
