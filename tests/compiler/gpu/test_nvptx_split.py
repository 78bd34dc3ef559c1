"""SplitHostDevice: kernels, launch geometry, guards, shared-memory hoisting, workspaces, errors."""

from __future__ import annotations

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ir
from vtakit.compiler.backend.nvptx import split_host_device
from vtakit.errors import CompileError
from tests.compiler.gpu.nvptx_cases import shared_gemm, two_kernels


def _bound(s, stage, outer, inner):
    s[stage].bind(outer, te.thread_axis("blockIdx.x"))
    s[stage].bind(inner, te.thread_axis("threadIdx.x"))


def test_gemm_is_one_kernel_with_shared_memory_hoisted():
    s, args = shared_gemm(32, 32, 8)
    program = split_host_device(vtakit.lower(s, args))
    (kernel,) = program.kernels
    assert (kernel.grid, kernel.block) == ((4, 4, 1), (8, 8, 1))
    assert kernel.shared_bytes == 2 * 8 * 8 * 4
    assert [b.name for b in kernel.params] == ["A", "B", "C"]
    assert set(kernel.thread_vars) == {"blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y"}
    body = kernel.body
    hoisted = []
    while isinstance(body, ir.Allocate) and body.buffer.scope == "shared":
        hoisted.append(body.buffer.name)
        body = body.body
    assert sorted(hoisted) == ["A.shared", "B.shared"]
    loops = []
    ir.walk(kernel.body, lambda n: isinstance(n, ir.For) and loops.append(n))
    assert all(loop.kind is not ir.ForKind.THREAD_BINDING for loop in loops)
    assert not ir.contains(body, ir.IfThenElse)  # the fetches use the whole block: no guard


def test_two_stages_are_two_kernels_and_the_intermediate_a_workspace():
    s, args = two_kernels(64)
    program = split_host_device(vtakit.lower(s, args))
    assert [(k.grid, k.block) for k in program.kernels] == [((64, 1, 1), (64, 1, 1)), ((2, 1, 1), (32, 1, 1))]
    assert [b.name for b in program.workspaces] == ["E"]
    assert [[b.name for b in k.params] for k in program.kernels] == [["X", "E"], ["S", "E"]]


def test_a_narrower_cooperative_fetch_is_guarded():
    s, args = shared_gemm(32, 32, 8, fetch_threads=4)
    (kernel,) = split_host_device(vtakit.lower(s, args)).kernels
    assert kernel.block == (8, 8, 1)
    guards = []
    ir.walk(kernel.body, lambda n: isinstance(n, ir.IfThenElse) and guards.append(str(n.cond)))
    assert guards == ["(threadIdx.x < 4)", "(threadIdx.x < 4)"]


def _kernel_func(body: ir.Stmt, *params: ir.Buffer) -> ir.PrimFunc:
    return ir.PrimFunc("f", params, body)


def _thread_loop(tag: str, extent, body: ir.Stmt) -> ir.For:
    return ir.For(ir.Var(tag.replace(".", "_"), "int32"), ir.const(0, "int32"), ir.convert(extent),
                  ir.ForKind.THREAD_BINDING, body, tag)


def test_an_unbound_stage_is_an_error_naming_it():
    n = 64
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    C = te.compute((n,), lambda i: B[i] + 1, name="C")
    s = te.create_schedule(C.op)
    _bound(s, C, *s[C].split(C.op.axis[0], factor=32))
    with pytest.raises(CompileError, match="stage B is not bound to blockIdx/threadIdx; bind it or compute it inline"):
        vtakit.build(s, [A, C], target="cuda")


def test_a_symbolic_thread_extent_is_an_error():
    out = ir.Buffer("out", (64,), "int32")
    n = ir.Var("n", "int32")
    loop = _thread_loop("threadIdx.x", n, ir.BufferStore(out, ir.const(1, "int32"), (ir.const(0, "int32"),)))
    with pytest.raises(CompileError, match="symbolic extent n; the cuda target supports constant extents only"):
        split_host_device(_kernel_func(loop, out))


