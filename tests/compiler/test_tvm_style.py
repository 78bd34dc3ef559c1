"""Programs written the way a TVM (classic TE) user writes them, checked against numpy.

Each schedule runs in the reference interpreter and, when the CPU backend is importable, as a module
built with ``vtakit.build(s, args, target="llvm")`` and called TVM-style (outputs passed in).
The schedules are deliberately different from :mod:`vtakit.compiler.testing`'s cases: TVM
signatures (``split(x, nparts=3)``, ``tile(x, y, 4, 4)``, ``fuse(a, b)``), non-dividing factors
under ``compute_at``, symbolic shapes, cache stages under virtual threads, the tensorize tutorial's
GEMV intrinsic with ``access_ptr`` calls, and integer bitwise operators.
"""

import importlib.util

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler.interpreter import run
from vtakit.compiler import ir, ir_builder
from vtakit.errors import CompileError, ScheduleError

HAVE_LLVM = importlib.util.find_spec("llvmlite") is not None


def _arrays(args, num_inputs, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for k, t in enumerate(args):
        shape = tuple(int(x) for x in t.shape)
        if k >= num_inputs:
            out.append(np.zeros(shape, t.dtype))
        elif np.dtype(t.dtype).kind == "f":
            out.append(rng.uniform(-1, 1, shape).astype(t.dtype))
        else:
            out.append(rng.integers(-20, 20, shape).astype(t.dtype))
    return out


def check(s, args, reference, num_inputs, llvm=True):
    """Interpreter and (if available) the llvm module both equal ``reference(*inputs)``."""
    arrays = _arrays(args, num_inputs)
    expected = reference(*arrays[:num_inputs])
    runners = [lambda *a: run(vtakit.lower(s, args), *a)]
    if llvm and HAVE_LLVM:
        runners.append(vtakit.build(s, args, target="llvm"))
    for runner in runners:
        got = [a.copy() for a in arrays]
        runner(*got)
        for t, g, w in zip(args[num_inputs:], got[num_inputs:], expected):
            if np.dtype(t.dtype).kind == "f":
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=t.name)
            else:
                np.testing.assert_array_equal(g, w, err_msg=t.name)


def matmul(n=13, m=11, l=9, dtype="float32"):
    A = te.placeholder((n, l), dtype, name="A")
    B = te.placeholder((l, m), dtype, name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def mm_ref(a, b):
    return [a @ b]


# ---------------------------------------------------------------------------- loop primitives
def _split_factor(s, C):
    s[C].split(C.op.axis[0], factor=8)


def _split_nparts(s, C):
    s[C].split(C.op.axis[0], nparts=3)


def _tile(s, C):
    s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)


def _fuse_split(s, C):
    fused = s[C].fuse(*C.op.axis)
    s[C].split(fused, 5)


def _fuse_parallel(s, C):
    s[C].parallel(s[C].fuse(C.op.axis[0], C.op.axis[1]))


def _reduction_outer_nondividing(s, C):
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(ko, *C.op.axis, ki)


@pytest.mark.parametrize("primitive", [_split_factor, _split_nparts, _tile, _fuse_split, _fuse_parallel,
                                       _reduction_outer_nondividing], ids=lambda f: f.__name__.strip("_"))
def test_loop_primitives(primitive):
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    primitive(s, C)
    check(s, [A, B, C], mm_ref, 2)


# ---------------------------------------------------------------------------- compute_at under splits
def _stencil():
    A = te.placeholder((20,), name="A")
    B = te.compute((20,), lambda i: A[i] * 2, name="B")
    C = te.compute((17,), lambda i: B[i] + B[i + 3], name="C")
    return A, B, C


def _stencil_ref(a):
    return [a[:17] * 2 + a[3:] * 2]


