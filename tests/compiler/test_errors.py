"""Invalid expressions, schedules and lowering requests raise clear ScheduleError / CompileError."""

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ir
from vtakit.compiler.build import build, register_target
from vtakit.compiler.interpreter import run
from vtakit.compiler.scope import MemoryInfo, register_memory_scope
from vtakit.compiler.testing import toy_gemm_intrin
from vtakit.compiler.transform import PassContext
from vtakit.errors import CompileError, MemoryAccessError, ScheduleError


def matmul(n=8, m=8, l=8, dtype="int32"):
    A = te.placeholder((n, l), dtype, name="A")
    B = te.placeholder((l, m), dtype, name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def pipeline():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: A[i] * 3.0, name="D")
    return A, B, C, D


# ---------------------------------------------------------------------------- schedule primitives
def test_split_of_already_split_axis_names_stage_and_axis():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match="stage C: axis i was already split"):
        s[C].split(C.op.axis[0], factor=4)


@pytest.mark.parametrize("kw", [dict(factor=0), dict(factor=2.5), dict(), dict(factor=2, nparts=2)])
def test_split_needs_one_positive_integer(kw):
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="stage C: split of axis i"):
        s[C].split(C.op.axis[0], **kw)


def test_reorder_with_axis_of_another_stage():
    A, B, C, D = pipeline()
    s = te.create_schedule([C.op, D.op])
    with pytest.raises(ScheduleError, match="stage C: axis i does not belong to this stage"):
        s[C].reorder(D.op.axis[0])


def test_reorder_duplicate_axis():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="stage C: reorder got an axis twice"):
        s[C].reorder(C.op.axis[0], C.op.axis[0])


def test_fuse_needs_adjacent_axes_of_one_kind():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="stage C: fuse needs adjacent axes"):
        s[C].fuse(C.op.axis[0], C.op.reduce_axis[0])
    with pytest.raises(ScheduleError, match="cannot fuse data-parallel and reduction"):
        s[C].fuse(C.op.axis[1], C.op.reduce_axis[0])
    with pytest.raises(ScheduleError, match="at least one axis"):
        s[C].fuse()


def test_compute_at_into_non_consumer():
    A, B, C, D = pipeline()
    s = te.create_schedule([C.op, D.op])
    with pytest.raises(ScheduleError, match="stage B: cannot compute_at stage D, which does not consume B"):
        s[B].compute_at(s[D], D.op.axis[0])


def test_compute_at_axis_of_other_stage_and_self_and_output():
    A, B, C, D = pipeline()
    s = te.create_schedule([C.op, D.op])
    with pytest.raises(ScheduleError, match="stage B: compute_at axis i is not a loop axis of stage C"):
        s[B].compute_at(s[C], D.op.axis[0])
    with pytest.raises(ScheduleError, match="cannot compute_at itself"):
        s[B].compute_at(s[B], B.op.axis[0])
    with pytest.raises(ScheduleError, match="expects a stage"):
        s[B].compute_at(C, C.op.axis[0])
    with pytest.raises(ScheduleError, match="stage C: cannot compute_inline an output"):
        s[C].compute_inline()


def test_compute_inline_of_reduction():
    A, B, C = matmul()
    D = te.compute(C.shape, lambda i, j: C[i, j] + 1, name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match="stage C: cannot compute_inline a reduction"):
        s[C].compute_inline()


def test_placeholder_stage_has_no_loops():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="placeholder stage A"):
        s[A].compute_inline()
    with pytest.raises(ScheduleError, match="not part of this schedule"):
        s[te.placeholder((2,), name="Z")]


def test_bind_errors():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    tx = te.thread_axis("threadIdx.x")
    with pytest.raises(ScheduleError, match="needs te.thread_axis"):
        s[C].bind(C.op.axis[0], C.op.axis[1])
    with pytest.raises(ScheduleError, match="stage C: cannot bind the reduction axis k to blockIdx.x"):
        s[C].bind(C.op.reduce_axis[0], te.thread_axis("blockIdx.x"))  # threadIdx.*: a cross-thread reduction
    s[C].bind(C.op.axis[0], tx)
    with pytest.raises(ScheduleError, match="thread axis threadIdx.x is already bound to axis i"):
        s[C].bind(C.op.axis[1], tx)
    with pytest.raises(CompileError, match="thread_axis needs a tag"):
        te.thread_axis()


