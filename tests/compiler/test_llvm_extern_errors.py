"""Exceptions raised by Python extern callbacks reach the caller of a compiled CPU module.

ctypes prints and swallows an exception raised inside a callback; the CPU backend routes it back
(a per-call status word, as TVM's last-error + return code) so ``mod(...)`` re-raises it, the
kernel stops at the failing call, and the module stays usable.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler.backend import register_extern
from vtakit.compiler.backend.llvm_codegen import STACK_LIMIT

_UNARY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32)


class Boom(RuntimeError):
    pass


class Callback:
    """``f(x) = 3 x + 1``, raising :class:`Boom` on the call numbered ``fail_at`` (1-based)."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail_at: int | None = None
        self.result: object = None  # if set, returned instead of 3 x + 1

    def __call__(self, x: int) -> object:
        self.calls += 1
        if self.calls == self.fail_at:
            raise Boom(f"callback failed on x={x}")
        return 3 * x + 1 if self.result is None else self.result


def _register(name: str) -> tuple[Callback, object]:
    cb = Callback()
    cfunc = _UNARY(cb)
    register_extern(name, cfunc)
    return cb, cfunc  # the caller keeps the ctypes object alive too, as a user would


def _elementwise(name: str, n: int, kind: str = "serial"):
    A = te.placeholder((n,), "int32", name="A")
    B = te.compute((n,), lambda i: te.call_intrin("int32", name, A[i]), name="B")
    s = te.create_schedule(B.op)
    if kind == "parallel":
        s[B].parallel(B.op.axis[0])
    return vtakit.build(s, [A, B], target="llvm")


def test_exception_propagates_and_module_stays_usable():
    cb, _keep = _register("ext_err_serial")
    mod = _elementwise("ext_err_serial", 64)
    a = np.arange(64, dtype="int32")
    b = np.zeros(64, "int32")
    cb.fail_at = 10
    with pytest.raises(Boom, match="x=9"):
        mod(a, b)
    assert cb.calls == 10  # the kernel stopped at the failing call
    assert not b[10:].any()  # and wrote nothing after it
    cb.calls, cb.fail_at = 0, None
    mod(a, b)
    np.testing.assert_array_equal(b, 3 * a + 1)
    cb.calls, cb.fail_at = 0, 1  # fails again on the next call: each call reports its own failure
    with pytest.raises(Boom, match="x=0"):
        mod(a, b)


def test_exception_in_parallel_loop_propagates():
    cb, _keep = _register("ext_err_parallel")
    mod = _elementwise("ext_err_parallel", 4096, kind="parallel")
    a = np.arange(4096, dtype="int32")
    b = np.zeros(4096, "int32")
    cb.fail_at = 100
    with pytest.raises(Boom):
        mod(a, b)
    assert cb.calls < 4096  # every pool thread stops at its next callback
    cb.calls, cb.fail_at = 0, None
    mod(a, b)
    np.testing.assert_array_equal(b, 3 * a + 1)


def test_result_the_prototype_cannot_hold_is_reported():
    cb, _keep = _register("ext_err_result")
    mod = _elementwise("ext_err_result", 8)
    cb.result = "not an int"
    with pytest.raises(TypeError, match="'str' object cannot be interpreted as an integer"):
        mod(np.arange(8, dtype="int32"), np.zeros(8, "int32"))
    cb.result = None
    b = np.zeros(8, "int32")
    mod(np.arange(8, dtype="int32"), b)
    np.testing.assert_array_equal(b, 3 * np.arange(8) + 1)


def test_failure_inside_heap_allocation_returns_cleanly():
    """A heap-allocated intermediate (larger than the stack limit) between the callback's stage and
    the output: the early return frees it and later calls still work."""
    cb, _keep = _register("ext_err_heap")
    n = STACK_LIMIT // 4 + 256
    A = te.placeholder((n,), "int32", name="A")
    T = te.compute((n,), lambda i: te.call_intrin("int32", "ext_err_heap", A[i]), name="T")
    B = te.compute((n,), lambda i: T[i] * 2, name="B")
    s = te.create_schedule(B.op)
    mod = vtakit.build(s, [A, B], target="llvm")
    a = np.arange(n, dtype="int32")
    b = np.zeros(n, "int32")
    cb.fail_at = n // 2
    with pytest.raises(Boom):
        mod(a, b)
    assert cb.calls == n // 2
    cb.calls, cb.fail_at = 0, None
    mod(a, b)
    np.testing.assert_array_equal(b, (3 * a + 1) * 2)


def test_c_library_function_is_called_unchecked():
    """A C symbol (no Python behind it) is called directly, without the status word."""
    libc = ctypes.CDLL(None)
    libc.abs.restype, libc.abs.argtypes = ctypes.c_int, [ctypes.c_int]
    register_extern("ext_libc_abs", libc.abs)
    mod = _elementwise("ext_libc_abs", 16)
    a = np.arange(-8, 8, dtype="int32")
    b = np.zeros(16, "int32")
    mod(a, b)
    np.testing.assert_array_equal(b, np.abs(a))
    assert "ext_libc_abs" in mod.get_source("ll-raw") and "_checked" not in mod.get_source("ll-raw")


def test_module_keeps_its_callback_alive_when_the_name_is_registered_again():
    import gc

    cb, keep = _register("ext_rebound")
    mod = _elementwise("ext_rebound", 8)
    del keep
    register_extern("ext_rebound", _UNARY(lambda x: -x))   # the old callback's last reference elsewhere
    gc.collect()
    b = np.zeros(8, "int32")
    mod(np.arange(8, dtype="int32"), b)
    np.testing.assert_array_equal(b, 3 * np.arange(8) + 1)
    fresh = _elementwise("ext_rebound", 8)                  # a new build uses the new function
    fresh(np.arange(8, dtype="int32"), b)
    np.testing.assert_array_equal(b, -np.arange(8))


def test_callback_in_a_parallel_task_may_run_a_parallel_kernel():
    """A pool thread's callback calling another parallel kernel runs that launch inline (waiting for
    the pool would deadlock: the outer launch waits for this very task); its failure propagates
    through both modules."""
    import threading

    inner_cb, _keep_inner = _register("ext_nested_inner")
    inner = _elementwise("ext_nested_inner", 64, kind="parallel")
    inner_a = np.arange(64, dtype="int32")

    def outer(x: int) -> int:
        inner_b = np.zeros(64, "int32")
        inner(inner_a, inner_b)
        return int(inner_b[x % 64])

    outer_c = _UNARY(outer)
    register_extern("ext_nested_outer", outer_c)
    mod = _elementwise("ext_nested_outer", 512, kind="parallel")
    a = np.arange(512, dtype="int32")
    b = np.zeros(512, "int32")
    raised: list[BaseException] = []

    def run() -> None:
        mod(a, b)
        inner_cb.calls, inner_cb.fail_at = 0, 1000
        try:
            mod(a, b)
        except Boom as exc:
            raised.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "a nested parallel launch deadlocked"
    assert len(raised) == 1
    inner_cb.fail_at = None
    mod(a, b)
    np.testing.assert_array_equal(b, 3 * (a % 64) + 1)
