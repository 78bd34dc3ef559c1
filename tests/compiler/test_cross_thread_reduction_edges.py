"""Cross-thread reductions (``tvm_thread_allreduce``) and store predicates at their edges.

Inputs test_cross_thread_reduction.py does not try: ``where`` conditions on the thread index, reduce axes with a
non-zero minimum or a tail, rfactor of fused axes, caches and producers attached at every level of
the reduction (including the thread-bound axis after the per-thread loop), int8 -> int32
accumulation, softmax-like chains of all-reduces, symbolic reduction extents, store predicates on
split axes and on ordinary reductions (TVM: the predicate guards the update, not the
initialisation). Golden: numpy; the reference interpreter executes; integers compared exactly.
Outputs are pre-filled with a sentinel so a missing or extra store shows.
"""

import numpy as np
import pytest

import vtakit
from tests.compiler.test_cross_thread_reduction import _assert_equal as _close
from vtakit import te
from vtakit.compiler import ir
from vtakit.compiler.interpreter import run
from vtakit.errors import CompileError, ScheduleError

SENTINEL = 7


def _inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-1, 1, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -50), min(info.max, 50) + 1, shape).astype(dtype)


def _run(s, args, inputs):
    """Lower, print (the printer must handle every node), run; the outputs (pre-filled) and the text."""
    f = vtakit.lower(s, args)
    text = str(f)
    outs = [np.full(tuple(int(x) for x in t.shape), SENTINEL, t.dtype) for t in args[len(inputs):]]
    run(f, *inputs, *outs)
    return outs, text


def _rows(n, m, dtype="int32", lo=0, reducer=te.sum, where=None, cast=None):
    A = te.placeholder((n, m), dtype, name="A")
    k = te.reduce_axis((lo, m), "k")

    def body(i):
        v = A[i, k] if cast is None else A[i, k].astype(cast)
        return reducer(v, axis=k) if where is None else reducer(v, axis=k, where=where(i, k))

    return A, k, te.compute((n,), body, name="B")


def _bind_inner(s, B, k, factor, predicate=True):
    ko, ki = s[B].split(k, factor=factor)
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(ki, tx)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    if predicate:
        s[B].set_store_predicate(tx.var.equal(0))
    return ko, ki, tx


# ---------------------------------------------------------------------------- conditions and ranges
@pytest.mark.parametrize("factor", [16, 64])
def test_where_on_the_thread_index(factor):
    """``where`` reads the bound part of the reduce axis (the thread index) and the row."""
    n, m = 9, 50
    A, k, B = _rows(n, m, where=lambda i, k: te.all(k % 16 < 5 + i % 3, k != 2))
    s = te.create_schedule(B.op)
    _bind_inner(s, B, k, factor)
    a = _inputs((n, m), "int32")
    kk, ii = np.arange(m)[None], np.arange(n)[:, None]
    mask = (kk % 16 < 5 + ii % 3) & (kk != 2)
    (b,), _ = _run(s, [A, B], [a])
    _close(b, (a * mask).sum(1))


def test_where_false_for_a_whole_row_gives_the_identity():
    n, m = 9, 50
    A, k, B = _rows(n, m, reducer=te.max, where=lambda i, k: i > 3)
    s = te.create_schedule(B.op)
    _bind_inner(s, B, k, 16)
    a = _inputs((n, m), "int32")
    want = a.max(1)
    want[:4] = np.iinfo(np.int32).min
    (b,), _ = _run(s, [A, B], [a])
    _close(b, want)


def test_where_with_the_whole_reduce_axis_on_threads():
    n, m = 5, 32
    A, k, B = _rows(n, m, "float32", reducer=te.min, where=lambda i, k: te.all(k > i, k % 3 == 0))
    s = te.create_schedule(B.op)
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(k, tx)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].set_store_predicate(tx.var.equal(0))
    a = _inputs((n, m), "float32")
    mask = (np.arange(m)[None] > np.arange(n)[:, None]) & (np.arange(m)[None] % 3 == 0)
    (b,), _ = _run(s, [A, B], [a])
    _close(b, np.where(mask, a, np.inf).min(1))