def test_bind_extent_mismatch_at_lowering():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis((0, 4), "threadIdx.x"))
    with pytest.raises(ScheduleError, match="axis i has extent 8 but is bound to thread axis threadIdx.x of extent 4"):
        vtakit.lower(s, [A, B, C])


def test_annotation_conflicts():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    s[C].parallel(C.op.axis[0])
    with pytest.raises(ScheduleError, match="stage C: axis i is already parallel, cannot vectorize"):
        s[C].vectorize(C.op.axis[0])
    with pytest.raises(ScheduleError, match="cannot parallelize the reduction axis k"):
        s[C].parallel(C.op.reduce_axis[0])
    with pytest.raises(ScheduleError, match="stage C: cannot vectorize the reduction axis k"):
        s[C].vectorize(C.op.reduce_axis[0])
    with pytest.raises(ScheduleError, match="already parallel"):
        s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    with pytest.raises(ScheduleError, match="pragma key"):
        s[C].pragma(C.op.axis[1], "")
    with pytest.raises(ScheduleError, match="scope must be a non-empty string"):
        s[C].set_scope("")


def test_cache_read_write_errors():
    A, B, C, D = pipeline()
    s = te.create_schedule([C.op, D.op])
    with pytest.raises(ScheduleError, match="stage D does not read B"):
        s.cache_read(B, "shared", [D])
    with pytest.raises(ScheduleError, match="no readers"):
        s.cache_read(B, "shared", [])
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match="stage C: cache_write must come before"):
        s.cache_write(C, "local")


# ---------------------------------------------------------------------------- tensorize
def tiled(intrin, split_k=None):
    A, B, C = matmul(8, 8, 16)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    if split_k:
        ko, ki = s[C].split(C.op.reduce_axis[0], factor=split_k)
        s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, intrin)
    return s, [A, B, C]


def test_tensorize_body_mismatch():
    a = te.placeholder((4, 16), "int32", name="a")
    b = te.placeholder((16, 4), "int32", name="b")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, k] + b[k, j], axis=k), name="c")
    intrin = te.decl_tensor_intrin(c.op, lambda ins, outs: te.call_intrin("int32", "nop"),
                                   default_buffer_params=dict(offset_factor=1, strides=[te.var("s"), 1]))
    s, args = tiled(intrin)
    with pytest.raises(ScheduleError, match="stage C: tensorize at axis i.inner .* failed to match the compute"):
        vtakit.lower(s, args)


def test_tensorize_shape_mismatch_and_missing_update():
    s, args = tiled(toy_gemm_intrin(4, 4, 8, "body"))
    with pytest.raises(ScheduleError, match="reduce axis k covers 16 but the intrinsic's k has extent 8"):
        vtakit.lower(s, args)
    s, args = tiled(toy_gemm_intrin(4, 4, 8, "body"), split_k=8)
    with pytest.raises(ScheduleError, match="needs reduce_update"):
        vtakit.lower(s, args)


def test_tensorize_region_must_divide():
    A, B, C = matmul(10, 8, 16)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[C].tensorize(ii, toy_gemm_intrin(4, 4, 16, "body"))
    with pytest.raises(ScheduleError, match="must divide its axes evenly"):
        vtakit.lower(s, [A, B, C])