def test_a_wider_nested_binding_is_an_error():
    out = ir.Buffer("out", (64,), "int32")
    inner = _thread_loop("threadIdx.x", 64, ir.BufferStore(out, ir.const(1, "int32"), (ir.const(0, "int32"),)))
    with pytest.raises(CompileError, match="binds threadIdx.x with extent 64 inside loop 'threadIdx_x', which binds "
                                           "it with extent 32"):
        split_host_device(_kernel_func(_thread_loop("threadIdx.x", 32, inner), out))


def test_a_global_allocation_inside_a_kernel_is_an_error():
    out = ir.Buffer("out", (64,), "int32")
    tmp = ir.Buffer("tmp", (4,), "int32", "global")
    body = ir.Allocate(tmp, ir.BufferStore(tmp, ir.const(1, "int32"), (ir.const(0, "int32"),)))
    with pytest.raises(CompileError, match="buffer 'tmp' is allocated in scope 'global' inside a kernel"):
        split_host_device(_kernel_func(_thread_loop("threadIdx.x", 32, body), out))


def test_a_host_loop_around_kernels_is_an_error():
    out = ir.Buffer("out", (64,), "int32")
    i = ir.Var("i", "int32")
    kernel = _thread_loop("threadIdx.x", 32, ir.BufferStore(out, i, (i,)))
    loop = ir.For(i, ir.const(0, "int32"), ir.const(2, "int32"), ir.ForKind.SERIAL, kernel)
    with pytest.raises(CompileError, match="the host cannot loop or branch around kernel launches"):
        split_host_device(_kernel_func(loop, out))


def test_symbolic_parameter_shapes_are_an_error():
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    _bound(s, B, *s[B].split(B.op.axis[0], factor=64))
    with pytest.raises(CompileError, match="parameter 'A' has shape .'n',.; the cuda target supports constant shapes"):
        vtakit.build(s, [A, B], target="cuda")


def test_a_64_bit_thread_loop_variable_becomes_a_cast_of_the_index():
    out = ir.Buffer("out", (64,), "int64")
    t = ir.Var("t", "int64")
    loop = ir.For(t, ir.const(0, "int64"), ir.const(64, "int64"), ir.ForKind.THREAD_BINDING,
                  ir.BufferStore(out, t * 3, (t,)), "threadIdx.x")
    (kernel,) = split_host_device(_kernel_func(loop, out)).kernels
    assert str(kernel.body).strip() == "out[int64(threadIdx.x)] = (int64(threadIdx.x) * int64(3))"
    got = np.zeros(64, "int64")
    mod = vtakit.build(_kernel_func(loop, out), target="cuda")
    mod.emulate(got)
    np.testing.assert_array_equal(got, np.arange(64) * 3)


def test_a_local_stage_left_outside_the_kernels_is_an_error():
    A = te.placeholder((64,), "float32", name="A")
    B = te.compute((64,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    s.cache_write(B, "local")  # never attached inside the kernel
    _bound(s, B, *s[B].split(B.op.axis[0], factor=32))
    with pytest.raises(CompileError, match="buffer 'B.local' in scope 'local' is allocated outside every kernel"):
        vtakit.build(s, [A, B], target="cuda")


def test_a_device_program_prints_its_kernels_in_launch_order():
    s, args = two_kernels(64)
    text = str(split_host_device(vtakit.lower(s, args)))
    assert text.splitlines()[0] == "// device program main: 2 kernel(s), workspaces E[4096] float32"
    assert text.index("// kernel main_kernel0: grid (64, 1, 1), block (64, 1, 1), 0 bytes shared") \
        < text.index("// kernel main_kernel1: grid (2, 1, 1), block (32, 1, 1), 0 bytes shared")
    assert "primfn main_kernel1(S: Buffer(float32, [64]), E: Buffer(float32, [4096]))" in text
