"""Cross-thread reductions (TVM's "Reduction" tutorial): a reduce axis bound to threadIdx.*.

The schedules lower to ``tvm_thread_allreduce`` (:class:`vtakit.compiler.ir.AllReduce`) and run
in the reference interpreter, which executes the reduction's threads cooperatively (each with
private storage, meeting at the all-reduce); results are compared with numpy, integers exactly.
The CPU backend has no GPU threads, so these kernels have no llvm build (tested: a clear error).
"""

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ir
from vtakit.compiler.interpreter import run
from vtakit.errors import CompileError, ScheduleError


def _inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-1, 1, shape).astype(dtype)
    return rng.integers(-50, 50, shape).astype(dtype)


def _run(s, args, inputs):
    """Lower, print, run in the interpreter; the output array(s) and the printed IR."""
    f = vtakit.lower(s, args)
    text = str(f)
    outs = [np.zeros(tuple(int(x) for x in t.shape), t.dtype) for t in args[len(inputs):]]
    run(f, *inputs, *outs)
    return outs, text


def _assert_equal(got, want):
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def row_reduce(n, m, dtype="float32", reducer=te.sum):
    A = te.placeholder((n, m), dtype, name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: reducer(A[i, k], axis=k), name="B")
    return A, B


def tutorial_rfactor(A, B, factor=16, rows=32, predicate=True):
    """The tutorial's schedule: rfactor on the inner reduce axis, threads over its partial sums."""
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=factor)
    BF = s.rfactor(B, ki)
    xo, xi = s[B].split(s[B].op.axis[0], factor=rows)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(s[B].op.reduce_axis[0], tx)
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    if predicate:
        s[B].set_store_predicate(tx.var.equal(0))
    return s


def direct_bind(A, B, factor=16, rows=8, predicate=True):
    """No rfactor: the inner part of the split reduce axis is bound to threadIdx.x directly."""
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=factor)
    xo, xi = s[B].split(B.op.axis[0], factor=rows)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(ki, tx)
    if predicate:
        s[B].set_store_predicate(tx.var.equal(0))
    return s


_REF = {"sum": lambda a: a.sum(axis=1, dtype=a.dtype), "max": lambda a: a.max(axis=1),
        "min": lambda a: a.min(axis=1)}
_REDUCERS = {"sum": te.sum, "max": te.max, "min": te.min}


@pytest.mark.parametrize("n,m", [(64, 128), (50, 100), (7, 5), (33, 17)])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("schedule", [tutorial_rfactor, direct_bind], ids=["rfactor", "direct"])
def test_tutorial_schedules_sum(schedule, dtype, n, m):
    A, B = row_reduce(n, m, dtype)
    s = schedule(A, B)
    a = _inputs((n, m), dtype)
    (b,), text = _run(s, [A, B], [a])
    _assert_equal(b, _REF["sum"](a))
    assert "tvm_thread_allreduce" in text and "(threadIdx.x == 0)" in text


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int32"])
@pytest.mark.parametrize("schedule", [tutorial_rfactor, direct_bind], ids=["rfactor", "direct"])
def test_max_min(schedule, dtype, name):
    n, m = 21, 45  # neither divides: masked threads must contribute the identity
    A, B = row_reduce(n, m, dtype, _REDUCERS[name])
    s = schedule(A, B)
    a = _inputs((n, m), dtype, seed=3)
    (b,), _ = _run(s, [A, B], [a])
    _assert_equal(b, _REF[name](a))


def test_tutorial_ir_shape():
    """The lowered tutorial reads like TVM's: per-thread partial sums in a local rf buffer, the
    all-reduce into a local temporary, one thread storing."""
    A, B = row_reduce(64, 128)
    s = tutorial_rfactor(A, B)
    f = vtakit.lower(s, [A, B])
    text = str(f)
    lines = [line.strip() for line in text.splitlines()]
    assert 'for thread_binding (threadIdx.x, 0, 16) "threadIdx.x":' in lines
    assert "allocate B.rf[float32 * (1)] in local" in lines
    assert "// attr [comm_reducer sum(x, y) = (x + y), identity 0.0f] reduce_scope" in lines
    assert 'reduce_temp[0] = tvm_thread_allreduce(B.rf[0], where=True, over=threadIdx.x "threadIdx.x")' in lines
    assert lines.index("if (threadIdx.x == 0):") == len(lines) - 3
    assert sum(isinstance(n, ir.AllReduce) for n in _nodes(f.body)) == 1