def test_tensorize_scope_and_offset_factor_checks():
    a = te.placeholder((4, 16), "int32", name="a")
    b = te.placeholder((16, 4), "int32", name="b")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    strided = dict(strides=[te.var("s"), 1])
    scoped = te.decl_tensor_intrin(c.op, lambda ins, outs: te.call_intrin("int32", "nop"), binds={
        a: te.decl_buffer(a.shape, "int32", "a", scope="local.inp", offset_factor=1, **strided)},
        default_buffer_params=dict(offset_factor=1, **strided))
    s, args = tiled(scoped)
    with pytest.raises(ScheduleError, match="expects a in scope 'local.inp', but A is in scope 'global'"):
        vtakit.lower(s, args)
    aligned = te.decl_tensor_intrin(c.op, lambda ins, outs: te.call_intrin("int32", "nop"),
                                    default_buffer_params=dict(offset_factor=64, **strided))
    s, args = tiled(aligned)
    with pytest.raises(CompileError, match="not provably a multiple of its offset_factor 64"):
        vtakit.lower(s, args)
    fixed = te.decl_tensor_intrin(c.op, lambda ins, outs: te.call_intrin("int32", "nop"),
                                  default_buffer_params=dict(**strided))
    s, args = tiled(fixed)
    with pytest.raises(CompileError, match="fixed element offset 0"):
        vtakit.lower(s, args)
    compact = te.decl_tensor_intrin(c.op, lambda ins, outs: te.call_intrin("int32", "nop"),
                                    default_buffer_params=dict(offset_factor=1))
    s, args = tiled(compact)
    with pytest.raises(CompileError, match="buffer b is compact but the region of B has stride 8"):
        vtakit.lower(s, args)


def test_tensorize_declaration_errors():
    A, B, C = matmul()
    D = te.compute(C.shape, lambda i, j: C[i, j] * 2, name="D")
    with pytest.raises(CompileError, match="input C must be a te.placeholder"):
        te.decl_tensor_intrin(D.op, lambda ins, outs: None)
    with pytest.raises(CompileError, match="returned 2 items"):
        te.decl_tensor_intrin(C.op, lambda ins, outs: (None, None))
    with pytest.raises(CompileError, match="3 strides for 2 dimensions"):
        te.decl_buffer((2, 2), strides=[1, 2, 3])
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="tensorize needs a te.decl_tensor_intrin"):
        s[C].tensorize(C.op.axis[0], "gemm")


# ---------------------------------------------------------------------------- lowering
def test_lower_argument_errors():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(CompileError, match="placeholder B is read but not passed in args"):
        vtakit.lower(s, [A, C])
    with pytest.raises(CompileError, match="arguments must be tensors"):
        vtakit.lower(s, [A, B, "C"])
    with pytest.raises(CompileError, match="tensor A appears twice"):
        vtakit.lower(s, [A, A, B, C])
    with pytest.raises(CompileError, match="expects a schedule"):
        vtakit.lower(C, [A, B, C])


def test_attached_or_inlined_stage_cannot_be_an_argument():
    A, B, C, D = pipeline()
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ScheduleError, match="stage B is attached with compute_at but also passed in args"):
        vtakit.lower(s, [A, B, C])
    s[B].compute_inline()
    with pytest.raises(ScheduleError, match="stage B is inlined but also passed in args"):
        vtakit.lower(s, [A, B, C])


def test_scope_buffer_over_capacity_names_buffer_size_and_capacity():
    register_memory_scope("local.tiny_test", MemoryInfo(unit_bits=32, max_num_bits=32 * 16), override=True)
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local.tiny_test")
    s[CL].compute_at(s[C], C.op.axis[0])
    vtakit.lower(s, [A, B, C])  # 8 int32 = 256 bits fit
    s2 = te.create_schedule(C.op)
    s2.cache_write(C, "local.tiny_test")  # at the root: 64 int32 = 2048 bits
    with pytest.raises(CompileError, match=r"buffer C.local.tiny_test needs 2048 bits \(256 bytes\) in scope "
                                           r"local.tiny_test, over its capacity of 512 bits"):
        vtakit.lower(s2, [A, B, C])