@pytest.mark.parametrize("how", ["factor", "nparts_vectorized_producer", "reordered_inner"])
def test_compute_at_nondividing_stencil(how):
    A, B, C = _stencil()
    s = te.create_schedule(C.op)
    if how == "factor":
        xo, _ = s[C].split(C.op.axis[0], factor=5)
        s[B].compute_at(s[C], xo)
    elif how == "nparts_vectorized_producer":
        xo, _ = s[C].split(C.op.axis[0], nparts=4)
        s[B].compute_at(s[C], xo)
        s[B].vectorize(B.op.axis[0])
    else:
        xo, xi = s[C].split(C.op.axis[0], factor=5)
        s[C].reorder(xi, xo)
        s[B].compute_at(s[C], xi)
    check(s, [A, C], _stencil_ref, 1)


@pytest.mark.parametrize("how", ["split", "fused", "tile"])
def test_compute_at_elementwise_nondividing(how):
    A = te.placeholder((13, 10), name="A")
    B = te.compute((13, 10), lambda i, j: A[i, j] * 2 + 1, name="B")
    C = te.compute((13, 10), lambda i, j: B[i, j] + 3, name="C")
    s = te.create_schedule(C.op)
    if how == "split":
        at, _ = s[C].split(C.op.axis[0], factor=4)
    elif how == "fused":
        at, _ = s[C].split(s[C].fuse(*C.op.axis), 7)
    else:
        xo, at, _, _ = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 3)
    s[B].compute_at(s[C], at)
    check(s, [A, C], lambda a: [a * 2 + 4], 1)
    if how == "split":  # the producer covers one 4-row band (clipped at the tail), not the whole tensor
        text = str(vtakit.lower(s, [A, C], simple_mode=True))
        assert "allocate B[float32 * (40)]" in text and "min(4, (13 - (i.outer * 4)))" in text


# ---------------------------------------------------------------------------- cache stages and threads
@pytest.mark.parametrize("thread", ["vthread", "cthread"])
def test_shared_local_caches_under_block_virtual_and_thread_axes(thread):
    """The GPU tutorial structure: blockIdx / virtual thread / threadIdx, shared and local caches."""
    A, B, C = matmul(16, 16, 8)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    AL = s.cache_read(AA, "local", [C])
    CL = s.cache_write(C, "local")
    bx, rest = s[C].split(C.op.axis[0], factor=8)
    vx, tx = s[C].split(rest, nparts=2)
    by, ty = s[C].split(C.op.axis[1], factor=4)
    s[C].reorder(bx, by, vx, tx, ty)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(vx, te.thread_axis(thread))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tx)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=4)
    s[AA].compute_at(s[CL], ko)
    s[BB].compute_at(s[CL], ko)
    s[AL].compute_at(s[CL], ki)
    check(s, [A, B, C], mm_ref, 2, llvm=False)  # blockIdx/threadIdx: no CPU lowering
    text = str(vtakit.lower(s, [A, B, C]))
    assert "in shared" in text and "in local" in text and '"blockIdx.x"' in text