def _nodes(stmt):
    out = []
    ir.walk(stmt, out.append)
    return out


@pytest.mark.parametrize("schedule", [tutorial_rfactor, direct_bind], ids=["rfactor", "direct"])
def test_without_store_predicate_every_thread_stores_the_same(schedule):
    A, B = row_reduce(19, 40, "int32")
    s = schedule(A, B, predicate=False)
    a = _inputs((19, 40), "int32", seed=5)
    (b,), text = _run(s, [A, B], [a])
    _assert_equal(b, _REF["sum"](a))
    assert "threadIdx.x == 0" not in text


def test_whole_reduce_axis_on_threads():
    """No split: every reduction iteration is one thread (the thread axis has a fixed extent)."""
    A, B = row_reduce(6, 32, "int32")
    s = te.create_schedule(B.op)
    tx = te.thread_axis((0, 32), "threadIdx.x")
    s[B].bind(B.op.reduce_axis[0], tx)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    a = _inputs((6, 32), "int32")
    (b,), text = _run(s, [A, B], [a])
    _assert_equal(b, _REF["sum"](a))
    assert "for (" not in text  # no serial loop is left


def test_threads_on_the_outer_part_of_the_reduction():
    """The outer part of the split is on threads, the inner part stays a per-thread loop."""
    A, B = row_reduce(10, 37, "float32")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], nparts=8)
    s[B].bind(ko, te.thread_axis("threadIdx.x"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    a = _inputs((10, 37), "float32", seed=1)
    (b,), text = _run(s, [A, B], [a])
    _assert_equal(b, _REF["sum"](a))
    assert "normal_reduce_temp" in text


def test_reduction_on_threadidx_y_rows_on_threadidx_x():
    A, B = row_reduce(12, 30, "int32")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=8)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].reorder(xo, ki, xi, ko)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    ty = te.thread_axis("threadIdx.y")
    s[B].bind(ki, ty)
    s[B].set_store_predicate(ty.var.equal(0))
    a = _inputs((12, 30), "int32", seed=2)
    (b,), _ = _run(s, [A, B], [a])
    _assert_equal(b, _REF["sum"](a))


