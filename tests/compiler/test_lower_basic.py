"""First vertical slice: placeholder/compute/reduce, split/reorder, lower, interpreter == numpy."""

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ir
from vtakit.compiler.interpreter import run
from vtakit.errors import CompileError, MemoryAccessError


def matmul(n, m, l, dtype="float32"):
    A = te.placeholder((n, l), dtype, name="A")
    B = te.placeholder((l, m), dtype, name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_default_schedule_matmul():
    A, B, C = matmul(5, 6, 7)
    s = te.create_schedule(C.op)
    f = vtakit.lower(s, [A, B, C])
    assert isinstance(f, ir.PrimFunc) and "for (k, 0, 7)" in str(f)
    rng = np.random.default_rng(0)
    a, b = rng.random((5, 7), dtype=np.float32), rng.random((7, 6), dtype=np.float32)
    c = np.zeros((5, 6), np.float32)
    run(f, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_split_reorder_int_matmul_exact():
    A, B, C = matmul(10, 12, 7, "int32")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=3)
    s[C].reorder(xo, ko, C.op.axis[1], ki, xi)
    f = vtakit.lower(s, [A, B, C])
    text = str(f)
    assert "i.outer" in text and "k.inner" in text and "< 10" in text  # tail predicate kept
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, (10, 7), dtype=np.int32)
    b = rng.integers(-1000, 1000, (7, 12), dtype=np.int32)
    c = np.zeros((10, 12), np.int32)
    run(f, a, b, c)
    np.testing.assert_array_equal(c, a @ b)


def test_interpreter_checks_arguments():
    A, B, C = matmul(2, 2, 2)
    f = vtakit.lower(te.create_schedule(C.op), [A, B, C])
    with pytest.raises(CompileError, match="argument 2 \\(C\\)"):
        run(f, np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32), np.zeros((2, 3), np.float32))
    with pytest.raises(CompileError, match="takes 3 arrays"):
        run(f, np.zeros((2, 2), np.float32))


def test_interpreter_bounds_checks_accesses():
    buf = ir.Buffer("X", (4,), "int32")
    i = ir.Var("i")
    body = ir.For(i, ir.const(0), ir.const(5), ir.ForKind.SERIAL, ir.BufferStore(buf, ir.const(1), (i,)))
    with pytest.raises(MemoryAccessError, match="X\\[4\\]"):
        run(ir.PrimFunc("f", (buf,), body), np.zeros(4, np.int32))


def test_int8_wraps_like_hardware():
    A = te.placeholder((4,), "int8", name="A")
    B = te.compute((4,), lambda i: A[i] * 3 + 100, name="B")
    f = vtakit.lower(te.create_schedule(B.op), [A, B])
    a = np.array([1, 50, -128, 127], np.int8)
    b = np.zeros(4, np.int8)
    run(f, a, b)
    np.testing.assert_array_equal(b, (a.astype(np.int64) * 3 + 100).astype(np.int8))


def test_symbolic_shape_binds_from_arrays():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    f = vtakit.lower(s, [A, B])
    for size in (5, 8):
        a, b = np.arange(size, dtype=np.float32), np.zeros(size, np.float32)
        run(f, a, b)
        np.testing.assert_array_equal(b, a * 2)
    with pytest.raises(CompileError, match="argument 1 \\(B\\): expected an array of shape \\(3,\\)"):
        run(f, np.zeros(3, np.float32), np.zeros(4, np.float32))
