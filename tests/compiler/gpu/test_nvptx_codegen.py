"""NVPTX code generation and ptxas: the PTX of each example is accepted for sm_80 and sm_90."""

from __future__ import annotations

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ir
from vtakit.compiler.backend.nvptx import KernelResources, ptxas_check
from vtakit.compiler.backend.nvptx.ptxas import parse_ptxas_log
from vtakit.errors import ArgumentError, CompileError, DeviceError
from tests.compiler.gpu.nvptx_cases import elementwise, elementwise_ref, needs_ptxas, row_sum, shared_gemm

ARCHS = ("sm_80", "sm_90")
CASES = {
    "elementwise": lambda: elementwise(1000, 128),
    "gemm": lambda: shared_gemm(32, 32, 8),
    "gemm_guarded_fetch": lambda: shared_gemm(32, 32, 8, fetch_threads=4),
    "row_sum_rfactor": lambda: row_sum(8, 48, 16, rfactor=True),
    "row_sum_direct": lambda: row_sum(8, 48, 12, "float32", rfactor=False),
}


@needs_ptxas
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", CASES)
def test_ptxas_accepts_the_ptx(case, arch):
    s, args = CASES[case]()
    mod = vtakit.build(s, args, target=f"cuda -arch={arch}")
    report = mod.ptxas()
    assert report.arch == arch
    assert [k.name for k in report.kernels] == [k.name for k in mod.kernels]
    for info, resources in zip(mod.kernels, report.kernels):
        assert resources.registers > 0 and resources.spill_stores == 0
        assert resources.shared_bytes == info.shared_bytes  # each buffer 16-byte aligned, as counted
        assert (resources.barriers > 0) == (info.shared_bytes > 0)


def test_the_module_describes_its_kernels_and_sources():
    s, args = shared_gemm(32, 32, 8)
    mod = vtakit.build(s, args, target="cuda")
    (kernel,) = mod.kernels
    assert (kernel.name, kernel.grid, kernel.block, kernel.shared_bytes) == ("main_kernel0", (4, 4, 1), (8, 8, 1), 512)
    ptx = mod.get_source("ptx")
    assert ".entry main_kernel0(" in ptx and ".maxntid 8, 8, 1" in ptx and "bar.sync" in ptx
    assert ".shared .align 16" in ptx and "ld.global" in ptx and "%tid.x" in ptx and "%ctaid.y" in ptx
    llvm_ir = mod.get_source("llvm")
    assert "nvptx64-nvidia-cuda" in llvm_ir and "addrspace(3)" in llvm_ir and "addrspace(1)" in llvm_ir
    assert mod.program.kernels[0].name == "main_kernel0"
    with pytest.raises(CompileError, match="unknown source format 'cubin'"):
        mod.get_source("cubin")
    assert vtakit.build(s, args, target="cuda") is mod  # cached by content


def test_calling_without_a_gpu_points_to_emulation():
    s, args = elementwise(256, 64)
    mod = vtakit.build(s, args, target="cuda")
    a, b = np.ones(256, "float32"), np.zeros(256, "float32")
    try:
        mod(a, b)
    except DeviceError as exc:
        assert "mod.emulate(*arrays)" in str(exc)
    else:  # a machine with a GPU runs it
        np.testing.assert_allclose(b, elementwise_ref(a), rtol=1e-5)


@pytest.mark.parametrize("args, message", [
    ((np.ones(256, "float32"),), "takes 2 arguments"),
    ((np.ones(256, "float64"), np.zeros(256, "float32")), "argument 0 .'A'. has dtype float64, expected float32"),
    ((np.ones(255, "float32"), np.zeros(256, "float32")), r"has shape \(255,\), expected \(256,\)"),
    ((np.ones(256, "float32"), [0.0] * 256), "must be a numpy array( or a CUDAArray)?, got list"),
    ((np.ones(512, "float32")[::2], np.zeros(256, "float32")), "must be C-contiguous"),
])
def test_bad_arguments(args, message):
    s, tensors = elementwise(256, 64)
    mod = vtakit.build(s, tensors, target="cuda")
    with pytest.raises(ArgumentError, match=message):
        mod.emulate(*args)
    with pytest.raises(ArgumentError, match=message):
        mod(*args)


def test_a_read_only_output_is_rejected():
    s, tensors = elementwise(256, 64)
    mod = vtakit.build(s, tensors, target="cuda")
    out = np.zeros(256, "float32")
    out.flags.writeable = False
    with pytest.raises(ArgumentError, match="written by the kernels but the array is read-only"):
        mod.emulate(np.ones(256, "float32"), out)