def test_two_reduce_axes_fused_onto_threads():
    n, p, q = 5, 6, 7
    A = te.placeholder((n, p, q), "int32", name="A")
    r = te.reduce_axis((0, p), "r")
    c = te.reduce_axis((0, q), "c")
    B = te.compute((n,), lambda i: te.sum(A[i, r, c], axis=[r, c]), name="B")
    s = te.create_schedule(B.op)
    fused = s[B].fuse(r, c)
    fo, fi = s[B].split(fused, factor=16)
    s[B].bind(fi, te.thread_axis("threadIdx.x"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    a = _inputs((n, p, q), "int32")
    (b,), _ = _run(s, [A, B], [a])
    _assert_equal(b, a.sum(axis=(1, 2)))


@pytest.mark.parametrize("schedule", [tutorial_rfactor, direct_bind], ids=["rfactor", "direct"])
def test_where_and_init(schedule):
    n, m = 9, 50
    A = te.placeholder((n, m), "int32", name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k, where=k % 3 == 1, init=1000), name="B")
    s = schedule(A, B)
    a = _inputs((n, m), "int32", seed=4)
    (b,), _ = _run(s, [A, B], [a])
    _assert_equal(b, 1000 + a[:, 1::3].sum(axis=1))


def test_custom_comm_reducer_wraps_exactly():
    """A product reducer on int8 (two's-complement wrap-around) over threads."""
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")
    A, B = row_reduce(11, 23, "int8", prod)
    s = direct_bind(A, B, factor=8, rows=4)
    a = _inputs((11, 23), "int8", seed=6) % 5 + 1
    a = a.astype("int8")
    (b,), _ = _run(s, [A, B], [a])
    want = np.ones(11, np.int64)
    for j in range(23):
        want = ((want * a[:, j]) + 128) % 256 - 128
    np.testing.assert_array_equal(b, want.astype("int8"))


def test_consumer_of_a_cross_thread_reduction():
    """A softmax-style normaliser: a max over threads feeds an elementwise stage."""
    n, m = 6, 40
    A = te.placeholder((n, m), "float32", name="A")
    k = te.reduce_axis((0, m), "k")
    M = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="M")
    C = te.compute((n, m), lambda i, j: A[i, j] - M[i], name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[M].split(M.op.reduce_axis[0], factor=16)
    s[M].bind(ki, te.thread_axis("threadIdx.x"))
    s[M].bind(M.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    a = _inputs((n, m), "float32")
    (c,), _ = _run(s, [A, C], [a])
    _assert_equal(c, a - a.max(axis=1, keepdims=True))


@pytest.mark.parametrize("seed", range(12))
def test_random_shapes_and_factors(seed):
    rng = np.random.default_rng(100 + seed)
    n, m = int(rng.integers(1, 40)), int(rng.integers(1, 70))
    dtype = ["float32", "int32", "int16"][seed % 3]
    name = ["sum", "max", "min"][(seed // 3) % 3]
    factor, rows = int(rng.integers(1, 33)), int(rng.integers(1, 9))
    A, B = row_reduce(n, m, dtype, _REDUCERS[name])
    schedule = [tutorial_rfactor, direct_bind][seed % 2]
    s = schedule(A, B, factor=factor, rows=rows, predicate=bool(seed % 4))
    a = _inputs((n, m), dtype, seed=seed)
    (b,), _ = _run(s, [A, B], [a])
    _assert_equal(b, _REF[name](a))


# ---------------------------------------------------------------------------- set_store_predicate
def test_store_predicate_on_an_elementwise_stage():
    A = te.placeholder((10,), "int32", name="A")
    B = te.compute((10,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    s[B].set_store_predicate(B.op.axis[0] % 3 != 0)
    a = _inputs((10,), "int32")
    (b,), _ = _run(s, [A, B], [a])
    want = np.where(np.arange(10) % 3 != 0, a * 2, 0)
    np.testing.assert_array_equal(b, want)


def test_store_predicate_errors():
    A, B = row_reduce(4, 8)
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="stage B: set_store_predicate needs a boolean condition, got"):
        s[B].set_store_predicate(B.op.axis[0] + 1)
    with pytest.raises(ScheduleError, match="cannot set_store_predicate the placeholder stage A"):
        s[A].set_store_predicate(B.op.axis[0] < 1)


# ---------------------------------------------------------------------------- what stays unsupported
def test_reduce_axis_only_on_threadidx():
    A, B = row_reduce(4, 8)
    s = te.create_schedule(B.op)
    k = B.op.reduce_axis[0]
    for tag in ("blockIdx.x", "vthread", "cthread"):
        with pytest.raises(ScheduleError, match=f"stage B: cannot bind the reduction axis k to {tag}; a reduction "
                                                "axis can only be bound to threadIdx"):
            s[B].bind(k, te.thread_axis(tag))


def test_two_thread_indices_on_one_reduction_rejected():
    A, B = row_reduce(4, 64)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=8)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="stage B: cannot bind the reduction axis k.outer to threadIdx.y: "
                                            "reduction axis k.inner is already bound to threadIdx.x"):
        s[B].bind(ko, te.thread_axis("threadIdx.y"))


def test_same_thread_index_on_a_data_axis_and_the_reduction_rejected():
    A, B = row_reduce(4, 64)
    s = te.create_schedule(B.op)
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(B.op.axis[0], tx)
    with pytest.raises(ScheduleError, match="thread axis threadIdx.x is already bound to axis i"):
        s[B].bind(B.op.reduce_axis[0], te.thread_axis("threadIdx.x"))


def test_reduce_axis_of_another_stage_rejected():
    """A reduce axis bound on a stage that does not reduce over it (an elementwise stage)."""
    A, B = row_reduce(4, 8)
    C = te.compute((4,), lambda i: B[i] + 1, name="C")
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="stage C: axis k does not belong to this stage"):
        s[C].bind(B.op.reduce_axis[0], te.thread_axis("threadIdx.x"))


def test_thread_limit_applies_to_the_reduction():
    A, B = row_reduce(2, 4096)
    s = te.create_schedule(B.op)
    s[B].bind(B.op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"stage B: axis k is bound to threadIdx.x with extent 4096, above "
                                            r"the limit of 1024; split it and bind the inner part \(a reduction"):
        vtakit.lower(s, [A, B])


@pytest.mark.parametrize("schedule", [tutorial_rfactor, direct_bind], ids=["rfactor", "direct"])
def test_cpu_build_rejected(schedule):
    A, B = row_reduce(16, 32)
    s = schedule(A, B)
    with pytest.raises(CompileError, match="is bound to 'blockIdx.x', which the CPU has no hardware for"):
        vtakit.build(s, [A, B], target="llvm")


def test_cpu_build_rejected_threads_only():
    A, B = row_reduce(3, 32)
    s = te.create_schedule(B.op)
    s[B].bind(B.op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(CompileError, match="is bound to 'threadIdx.x', which the CPU has no hardware for"):
        vtakit.build(s, [A, B], target="llvm")


# ---------------------------------------------------------------------------- interpreter semantics
def _kernel(guard_threads=None, outside=False):
    """A hand-written all-reduce kernel: out[0] = sum over 8 threads of inp[tx]."""
    inp = ir.Buffer("inp", (8,), "int32")
    out = ir.Buffer("out", (1,), "int32")
    tx = ir.Var("threadIdx.x")
    temp = ir.Buffer("t", (1,), "int32", "local")
    zero = (ir.IntImm("int32", 0),)
    comb = te.sum.instantiate("int32")
    red: ir.Stmt = ir.AllReduce(comb, ir.BufferLoad(inp, (tx,)), ir.IntImm("bool", 1), temp, zero, tx, "threadIdx.x")
    if guard_threads is not None:
        red = ir.IfThenElse(ir.LT(tx, ir.IntImm("int32", guard_threads)), red)
    body = ir.Allocate(temp, ir.seq(red, ir.IfThenElse(ir.EQ(tx, ir.IntImm("int32", 0)),
                                                        ir.BufferStore(out, ir.BufferLoad(temp, zero), zero))))
    if outside:
        body = ir.LetStmt(tx, ir.IntImm("int32", 0), body)
    else:
        body = ir.For(tx, ir.IntImm("int32", 0), ir.IntImm("int32", 8), ir.ForKind.THREAD_BINDING, body,
                      thread_tag="threadIdx.x")
    return ir.PrimFunc("k", (inp, out), body)


def test_interpreter_all_threads_contribute_before_any_reads():
    inp = np.arange(1, 9, dtype=np.int32)
    out = np.zeros(1, np.int32)
    run(_kernel(), inp, out)
    assert out[0] == 36


def test_interpreter_rejects_a_divergent_all_reduce():
    with pytest.raises(CompileError, match=r"divergent all-reduce over threadIdx.x \(threadIdx.x\): thread "
                                           r"threadIdx.x=3 finished while others wait at the all-reduce into t; "
                                           r"every thread"):
        run(_kernel(guard_threads=3), np.arange(8, dtype=np.int32), np.zeros(1, np.int32))


def test_interpreter_rejects_an_all_reduce_outside_its_thread_loop():
    with pytest.raises(CompileError, match="all-reduce over threadIdx.x .* outside a loop bound to it"):
        run(_kernel(outside=True), np.arange(8, dtype=np.int32), np.zeros(1, np.int32))


def test_interpreter_rejects_interleaved_groups():
    """An all-reduce of the outer thread group inside a loop that reduces over its own threads."""
    inp = ir.Buffer("inp", (8,), "int32")
    tx, ty = ir.Var("threadIdx.x"), ir.Var("threadIdx.y")
    temp = ir.Buffer("t", (1,), "int32", "local")
    zero = (ir.IntImm("int32", 0),)
    comb = te.sum.instantiate("int32")
    one = ir.IntImm("bool", 1)
    inner = ir.seq(ir.AllReduce(comb, ir.BufferLoad(inp, (tx,)), one, temp, zero, ty, "threadIdx.y"),
                   ir.AllReduce(comb, ir.BufferLoad(inp, (tx,)), one, temp, zero, tx, "threadIdx.x"))
    loop_y = ir.For(ty, ir.IntImm("int32", 0), ir.IntImm("int32", 2), ir.ForKind.THREAD_BINDING, inner,
                    thread_tag="threadIdx.y")
    body = ir.For(tx, ir.IntImm("int32", 0), ir.IntImm("int32", 8), ir.ForKind.THREAD_BINDING,
                  ir.Allocate(temp, loop_y), thread_tag="threadIdx.x")
    with pytest.raises(CompileError, match="an all-reduce over threadIdx.x inside the threadIdx.y loop threadIdx.y, "
                                           "which reduces over its own threads"):
        run(ir.PrimFunc("k", (inp,), body), np.arange(8, dtype=np.int32))


# ---------------------------------------------------------------------------- with other primitives and passes
def _sum_rows(n, m, dtype="int32"):
    A, B = row_reduce(n, m, dtype)
    return A, B, te.create_schedule(B.op)


def _check_rows(s, A, B, dtype="int32", seed=0):
    n, m = (int(x) for x in A.shape)
    a = _inputs((n, m), dtype, seed)
    (b,), text = _run(s, [A, B], [a])
    _assert_equal(b, _REF["sum"](a))
    return text


def test_unrolled_per_thread_loop():
    A, B, s = _sum_rows(10, 70)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    s[B].unroll(ko)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    text = _check_rows(s, A, B)
    assert "k.outer" not in text  # unrolled away


def test_rows_on_virtual_threads():
    """InjectVirtualThread splits the private temporaries per virtual thread, all-reduces included."""
    A, B, s = _sum_rows(12, 40)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=8)
    xo, xi = s[B].split(B.op.axis[0], factor=2)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("vthread"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    text = _check_rows(s, A, B)
    assert "reduce_temp[1] = tvm_thread_allreduce" in text


def test_cooperative_fetch_into_shared_then_all_reduce():
    A, B, s = _sum_rows(8, 64, "float32")
    AS = s.cache_read(A, "shared", [B])
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(ki, tx)
    s[AS].compute_at(s[B], B.op.axis[0])
    fo, fi = s[AS].split(s[AS].op.axis[1], factor=16)
    s[AS].bind(fi, te.thread_axis("threadIdx.x"))
    s[B].set_store_predicate(tx.var.equal(0))
    _check_rows(s, A, B, "float32")


def test_loop_partition_enabled():
    from vtakit.compiler.transform import PassContext

    A, B = row_reduce(10, 70, "int32")
    s = direct_bind(A, B)
    with PassContext(config={"tir.LoopPartition.partition_const_loop": True}):
        _check_rows(s, A, B)


def test_symbolic_rows():
    n = te.var("n")
    A = te.placeholder((n, 50), "int32", name="A")
    k = te.reduce_axis((0, 50), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    f = vtakit.lower(direct_bind(A, B), [A, B])
    for rows in (13, 1):
        a, b = _inputs((rows, 50), "int32"), np.zeros(rows, "int32")
        run(f, a, b)
        np.testing.assert_array_equal(b, a.sum(axis=1))


@pytest.mark.parametrize("attach", [True, False], ids=["rf_at_threads", "rf_at_root"])
def test_rfactor_factor_axis_and_placement(attach):
    A, B, s = _sum_rows(20, 50)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=8)
    BF = s.rfactor(B, ki, factor_axis=1)
    s[B].bind(s[B].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    if attach:
        s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    _check_rows(s, A, B)


def test_nested_cross_thread_reductions():
    """The rfactor stage, computed per threadIdx.x thread, is itself an all-reduce over threadIdx.y."""
    A, B, s = _sum_rows(5, 100)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=8)
    BF = s.rfactor(B, ki)
    s[B].bind(s[B].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    oo, oi = s[BF].split(s[BF].op.reduce_axis[0], factor=4)
    s[BF].bind(oi, te.thread_axis("threadIdx.y"))
    text = _check_rows(s, A, B)
    assert 'over=threadIdx.y "threadIdx.y"' in text and 'over=threadIdx.x "threadIdx.x"' in text


def test_reduction_attached_in_a_consumer_kernel():
    """A row sum in shared memory, attached in its consumer's block loop, then a division."""
    n, m = 6, 40
    A = te.placeholder((n, m), "float32", name="A")
    k = te.reduce_axis((0, m), "k")
    M = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="M")
    C = te.compute((n, m), lambda i, j: A[i, j] / M[i], name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].bind(ji, te.thread_axis("threadIdx.x"))
    s[M].compute_at(s[C], C.op.axis[0])
    s[M].set_scope("shared")
    ko, ki = s[M].split(M.op.reduce_axis[0], factor=8)
    tx = te.thread_axis("threadIdx.x")
    s[M].bind(ki, tx)
    s[M].set_store_predicate(tx.var.equal(0))
    a = _inputs((n, m), "float32") + 2
    (c,), text = _run(s, [A, C], [a])
    _assert_equal(c, a / a.sum(axis=1, keepdims=True))
    assert "allocate M[float32 * (1)] in shared" in text