def test_gpu_gemm_tutorial_schedule_with_cooperative_fetching():
    """TVM's GPU GEMM schedule: blocks, virtual threads, threads, shared and local caches, and the
    shared tiles fetched cooperatively (the fetch stage binds the threads of the loop it is
    attached in). Regression: the interpreter ran such a re-bound thread loop for the current
    thread only, leaving its peers' share of the shared tile uninitialised (NaN results)."""
    n, L, num_thread, vthread, step = 64, 32, 4, 2, 8
    A = te.placeholder((L, n), name="A")
    B = te.placeholder((L, n), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[k, i] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    AL, BL = s.cache_read(AA, "local", [C]), s.cache_read(BB, "local", [C])
    CC = s.cache_write(C, "local")
    thread_x = te.thread_axis((0, num_thread), "threadIdx.x")
    thread_y = te.thread_axis((0, num_thread), "threadIdx.y")
    by, yi = s[C].split(C.op.axis[0], factor=32)
    bx, xi = s[C].split(C.op.axis[1], factor=32)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].reorder(by, bx, yi, xi)
    tyz, yi = s[C].split(yi, nparts=vthread)
    ty, yi = s[C].split(yi, nparts=num_thread)
    txz, xi = s[C].split(xi, nparts=vthread)
    tx, xi = s[C].split(xi, nparts=num_thread)
    s[C].bind(tyz, te.thread_axis((0, vthread), "vthread", name="vy"))
    s[C].bind(txz, te.thread_axis((0, vthread), "vthread", name="vx"))
    s[C].bind(ty, thread_y)
    s[C].bind(tx, thread_x)
    s[C].reorder(by, bx, tyz, txz, ty, tx, yi, xi)
    s[CC].compute_at(s[C], tx)
    yo, xo = CC.op.axis
    ko, ki = s[CC].split(CC.op.reduce_axis[0], factor=step)
    kt, ki = s[CC].split(ki, factor=1)
    s[CC].reorder(ko, kt, ki, yo, xo)
    s[AA].compute_at(s[CC], ko)
    s[BB].compute_at(s[CC], ko)
    s[CC].unroll(kt)
    s[AL].compute_at(s[CC], kt)
    s[BL].compute_at(s[CC], kt)
    for load in (AA, BB):
        fused = s[load].fuse(*s[load].op.axis)
        ty2, fused = s[load].split(fused, nparts=num_thread)
        tx2, fused = s[load].split(fused, nparts=num_thread)
        s[load].bind(ty2, thread_y)
        s[load].bind(tx2, thread_x)
    check(s, [A, B, C], lambda a, b: [a.T @ b], 2, llvm=False)


def _fetch_schedule(scope, fetch_parts):
    A = te.placeholder((4, 2), "int32", name="A")
    B = te.placeholder((2, 4), "int32", name="B")
    k = te.reduce_axis((0, 2), "k")
    C = te.compute((4, 4), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, scope, [C])
    ty = te.thread_axis("threadIdx.y")
    by, yi = s[C].split(C.op.axis[0], factor=2)
    tyo, yi = s[C].split(yi, nparts=2 if scope == "local" else 1)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(tyo, ty)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=1)
    s[AA].compute_at(s[C], ko)
    t2, _ = s[AA].split(s[AA].fuse(*s[AA].op.axis), nparts=fetch_parts)
    s[AA].bind(t2, ty)
    return s, [A, B, C]


def test_fused_producer_at_two_nondividing_tails():
    """Regression: a producer attached under two non-dividing splits fuses two region extents
    that are both negative in a tail iteration (an empty region); their product was positive, so
    the fused loop ran and read out of bounds."""
    A = te.placeholder((5, 4), "int32", name="A")
    B = te.placeholder((4, 4), "int32", name="B")
    k = te.reduce_axis((0, 4), "k")
    C = te.compute((5, 4), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "global", [C])
    io, ii = s[C].split(C.op.axis[0], factor=4)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=3)
    s[C].reorder(io, C.op.axis[1], ii, ko, ki)
    s[AA].compute_at(s[C], ki)
    s[AA].fuse(*s[AA].op.axis)
    check(s, [A, B, C], lambda a, b: [a @ b], 2)


def test_fetch_rebinding_a_thread_of_another_extent():
    """Regression: the fetch stage's own thread extent (2) was overridden by the enclosing
    loop's (1) while simplifying its indices, so half of the tile was never written."""
    s, args = _fetch_schedule("global", fetch_parts=2)
    check(s, args, lambda a, b: [a @ b], 2, llvm=False)


def test_rebinding_a_thread_for_a_per_thread_buffer_is_an_error():
    s, args = _fetch_schedule("local", fetch_parts=1)
    with pytest.raises(ScheduleError, match="stage A.local: axis .* is bound to threadIdx.y, which already encloses"):
        vtakit.lower(s, args)


@pytest.mark.parametrize("scope,thread,at", [("local", "vthread", "inner"), ("local", "cthread", "outer"),
                                              ("global", "vthread", "inner"), ("local", "vthread", "outer")])