def _unary(fn, dtype="float32"):
    A = te.placeholder((64,), dtype, name="A")
    B = te.compute((64,), lambda i: fn(A[i]), name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    return s, [A, B]


@needs_ptxas
@pytest.mark.parametrize("name", ["exp", "exp2", "exp10", "log", "log2", "log10", "sin", "cos", "tan", "tanh",
                                  "sinh", "cosh", "erf", "log1p", "expm1", "sigmoid", "rsqrt", "floor", "ceil",
                                  "round", "trunc", "fabs", "sqrt"])
def test_math_needs_no_libdevice(name):
    s, args = _unary(lambda x: ir.Call.make("float32", name, [x]))
    ptx = vtakit.build(s, args, target="cuda").get_source("ptx")
    assert "call" not in ptx.split(".entry", 1)[1]  # every function is inline PTX, nothing to link
    ptxas_check(ptx, "sm_80")


def test_float64_transcendentals_are_an_error():
    s, args = _unary(te.exp, "float64")
    with pytest.raises(CompileError, match="computes 'exp' in float32 only, got double"):
        vtakit.build(s, args, target="cuda")
    s, args = _unary(lambda x: te.sqrt(x) + te.floor(x), "float64")
    vtakit.build(s, args, target="cuda")  # native PTX instructions


def test_an_unknown_intrinsic_is_an_error():
    s, args = _unary(lambda x: ir.Call.make("float32", "atan2", [x, x]))
    with pytest.raises(CompileError, match="the cuda backend has no intrinsic 'atan2'"):
        vtakit.build(s, args, target="cuda")
    s, args = _unary(lambda x: ir.Call.make("float32", "my_intrinsic", [x]))
    with pytest.raises(CompileError, match="the cuda backend has no intrinsic 'my_intrinsic'"):
        vtakit.build(s, args, target="cuda")


def test_parallel_loops_are_an_error():
    A = te.placeholder((64, 8), "float32", name="A")
    B = te.compute((64, 8), lambda i, j: A[i, j] + 1, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    s[B].parallel(B.op.axis[1])
    with pytest.raises(CompileError, match="is parallel; on the cuda target bind it to blockIdx/threadIdx"):
        vtakit.build(s, [A, B], target="cuda")


@needs_ptxas
def test_ptxas_rejection_carries_its_message():
    with pytest.raises(CompileError, match="(?s)ptxas rejected the PTX for sm_80.*Missing .version directive"):
        ptxas_check("this is not PTX\n", "sm_80")
    with pytest.raises(CompileError, match="unknown CUDA architecture 'sm_10'"):
        ptxas_check("", "sm_10")


def test_ptxas_log_parsing():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k0' for 'sm_80'
ptxas info    : Function properties for k0
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 368 bytes cmem[0]
ptxas info    : Compiling entry function 'k1' for 'sm_80'
ptxas info    : Function properties for k1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 368 bytes cmem[0]
"""
    assert parse_ptxas_log(log) == (KernelResources("k0", 40, 2048, 4, 12, 8, 1), KernelResources("k1", 10))


def test_vectorized_accesses_become_vector_loads_and_stores():
    n = 4096
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2 + 1, name="B")
    s = te.create_schedule(B.op)
    bx, rest = s[B].split(B.op.axis[0], factor=512)
    tx, lanes = s[B].split(rest, factor=4)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].vectorize(lanes)
    mod = vtakit.build(s, [A, B], target="cuda")
    ptx = mod.get_source("ptx")
    assert "ld.global.nc.v4.b32" in ptx and "st.global.v4.b32" in ptx
    a, b = np.arange(n, dtype="float32"), np.zeros(n, "float32")
    mod.emulate(a, b)
    np.testing.assert_array_equal(b, a * 2 + 1)


@needs_ptxas
def test_float16_storage_and_arithmetic():
    n = 1024
    H = te.placeholder((n,), "float16", name="H")
    G = te.compute((n,), lambda i: H[i] * H[i] + H[i], name="G")
    s = te.create_schedule(G.op)
    bx, tx = s[G].split(G.op.axis[0], factor=256)
    s[G].bind(bx, te.thread_axis("blockIdx.x"))
    s[G].bind(tx, te.thread_axis("threadIdx.x"))
    mod = vtakit.build(s, [H, G], target="cuda")
    assert ".f16" in mod.get_source("ptx") or ".b16" in mod.get_source("ptx")
    ptxas_check(mod.get_source("ptx"), "sm_80")
    h = np.linspace(-2, 2, n).astype("float16")
    g = np.zeros(n, "float16")
    mod.emulate(h, g)
    np.testing.assert_array_equal(g, h * h + h)


@needs_ptxas
def test_a_local_array_lives_in_local_memory():
    n, m = 128, 200
    A = te.placeholder((n, m), "float32", name="A")
    B = te.compute((n, m), lambda i, j: A[i, m - 1 - j] * 2, name="B")
    s = te.create_schedule(B.op)
    AL = s.cache_read(A, "local", [B])
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[AL].compute_at(s[B], tx)
    mod = vtakit.build(s, [A, B], target="cuda")
    assert "st.local" in mod.get_source("ptx")  # a 200-element array indexed in reverse: not registers
    assert mod.ptxas().kernels[0].stack_bytes >= 200 * 4
    a, b = np.random.default_rng(1).random((n, m), dtype="float32"), np.zeros((n, m), "float32")
    mod.emulate(a, b)
    np.testing.assert_array_equal(b, a[:, ::-1] * 2)