def test_live_buffers_of_a_scope_are_summed():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    AL = s.cache_read(A, "local.pair_test", [C])
    BL = s.cache_read(B, "local.pair_test", [C])
    s[AL].compute_at(s[C], C.op.axis[0])
    s[BL].compute_at(s[C], C.op.axis[0])
    with PassContext(memory_scopes={"local.pair_test": MemoryInfo(32, 32 * 70)}):
        with pytest.raises(CompileError, match="buffers A.local.pair_test, B.local.pair_test live together need "
                                               "2304 bits"):
            vtakit.lower(s, [A, B, C])


def test_unregistered_tagged_scope():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    s.cache_write(C, "local.nowhere")
    with pytest.raises(CompileError, match="scope 'local.nowhere', which has no registered memory info"):
        vtakit.lower(s, [A, B, C])


def test_memory_scope_registry_errors():
    with pytest.raises(CompileError, match="max_num_bits must be a positive int"):
        MemoryInfo(8, 0)
    register_memory_scope("local.once_test", MemoryInfo(8, 64), override=True)
    with pytest.raises(CompileError, match="already registered"):
        register_memory_scope("local.once_test", MemoryInfo(8, 128))
    with pytest.raises(CompileError, match="expected a MemoryInfo"):
        register_memory_scope("local.x", 5)


def test_pass_context_errors():
    with pytest.raises(CompileError, match="unknown PassContext config key 'tir.bogus'"):
        PassContext(config={"tir.bogus": 1})
    with pytest.raises(CompileError, match="tir.add_lower_pass entries"):
        PassContext(config={"tir.add_lower_pass": [(7, lambda f: f)]})
    with pytest.raises(CompileError, match="cannot disable unknown pass 'Nope'"):
        PassContext(disabled_pass=("Nope",))
    with pytest.raises(CompileError, match="must be a MemoryInfo"):
        PassContext(memory_scopes={"local.x": 3})
    A, B, C = matmul()
    with PassContext(config={"tir.add_lower_pass": [(1, lambda f: None)]}):
        with pytest.raises(CompileError, match="returned NoneType, expected a PrimFunc"):
            vtakit.lower(te.create_schedule(C.op), [A, B, C])


def test_build_target_errors():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(CompileError, match="unknown target 'tpu'"):
        build(s, [A, B, C], target="tpu")
    register_target("dummy_test", lambda s, a, n, c, t: f"module for {t}", override=True)
    with pytest.raises(CompileError, match="already registered"):
        register_target("dummy_test", lambda s, a, n, c, t: "other")
    assert build(s, [A, B, C], target="dummy_test -opt=1") == "module for dummy_test -opt=1"


# ---------------------------------------------------------------------------- expressions
def test_expression_errors():
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(CompileError, match="fcompute takes 1 indices but the shape \\[4, 4\\] has 2"):
        te.compute((4, 4), lambda i: A[i, 0])
    with pytest.raises(CompileError, match="tensor A has 2 dimensions, indexed with 1"):
        A[0]
    with pytest.raises(CompileError, match="is not an integer expression"):
        A[0.5, 1]
    with pytest.raises(CompileError, match="reduction must be the top-level expression"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k) * 2.0)
    with pytest.raises(CompileError, match="nested reductions"):
        te.sum(te.sum(A[0, k], axis=k), axis=k)
    with pytest.raises(CompileError, match="axis .* is not a reduction axis"):
        te.compute((4,), lambda i: te.sum(A[i, 0], axis=[te.thread_axis("vthread")]))
    with pytest.raises(CompileError, match="multiple outputs are not supported"):
        te.compute((4,), lambda i: (A[i, 0], A[i, 1]))
    with pytest.raises(CompileError, match="te.exp needs a float argument"):
        te.exp(te.var("n"))
    with pytest.raises(CompileError, match="shape entries must be non-negative"):
        te.placeholder((-1, 2))
    with pytest.raises(CompileError, match="a range is \\(begin, end\\)"):
        te.reduce_axis((0, 1, 2))
    with pytest.raises(CompileError, match="as a Python bool"):
        bool(te.var("x") < 3)
    with pytest.raises(CompileError, match="access_mask"):
        ir.Buffer("X", (4,)).access_ptr("x")