@pytest.mark.parametrize("how", ["inner16", "whole", "nparts6_outer", "rfactor"])
def test_reduce_axis_with_a_nonzero_minimum(how):
    n, m, lo = 7, 48, 5
    A, k, B = _rows(n, m, lo=lo)
    s = te.create_schedule(B.op)
    tx = te.thread_axis("threadIdx.x")
    if how == "whole":
        s[B].bind(k, tx)
    elif how == "nparts6_outer":
        ko, ki = s[B].split(k, nparts=6)
        s[B].bind(ko, tx)
    elif how == "inner16":
        ko, ki = s[B].split(k, factor=16)
        s[B].bind(ki, tx)
    else:
        ko, ki = s[B].split(k, factor=16)
        BF = s.rfactor(B, ki)
        s[B].bind(s[B].op.reduce_axis[0], tx)
        s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].set_store_predicate(tx.var.equal(0))
    a = _inputs((n, m), "int32")
    (b,), _ = _run(s, [A, B], [a])
    _close(b, a[:, lo:].sum(1))


def test_tails_on_rows_and_reduction_with_another_storing_thread():
    """Both axes split with tails; thread 3 stores (the predicate and the tail guard combine)."""
    n, m = 13, 45
    A, k, B = _rows(n, m)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=16)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(ki, tx)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    s[B].set_store_predicate(tx.var.equal(3))
    a = _inputs((n, m), "int32")
    (b,), text = _run(s, [A, B], [a])
    _close(b, a.sum(1))
    assert "(threadIdx.x == 3)" in text


# ---------------------------------------------------------------------------- rfactor, casts
@pytest.mark.parametrize("rf_of", ["split_of_fused", "fused"])
def test_rfactor_of_fused_reduce_axes(rf_of):
    n, p, q = 5, 6, 7
    A = te.placeholder((n, p, q), "int32", name="A")
    r = te.reduce_axis((0, p), "r")
    c = te.reduce_axis((0, q), "c")
    B = te.compute((n,), lambda i: te.sum(A[i, r, c], axis=[r, c]), name="B")
    s = te.create_schedule(B.op)
    fused = s[B].fuse(r, c)
    if rf_of == "fused":
        BF = s.rfactor(B, fused)
    else:
        _, fi = s[B].split(fused, factor=8)
        BF = s.rfactor(B, fi)
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(s[B].op.reduce_axis[0], tx)
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    s[B].set_store_predicate(tx.var.equal(0))
    a = _inputs((n, p, q), "int32")
    (b,), _ = _run(s, [A, B], [a])
    _close(b, a.sum((1, 2)))


@pytest.mark.parametrize("rfactor", [False, True])
def test_int8_accumulated_in_int32(rfactor):
    """300 int8 values per row overflow int8 many times over: the accumulator is int32 throughout."""
    n, m = 7, 300
    A, k, B = _rows(n, m, "int8", cast="int32")
    s = te.create_schedule(B.op)
    tx = te.thread_axis("threadIdx.x")
    if rfactor:
        ko, ki = s[B].split(k, factor=32)
        BF = s.rfactor(B, ki)
        s[B].bind(s[B].op.reduce_axis[0], tx)
        s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
        s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
        s[B].set_store_predicate(tx.var.equal(0))
    else:
        _bind_inner(s, B, k, 32)
    a = np.random.default_rng(1).integers(-128, 128, (n, m)).astype("int8")
    (b,), _ = _run(s, [A, B], [a])
    assert b.dtype == np.int32
    _close(b, a.astype("int32").sum(1))
    assert np.abs(b).max() > 127


# ---------------------------------------------------------------------------- what is attached where
def _cached_rows(scope, level):
    n, m = 6, 50
    A = te.placeholder((n, m), "float32", name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="B")
    s = te.create_schedule(B.op)
    AC = s.cache_read(A, scope, [B])
    ko, ki, _ = _bind_inner(s, B, k, 16)
    s[AC].compute_at(s[B], {"row": B.op.axis[0], "k.outer": ko, "k.inner": ki}[level])
    a = _inputs((n, m), "float32")
    (b,), text = _run(s, [A, B], [a])
    _close(b, (a * 2).sum(1))
    return text


