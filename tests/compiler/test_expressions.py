"""Expression semantics through lowering and the interpreter: division flavours, casts, reducers, masks."""

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ir
from vtakit.compiler.interpreter import run


def elementwise(fn, dtype="int32", out_dtype=None, n=13):
    A = te.placeholder((n,), dtype, name="A")
    B = te.compute((n,), lambda i: fn(A[i], i), name="B")
    f = vtakit.lower(te.create_schedule(B.op), [A, B])

    def call(a):
        b = np.zeros(n, out_dtype or B.dtype)
        run(f, a, b)
        return b

    return call


def test_integer_division_flavours_match_c_and_python():
    a = np.arange(-6, 7, dtype=np.int32)
    np.testing.assert_array_equal(elementwise(lambda x, i: te.floordiv(x, 4))(a), a // 4)
    np.testing.assert_array_equal(elementwise(lambda x, i: te.floormod(x, 4))(a), a % 4)
    np.testing.assert_array_equal(elementwise(lambda x, i: te.truncdiv(x, 4))(a), np.trunc(a / 4).astype(np.int32))
    np.testing.assert_array_equal(elementwise(lambda x, i: te.truncmod(x, 4))(a), np.fmod(a, 4))
    np.testing.assert_array_equal(elementwise(lambda x, i: x // -3)(a), a // -3)


def test_casts_truncate_and_wrap():
    a = np.array([-2.7, -0.5, 0.5, 2.7, 130.2, -129.9, 300.0, 1.0, 0, 5, 6, 7, 8], np.float32)
    got = elementwise(lambda x, i: x.astype("int32"), "float32")(a)
    np.testing.assert_array_equal(got, np.trunc(a).astype(np.int32))
    got = elementwise(lambda x, i: x.astype("int32").astype("int8"), "float32", "int8")(a)
    np.testing.assert_array_equal(got, np.trunc(a).astype(np.int32).astype(np.int8))
    u = np.arange(250, 263, dtype=np.int32)
    got = elementwise(lambda x, i: x.astype("uint8"), "int32", "uint8")(u)
    np.testing.assert_array_equal(got, u.astype(np.uint8))
    got = elementwise(lambda x, i: (x >> 2) + (x << 1), "int32")(np.arange(-6, 7, dtype=np.int32))
    a = np.arange(-6, 7, dtype=np.int32)
    np.testing.assert_array_equal(got, (a >> 2) + (a << 1))


def test_select_all_any_and_if_then_else_mask():
    a = np.arange(-6, 7, dtype=np.int32)
    got = elementwise(lambda x, i: te.if_then_else(te.any(x < -3, te.all(x > 2, i % 2 == 0)), x * 10, -x))(a)
    idx = np.arange(13)
    np.testing.assert_array_equal(got, np.where((a < -3) | ((a > 2) & (idx % 2 == 0)), a * 10, -a))


def test_reduce_where_and_init():
    A = te.placeholder((5, 6), "int32", name="A")
    k = te.reduce_axis((0, 6), name="k")
    S = te.compute((5,), lambda i: te.sum(A[i, k], axis=k, where=A[i, k] > 0, init=100), name="S")
    f = vtakit.lower(te.create_schedule(S.op), [A, S])
    a = (np.arange(30, dtype=np.int32).reshape(5, 6) % 7) - 3
    s = np.zeros(5, np.int32)
    run(f, a, s)
    np.testing.assert_array_equal(s, 100 + np.where(a > 0, a, 0).sum(axis=1))


def test_compute_root_undoes_compute_at():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].compute_root()
    f = vtakit.lower(s, [A, C])
    assert isinstance(f.body, ir.Allocate) and f.body.buffer.shape[0].value == 8
    a, c = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    run(f, a, c)
    np.testing.assert_array_equal(c, (a + 1) * 2)


def test_decl_buffer_explicit_elem_offset_and_access_ptr():
    buf = te.decl_buffer((4, 4), "int8", "X", elem_offset=8, strides=[16, 1], scope="local.x")
    ptr = buf.access_ptr("rw", offset=2)
    assert ptr.op == "tvm_access_ptr" and buf.scope == "local.x"
    dtype, data, offset, extent, mask = ptr.args
    assert dtype == "int8" and data is buf.data and mask.value == 3
    assert str(vtakit.compiler.arith.simplify(offset)) == "10"
    assert str(vtakit.compiler.arith.simplify(extent)) == "50"  # 1 + 3*16 + 3*1 - 2
    auto = te.decl_buffer((2, 3), "float32", "Y", offset_factor=4)
    assert isinstance(auto.elem_offset, ir.Var) and auto.offset_factor == 4
    assert str(vtakit.compiler.arith.simplify(auto.access_ptr("r").args[3])) == "6"


@pytest.mark.parametrize("fn,ref", [
    (te.exp, np.exp), (te.log, np.log), (te.sqrt, np.sqrt), (te.tanh, np.tanh), (te.floor, np.floor),
    (te.ceil, np.ceil), (te.abs, np.abs), (te.rsqrt, lambda x: 1 / np.sqrt(x)), (te.exp2, np.exp2),
    (lambda x: te.power(x, 2.5), lambda x: x ** np.float32(2.5)), (te.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
])
def test_float_intrinsics(fn, ref):
    a = np.linspace(0.1, 3.0, 13).astype(np.float32)
    got = elementwise(lambda x, i: fn(x), "float32")(a)
    np.testing.assert_allclose(got, ref(a).astype(np.float32), rtol=1e-6)


def test_iter_vars_compare_into_expressions_and_keep_identity():
    A = te.placeholder((4, 5), "int32", name="A")
    k = te.reduce_axis((0, 5), name="k")
    S = te.compute((4,), lambda i: te.sum(te.if_then_else(k == 0, A[i, k] * 100, A[i, k]), axis=k), name="S")
    f = vtakit.lower(te.create_schedule(S.op), [A, S])
    a = np.arange(20, dtype=np.int32).reshape(4, 5)
    s = np.zeros(4, np.int32)
    run(f, a, s)
    np.testing.assert_array_equal(s, a[:, 0] * 100 + a[:, 1:].sum(axis=1))
    other = te.reduce_axis((0, 5), name="k")
    assert k in [other, k] and [other, k].index(k) == 1 and k != other and not (k == None)  # noqa: E711