def test_cache_write_and_read_under_virtual_threads(scope, thread, at):
    A, B, C = matmul(12, 8, 5)
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, scope)
    AA = s.cache_read(A, scope, [CL])
    xo, xi = s[C].split(C.op.axis[0], nparts=2)
    s[C].bind(xo, te.thread_axis(thread))
    s[CL].compute_at(s[C], xi if at == "inner" else xo)
    s[AA].compute_at(s[CL], CL.op.axis[0])
    check(s, [A, B, C], mm_ref, 2)


def test_set_scope_compute_root_inline_and_annotations():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1, name="B")
    C = te.compute((10,), lambda i: B[i] * 2, name="C")
    ref = lambda a: [(a + 1) * 2]  # noqa: E731
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], 3)
    s[B].set_scope("local")
    s[B].compute_at(s[C], xo)
    check(s, [A, C], ref, 1)
    s[B].compute_root()
    check(s, [A, C], ref, 1)
    s[B].compute_inline()
    check(s, [A, C], ref, 1)
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], 4)
    s[C].vectorize(xi)
    s[C].unroll(xo)
    s[C].pragma(xo, "auto_unroll_max_step", 16)
    check(s, [A, C], ref, 1)
    assert "pragma_auto_unroll_max_step = 16" in str(vtakit.lower(s, [A, C], simple_mode=True))


# ---------------------------------------------------------------------------- symbolic shapes
def test_symbolic_vector_add_like_the_tvm_tutorial():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    assert "< n)" in str(vtakit.lower(s, [A, B, C], simple_mode=True))
    func = vtakit.lower(s, [A, B, C])
    mod = vtakit.build(s, [A, B, C], target="llvm") if HAVE_LLVM else None
    for size in (1, 64, 129):
        a, b = np.arange(size, dtype=np.float32), np.ones(size, np.float32)
        for runner in filter(None, [lambda *x: run(func, *x), mod]):
            c = np.zeros(size, np.float32)
            runner(a, b, c)
            np.testing.assert_array_equal(c, a + b)


@pytest.mark.parametrize("how", ["row", "nparts", "factor", "fused"])
def test_compute_at_with_symbolic_shapes(how):
    """Regression: attached stages of symbolic extent used to be rejected ("cannot bound by a
    constant"); they now allocate a loop-invariant bound such as m or n * m."""
    n, m = te.var("n"), te.var("m")
    X = te.placeholder((n, m), name="X")
    Y = te.compute((n, m), lambda i, j: X[i, j] * 2, name="Y")
    Z = te.compute((n, m), lambda i, j: Y[i, j] + 1, name="Z")
    s = te.create_schedule(Z.op)
    if how == "row":
        at = Z.op.axis[0]
    elif how == "nparts":
        at, _ = s[Z].split(Z.op.axis[1], nparts=3)
    elif how == "factor":
        at, _ = s[Z].split(Z.op.axis[1], factor=3)
    else:
        at, _ = s[Z].split(s[Z].fuse(*Z.op.axis), nparts=4)
    s[Y].compute_at(s[Z], at)
    func = vtakit.lower(s, [X, Z])
    # the attached buffer's size is symbolic or small, never a bound taken from int32's range
    # (``(m + 2) // 3`` once allocated 715,827,883 floats)
    sizes = []
    ir.walk(func.body, lambda node: sizes.extend(node.buffer.shape) if isinstance(node, ir.Allocate) else None)
    assert sizes and all(not isinstance(e, (int, ir.IntImm)) or int(getattr(e, "value", e)) < 1 << 20 for e in sizes)
    mod = vtakit.build(s, [X, Z], target="llvm") if HAVE_LLVM else None
    for shape in ((5, 7), (1, 1), (3, 10)):
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        for runner in filter(None, [lambda *a: run(func, *a), mod]):
            z = np.zeros(shape, np.float32)
            runner(x, z)
            np.testing.assert_array_equal(z, x * 2 + 1)