def test_interpreter_runtime_errors():
    A = te.placeholder((4,), "int32", name="A")
    B = te.compute((4,), lambda i: te.truncdiv(A[i], A[i] - A[i]), name="B")
    f = vtakit.lower(te.create_schedule(B.op), [A, B])
    with pytest.raises(CompileError, match="integer division by zero"):
        run(f, np.ones(4, np.int32), np.zeros(4, np.int32))
    C = te.compute((4,), lambda i: te.call_intrin("int32", "mystery", A[i]), name="C")
    f = vtakit.lower(te.create_schedule(C.op), [A, C])
    with pytest.raises(CompileError, match="no implementation for intrinsic 'mystery'"):
        run(f, np.ones(4, np.int32), np.zeros(4, np.int32))
    out = np.zeros(4, np.int32)
    run(f, np.arange(4, dtype=np.int32), out, intrinsics={"mystery": lambda x: x * 10})
    np.testing.assert_array_equal(out, [0, 10, 20, 30])


def test_attached_stage_read_outside_its_loop():
    A, B, C, D = pipeline()
    E = te.compute((8,), lambda i: B[i] - 1.0, name="E")
    s = te.create_schedule([C.op, E.op])
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ScheduleError, match="stage B is computed inside loop i of stage C, but stage E also reads it"):
        vtakit.lower(s, [A, C, E])


def test_tensorize_stride_variable_bound_twice():
    a = te.placeholder((4, 16), "int32", name="a")
    b = te.placeholder((16, 4), "int32", name="b")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    shared = dict(offset_factor=1, strides=[te.var("s"), 1])  # one stride variable for every buffer
    intrin = te.decl_tensor_intrin(c.op, lambda ins, outs: te.call_intrin("int32", "nop"),
                                   default_buffer_params=shared)
    s, args = tiled(intrin)
    with pytest.raises(CompileError, match="stride variable s of b would be 8 here but is 16 for another buffer"):
        vtakit.lower(s, args)


