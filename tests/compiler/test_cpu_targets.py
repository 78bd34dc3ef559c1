"""CPU target options (``-mcpu``, ``-mattr``, ``-vector-width``) and the schedules that block for them:
parsing and its errors, the register tiles derived from a target, the vector width in the assembly,
and, for every target option this host can run, odd shapes (primes, tails) equal to numpy."""

from __future__ import annotations

import re

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ops
from vtakit.compiler.backend.llvm_runtime import (CPUTarget, enabled_features, host_target, native_vector_width,
                                                  parse_target)
from vtakit.compiler.ops import cpu
from vtakit.errors import CompileError

HOST = host_target()
X86 = HOST.triple.startswith(("x86_64", "i686", "i386"))
HOST_FLAGS = enabled_features(HOST.features)


def runnable_targets() -> list[str]:
    """Target strings whose code runs on this host: every vector width up to the host's, and named
    x86 CPUs whose features the host has."""
    targets = ["llvm"] + [f"llvm -vector-width={w}" for w in (128, 256, 512) if w <= HOST.vector_width]
    if X86:
        targets.append("llvm -mcpu=x86-64")
        if HOST_FLAGS.get("avx2") and HOST_FLAGS.get("fma"):
            targets.append("llvm -mcpu=haswell")
        if HOST_FLAGS.get("avx512f"):
            targets.append("llvm -mattr=-avx512f")
    return targets


TARGETS = runnable_targets()


# ---------------------------------------------------------------------------- parsing
def test_host_default_is_the_widest_vector():
    t = parse_target("llvm")
    assert t == HOST and t.vector_width == native_vector_width(HOST.cpu, HOST.features)
    assert f"-vector-width={t.vector_width}" in str(t)
    assert parse_target(str(t)) == t  # a target prints as a string that parses back to it


@pytest.mark.parametrize("cpu_name, width, registers", [
    ("skylake-avx512", 512, 32), ("znver4", 512, 32), ("haswell", 256, 16), ("znver2", 256, 16),
    ("x86-64", 128, 16)])
def test_named_cpu_vector_width(cpu_name, width, registers):
    t = parse_target(f"llvm -mcpu={cpu_name}")
    assert (t.cpu, t.vector_width, t.vector_registers) == (cpu_name, width, registers)


def test_features_override_the_cpu_name():
    assert enabled_features("+avx512f,-avx2,-avx512f") == {"avx512f": False, "avx2": False}
    assert native_vector_width("skylake-avx512", "-avx512f") == 256
    assert native_vector_width("x86-64", "+avx2") == 256
    assert native_vector_width("haswell", "-avx") == 128
    assert native_vector_width("x86-64", "+avx512f") == 512


def test_vector_width_option_and_llvm_tuning_feature():
    t = parse_target("llvm -mcpu=skylake-avx512 -vector-width=256")
    assert t.vector_width == 256 and t.vector_registers == 32  # AVX-512's 32 registers stay
    assert t.llvm_features.endswith("+prefer-256-bit")
    assert parse_target("llvm -mcpu=skylake-avx512").llvm_features.endswith("-prefer-256-bit,-prefer-128-bit")
    assert parse_target("llvm -mcpu=haswell -vector-width=128").llvm_features.endswith("+prefer-128-bit")


@pytest.mark.parametrize("text, message", [
    ("llvm -vector-width=300", r"-vector-width=300 .* expected one of \(128, 256, 512\)"),
    ("llvm -vector-width=wide", r"-vector-width=wide"),
    ("llvm -mcpu=haswell -vector-width=512", r"'haswell' .* 256-bit vectors at most"),
    ("llvm -mcpu=x86-64 -vector-width=256", r"'x86-64' .* 128-bit vectors at most"),
    ("llvm -vectorwidth=256", r"unknown target option '-vectorwidth'.*-vector-width"),
])
def test_bad_target_options(text, message):
    with pytest.raises(CompileError, match=message):
        parse_target(text)


def test_target_of_the_wrong_type():
    with pytest.raises(CompileError, match="got int"):
        parse_target(512)


