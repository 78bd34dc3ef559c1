"""The per-kernel GPU passes: ThreadSync, LowerThreadAllreduce and VerifyGPUCode."""

from __future__ import annotations

import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ir
from vtakit.compiler.backend.nvptx import DeviceKernel, device_program, split_host_device
from vtakit.compiler.backend.nvptx.allreduce import lower_thread_allreduce
from vtakit.compiler.backend.nvptx.program import barrier, is_barrier
from vtakit.compiler.backend.nvptx.thread_sync import thread_sync
from vtakit.errors import CompileError, ScheduleError
from tests.compiler.gpu.nvptx_cases import row_sum, shared_gemm


def _events(stmt: ir.Stmt, shared: str) -> list[str]:
    """Program order of barriers, stores to and loads from the shared buffer ``shared``."""
    out: list[str] = []

    def visit(s):
        if is_barrier(s):
            out.append("sync")
        elif isinstance(s, ir.For):
            out.append("loop{")
            visit(s.body)
            out.append("}")
        elif isinstance(s, ir.BufferStore):
            loads = []
            ir.walk(s.value, lambda n: isinstance(n, ir.BufferLoad) and n.buffer.name == shared and loads.append(n))
            out.extend(["load"] if loads else [])
            out.extend(["store"] if s.buffer.name == shared else [])
        else:
            for child in ir.children(s):
                if isinstance(child, ir.Stmt):
                    visit(child)
    visit(stmt)
    return out


def test_gemm_gets_a_barrier_after_its_fetch_and_one_at_the_loop_back_edge():
    s, args = shared_gemm(32, 32, 8)
    (kernel,) = device_program(vtakit.lower(s, args)).kernels
    # the k.outer loop: sync (the previous tile's readers are done), fetch, sync, then the k.inner loop reads
    assert _events(kernel.body, "A.shared") == ["loop{", "sync", "store", "sync", "loop{", "load", "}", "}"]


def test_a_double_buffered_fetch_needs_no_barrier_before_the_pipelined_loop():
    s, args = shared_gemm(16, 64, 8, double_buffer=True)
    (kernel,) = device_program(vtakit.lower(s, args)).kernels
    # prologue fetch; per step: sync, fetch the next tile into the other half, sync, use this tile
    assert _events(kernel.body, "A.shared") == ["store", "loop{", "sync", "store", "sync", "loop{", "load", "}", "}"]


def test_no_barrier_without_shared_memory_hand_off():
    tx = ir.Var("threadIdx.x", "int32")
    sh = ir.Buffer("sh", (32,), "float32", "shared")
    out = ir.Buffer("out", (32,), "float32")
    # each thread reads back only the element it wrote itself
    body = ir.Allocate(sh, ir.seq(ir.BufferStore(sh, ir.const(1.0, "float32"), (tx,)),
                                  ir.BufferStore(out, sh[tx], (tx,))))
    kernel = DeviceKernel("k", (out,), body, {"threadIdx.x": tx}, (1, 1, 1), (32, 1, 1), 128)
    assert "sync" not in _events(thread_sync(kernel).body, "sh")
    # a neighbour's element needs the barrier
    body = ir.Allocate(sh, ir.seq(ir.BufferStore(sh, ir.const(1.0, "float32"), (tx,)),
                                  ir.BufferStore(out, sh[(tx + 1) % 32], (tx,))))
    kernel = DeviceKernel("k", (out,), body, {"threadIdx.x": tx}, (1, 1, 1), (32, 1, 1), 128)
    assert _events(thread_sync(kernel).body, "sh") == ["store", "sync", "load"]


def test_no_barrier_inside_a_thread_dependent_condition():
    tx = ir.Var("threadIdx.x", "int32")
    sh = ir.Buffer("sh", (32,), "float32", "shared")
    out = ir.Buffer("out", (32,), "float32")
    guarded = ir.IfThenElse(tx < 16, ir.BufferStore(out, sh[tx + 1], (tx,)))
    body = ir.Allocate(sh, ir.seq(ir.BufferStore(sh, ir.const(1.0, "float32"), (tx,)), guarded))
    kernel = DeviceKernel("k", (out,), body, {"threadIdx.x": tx}, (1, 1, 1), (32, 1, 1), 128)
    synced = thread_sync(kernel).body.body
    assert is_barrier(synced.stmts[1]) and isinstance(synced.stmts[2], ir.IfThenElse)


@pytest.mark.parametrize("factor, folds", [(16, [8, 4, 2, 1]), (12, [4, 4, 2, 1])])
def test_allreduce_becomes_a_shared_memory_tree(factor, folds):
    s, args = row_sum(8, 48, factor, rfactor=False)
    (kernel,) = split_host_device(vtakit.lower(s, args)).kernels
    lowered = lower_thread_allreduce(kernel)
    assert not ir.contains(lowered.body, ir.AllReduce)
    assert lowered.shared_bytes == 4 * 4 * factor  # one int32 slot per thread of the 4 x factor block
    guards = []
    ir.walk(lowered.body, lambda n: isinstance(n, ir.IfThenElse) and "red_buf0" in str(n.then_case)
            and guards.append(n.cond.b.value))
    assert guards == folds
    syncs = []
    ir.walk(lowered.body, lambda n: is_barrier(n) and syncs.append(n))
    assert len(syncs) == len(folds) + 1