def test_attached_stage_of_symbolic_size_allocates_the_invariant_bound():
    """No constant bounds the region, so the attached buffer takes the loop-invariant extent n (as TVM)."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((n,), lambda i: B[te.floormod(i * i, n)], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], xo)
    func = vtakit.lower(s, [A, C])
    assert "allocate B[float32 * (n)]" in str(func)
    a = np.arange(7, dtype=np.float32)
    c = np.zeros(7, np.float32)
    run(func, a, c)
    np.testing.assert_array_equal(c, a[np.arange(7) ** 2 % 7] + 1)


def test_storage_align_errors():
    A, B, C, D = pipeline()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="stage B: storage_align needs factor > 0"):
        s[B].storage_align(B.op.axis[0], 0, 0)
    with pytest.raises(ScheduleError, match="stage B: storage_align needs one of the stage's original axes"):
        s[B].storage_align(C.op.axis[0], 4, 0)
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: X[i] + 1.0, name="Y")
    Z = te.compute((n,), lambda i: Y[i] * 2.0, name="Z")
    s = te.create_schedule(Z.op)
    s[Y].storage_align(Y.op.axis[0], 4, 0)
    with pytest.raises(CompileError, match="storage_align needs a buffer of constant shape"):
        vtakit.lower(s, [X, Z])


# ---------------------------------------------------------------------------- more user-reachable errors
def small_intrin(m=4, n=4, l=4, body=True, reset=True, update=True, reduce=True, b_shape=None):
    a = te.placeholder((m, l), "int32", name="a")
    b = te.placeholder(b_shape or (l, n), "int32", name="b")
    if reduce:
        k = te.reduce_axis((0, l), name="k")
        c = te.compute((m, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    else:
        c = te.compute((m, n), lambda i, j: a[i, j] * b[i, j], name="c")
    call = te.call_intrin("int32", "nop")
    return te.decl_tensor_intrin(c.op, lambda ins, outs: (call if body else None, call if reset else None,
                                                          call if update else None),
                                 binds={t: te.decl_buffer(t.shape, "int32", t.name, offset_factor=1,
                                                          strides=[te.var(t.name + "_s"), 1]) for t in (a, b, c)})


def test_tensorize_structure_errors():
    s, args = tiled(small_intrin(reduce=False))
    with pytest.raises(ScheduleError, match="the compute is a reduction but the intrinsic is not"):
        vtakit.lower(s, args)
    s, args = tiled(small_intrin(l=16, body=False))
    with pytest.raises(ScheduleError, match="the intrinsic has no body"):
        vtakit.lower(s, args)
    s, args = tiled(small_intrin(body=False, reset=False), split_k=4)
    with pytest.raises(ScheduleError, match="needs a body or a reduce_reset"):
        vtakit.lower(s, args)
    s, args = tiled(small_intrin(l=16))
    with pytest.raises(ScheduleError, match="axis i.inner is already tensorized"):
        s[args[2]].tensorize(s[args[2]].leaf_iter_vars[3], small_intrin(l=16))


def test_tensorize_axis_alignment_errors():
    A = te.placeholder((2, 4, 16), "int32", name="A")
    B = te.placeholder((16, 4), "int32", name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((2, 4, 4), lambda n, i, j: te.sum(A[n, i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[0], small_intrin(l=16))
    with pytest.raises(ScheduleError, match="axis n has extent 2 in the region but the intrinsic has no matching axis"):
        vtakit.lower(s, [A, B, C])
    A2, B2, C2 = matmul(4, 4, 16)
    s = te.create_schedule(C2.op)
    k1 = te.reduce_axis((0, 4), name="k1")
    a = te.placeholder((4, 4, 4), "int32", name="a")
    b = te.placeholder((4, 4), "int32", name="b")
    k2 = te.reduce_axis((0, 4), name="k2")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, k1, k2] * b[k1, j], axis=[k1, k2]), name="c")
    s[C2].tensorize(C2.op.axis[0], te.decl_tensor_intrin(c.op, lambda ins, outs: te.call_intrin("int32", "nop")))
    with pytest.raises(ScheduleError, match="the intrinsic has 2 reduce axis dimensions, the stage only 1"):
        vtakit.lower(s, [A2, B2, C2])


def test_tensorize_input_errors():
    A = te.placeholder((8, 16), "int32", name="A")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * A[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[C].tensorize(ii, small_intrin(l=16))
    with pytest.raises(ScheduleError, match="the compute reads 1 tensors \\(A\\) but the intrinsic 2"):
        vtakit.lower(s, [A, C])
    A, B, C = matmul(8, 8, 16)
    s2 = te.create_schedule(C.op)
    io, jo, ii, ji = s2[C].tile(C.op.axis[0], C.op.axis[1], 4, 2)
    s2[C].tensorize(ii, small_intrin(l=16, n=2, b_shape=(16, 4)))
    with pytest.raises(ScheduleError, match="the region \\[16, 2\\] of B does not fit the intrinsic's buffer shape"):
        vtakit.lower(s2, [A, B, C])


def test_tensorize_thread_inside_region_and_attached_inside():
    A, B, C = matmul(8, 8, 16)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[C].bind(ji, te.thread_axis("threadIdx.x"))
    s[C].tensorize(ii, small_intrin(l=16))
    with pytest.raises(ScheduleError, match="axis j.inner inside the tensorized region is bound to a thread"):
        vtakit.lower(s, [A, B, C])
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "local", [C])
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[AA].compute_at(s[C], ji)
    s[C].tensorize(ii, small_intrin(l=16))
    with pytest.raises(ScheduleError, match="stage A.local is attached at axis j.inner of stage C, inside its tensorized"):
        vtakit.lower(s, [A, B, C])


def test_tensorize_fixed_stride_mismatch():
    a = te.placeholder((4, 16), "int32", name="a")
    b = te.placeholder((16, 4), "int32", name="b")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    binds = {t: te.decl_buffer(t.shape, "int32", t.name, offset_factor=1, strides=[100, 1]) for t in (a, b, c)}
    s, args = tiled(te.decl_tensor_intrin(c.op, lambda ins, outs: te.call_intrin("int32", "nop"), binds=binds))
    with pytest.raises(CompileError, match="buffer a declares stride 100 for dimension 0, but A has stride 16"):
        vtakit.lower(s, args)


def test_lowering_structure_errors():
    A, B, C, D = pipeline()
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    E = te.compute((8,), lambda i: C[i] + 1.0, name="E")
    s = te.create_schedule(E.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].compute_inline()
    with pytest.raises(ScheduleError, match="stage B is attached to stage C, which is inlined"):
        vtakit.lower(s, [A, E])
    s = te.create_schedule(C.op)
    s[C].set_scope("shared")
    with pytest.raises(ScheduleError, match="stage C is an argument, its scope must be global, not shared"):
        vtakit.lower(s, [A, C])
    with pytest.raises(CompileError, match="args must be a list of tensors"):
        vtakit.lower(s, A)


def test_virtual_thread_errors():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("vthread"))
    with pytest.raises(CompileError, match="virtual thread vthread \\(vthread\\) needs a constant extent, got n"):
        vtakit.lower(s, [A, B])
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    t, rest = s[C].split(C.op.axis[0], nparts=2)
    s[C].bind(t, te.thread_axis("cthread"))
    s[CL].compute_at(s[C], rest)
    with PassContext(disabled_pass=("StorageFlatten",)):
        with pytest.raises(CompileError, match="virtual threads need flattened buffers"):
            vtakit.lower(s, [A, B, C])


def test_symbolic_allocation_in_tagged_scope():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s.cache_write(B, "local.sym_test")
    with PassContext(memory_scopes={"local.sym_test": MemoryInfo(32, 1024)}):
        with pytest.raises(CompileError, match="allocation B.local.sym_test in scope local.sym_test has non-constant size"):
            vtakit.lower(s, [A, B])


def test_more_expression_and_declaration_errors():
    with pytest.raises(CompileError, match="combines int32 into float32"):
        bad = te.comm_reducer(lambda x, y: (x + y).astype("float32"), lambda t: ir.const(0, t))
        A = te.placeholder((4,), "int32", name="A")
        bad(A[0], axis=te.reduce_axis((0, 4)))
    with pytest.raises(CompileError, match="at least one condition"):
        te.all()
    with pytest.raises(CompileError, match="te.power needs float arguments"):
        te.power(te.var("x"), 2)
    with pytest.raises(CompileError, match="shape entries must be integers"):
        te.placeholder((2.5,))
    with pytest.raises(CompileError, match="has one output, asked for output 1"):
        te.placeholder((2,)).op.output(1)
    with pytest.raises(CompileError, match="offset_factor must be a non-negative int"):
        te.decl_buffer((2,), offset_factor=-1)
    A, B, C = matmul()
    with pytest.raises(CompileError, match="must return statements or expressions"):
        te.decl_tensor_intrin(C.op, lambda ins, outs: 5)
    with pytest.raises(CompileError, match="expected a te.compute operation"):
        te.decl_tensor_intrin(A.op, lambda ins, outs: None)
    with pytest.raises(CompileError, match="scalar_params are not supported"):
        te.decl_tensor_intrin(C.op, lambda ins, outs: None, scalar_params=[te.var("x")])
    with pytest.raises(CompileError, match="buffer A \\[4, 8\\] int32 does not fit tensor A"):
        te.decl_tensor_intrin(C.op, lambda ins, outs: None, binds={A: te.decl_buffer((4, 8), "int32", "A")})
    with pytest.raises(CompileError, match="at least one operand must be an expression"):
        ir.Add.make(1, 2)
    with pytest.raises(CompileError, match="vector lanes differ"):
        ir.Ramp(ir.const(0), ir.const(1), 4) + ir.Ramp(ir.const(0), ir.const(1), 8)


def test_schedule_argument_errors():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="stage C: split expects an axis \\(IterVar\\), got 'i'"):
        s[C].split("i", factor=2)
    with pytest.raises(ScheduleError, match="create_schedule expects operations or tensors"):
        te.create_schedule(["C"])


def test_interpreter_memory_and_scope_errors():
    buf = ir.Buffer("X", (4,), "int32")
    other = ir.Buffer("Y", (4,), "int32")
    i = ir.Var("i")
    f = lambda body: ir.PrimFunc("f", (buf,), body)  # noqa: E731
    x = np.zeros(4, np.int32)
    with pytest.raises(MemoryAccessError, match="out-of-bounds read of X\\[7\\]"):
        run(f(ir.BufferStore(buf, ir.BufferLoad(buf, (ir.const(7),)), (ir.const(0),))), x)
    with pytest.raises(MemoryAccessError, match="out-of-bounds read of X\\[2, 3, 4, 5\\]"):
        run(f(ir.BufferStore(buf, ir.BufferLoad(buf, (ir.Ramp(ir.const(2), ir.const(1), 4),)),
                             (ir.Ramp(ir.const(0), ir.const(1), 4),))), x)
    with pytest.raises(MemoryAccessError, match="out-of-bounds write of X\\[3, 4\\]"):
        run(f(ir.BufferStore(buf, ir.Broadcast(ir.const(1), 2), (ir.Ramp(ir.const(3), ir.const(1), 2),))), x)
    with pytest.raises(MemoryAccessError, match="access pointer to X\\[2:6\\] is out of range"):
        run(f(ir.Evaluate(ir.Call.make("int32", "use", [buf.access_ptr("r", offset=2, extent=4)]))), x,
            intrinsics={"use": lambda p: 0})
    with pytest.raises(CompileError, match="buffer Y is accessed outside its allocation"):
        run(f(ir.BufferStore(other, ir.const(1), (ir.const(0),))), x)
    with pytest.raises(CompileError, match="variable i is used outside its scope"):
        run(f(ir.BufferStore(buf, i, (ir.const(0),))), x)
    with pytest.raises(CompileError, match="access to X with 2 indices; it has 1 dimensions"):
        run(f(ir.BufferStore(buf, ir.const(1), (ir.const(0), ir.const(0)))), x)
    with pytest.raises(CompileError, match="must be C-contiguous"):
        b2 = ir.Buffer("M", (2, 2), "int32")
        run(ir.PrimFunc("g", (b2,), ir.Evaluate(ir.const(0))), np.asfortranarray(np.zeros((2, 3), np.int32))[:, :2])
    with pytest.raises(CompileError, match="cast of non-finite nan to int32"):
        fb = ir.Buffer("F", (1,), "float32")
        run(ir.PrimFunc("h", (fb, buf), ir.BufferStore(buf, ir.BufferLoad(fb, (ir.const(0),)).astype("int32"),
                                                       (ir.const(0),))), np.full(1, np.nan, np.float32), x)
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(CompileError, match="cannot interpret ProducerLoad"):
        run(ir.PrimFunc("p", (), ir.Evaluate(B.op.body)))


def test_unavailable_target(monkeypatch):
    from vtakit.compiler import targets

    monkeypatch.setitem(targets._LAZY, "ghost", "vtakit.compiler.no_such_backend")
    with pytest.raises(CompileError, match="target 'ghost' is not available"):
        build(None, [], target="ghost")


def test_rfactor_errors():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="stage C: rfactor needs a reduction axis of a reduction, got i"):
        s.rfactor(C, C.op.axis[0])
    with pytest.raises(ScheduleError, match="rfactor factor_axis must be in \\[0, 2\\], got 5"):
        s.rfactor(C, C.op.reduce_axis[0], factor_axis=5)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=2)
    with pytest.raises(ScheduleError, match="stage C: axis k was already split"):
        s.rfactor(C, C.op.reduce_axis[0])


@pytest.mark.parametrize("target", ["llvm", "interpreter", "vta"])
def test_build_without_the_output_tensor_names_it(target):
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(CompileError, match=r"output tensor\(s\) \['C'\] are not among the arguments \['A', 'B'\]"):
        vtakit.build(s, [A, B], target=target)
