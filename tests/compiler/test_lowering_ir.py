"""The shape of lowered IR: loop kinds, attributes, allocations, vectors, virtual threads, passes."""

import numpy as np
import pytest

from tests.compiler.hand_ir import nodes
import vtakit
from vtakit import te
from vtakit.compiler import ir
from vtakit.compiler.interpreter import run
from vtakit.compiler.testing import CASES, make_arrays
from vtakit.compiler.transform import PassContext


def case(name):
    return next(c for c in CASES if c.name == name)


def assert_case_matches_numpy(name, func=None):
    """Run case ``name`` (lowered by default, or ``func``) in the interpreter; outputs must equal its numpy reference."""
    c = case(name)
    s, args = c.build()
    func = func or vtakit.lower(s, args)
    arrays = make_arrays(args, c.num_inputs)
    run(func, *arrays, intrinsics=c.intrinsics)
    for got, want in zip(arrays[c.num_inputs:], c.reference(*arrays[:c.num_inputs])):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    return func


def test_vectorized_loop_becomes_unit_stride_ramps():
    f = assert_case_matches_numpy("vectorize_inner")
    stores = nodes(f, ir.BufferStore)
    assert len(stores) == 1 and isinstance(stores[0].indices[0], ir.Ramp)
    ramp = stores[0].indices[0]
    assert ramp.lanes == 8 and isinstance(ramp.stride, ir.IntImm) and ramp.stride.value == 1
    assert stores[0].value.dtype == "float32x8"
    assert not [n for n in nodes(f, ir.For) if n.kind is ir.ForKind.VECTORIZED]


def test_vectorize_falls_back_to_serial_with_a_tail_guard():
    f = assert_case_matches_numpy("vectorize_nondividing")
    assert not nodes(f, ir.Ramp) and nodes(f, ir.IfThenElse)


def test_unroll_parallel_and_pragma():
    f = assert_case_matches_numpy("unroll_parallel_pragma")
    loops = nodes(f, ir.For)
    assert [lp.kind for lp in loops if lp.kind is ir.ForKind.PARALLEL]
    assert not [lp for lp in loops if lp.kind is ir.ForKind.UNROLLED]
    assert not [lp for lp in loops if lp.loop_var.name in ("i.inner", "k")]  # unrolled away
    attrs = nodes(f, ir.AttrStmt)
    assert attrs and attrs[0].key == "pragma_parallel_launch_point" and isinstance(attrs[0].body, ir.For)
    assert attrs[0].body.kind is ir.ForKind.PARALLEL


def test_cache_stages_allocate_in_their_scopes():
    f = assert_case_matches_numpy("cache_read_shared_at_reduction")
    scopes = {a.buffer.name: a.buffer.scope for a in nodes(f, ir.Allocate)}
    assert scopes == {"A.shared": "shared", "B.local": "local"}
    sizes = {a.buffer.name: a.buffer.shape[0].value for a in nodes(f, ir.Allocate)}
    assert sizes == {"A.shared": 4 * 5, "B.local": 5 * 9}  # region per (io, ko) and per ii


def test_vthread_shares_untouched_buffers_and_cthread_splits_all():
    fv = assert_case_matches_numpy("vthread_matmul")
    fc = assert_case_matches_numpy("cthread_matmul")
    size = lambda f, name: next(a.buffer.shape[0].value for a in nodes(f, ir.Allocate) if a.buffer.name == name)
    assert size(fv, "C.local") == 12 and size(fc, "C.local") == 12   # touched: one slice per thread
    assert size(fv, "A.local") == 1 and size(fc, "A.local") == 2     # untouched: shared only for vthread
    assert not [lp for lp in nodes(fv, ir.For) if lp.kind is ir.ForKind.THREAD_BINDING]


