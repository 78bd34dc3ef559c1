"""Schedules through the CPU backend: every shared schedule case and random schedules equal numpy.

The interpreter half of the same cases is tests/compiler/test_schedule_cases.py; together they
check that the interpreter and the compiled module both agree with numpy.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import vtakit
from vtakit import te
from vtakit.compiler.testing import CASES, check_case, make_arrays, matmul_variant

PORTABLE = [c for c in CASES if c.portable]


def llvm_runner(s, args, arrays):
    vtakit.build(s, args, target="llvm")(*arrays)


@pytest.mark.parametrize("case", PORTABLE, ids=[c.name for c in PORTABLE])
def test_case_cpu_module_matches_numpy(case):
    check_case(case, llvm_runner)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(n=st.integers(1, 9), m=st.integers(1, 9), l=st.integers(1, 9),
       factors=st.tuples(st.integers(1, 10), st.integers(1, 10), st.integers(1, 10)),
       order=st.permutations(range(6)))
def test_random_splits_and_orders_cpu_module(n, m, l, factors, order):
    s, args = matmul_variant(n, m, l, factors, order)
    a, b, c = make_arrays(args, 2, seed=n * 100 + m * 10 + l)
    vtakit.build(s, args, target="llvm")(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


def blocked_matmul(n, m, l, bn, bm, parallel=True, vectorize=True, unroll=True):
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bm)
    outer = s[C].fuse(io, jo)
    s[CC].compute_at(s[C], outer)
    ci, cj = CC.op.axis
    (ck,) = CC.op.reduce_axis
    s[CC].reorder(ck, ci, cj)
    if unroll:
        s[CC].unroll(ci)
    if vectorize:
        s[CC].vectorize(cj)
        s[C].vectorize(ji)
    if parallel:
        s[C].parallel(outer)
    return s, [A, B, C]


@pytest.mark.parametrize("shape", [(16, 32, 8), (13, 21, 5), (1, 7, 3)])
@pytest.mark.parametrize("flags", [(True, True, True), (True, False, False), (False, True, True)])
def test_register_blocked_matmul(shape, flags):
    n, m, l = shape
    s, args = blocked_matmul(n, m, l, 4, 8, *flags)
    mod = vtakit.build(s, args, target="llvm")
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (n, l)).astype("float32")
    b = rng.uniform(-1, 1, (l, m)).astype("float32")
    c = np.zeros((n, m), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_vectorized_schedule_uses_vector_types():
    s, args = blocked_matmul(16, 32, 8, 4, 8)
    mod = vtakit.build(s, args, target="llvm")
    assert "<8 x float>" in mod.get_source("ll-raw")
    assert "vtakit_parallel_launch" in mod.get_source("ll-raw")


def test_build_accepts_lowered_function_and_caches():
    s, args = blocked_matmul(8, 8, 4, 4, 8)
    func = vtakit.lower(s, args)
    m1 = vtakit.build(func, target="llvm")
    assert vtakit.build(func, target="llvm") is m1
    assert m1.compile_seconds > 0


def test_call_style_tensorize_with_registered_extern():
    """The VTA-shaped case (a call intrinsic on access pointers) with the intrinsic in C ABI."""
    import ctypes

    from vtakit.compiler.backend import register_extern

    i32p = ctypes.POINTER(ctypes.c_int32)

    @ctypes.CFUNCTYPE(ctypes.c_int32, i32p, i32p, i32p, *[ctypes.c_int32] * 7)
    def toy_gemm(pa, pb, pc, sa, sb, sc, m, n, l, reset):
        def view(p, rows, cols, stride):
            flat = np.ctypeslib.as_array(p, shape=((rows - 1) * stride + cols,))
            return np.lib.stride_tricks.as_strided(flat, (rows, cols), (stride * 4, 4))
        a, b, c = view(pa, m, l, sa), view(pb, l, n, sb), view(pc, m, n, sc)
        c[...] = a @ b if reset else c + a @ b
        return 0

    register_extern("toy_gemm", toy_gemm)
    (call_case,) = [c for c in CASES if not c.portable]
    check_case(call_case, llvm_runner)


def test_register_extern_errors():
    from vtakit.compiler.backend import register_extern
    from vtakit.errors import CompileError

    with pytest.raises(CompileError, match="extern name must be an identifier"):
        register_extern("not a name", 1234)
    with pytest.raises(CompileError, match="expected a ctypes function or an address, got str"):
        register_extern("f", "nope")
    with pytest.raises(CompileError, match="null address"):
        register_extern("f", 0)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(h=st.integers(3, 12), w=st.integers(2, 20), fy=st.integers(1, 6), fx=st.integers(1, 9),
       level=st.integers(0, 3), kinds=st.tuples(*[st.sampled_from(["serial", "parallel", "vectorize", "unroll"])] * 4))
def test_random_attach_points_and_loop_kinds_cpu_module(h, w, fy, fx, level, kinds):
    """A stencil producer attached at a random loop of a tiled consumer whose loops get random kinds
    (parallel only where legal: one parallel loop, outside the attach point's body)."""
    A = te.placeholder((h + 2, w + 1), "int32", name="A")
    B = te.compute((h + 2, w + 1), lambda i, j: A[i, j] * 3 - 1, name="B")
    C = te.compute((h, w), lambda i, j: B[i, j] + B[i + 2, j + 1] - B[i + 1, j], name="C")
    s = te.create_schedule(C.op)
    yo, yi = s[C].split(C.op.axis[0], factor=fy)
    xo, xi = s[C].split(C.op.axis[1], factor=fx)
    loops = [yo, xo, yi, xi]
    s[C].reorder(*loops)
    s[B].compute_at(s[C], loops[level])
    parallel_used = False
    for depth, (axis, kind) in enumerate(zip(loops, kinds)):
        if kind == "parallel" and not parallel_used and depth <= level:
            s[C].parallel(axis)
            parallel_used = True
        elif kind == "vectorize" and depth == 3:
            s[C].vectorize(axis)
        elif kind == "unroll":
            s[C].unroll(axis)
    a = np.random.default_rng(h * w + fx).integers(-50, 50, (h + 2, w + 1)).astype(np.int32)
    c = np.zeros((h, w), np.int32)
    vtakit.build(s, [A, C], target="llvm")(a, c)
    b = a * 3 - 1
    np.testing.assert_array_equal(c, b[:h, :w] + b[2:, 1:] - b[1:h + 1, :w])