# ---------------------------------------------------------------------------- expressions
def test_integer_bitwise_operators_are_bitwise():
    """Regression: ``&``, ``|`` on integers built logical and/or (bool results), ``^`` and ``~``
    and reflected shifts (``1 << j``) were missing; as in TVM they are bitwise on integers."""
    A = te.placeholder((7, 9), "int32", name="A")
    U = te.placeholder((7, 9), "uint8", name="U")
    C = te.compute((7, 9), lambda i, j: ((A[i, j] & 5) | (A[i, j] ^ 3)) + (~A[i, j]) + (1 << (j % 4)) + (6 & i),
                   name="C")
    D = te.compute((7, 9), lambda i, j: ~U[i, j] ^ 7, name="D")
    assert C.dtype == "int32" and D.dtype == "uint8"
    ii, jj = np.arange(7, dtype=np.int32)[:, None], np.arange(9, dtype=np.int32)[None]
    s = te.create_schedule([C.op, D.op])
    s[D].vectorize(D.op.axis[1])
    check(s, [A, U, C, D], lambda a, u: [((a & 5) | (a ^ 3)) + ~a + (1 << (jj % 4)) + (6 & ii), ~u ^ 7], 2)
    # on booleans they stay logical
    E = te.compute((7, 9), lambda i, j: te.if_then_else((i > 2) & (j < 4) | ~(i < 5), A[i, j], 0), name="E")
    check(te.create_schedule(E.op), [A, E], lambda a: [np.where(((ii > 2) & (jj < 4)) | ~(ii < 5), a, 0)], 1)
    with pytest.raises(CompileError, match="bitwise_xor needs integer or boolean operands, got float32"):
        te.placeholder((2,), name="F")[0] ^ 1
    with pytest.raises(CompileError, match="shift_left needs an integer operand"):
        te.placeholder((2,), name="F")[0] << 1


@pytest.mark.parametrize("name", ["ite_all", "casts", "math", "int_div_mod", "reductions"])
def test_expressions_tvm_style(name):
    A = te.placeholder((7, 9), name="A")
    Ai = te.placeholder((7, 9), "int32", name="Ai")
    ii, jj = np.arange(7)[:, None], np.arange(9)[None]
    if name == "ite_all":
        C = te.compute((7, 9), lambda i, j: te.if_then_else(te.all(i > 1, j < 5), A[i, j],
                                                               te.if_then_else(te.any(i == 0, j == 8), -A[i, j], 0.0)))
        return check(te.create_schedule(C.op), [A, C],
                     lambda a: [np.where((ii > 1) & (jj < 5), a, np.where((ii == 0) | (jj == 8), -a, 0))], 1)
    if name == "casts":
        C = te.compute((7, 9), lambda i, j: (A[i, j] * 10).astype("int32") + Ai[i, j].astype("int8").astype("int32"))
        return check(te.create_schedule(C.op), [A, Ai, C],
                     lambda a, b: [(a * np.float32(10)).astype("int32") + b.astype("int8").astype("int32")], 2)
    if name == "math":
        C = te.compute((7, 9), lambda i, j: te.exp(A[i, j]) + te.log(A[i, j] + 2.0) + te.sqrt(te.abs(A[i, j]))
                       + te.tanh(A[i, j]))
        return check(te.create_schedule(C.op), [A, C],
                     lambda a: [np.exp(a) + np.log(a + 2) + np.sqrt(np.abs(a)) + np.tanh(a)], 1)
    if name == "int_div_mod":
        C = te.compute((7, 9), lambda i, j: Ai[i, j] // 3 + Ai[i, j] % 3 + te.truncdiv(Ai[i, j], 4)
                       - te.truncmod(Ai[i, j], 4) + te.floordiv(Ai[i, j], 5) * te.floormod(Ai[i, j], 5))
        return check(te.create_schedule(C.op), [Ai, C],
                     lambda a: [a // 3 + a % 3 + np.fix(a / 4).astype("int32") - np.fmod(a, 4) + (a // 5) * (a % 5)], 1)
    k = te.reduce_axis((0, 9), name="k")
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, dtype=t), name="prod")
    R1 = te.compute((7,), lambda i: te.max(A[i, k], axis=k), name="R1")
    R2 = te.compute((7,), lambda i: te.min(Ai[i, k], axis=k), name="R2")
    R3 = te.compute((7,), lambda i: te.sum(A[i, k], axis=k, where=k > i), name="R3")
    R4 = te.compute((7,), lambda i: prod(Ai[i, k] % 3 + 1, axis=k), name="R4")
    s = te.create_schedule([R1.op, R2.op, R3.op, R4.op])
    ko, ki = s[R3].split(R3.op.reduce_axis[0], factor=4)
    s[R3].reorder(ko, R3.op.axis[0], ki)
    check(s, [A, Ai, R1, R2, R3, R4],
          lambda a, b: [a.max(1), b.min(1), np.where(jj > ii, a, 0).sum(1), np.prod(b % 3 + 1, 1).astype("int32")], 2)