# ---------------------------------------------------------------------------- blocking from the target
def test_register_tiles_follow_the_register_file():
    assert cpu.gemm_tile("float32", "llvm -mcpu=skylake-avx512") == cpu.RegisterTile(8, 32, 2)
    assert cpu.gemm_tile("float32", "llvm -mcpu=haswell") == cpu.RegisterTile(6, 16, 2)
    assert cpu.gemm_tile("float32", "llvm -mcpu=x86-64") == cpu.RegisterTile(6, 8, 2)
    assert cpu.dense_pack_block("float32", "llvm -mcpu=skylake-avx512 -vector-width=256") == 16
    assert cpu.dense_pack_block("float32", "llvm -mcpu=skylake-avx512", out_features=1000) == 25
    assert cpu.dense_pack_block("float32", "llvm -mcpu=skylake-avx512", out_features=48) == 16
    assert cpu.dense_pack_block("float32", "llvm -mcpu=haswell", out_features=21) == 7
    assert cpu.conv2d_channel_block(48, "float32", "llvm -mcpu=skylake-avx512") == 24
    assert cpu.conv2d_channel_block(64, "float32", "llvm -mcpu=haswell") == 16
    # a 7-wide output: 7 pixels x 1 ymm beat 1 pixel x 2 ymm on AVX2; AVX-512 keeps 7 x 2 zmm
    assert cpu.conv2d_channel_block(512, "float32", "llvm -mcpu=haswell", out_width=7) == 8
    assert cpu.conv2d_channel_block(512, "float32", "llvm -mcpu=skylake-avx512", out_width=7) == 32
    assert cpu.vector_lanes("float32", "llvm -mcpu=haswell") == 8
    assert cpu.vector_lanes("int8", "llvm -mcpu=skylake-avx512") == 64


def _gemm_asm(target: str) -> str:
    n = 64
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    C = ops.matmul(A, B, pack_block=cpu.dense_pack_block("float32", target))
    return vtakit.build(cpu.schedule_dense(C, target=target), [A, B, C], target=target).get_source("asm")


@pytest.mark.skipif(not X86, reason="x86 register names")
@pytest.mark.parametrize("target, register", [("llvm -mcpu=haswell", "ymm"), ("llvm -mcpu=skylake-avx512", "zmm"),
                                              ("llvm -mcpu=skylake-avx512 -vector-width=256", "ymm")])
def test_assembly_uses_the_target_vector_width(target, register):
    asm = _gemm_asm(target)
    fmas = re.findall(r"vfmadd\w+\s+[^\n]*%([xyz]mm)\d+", asm)
    assert fmas and set(fmas) == {register}, (target, set(fmas))
    assert "Spill" not in asm  # the register tile fits the register file


# ---------------------------------------------------------------------------- odd shapes, every target
def _run(s, args, arrays, out_shape, target):
    mod = vtakit.build(s, args, target=target)
    out = np.zeros(out_shape, "float32")
    mod(*arrays, out)
    return out


def _conv_ref(x, w, pad, stride):
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, c, kh, kw = w.shape
    oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], o, oh, ow))
    for y in range(kh):
        for z in range(kw):
            patch = xp[:, :, y:y + (oh - 1) * stride + 1:stride, z:z + (ow - 1) * stride + 1:stride]
            out += np.einsum("oc,nchw->nohw", w[:, :, y, z], patch)
    return out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m, k, panels", [(37, 29, 3), (1, 61, 1), (13, 7, 8), (9, 1024, 8)])
def test_matmul_odd_shapes(target, m, k, panels):
    """Rows and depth prime or tails of the register tile; 8 panels take the pack-per-panel path
    (with k=1024 the per-thread panel is 128 KiB on the task's stack)."""
    rng = np.random.default_rng(m * k)
    block = cpu.dense_pack_block("float32", target)
    n = block * panels
    a = rng.uniform(-1, 1, (m, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, n)).astype("float32")
    A, B = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    C = ops.matmul(A, B, pack_block=block)
    got = _run(cpu.schedule(C, target=target), [A, B, C], [a, b], (m, n), target)
    np.testing.assert_allclose(got, a.astype("float64") @ b, rtol=1e-5, atol=1e-5 * k)