def test_a_reduction_bound_to_blockidx_is_an_error():
    A = te.placeholder((4, 64), "float32", name="A")
    k = te.reduce_axis((0, 64), "k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="cannot bind the reduction axis k to blockIdx.x"):
        s[B].bind(B.op.reduce_axis[0], te.thread_axis("blockIdx.x"))
    # hand-written IR gets as far as the backend, which says why it cannot lower it
    bx = ir.Var("blockIdx.x", "int32")
    out = ir.Buffer("out", (1,), "float32", "local")
    red = ir.AllReduce(te.sum.instantiate("float32"), ir.const(1.0, "float32"), ir.const(True, "bool"), out,
                       (ir.const(0, "int32"),), bx, "blockIdx.x")
    kernel = DeviceKernel("k", (), ir.Allocate(out, red), {"blockIdx.x": bx}, (8, 1, 1), (1, 1, 1))
    with pytest.raises(CompileError, match="a reduction is bound to blockIdx.x, which the cuda target cannot lower"):
        lower_thread_allreduce(kernel)


def test_an_allreduce_under_a_thread_condition_is_an_error():
    tx = ir.Var("threadIdx.x", "int32")
    out = ir.Buffer("out", (1,), "float32", "local")
    red = ir.AllReduce(te.sum.instantiate("float32"),
                       ir.const(1.0, "float32"), ir.const(True, "bool"), out, (ir.const(0, "int32"),), tx,
                       "threadIdx.x")
    body = ir.Allocate(out, ir.IfThenElse(tx < 8, red))
    kernel = DeviceKernel("k", (), body, {"threadIdx.x": tx}, (1, 1, 1), (32, 1, 1))
    with pytest.raises(CompileError, match="sits under the condition"):
        lower_thread_allreduce(kernel)


def _hand_kernel(tag: str, extent: int, shared_elems: int = 0) -> ir.PrimFunc:
    out = ir.Buffer("out", (4,), "float32")
    loop_var = ir.Var("t", "int32")
    body: ir.Stmt = ir.BufferStore(out, ir.const(1.0, "float32"), (ir.const(0, "int32"),))
    if shared_elems:
        sh = ir.Buffer("big", (shared_elems,), "float32", "shared")
        body = ir.Allocate(sh, ir.seq(ir.BufferStore(sh, ir.const(1.0, "float32"), (loop_var,)), barrier(),
                                      ir.BufferStore(out, sh[ir.const(0, "int32")], (ir.const(0, "int32"),))))
    loop = ir.For(loop_var, ir.const(0, "int32"), ir.const(extent, "int32"), ir.ForKind.THREAD_BINDING, body, tag)
    return ir.PrimFunc("f", (out,), loop)


def test_thread_extent_over_the_limit():
    with pytest.raises(CompileError, match="threadIdx.x extent 2048 exceeds 1024"):
        vtakit.build(_hand_kernel("threadIdx.x", 2048), target="cuda")
    with pytest.raises(CompileError, match="threadIdx.z extent 128 exceeds 64"):
        vtakit.build(_hand_kernel("threadIdx.z", 128), target="cuda")


def test_thread_extent_over_the_limit_in_a_schedule():
    A = te.placeholder((4096,), "float32", name="A")
    B = te.compute((4096,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=2048)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises((ScheduleError, CompileError), match="threadIdx.x with extent 2048, above the limit of 1024"):
        vtakit.build(s, [A, B], target="cuda")


def test_shared_memory_over_the_limit():
    with pytest.raises(CompileError, match=r"shared memory 65536 bytes exceeds the 49152-byte limit \(big 65536 bytes\)"):
        vtakit.build(_hand_kernel("threadIdx.x", 32, 16384), target="cuda")


def test_shared_memory_over_the_limit_in_a_schedule():
    s, args = shared_gemm(256, 256, 16)
    ok = vtakit.build(s, args, target="cuda")
    assert ok.kernels[0].shared_bytes == 2 * 16 * 16 * 4
    n, per_block = 16384, 16384
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    bx, rest = s[B].split(B.op.axis[0], factor=per_block)
    tx, _ = s[B].split(rest, nparts=128)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], bx)
    fo, _ = s[AA].split(AA.op.axis[0], nparts=128)
    s[AA].bind(fo, te.thread_axis("threadIdx.x"))
    with pytest.raises(CompileError, match="shared memory 65536 bytes exceeds the 49152-byte limit"):
        vtakit.build(s, [A, B], target="cuda")


def test_a_barrier_under_a_thread_condition_is_an_error():
    tx = ir.Var("t", "int32")
    out = ir.Buffer("out", (4,), "float32")
    body = ir.IfThenElse(tx < 4, ir.seq(barrier(), ir.BufferStore(out, ir.const(1.0, "float32"), (tx,))))
    loop = ir.For(tx, ir.const(0, "int32"), ir.const(32, "int32"), ir.ForKind.THREAD_BINDING, body, "threadIdx.x")
    with pytest.raises(CompileError, match="a barrier sits under the condition"):
        vtakit.build(ir.PrimFunc("f", (out,), loop), target="cuda")