# ---------------------------------------------------------------------------- tensorize (the TVM tutorial)
def _gemv_update(pc, pa, pb, m, l, stride):
    a = pa.array[pa.offset:pa.offset + l]
    for i in range(m):
        row = pb.array[pb.offset + i * stride: pb.offset + i * stride + l]
        pc.array[pc.offset + i] += (a * row).sum()
    return 0


def _gemv_reset(pc, m):
    pc.array[pc.offset:pc.offset + m] = 0
    return 0


def intrin_gemv(m, l, with_reset):
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    Ab = te.decl_buffer(a.shape, a.dtype, name="A", offset_factor=1, strides=[1])
    Bb = te.decl_buffer(b.shape, b.dtype, name="B", offset_factor=1, strides=[te.var("s1"), 1])
    Cb = te.decl_buffer(c.shape, c.dtype, name="C", offset_factor=1, strides=[1])

    def intrin_func(ins, outs):
        aa, bb = ins
        cc = outs[0]

        def update():
            ib = ir_builder.create()
            ib.emit(te.call_intrin("int32", "gemv_update", cc.access_ptr("w"), aa.access_ptr("r"),
                                   bb.access_ptr("r"), m, l, bb.strides[0]))
            return ib.get()

        def reset():
            ib = ir_builder.create()
            ib.emit(te.call_intrin("int32", "gemv_reset", cc.access_ptr("w"), m))
            return ib.get()

        if not with_reset:
            ib = ir_builder.create()
            ib.emit(reset())
            ib.emit(update())
            return ib.get()
        return update(), reset(), update()

    return te.decl_tensor_intrin(c.op, intrin_func, binds={a: Ab, b: Bb, c: Cb})


@pytest.mark.parametrize("with_reset", [False, True], ids=["body", "reset_update"])
def test_tensorize_gemv_tutorial(with_reset):
    N, M, L = 16, 32, 24
    A = te.placeholder((N, L), name="A")
    B = te.placeholder((M, L), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=16)
    if with_reset:
        zo, zi = s[C].split(z, factor=8)
        s[C].reorder(x, yo, zo, yi, zi)
        s[C].tensorize(yi, intrin_gemv(16, 8, True))
    else:
        s[C].reorder(x, yo, yi, z)
        s[C].tensorize(yi, intrin_gemv(16, L, False))
    func = vtakit.lower(s, [A, B, C], simple_mode=True)
    assert "gemv_update(tvm_access_ptr(" in str(func)
    a, b = _arrays([A, B], 2)
    c = np.full((N, M), 7, np.float32)  # garbage: the reset must clear it
    run(func, a, b, c, intrinsics={"gemv_update": _gemv_update, "gemv_reset": _gemv_reset})
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-4, atol=1e-5)
    # a tile that does not match the intrinsic's extent names stage and axis
    s = te.create_schedule(C.op)
    yo, yi = s[C].split(C.op.axis[1], factor=8)
    s[C].reorder(C.op.axis[0], yo, yi, C.op.reduce_axis[0])
    s[C].tensorize(yi, intrin_gemv(16, L, False))
    with pytest.raises(ScheduleError, match="stage C: tensorize at axis j.inner"):
        vtakit.lower(s, [A, B, C])