@pytest.mark.parametrize("target", TARGETS)
def test_dense_bias_relu_odd_shapes(target):
    rng = np.random.default_rng(3)
    m, k, n = 5, 31, 23
    x = rng.uniform(-1, 1, (m, k)).astype("float32")
    w = rng.uniform(-1, 1, (n, k)).astype("float32")
    bias = rng.uniform(-1, 1, n).astype("float32")
    X, W, Bias = te.placeholder((m, k), name="x"), te.placeholder((n, k), name="w"), te.placeholder((n,), name="b")
    out = ops.elemwise.relu(ops.dense(X, W, Bias))
    got = _run(cpu.schedule(out, target=target), [X, W, Bias, out], [x, w, bias], (m, n), target)
    np.testing.assert_allclose(got, np.maximum(x.astype("float64") @ w.T + bias, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("h, w, ci, co, kernel, pad, stride", [(13, 11, 3, 24, 3, 1, 2), (7, 7, 5, 40, 1, 0, 1),
                                                               (9, 17, 7, 16, 3, 1, 1)])
def test_conv2d_packed_odd_shapes(target, h, w, ci, co, kernel, pad, stride):
    rng = np.random.default_rng(h * w + co)
    x = rng.uniform(-1, 1, (1, ci, h, w)).astype("float32")
    wt = rng.uniform(-1, 1, (co, ci, kernel, kernel)).astype("float32")
    ow = (w + 2 * pad - kernel) // stride + 1
    block = cpu.conv2d_channel_block(co, "float32", target, out_width=ow)
    data = te.placeholder(x.shape, name="data")
    packed = te.placeholder((co // block, ci, kernel, kernel, block), name="kernel")
    out = ops.conv2d_nchw_packed(data, packed, stride, pad)
    shape = tuple(int(s) for s in out.shape)
    got = _run(cpu.schedule(out, target=target), [data, packed, out], [x, ops.layout.pack_conv2d_kernel(wt, block)],
               shape, target)
    np.testing.assert_allclose(got, _conv_ref(x, wt, pad, stride), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_plain_conv_and_pool_odd_shapes(target):
    rng = np.random.default_rng(11)
    x = rng.uniform(-1, 1, (1, 5, 11, 13)).astype("float32")
    wt = rng.uniform(-1, 1, (7, 5, 3, 3)).astype("float32")
    data, kernel = te.placeholder(x.shape, name="data"), te.placeholder(wt.shape, name="kernel")
    out = ops.conv2d_nchw(data, kernel, 1, 1)
    got = _run(cpu.schedule(out, target=target), [data, kernel, out], [x, wt], (1, 7, 11, 13), target)
    np.testing.assert_allclose(got, _conv_ref(x, wt, 1, 1), rtol=1e-5, atol=1e-4)
    pooled = ops.pool2d(data, 3, 2, 1, "max")
    shape = tuple(int(s) for s in pooled.shape)
    got = _run(cpu.schedule(pooled, target=target), [data, pooled], [x], shape, target)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.stack([np.stack([xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(1, 2)) for j in range(shape[3])], -1)
                     for i in range(shape[2])], -2)[None]
    np.testing.assert_array_equal(got, want)


def test_cpu_target_is_a_dataclass_with_a_derived_width():
    t = CPUTarget(HOST.triple, "haswell", "")
    assert t.vector_width == 256 and t == parse_target("llvm -mcpu=haswell")


@pytest.mark.parametrize("target", TARGETS)
def test_dense_packed_features_no_whole_vectors_divide(target):
    """75 output features: the panel is the largest divisor below the tile (25 or 15 lanes)."""
    rng = np.random.default_rng(5)
    m, k, n = 16, 40, 75
    x = rng.uniform(-1, 1, (m, k)).astype("float32")
    w = rng.uniform(-1, 1, (n, k)).astype("float32")
    block = cpu.dense_pack_block("float32", target, out_features=n)
    assert n % block == 0
    X, W = te.placeholder((m, k), name="x"), te.placeholder((n // block, k, block), name="w")
    out = ops.dense_packed(X, W)
    got = _run(cpu.schedule(out, target=target), [X, W, out], [x, ops.layout.pack_dense_weight(w, block)], (m, n),
               target)
    np.testing.assert_allclose(got, x.astype("float64") @ w.T, rtol=1e-5, atol=1e-5 * k)