@pytest.mark.parametrize("level", ["row", "k.outer", "k.inner"])
@pytest.mark.parametrize("scope", ["local", "shared"])
def test_cache_read_attached_at_each_level(scope, level):
    """At ``k.inner`` (the thread axis, after the per-thread loop ``k.outer`` in the leaf order) the
    cache was bounded for one ``k.outer`` iteration, so it is computed inside that loop (it named
    ``k.outer`` outside its scope before)."""
    text = _cached_rows(scope, level)
    if level == "k.inner":
        lines = text.splitlines()
        loop = next(i for i, line in enumerate(lines) if line.strip().startswith("for (k.outer"))
        alloc = next(i for i, line in enumerate(lines) if f"allocate A.{scope}" in line)
        assert alloc > loop


@pytest.mark.parametrize("level", ["k.outer", "k.inner"])
def test_producer_attached_in_the_reduction(level):
    n, m = 6, 37
    A = te.placeholder((n, m), "int32", name="A")
    k = te.reduce_axis((0, m), "k")
    P = te.compute((n, m), lambda i, j: A[i, j] * 3 - j, name="P")
    B = te.compute((n,), lambda i: te.sum(P[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki, _ = _bind_inner(s, B, k, 8, predicate=False)
    s[P].compute_at(s[B], ko if level == "k.outer" else ki)
    a = _inputs((n, m), "int32")
    (b,), _ = _run(s, [A, B], [a])
    _close(b, (a * 3 - np.arange(m)).sum(1))


def test_producer_attached_after_the_per_thread_loop_with_a_data_axis_between():
    """Leaf order row.outer, k.outer, row.inner, k.inner: stages at row.inner and k.inner both follow
    the per-thread loop k.outer."""
    n, m = 8, 37
    A = te.placeholder((n, m), "int32", name="A")
    k = te.reduce_axis((0, m), "k")
    P = te.compute((n, m), lambda i, j: A[i, j] + i, name="P")
    Q = te.compute((n, m), lambda i, j: A[i, j] * 2, name="Q")
    B = te.compute((n,), lambda i: te.sum(P[i, k] + Q[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    xo, xi = s[B].split(B.op.axis[0], factor=2)
    s[B].reorder(xo, ko, xi, ki)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    s[P].compute_at(s[B], xi)
    s[Q].compute_at(s[B], ki)
    a = _inputs((n, m), "int32")
    (b,), _ = _run(s, [A, B], [a])
    _close(b, (a + np.arange(n)[:, None] + a * 2).sum(1))


def test_inlined_producer():
    A = te.placeholder((6, 37), "int32", name="A")
    k = te.reduce_axis((0, 37), "k")
    P = te.compute((6, 37), lambda i, j: A[i, j] * A[i, j] + 1, name="P")
    B = te.compute((6,), lambda i: te.sum(P[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    s[P].compute_inline()
    _bind_inner(s, B, k, 8)
    a = _inputs((6, 37), "int32")
    (b,), _ = _run(s, [A, B], [a])
    _close(b, (a * a + 1).sum(1))


def test_cache_write_local_reduced_across_threads():
    A, k, B = _rows(6, 37)
    s = te.create_schedule(B.op)
    BL = s.cache_write(B, "local")
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[BL].compute_at(s[B], B.op.axis[0])
    _, ki = s[BL].split(s[BL].op.reduce_axis[0], factor=8)
    s[BL].bind(ki, te.thread_axis("threadIdx.x"))
    a = _inputs((6, 37), "int32")
    (b,), _ = _run(s, [A, B], [a])
    _close(b, a.sum(1))


# ---------------------------------------------------------------------------- several reductions
@pytest.mark.parametrize("inline_exp", [True, False])
def test_softmax_max_then_sum_of_exp(inline_exp):
    """Two all-reduces over threadIdx.x in one block, the second reading the first's result."""
    n, m = 5, 40
    A = te.placeholder((n, m), "float32", name="A")
    k1 = te.reduce_axis((0, m), "k1")
    k2 = te.reduce_axis((0, m), "k2")
    M = te.compute((n,), lambda i: te.max(A[i, k1], axis=k1), name="M")
    E = te.compute((n, m), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    S = te.compute((n,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    C = te.compute((n, m), lambda i, j: E[i, j] / S[i], name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    _, ci = s[C].split(C.op.axis[1], factor=16)
    s[C].bind(ci, te.thread_axis("threadIdx.x"))
    for R, kk in ((M, k1), (S, k2)):
        s[R].compute_at(s[C], C.op.axis[0])
        s[R].set_scope("shared")
        _, ri = s[R].split(kk, factor=16)
        tx = te.thread_axis("threadIdx.x")
        s[R].bind(ri, tx)
        s[R].set_store_predicate(tx.var.equal(0))
    if inline_exp:
        s[E].compute_inline()
    else:
        s[E].compute_at(s[C], C.op.axis[0])
        s[E].set_scope("shared")
        _, ei = s[E].split(E.op.axis[1], factor=16)
        s[E].bind(ei, te.thread_axis("threadIdx.x"))
    a = _inputs((n, m), "float32") * 3
    (c,), text = _run(s, [A, C], [a])
    e = np.exp(a - a.max(1, keepdims=True))
    _close(c, e / e.sum(1, keepdims=True))
    assert text.count("tvm_thread_allreduce") == 2


def test_two_reductions_on_the_same_thread_index():
    n, m = 6, 37
    A = te.placeholder((n, m), "int32", name="A")
    k1 = te.reduce_axis((0, m), "k1")
    k2 = te.reduce_axis((0, m), "k2")
    S = te.compute((n,), lambda i: te.sum(A[i, k1], axis=k1), name="S")
    M = te.compute((n,), lambda i: te.max(A[i, k2], axis=k2), name="M")
    C = te.compute((n,), lambda i: S[i] - M[i], name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    for R, kk in ((S, k1), (M, k2)):
        s[R].compute_at(s[C], C.op.axis[0])
        _, ri = s[R].split(kk, factor=8)
        s[R].bind(ri, te.thread_axis("threadIdx.x"))
    a = _inputs((n, m), "int32")
    (c,), _ = _run(s, [A, C], [a])
    _close(c, a.sum(1) - a.max(1))


def test_two_reductions_on_one_thread_index_with_different_extents_rejected():
    n, m = 6, 37
    A = te.placeholder((n, m), "int32", name="A")
    k1 = te.reduce_axis((0, m), "k1")
    k2 = te.reduce_axis((0, m), "k2")
    S = te.compute((n,), lambda i: te.sum(A[i, k1], axis=k1), name="S")
    M = te.compute((n,), lambda i: te.max(A[i, k2], axis=k2), name="M")
    C = te.compute((n,), lambda i: S[i] - M[i], name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    for R, kk, f in ((S, k1, 8), (M, k2, 16)):
        s[R].compute_at(s[C], C.op.axis[0])
        _, ri = s[R].split(kk, factor=f)
        s[R].bind(ri, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="bound to threadIdx.x with extent 16, but axis k1.inner of stage S"):
        vtakit.lower(s, [A, C])


def test_a_reduction_of_cross_thread_reductions():
    """S sums over threadIdx.y the row maxima M, each an all-reduce over threadIdx.x."""
    n, m = 4, 20
    A = te.placeholder((n, m, m), "int32", name="A")
    k = te.reduce_axis((0, m), "k")
    r = te.reduce_axis((0, n), "r")
    M = te.compute((n, m), lambda i, j: te.max(A[i, j, k], axis=k), name="M")
    S = te.compute((1,), lambda z: te.sum(M[r, 3], axis=r), name="S")
    s = te.create_schedule(S.op)
    s[S].bind(r, te.thread_axis("threadIdx.y"))
    s[M].compute_at(s[S], r)
    _, mi = s[M].split(k, factor=8)
    s[M].bind(mi, te.thread_axis("threadIdx.x"))
    a = _inputs((n, m, m), "int32")
    (out,), _ = _run(s, [A, S], [a])
    _close(out, np.array([a[:, 3].max(1).sum()], "int32"))


# ---------------------------------------------------------------------------- symbolic shapes
def test_symbolic_reduction_extent():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), "int32", name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _bind_inner(s, B, k, 16)
    f = vtakit.lower(s, [A, B])
    for rows, cols in ((5, 37), (3, 1), (2, 64), (1, 15)):
        a = _inputs((rows, cols), "int32")
        b = np.full(rows, SENTINEL, "int32")
        run(f, a, b)
        np.testing.assert_array_equal(b, a.sum(1))


# ---------------------------------------------------------------------------- store predicates
def test_store_predicate_on_a_split_axis_bound_to_a_thread():
    """The predicate names a leaf of a split (bound to threadIdx.y); it named ``i.inner`` outside its
    scope before."""
    n, m = 13, 45
    A, k, B = _rows(n, m)
    s = te.create_schedule(B.op)
    _, ki = s[B].split(k, factor=16)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(ki, tx)
    s[B].set_store_predicate(te.all(xi.var < 2, tx.var.equal(0)))
    a = _inputs((n, m), "int32")
    (b,), _ = _run(s, [A, B], [a])
    _close(b, np.where(np.arange(n) % 4 < 2, a.sum(1), SENTINEL))


def test_store_predicate_on_the_per_thread_reduce_loop_rejected():
    A, k, B = _rows(6, 40)
    s = te.create_schedule(B.op)
    ko, _, _ = _bind_inner(s, B, k, 8, predicate=False)
    s[B].set_store_predicate(ko.var < 2)
    with pytest.raises(ScheduleError, match=r"stage B: the store predicate .* depends on the reduction loop\(s\) "
                                            r"k.outer, which each thread runs before the all-reduce over threadIdx.x"):
        vtakit.lower(s, [A, B])


@pytest.mark.parametrize("axis", ["root", "split_leaf"])
def test_store_predicate_on_an_ordinary_reduction_guards_the_update_only(axis):
    """TVM (ComputeLoopNest): the store predicate joins the main predicates, not the init
    predicates, so where it fails the output keeps the identity (before: the sentinel)."""
    n, m = 6, 10
    A, k, B = _rows(n, m)
    s = te.create_schedule(B.op)
    if axis == "root":
        s[B].set_store_predicate(B.op.axis[0] < 3)
        keep = np.arange(n) < 3
    else:
        _, xi = s[B].split(B.op.axis[0], factor=4)
        s[B].set_store_predicate(xi.var != 1)
        keep = np.arange(n) % 4 != 1
    a = _inputs((n, m), "int32")
    (b,), text = _run(s, [A, B], [a])
    _close(b, np.where(keep, a.sum(1), 0))


def test_store_predicate_on_the_reduce_axis_of_an_ordinary_reduction():
    """On the update only, a predicate on the reduce axis acts as ``where`` (it named ``k`` outside
    its scope when it also guarded the initialisation)."""
    A, k, B = _rows(6, 10)
    s = te.create_schedule(B.op)
    s[B].set_store_predicate(k < 4)
    a = _inputs((6, 10), "int32")
    (b,), _ = _run(s, [A, B], [a])
    _close(b, a[:, :4].sum(1))


def test_store_predicate_on_a_vectorized_data_axis_outside_the_threads():
    n, m = 8, 45
    A, k, B = _rows(n, m)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=16)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].reorder(xo, xi, ko, ki)
    s[B].vectorize(xi)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    a = _inputs((n, m), "int32")
    (b,), _ = _run(s, [A, B], [a])
    _close(b, a.sum(1))


def test_lowered_all_reduce_nodes_survive_the_printer_and_structural_equality():
    A, k, B = _rows(6, 40)
    s = te.create_schedule(B.op)
    _bind_inner(s, B, k, 8)
    f1, f2 = vtakit.lower(s, [A, B]), vtakit.lower(s, [A, B])
    assert str(f1) == str(f2)
    found = []
    ir.walk(f1.body, lambda n: found.append(n) if isinstance(n, ir.AllReduce) else None)
    assert len(found) == 1 and found[0].thread_tag == "threadIdx.x"


def test_store_predicate_naming_another_stages_axis_rejected():
    """It lowered to IR reading the consumer's loop variable outside its loop (found only when run)."""
    A, k, B = _rows(6, 10)
    C = te.compute((6,), lambda i: B[i] + 1, name="C")
    s = te.create_schedule(C.op)
    s[B].set_store_predicate(C.op.axis[0] < 2)
    with pytest.raises(ScheduleError, match=r"stage B: the store predicate \(i < 2\) names axis i of stage C"):
        vtakit.lower(s, [A, C])


@pytest.mark.parametrize("which", ["user_op_axis", "rfactored_op_axis"])
def test_store_predicate_on_the_rows_after_rfactor(which):
    A, k, B = _rows(6, 40)
    s = te.create_schedule(B.op)
    _, ki = s[B].split(k, factor=8)
    BF = s.rfactor(B, ki)
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(s[B].op.reduce_axis[0], tx)
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    row = B.op.axis[0] if which == "user_op_axis" else s[B].op.axis[0]
    s[B].set_store_predicate(te.all(tx.var.equal(0), row < 3))
    a = _inputs((6, 40), "int32")
    (b,), _ = _run(s, [A, B], [a])
    _close(b, np.where(np.arange(6) < 3, a.sum(1), SENTINEL))


# ---------------------------------------------------------------------------- one-thread groups
@pytest.mark.parametrize("how", ["split_factor_1", "axis_of_extent_1_with_where"])
def test_reduction_bound_to_a_single_thread(how):
    """A bound extent of 1: Simplify folded the thread index into the all-reduce (``over=0``) and the
    interpreter failed with an AttributeError; now there is nothing to combine and no all-reduce."""
    n, m = 5, 7 if how == "split_factor_1" else 1
    A, k, B = _rows(n, m, where=None if how == "split_factor_1" else (lambda i, k: i % 2 == 0))
    s = te.create_schedule(B.op)
    tx = te.thread_axis("threadIdx.x")
    if how == "split_factor_1":
        _, ki = s[B].split(k, factor=1)
        s[B].bind(ki, tx)
    else:
        s[B].bind(k, tx)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].set_store_predicate(tx.var.equal(0))
    a = _inputs((n, m), "int32")
    (b,), text = _run(s, [A, B], [a])
    want = a.sum(1) if how == "split_factor_1" else np.where(np.arange(n) % 2 == 0, a[:, 0], 0)
    _close(b, want)
    assert "tvm_thread_allreduce" not in text


def test_interpreter_names_a_folded_thread_index():
    """An all-reduce whose thread index was replaced by a constant: a CompileError, not an AttributeError."""
    buf = ir.Buffer("t", (1,), "int32", "local")
    zero = (ir.IntImm("int32", 0),)
    red = ir.AllReduce(te.sum.instantiate("int32"), ir.IntImm("int32", 3), ir.IntImm("bool", 1), buf, zero,
                       ir.IntImm("int32", 0), "threadIdx.x")
    out = ir.Buffer("out", (1,), "int32")
    msg = r"all-reduce over 0 \(not a thread variable\) \(threadIdx.x\) outside a loop"
    with pytest.raises(CompileError, match=msg):
        run(ir.PrimFunc("k", (out,), ir.Allocate(buf, red)), np.zeros(1, np.int32))


def test_store_predicate_and_compute_inline_exclude_each_other():
    """An inlined stage stores nothing: its store predicate was silently dropped."""
    A = te.placeholder((8,), "int32", name="A")
    P = te.compute((8,), lambda i: A[i] + 1, name="P")
    C = te.compute((8,), lambda i: P[i] * 2, name="C")
    s = te.create_schedule(C.op)
    s[P].set_store_predicate(P.op.axis[0] < 4)
    with pytest.raises(ScheduleError, match=r"stage P: cannot compute_inline a stage with a store predicate "
                                            r"\(\(i < 4\)\); an inlined stage stores nothing"):
        s[P].compute_inline()
    s2 = te.create_schedule(C.op)
    s2[P].compute_inline()
    with pytest.raises(ScheduleError, match="stage P: cannot set_store_predicate on an inlined stage"):
        s2[P].set_store_predicate(P.op.axis[0] < 4)
    s2[P].compute_root()
    s2[P].set_store_predicate(P.op.axis[0] < 4)
    a = _inputs((8,), "int32")
    (c,), _ = _run(s2, [A, C], [a])
    assert np.array_equal(c[:4], (a[:4] + 1) * 2)


def test_cross_thread_reduction_attached_after_another_ones_per_thread_loop():
    """P (an all-reduce over threadIdx.y) is attached at B's thread axis, which follows B's per-thread
    loop r.outer: P is computed inside that loop, a thread group nested in each threadIdx.x thread."""
    n, p, q = 3, 6, 12
    A = te.placeholder((n, p, q), "int32", name="A")
    r = te.reduce_axis((0, p), "r")
    c = te.reduce_axis((0, q), "c")
    P = te.compute((n, p), lambda i, j: te.sum(A[i, j, c], axis=c), name="P")
    B = te.compute((n,), lambda i: te.max(P[i, r], axis=r), name="B")
    s = te.create_schedule(B.op)
    _, ri = s[B].split(r, factor=2)
    s[B].bind(ri, te.thread_axis("threadIdx.x"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[P].compute_at(s[B], ri)
    _, ci = s[P].split(c, factor=4)
    s[P].bind(ci, te.thread_axis("threadIdx.y"))
    a = _inputs((n, p, q), "int32")
    (b,), text = _run(s, [A, B], [a])
    _close(b, a.sum(2).max(1))
    assert 'over=threadIdx.y "threadIdx.y"' in text


# ---------------------------------------------------------------------------- tensorized stages
def _tensorized_gemm():
    from vtakit.compiler.testing import toy_gemm_intrin

    A = te.placeholder((8, 32), "int32", name="A")
    Bm = te.placeholder((32, 8), "int32", name="Bm")
    k = te.reduce_axis((0, 32), "k")
    C = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * Bm[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    ko, ki = s[C].split(k, factor=8)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, toy_gemm_intrin(4, 4, 8, "reset_update"))
    return s, [A, Bm, C], C, io, ko


def test_store_predicate_on_a_tensorized_stage_rejected():
    """It was silently dropped (every row stored)."""
    s, args, C, io, _ = _tensorized_gemm()
    s[C].set_store_predicate(io.var < 1)
    with pytest.raises(ScheduleError, match=r"stage C: set_store_predicate is not supported on a tensorized stage "
                                            r"\(axis i.inner is tensorized\)"):
        vtakit.lower(s, args)


def test_tensorized_cross_thread_reduction_rejected():
    """The reduce axis outside the intrinsic bound to threadIdx.x lowered to a plain thread loop in
    which every thread updated the same outputs (a race on a GPU; the interpreter serialised it)."""
    s, args, C, _, ko = _tensorized_gemm()
    s[C].bind(ko, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="stage C: reduction axis k.outer is bound to threadIdx.x \\(a cross-thread "
                                            "reduction\\) and axis i.inner is tensorized"):
        vtakit.lower(s, args)


# ---------------------------------------------------------------------------- random schedules
_RANDOM_REDUCERS = {
    "sum": (te.sum, lambda a, mask: np.where(mask, a, 0).sum(1, dtype=a.dtype)),
    "max": (te.max, lambda a, mask: np.where(mask, a, np.iinfo(a.dtype).min).max(1)),
    "min": (te.min, lambda a, mask: np.where(mask, a, np.iinfo(a.dtype).max).min(1)),
}


def _random_case(seed):
    """A row reduction with a random shape (reduce minimum, tails), reducer, dtype, ``where``, thread
    binding (inner/outer part of a split, whole axis, rfactor), row split and binding, leaf order,
    cache level and store predicate; the output and numpy's, pre-filled with the sentinel."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 10)), int(rng.integers(1, 70))
    lo = min(int(rng.integers(0, 4)) if rng.random() < 0.3 else 0, m - 1)
    red = str(rng.choice(list(_RANDOM_REDUCERS)))
    dtype = str(rng.choice(["int32", "int8"])) if red != "sum" else "int32"
    wkind, mod = str(rng.choice(["none", "k", "ik"])), int(rng.integers(2, 5))
    reducer, ref = _RANDOM_REDUCERS[red]
    A = te.placeholder((n, m), dtype, name="A")
    k = te.reduce_axis((lo, m), "k")
    if wkind == "none":
        B = te.compute((n,), lambda i: reducer(A[i, k], axis=k), name="B")
    else:
        cond = (lambda i: k % mod != 1) if wkind == "k" else (lambda i: (k + i) % mod != 0)
        B = te.compute((n,), lambda i: reducer(A[i, k], axis=k, where=cond(i)), name="B")
    s = te.create_schedule(B.op)
    mode = str(rng.choice(["inner", "outer", "rfactor", "whole"]))
    tx = te.thread_axis(str(rng.choice(["threadIdx.x", "threadIdx.y"])))
    threads = int(rng.choice([1, 2, 3, 4, 8, 16, 32]))
    cache = str(rng.choice(["none", "local", "shared"])) if mode in ("inner", "outer") else "none"
    AC = s.cache_read(A, cache, [B]) if cache != "none" else None
    leaves = {}
    if mode == "whole":
        s[B].bind(k, tx)
        threads = m - lo
    elif mode == "inner":
        leaves["ko"], leaves["ki"] = s[B].split(k, factor=threads)
        s[B].bind(leaves["ki"], tx)
    elif mode == "outer":
        leaves["ko"], leaves["ki"] = s[B].split(k, nparts=threads)
        s[B].bind(leaves["ko"], tx)
    else:
        _, ki = s[B].split(k, factor=threads)
        BF = s.rfactor(B, ki, factor_axis=int(rng.integers(0, 2)))
        s[B].bind(s[B].op.reduce_axis[0], tx)
        if rng.random() < 0.7:
            s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    rows = s[B].op.axis[0]
    if rng.random() < 0.5:
        xo, leaves["xi"] = s[B].split(rows, factor=int(rng.integers(1, 5)))
        s[B].bind(xo, te.thread_axis("blockIdx.x"))
        if rng.random() < 0.5:
            s[B].bind(leaves["xi"], te.thread_axis("threadIdx.y" if tx.thread_tag == "threadIdx.x" else "threadIdx.x"))
    else:
        s[B].bind(rows, te.thread_axis("blockIdx.x"))
    if mode in ("inner", "outer") and rng.random() < 0.5:
        order = list(leaves.values())
        rng.shuffle(order)
        s[B].reorder(*order)
    if AC is not None:
        s[AC].compute_at(s[B], list(leaves.values())[int(rng.integers(0, len(leaves)))])
    if rng.random() < 0.6:
        s[B].set_store_predicate(tx.var.equal(int(rng.integers(0, max(1, threads)))))
    a = rng.integers(-100, 100, (n, m)).astype(dtype)
    kk, ii = np.arange(m)[None], np.arange(n)[:, None]
    mask = np.broadcast_to(kk >= lo, (n, m))
    if wkind == "k":
        mask = mask & (kk % mod != 1)
    elif wkind == "ik":
        mask = mask & ((kk + ii) % mod != 0)
    (b,), _ = _run(s, [A, B], [a])
    return b, ref(a, mask)


@pytest.mark.parametrize("block", range(4))
def test_random_schedules(block):
    for seed in range(block * 60, (block + 1) * 60):
        got, want = _random_case(seed)
        np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}")


@pytest.mark.slow
def test_random_schedules_campaign():
    for seed in range(240, 5240):
        got, want = _random_case(seed)
        np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}")


def test_late_stage_goes_inside_the_last_per_thread_loop_before_its_leaf_only():
    """Leaf order row, k.outer, k.inner.inner (threads), k.inner.outer: a cache at the thread axis is
    bounded for one k.outer iteration and over all of k.inner.outer, so it is filled inside k.outer
    and outside k.inner.outer (not once per k.inner.outer iteration)."""
    n, m = 4, 60
    A, k, B = _rows(n, m)
    s = te.create_schedule(B.op)
    AL = s.cache_read(A, "local", [B])
    ko, kr = s[B].split(k, factor=15)
    km, ki = s[B].split(kr, factor=5)
    s[B].reorder(B.op.axis[0], ko, ki, km)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[AL].compute_at(s[B], ki)
    a = _inputs((n, m), "int32")
    (b,), text = _run(s, [A, B], [a])
    _close(b, a.sum(1))
    lines = [line.strip() for line in text.splitlines()]
    at = {key: next(i for i, line in enumerate(lines) if line.startswith(key))
          for key in ("for (k.outer", "allocate A.local", "for (k.inner.outer")}
    assert at["for (k.outer"] < at["allocate A.local"] < at["for (k.inner.outer"]


@pytest.mark.parametrize("scope", ["local", "shared"])
def test_symbolic_shapes_with_a_cache_at_the_thread_axis(scope):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), "int32", name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k] * 2, axis=k), name="B")
    s = te.create_schedule(B.op)
    AC = s.cache_read(A, scope, [B])
    _, ki, _ = _bind_inner(s, B, k, 8)
    s[AC].compute_at(s[B], ki)
    f = vtakit.lower(s, [A, B])
    for rows, cols in ((3, 5), (2, 40), (1, 1), (4, 17)):
        a = _inputs((rows, cols), "int32", seed=cols)
        b = np.full(rows, SENTINEL, "int32")
        run(f, a, b)
        np.testing.assert_array_equal(b, (a * 2).sum(1))