def test_tensors_with_default_or_equal_names():
    """Regression: two arguments of one name (TVM's defaults "placeholder" / "compute") were a
    CompileError; as in TVM they are accepted and their buffers get distinct names."""
    A, B = te.placeholder((10,)), te.placeholder((10,))
    C = te.compute((10,), lambda i: A[i] + B[i] * 2)
    D = te.compute((10,), lambda i: C[i] * C[i])
    s = te.create_schedule(D.op)
    text = str(vtakit.lower(s, [A, B, D]))
    assert "placeholder_1: Buffer" in text and "allocate compute_1" in text
    check(s, [A, B, D], lambda a, b: [(a + 2 * b) ** 2], 2)


def test_stage_op_reflects_dataflow_rewrites():
    """Regression: after rfactor / cache_read / cache_write, ``s[B].op`` still was the user's
    operation, so the TVM idiom ``s[BF].compute_at(s[B], s[B].op.reduce_axis[0])`` named a stale
    axis. As in TVM the stage's op is now the rewritten one (producing the same tensor)."""
    A = te.placeholder((12, 40), name="A")
    k = te.reduce_axis((0, 40), "k")
    B = te.compute((12,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    assert s[B].op is not B.op and [iv.name for iv in s[B].op.reduce_axis] == ["k.inner.v"]
    assert s[s[B].op] is s[B] and s[B].tensor is B
    xo, xi = s[B].split(s[B].op.axis[0], factor=4)
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    check(s, [A, B], lambda a: [a.sum(1)], 1)
    s = te.create_schedule(B.op)
    s.cache_read(A, "local", [B])
    assert [t.name for t in s[B].op.input_tensors] == ["A.local"]
    BL = s.cache_write(B, "local")
    assert s[B].op.input_tensors == [BL] and s[B].op.reduce_axis == [] and s[B].op.axis == B.op.axis
    with pytest.raises(ScheduleError, match="stage B: cannot compute_inline an output"):
        s[B].compute_inline()
    check(s, [A, B], lambda a: [a.sum(1)], 1)


def test_pass_context_accepts_the_tvm_spelling():
    """``PassContext(opt_level=3, config={"tir.UnrollLoop": {"auto_max_step": N}})`` as in TVM."""
    from vtakit.compiler.transform import PassContext

    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    with PassContext(opt_level=3, config={"tir.UnrollLoop": {"auto_max_step": 16}}):
        text = str(vtakit.lower(s, [A, B]))
    assert "for (" not in text and "B[3] = (A[3] * 2.0f)" in text
    with pytest.raises(CompileError, match="unknown PassContext config key 'tir.UnrollLoop.bogus'"):
        PassContext(config={"tir.UnrollLoop": {"bogus": 1}})


def test_tvm_keyword_spellings_and_defaults():
    """``placeholder(dtype=None)`` is float32 (it stored None); pragma's TVM keyword names."""
    A = te.placeholder((8,), dtype=None, name="A")
    assert A.dtype == "float32"
    for bad in ("floaty", "int7", 5):
        with pytest.raises(CompileError, match="placeholder A: dtype must be a type name"):
            te.placeholder((8,), bad, name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    s[B].pragma(B.op.axis[0], pragma_type="unroll_explicit", pragma_value=False)
    assert "pragma_unroll_explicit = 0" in str(vtakit.lower(s, [A, B]))


# ---------------------------------------------------------------------------- errors
def test_binding_one_hardware_thread_tag_twice_in_a_stage():
    """Regression: two different thread_axis("threadIdx.x") objects on two loops of one stage were
    accepted (nested loops of the same hardware index); virtual threads may still nest."""
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], 4)
    s[C].bind(xo, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="stage C: thread axis threadIdx.x is already bound to axis i.outer"):
        s[C].bind(xi, te.thread_axis("threadIdx.x"))
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], nparts=2)
    yo, yi = s[C].split(C.op.axis[1], nparts=2)
    s[C].reorder(xo, yo, xi, yi)
    s[C].bind(xo, te.thread_axis("vthread", name="vx"))
    s[C].bind(yo, te.thread_axis("vthread", name="vy"))
    check(s, [A, B, C], mm_ref, 2)
