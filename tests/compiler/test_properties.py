"""Property tests: random split factors, loop orders and attach points keep results exact."""

import numpy as np
from hypothesis import given, settings, strategies as st

import vtakit
from vtakit import te
from vtakit.compiler.interpreter import run
from vtakit.compiler.testing import make_arrays, matmul_variant
from vtakit.compiler.transform import PassContext

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)


@SETTINGS
@given(n=st.integers(1, 9), m=st.integers(1, 9), l=st.integers(1, 9),
       factors=st.tuples(st.integers(1, 10), st.integers(1, 10), st.integers(1, 10)),
       order=st.permutations(range(6)))
def test_random_splits_and_orders_match_numpy(n, m, l, factors, order):
    s, args = matmul_variant(n, m, l, factors, order)
    a, b, c = make_arrays(args, 2, seed=n * 100 + m * 10 + l)
    with PassContext(config={"tir.LoopPartition.partition_const_loop": bool(order[0] % 2)}):
        func = vtakit.lower(s, args)
    run(func, a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


@SETTINGS
@given(h=st.integers(3, 12), w=st.integers(2, 9), fy=st.integers(1, 6), fx=st.integers(1, 6),
       level=st.integers(0, 3), swap=st.booleans(), inner_split=st.integers(1, 5))
def test_random_compute_at_positions_match_numpy(h, w, fy, fx, level, swap, inner_split):
    """A 3-point stencil producer attached at a random loop of a randomly tiled consumer."""
    A = te.placeholder((h + 2, w + 1), "int32", name="A")
    B = te.compute((h + 2, w + 1), lambda i, j: A[i, j] * 3 - 1, name="B")
    C = te.compute((h, w), lambda i, j: B[i, j] + B[i + 2, j + 1] - B[i + 1, j], name="C")
    s = te.create_schedule(C.op)
    yo, yi = s[C].split(C.op.axis[0], factor=fy)
    xo, xi = s[C].split(C.op.axis[1], factor=fx)
    loops = [yo, xo, yi, xi] if not swap else [xo, yo, xi, yi]
    s[C].reorder(*loops)
    s[B].compute_at(s[C], loops[level])
    bo, bi = s[B].split(B.op.axis[1], factor=inner_split)
    a = np.random.default_rng(h * w).integers(-50, 50, (h + 2, w + 1)).astype(np.int32)
    c = np.zeros((h, w), np.int32)
    run(vtakit.lower(s, [A, C]), a, c)
    b = a * 3 - 1
    np.testing.assert_array_equal(c, b[:h, :w] + b[2:, 1:] - b[1:h + 1, :w])


@SETTINGS
@given(f=st.integers(1, 7), nparts=st.integers(1, 7), fuse_first=st.booleans(), vec=st.booleans(),
       nthreads=st.integers(1, 3), tag=st.sampled_from(["vthread", "cthread"]))
def test_random_fuse_split_vthread_match_numpy(f, nparts, fuse_first, vec, nthreads, tag):
    A = te.placeholder((6, 7), "int32", name="A")
    B = te.compute((6, 7), lambda i, j: A[i, j] * A[i, j] + j, name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    if fuse_first:
        fused = s[B].fuse(i, j)
        t, rest = s[B].split(fused, nparts=nthreads)
        o, inner = s[B].split(rest, factor=f)
    else:
        t, rest = s[B].split(i, nparts=nthreads)
        o, inner = s[B].split(j, nparts=nparts)
    s[B].bind(t, te.thread_axis(tag))
    if vec:
        s[B].vectorize(inner)
    a = np.arange(42, dtype=np.int32).reshape(6, 7) - 20
    out = np.zeros((6, 7), np.int32)
    run(vtakit.lower(s, [A, B]), a, out)
    np.testing.assert_array_equal(out, a * a + np.arange(7, dtype=np.int32))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(data=st.data())
def test_random_pipeline_schedules_match_numpy(data):
    """Random mixes of split, reorder, compute_at/inline/root, cache_read/cache_write, vectorize, unroll and
    virtual threads over E = f(A); C = E @ B; D = C + 1."""
    n, m, l = data.draw(st.integers(2, 7)), data.draw(st.integers(2, 7)), data.draw(st.integers(2, 7))
    A = te.placeholder((n, l), "int32", name="A")
    B = te.placeholder((l, m), "int32", name="B")
    E = te.compute((n, l), lambda i, k: A[i, k] * 2 - 3, name="E")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(E[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((n, m), lambda i, j: C[i, j] + 1, name="D")
    s = te.create_schedule(D.op)
    factor = st.integers(1, 5)

    red = C
    if data.draw(st.booleans(), "cache_write"):
        red = s.cache_write(C, "local")
    rs = s[red]
    i, j = red.op.axis
    (kk,) = red.op.reduce_axis
    leaves = []
    for ax in (i, j, kk):
        if data.draw(st.booleans()):
            leaves += list(rs.split(ax, factor=data.draw(factor)))
        else:
            leaves.append(ax)
    order = data.draw(st.permutations(leaves))
    rs.reorder(*order)
    if red is not C:
        ci, cj = C.op.axis
        cio, cii = s[C].split(ci, factor=data.draw(factor))
        thread = data.draw(st.sampled_from([None, "vthread", "cthread"]), "thread")
        if thread:
            t, cio = s[C].split(cio, nparts=2)
            s[C].bind(t, te.thread_axis(thread))
        rs.compute_at(s[C], data.draw(st.sampled_from([cio, cii, cj])))
    where_e = data.draw(st.sampled_from(["root", "inline", "at"]))
    if where_e == "inline":
        s[E].compute_inline()
    elif where_e == "at":
        s[E].compute_at(rs, data.draw(st.sampled_from(order)))
    if data.draw(st.booleans(), "cache_read"):
        BB = s.cache_read(B, "shared", [red])
        s[BB].compute_at(rs, data.draw(st.sampled_from(order)))
    d_mode = data.draw(st.sampled_from(["root", "vectorize", "unroll", "vthread"]))
    if d_mode in ("vectorize", "unroll"):
        do, di = s[D].split(D.op.axis[1], factor=data.draw(factor))
        getattr(s[D], d_mode)(di)
    elif d_mode == "vthread":
        t, rest = s[D].split(D.op.axis[0], nparts=2)
        s[D].bind(t, te.thread_axis("vthread"))
    a = np.arange(n * l, dtype=np.int32).reshape(n, l) % 7 - 3
    b = np.arange(l * m, dtype=np.int32).reshape(l, m) % 5 - 2
    d = np.zeros((n, m), np.int32)
    partition = data.draw(st.booleans(), "partition")
    with PassContext(config={"tir.LoopPartition.partition_const_loop": partition}):
        func = vtakit.lower(s, [A, B, D])
    run(func, a, b, d)
    np.testing.assert_array_equal(d, (a * 2 - 3) @ b + 1)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(data=st.data())
def test_random_tensorized_schedules_match_numpy(data):
    """Tensorize a 4x4x4 toy GEMM under random outer tilings, loop orders, intrinsic modes and cache stages."""
    from vtakit.compiler.testing import toy_gemm_intrin

    tiles = st.integers(1, 3)
    n, m, l = 4 * data.draw(tiles), 4 * data.draw(tiles), 4 * data.draw(tiles)
    A = te.placeholder((n, l), "int32", name="A")
    B = te.placeholder((l, m), "int32", name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    red = s.cache_write(C, "local") if data.draw(st.booleans(), "cache_write") else C
    rs = s[red]
    i, j = red.op.axis
    io, ii = rs.split(i, factor=4)
    jo, ji = rs.split(j, factor=4)
    ko, ki = rs.split(red.op.reduce_axis[0], factor=4)
    outer = data.draw(st.permutations([io, jo, ko]))
    rs.reorder(*outer, ii, ji, ki)
    mode = data.draw(st.sampled_from(["reset_update", "body_update"]))
    rs.tensorize(ii, toy_gemm_intrin(4, 4, 4, mode))
    if red is not C:
        cio, cjo, cii, cji = s[C].tile(*C.op.axis, 4, 4)
        rs.compute_at(s[C], data.draw(st.sampled_from([cio, cjo])))
    if data.draw(st.booleans(), "cache_read"):
        AA = s.cache_read(A, "local", [red])
        s[AA].compute_at(rs, data.draw(st.sampled_from(outer)))
    a = np.arange(n * l, dtype=np.int32).reshape(n, l) % 7 - 3
    b = np.arange(l * m, dtype=np.int32).reshape(l, m) % 5 - 2
    c = np.zeros((n, m), np.int32)
    run(vtakit.lower(s, [A, B, C]), a, b, c)
    np.testing.assert_array_equal(c, a @ b)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(data=st.data())
def test_random_rfactor_schedules_match_numpy(data):
    """rfactor any reduction leaf after random splits/fuses of two reduction axes, at any factor position."""
    h, w = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 7))
    A = te.placeholder((3, h, w), "int32", name="A")
    r, c = te.reduce_axis((0, h), name="r"), te.reduce_axis((0, w), name="c")
    B = te.compute((3,), lambda i: te.sum(A[i, r, c] * (r + 1), axis=[r, c]), name="B")
    s = te.create_schedule(B.op)
    leaves = [r, c]
    if data.draw(st.booleans(), "fuse"):
        leaves = [s[B].fuse(r, c)]
    for ax in list(leaves):
        if data.draw(st.booleans()):
            pos = leaves.index(ax)
            leaves[pos:pos + 1] = list(s[B].split(ax, factor=data.draw(st.integers(1, 5))))
    axis = data.draw(st.sampled_from(leaves), "axis")
    BF = s.rfactor(B, axis, factor_axis=data.draw(st.integers(0, 1)))
    if data.draw(st.booleans(), "parallel"):
        s[BF].parallel(BF.op.axis[0])
    a = np.arange(3 * h * w, dtype=np.int32).reshape(3, h, w) % 11 - 5
    b = np.zeros(3, np.int32)
    run(vtakit.lower(s, [A, B]), a, b)
    np.testing.assert_array_equal(b, (a * (np.arange(h, dtype=np.int32)[None, :, None] + 1)).sum(axis=(1, 2)))