def test_cthread_interleaves_statements_per_thread():
    A = te.placeholder((2, 4), "int32", name="A")
    B = te.compute((2, 4), lambda i, j: A[i, j] + 1, name="B")
    s = te.create_schedule(B.op)
    BL = s.cache_write(B, "local")
    s[B].bind(B.op.axis[0], te.thread_axis("cthread"))
    s[BL].compute_at(s[B], B.op.axis[0])
    f = vtakit.lower(s, [A, B])
    text = str(f)
    # the per-thread copies of the producer loop come before those of the copy-out loop
    assert text.index("B.local[(j + 4)] = (A[(j + 4)] + 1)") < text.index("B[j_1] = B.local[j_1]")
    a = np.arange(8, dtype=np.int32).reshape(2, 4)
    b = np.zeros((2, 4), np.int32)
    run(f, a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_thread_binding_is_a_loop_with_the_tag():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    f = vtakit.lower(s, [A, B])
    tags = [(lp.thread_tag, lp.extent.value) for lp in nodes(f, ir.For)]
    assert tags == [("blockIdx.x", 4), ("threadIdx.x", 16)]
    a, b = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    run(f, a, b)
    np.testing.assert_array_equal(b, a * 2)


def test_global_buffer_is_relaxed_over_vthread_local_is_not():
    def build(scope):
        A = te.placeholder((8,), "int32", name="A")
        B = te.compute((8,), lambda i: A[i] * 2, name="B")
        C = te.compute((8,), lambda i: B[i] + 1, name="C")
        s = te.create_schedule(C.op)
        t, i = s[C].split(C.op.axis[0], nparts=2)
        s[C].bind(t, te.thread_axis("vthread"))
        s[B].set_scope(scope)
        s[B].compute_at(s[C], i)
        return vtakit.lower(s, [A, C])

    sizes = {scope: [a.buffer.shape[0].value for a in nodes(build(scope), ir.Allocate)] for scope in ("global", "local")}
    assert sizes == {"global": [5], "local": [2]}  # global: both threads' rows (4 apart) + 1; local: 1 per thread
    for scope in ("global", "local"):
        a, c = np.arange(8, dtype=np.int32), np.zeros(8, np.int32)
        run(build(scope), a, c)
        np.testing.assert_array_equal(c, a * 2 + 1)


def test_nested_compute_at_chain():
    A = te.placeholder((16,), "int32", name="A")
    B = te.compute((16,), lambda i: A[i] + 1, name="B")
    C = te.compute((15,), lambda i: B[i] * B[i + 1], name="C")
    D = te.compute((14,), lambda i: C[i] - C[i + 1], name="D")
    s = te.create_schedule(D.op)
    do, di = s[D].split(D.op.axis[0], factor=4)
    s[C].compute_at(s[D], do)
    co, ci = s[C].split(C.op.axis[0], factor=2)
    s[B].compute_at(s[C], co)
    f = vtakit.lower(s, [A, D])
    a, d = np.arange(16, dtype=np.int32) * 3 - 7, np.zeros(14, np.int32)
    run(f, a, d)
    b = a + 1
    c = b[:15] * b[1:]
    np.testing.assert_array_equal(d, c[:14] - c[1:])
    assert {x.buffer.name: x.buffer.shape[0].value for x in nodes(f, ir.Allocate)} == {"C": 5, "B": 3}


def test_user_passes_run_in_their_phase_and_builtin_passes_can_be_disabled():
    seen = []

    def phase_pass(tag):
        def p(func):
            flat = all(len(x.indices) == 1 for x in nodes(func, ir.BufferStore))
            seen.append((tag, flat))
            return func
        return p

    A = te.placeholder((4, 4), name="A")
    B = te.compute((4, 4), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    passes = [(3, phase_pass("p3")), (0, phase_pass("p0")), (1, phase_pass("p1"))]
    with PassContext(config={"tir.add_lower_pass": passes}):
        vtakit.lower(s, [A, B])
    assert seen == [("p0", False), ("p1", True), ("p3", True)]
    with PassContext(disabled_pass=("StorageFlatten",)):
        f = vtakit.lower(s, [A, B])
    assert all(len(x.indices) == 2 for x in nodes(f, ir.BufferStore))
    a, b = np.ones((4, 4), np.float32), np.zeros((4, 4), np.float32)
    run(f, a, b)  # the interpreter runs unflattened IR too
    np.testing.assert_array_equal(b, a + 1)


def test_auto_unroll_and_disable_vectorize():
    A = te.placeholder((4, 3), name="A")
    B = te.compute((4, 3), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    with PassContext(config={"tir.UnrollLoop.auto_max_step": 3}):
        f = vtakit.lower(s, [A, B])
    assert [lp.loop_var.name for lp in nodes(f, ir.For)] == ["i"]
    s[B].vectorize(B.op.axis[1])
    with PassContext(config={"tir.disable_vectorize": True}):
        f = vtakit.lower(s, [A, B])
    assert not nodes(f, ir.Ramp) and len(nodes(f, ir.For)) == 2


def test_interpreter_runs_ir_before_every_pass_equal_to_after():
    """Cumulatively disabling passes from the end never changes results (each pass is equivalence-preserving)."""
    from vtakit.compiler.transform import BUILTIN_PASSES

    for name in ("cthread_matmul", "vectorize_inner", "tensorize_reset_update", "unroll_parallel_pragma",
                 "conv2d_padded_tiled"):
        for k in range(len(BUILTIN_PASSES)):
            disabled = tuple(p for p in BUILTIN_PASSES[k:] if p not in ("StorageFlatten", "InjectVirtualThread"))
            with PassContext(disabled_pass=disabled):
                c = case(name)
                s, args = c.build()
                assert_case_matches_numpy(name, vtakit.lower(s, args))


def test_build_interpreter_target():
    c = case("tile_matmul")
    s, args = c.build()
    mod = vtakit.build(s, args, target="interpreter")
    arrays = make_arrays(args, 2)
    mod(*arrays)
    np.testing.assert_allclose(arrays[2], arrays[0] @ arrays[1], rtol=1e-5)


def test_default_scope_follows_the_threads_around_the_attach_point():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((64,), lambda i: A[i] * 2.0, name="C")
    D = te.compute((64,), lambda i: C[i] - B[i], name="D")
    s = te.create_schedule(D.op)
    bx, tx = s[D].split(D.op.axis[0], factor=16)
    s[D].bind(bx, te.thread_axis("blockIdx.x"))
    s[D].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].compute_at(s[D], bx)
    s[B].compute_at(s[D], tx)
    f = vtakit.lower(s, [A, D])
    assert {a.buffer.name: a.buffer.scope for a in nodes(f, ir.Allocate)} == {"C": "shared", "B": "local"}


def test_cthread_replicates_coproc_scopes_and_splits_scoped_buffers():
    """The VTA shape: a call intrinsic under coproc_scope, the accumulator in a tagged scope, two cthreads."""
    from vtakit.compiler.ir_builder import IRBuilder
    from vtakit.compiler.scope import MemoryInfo
    from vtakit.compiler.testing import TOY_INTRINSICS

    a = te.placeholder((4, 4), "int32", name="a")
    b = te.placeholder((4, 4), "int32", name="b")
    kk = te.reduce_axis((0, 4), name="kk")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, kk] * b[kk, j], axis=kk), name="c")
    vta = te.thread_axis("vta")

    def fcompute(ins, outs):
        def cmd(reset):
            ib = IRBuilder()
            ib.scope_attr(vta, "coproc_scope", 2)
            ib.emit(te.call_intrin("int32", "toy_gemm", ins[0].access_ptr("r"), ins[1].access_ptr("r"),
                                   outs[0].access_ptr("rw"), ins[0].strides[0], ins[1].strides[0],
                                   outs[0].strides[0], 4, 4, 4, reset))
            return ib.get()
        return cmd(1), None, cmd(0)

    binds = {t: te.decl_buffer(t.shape, "int32", t.name, scope="local.acc2" if t is c else "", offset_factor=1,
                               strides=[te.var(t.name + "_s"), 1]) for t in (a, b, c)}
    intrin = te.decl_tensor_intrin(c.op, fcompute, binds=binds)
    A = te.placeholder((8, 12), "int32", name="A")
    B = te.placeholder((12, 16), "int32", name="B")
    k = te.reduce_axis((0, 12), name="k")
    C = te.compute((8, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local.acc2")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    t, jo = s[C].split(jo, nparts=2)
    s[C].reorder(t, io, jo, ii, ji)
    s[C].bind(t, te.thread_axis("cthread"))
    s[CL].compute_at(s[C], jo)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=4)
    s[CL].reorder(ko, *CL.op.axis, ki)
    s[CL].tensorize(CL.op.axis[0], intrin)
    with PassContext(memory_scopes={"local.acc2": MemoryInfo(32, 32 * 32)}):
        f = vtakit.lower(s, [A, B, C])
    attrs = [n for n in nodes(f, ir.AttrStmt) if n.key == "coproc_scope"]
    assert len(attrs) == 4  # (first iteration + update) x 2 threads
    assert [x.buffer.shape[0].value for x in nodes(f, ir.Allocate)] == [32]  # 16 per thread
    arrays = [np.arange(96, dtype=np.int32).reshape(8, 12) % 5 - 2, np.arange(192, dtype=np.int32).reshape(12, 16) % 3,
              np.zeros((8, 16), np.int32)]
    run(f, *arrays, intrinsics=TOY_INTRINSICS)
    np.testing.assert_array_equal(arrays[2], arrays[0] @ arrays[1])
    with PassContext(memory_scopes={"local.acc2": MemoryInfo(32, 32 * 16)}):
        with pytest.raises(vtakit.errors.CompileError, match="buffer C.local.acc2 needs 1024 bits"):
            vtakit.lower(s, [A, B, C])  # fits one thread, not two


@pytest.mark.parametrize("name", ["vectorize_nondividing", "split_nondividing", "tile_matmul", "conv2d_padded_tiled",
                                  "compute_at_middle", "fuse_then_split", "cache_write_local"])
def test_loop_partition_preserves_results(name):
    with PassContext(config={"tir.LoopPartition.partition_const_loop": True}):
        c = case(name)
        s, args = c.build()
        assert_case_matches_numpy(name, vtakit.lower(s, args))


def test_loop_partition_lets_the_main_part_vectorize():
    s, args = case("vectorize_nondividing").build()
    with PassContext(config={"tir.LoopPartition.partition_const_loop": True}):
        f = vtakit.lower(s, args)
    ramps = nodes(f, ir.Ramp)
    guards = nodes(f, ir.IfThenElse)
    assert ramps and not guards  # main part 4 lanes, tail 2 lanes: no guard left
    assert {r.lanes for r in ramps} == {4, 2}
    assert "for (j.outer, 0, 2)" in str(f)


def test_build_finds_backends_without_imports():
    import subprocess
    import sys

    code = ("import vtakit\nfrom vtakit.compiler import targets\n"
            "assert 'llvm' not in targets.registered_targets() and 'vta' not in targets.registered_targets()\n"
            "targets.target_builder('llvm'); targets.target_builder('vta')\n"
            "assert {'llvm', 'vta', 'interpreter'} <= set(targets.registered_targets())\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr     # the AssertionError (and its line) of the script above


def test_storage_align_pads_strides():
    A = te.placeholder((6, 8), name="A")
    B = te.compute((6, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((6, 8), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[B].storage_align(B.op.axis[0], 16, 1)  # row stride 8 -> 17
    f = vtakit.lower(s, [A, C])
    alloc = nodes(f, ir.Allocate)[0]
    assert alloc.buffer.shape[0].value == 6 * 17
    assert "B[((i * 17) + j)]" in str(f)
    a, c = np.arange(48, dtype=np.float32).reshape(6, 8), np.zeros((6, 8), np.float32)
    run(f, a, c)
    np.testing.assert_array_equal(c, a * 2 + 1)


def test_double_buffer_prefetches_the_next_iteration():
    def build():
        s, args = case("cache_read_shared_at_reduction").build()
        next(st for st in s.stages if st.name == "A.shared").double_buffer()
        return s, args

    f = vtakit.lower(*build())
    text = str(f)
    alloc = next(a for a in nodes(f, ir.Allocate) if a.buffer.name == "A.shared")
    assert alloc.buffer.shape[0].value == 2 * 4 * 5
    assert "if ((k.outer + 1) < 3):" in text and "(floormod((k.outer + 1), 2) * 20)" in text
    assert_case_matches_numpy("cache_read_shared_at_reduction", f)
    with PassContext(disabled_pass=("InjectDoubleBuffer",)):  # the marker alone keeps single buffering
        f = vtakit.lower(*build())
    assert [a.key for a in nodes(f, ir.AttrStmt)] == ["double_buffer_write"]
    assert_case_matches_numpy("cache_read_shared_at_reduction", f)


def test_double_buffer_outside_a_loop_stays_single():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].double_buffer()
    f = vtakit.lower(s, [A, C])
    assert not nodes(f, ir.AttrStmt) and nodes(f, ir.Allocate)[0].buffer.shape[0].value == 8
