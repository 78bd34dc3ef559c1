"""The cuda target string, the nvptx alias, and the lowering context it registers."""

from __future__ import annotations

import pytest

import vtakit
from vtakit.compiler import ir
from vtakit.compiler.backend.nvptx import CUDATarget, parse_target
from vtakit.compiler.backend.nvptx.target import ARCHS
from vtakit.compiler.build import lowering_context
from vtakit.errors import CompileError
from tests.compiler.gpu.nvptx_cases import elementwise, needs_ptxas


@pytest.mark.parametrize("text, arch", [("cuda", "sm_80"), ("nvptx", "sm_80"), ("cuda -arch=sm_90", "sm_90"),
                                        ("  cuda   -arch=sm_86 ", "sm_86")])
def test_target_strings(text, arch):
    assert parse_target(text) == CUDATarget(arch)
    assert parse_target(text).max_threads_per_block == 1024
    assert parse_target(text).max_shared_bytes == 49152
    assert {parse_target(text): 1}[CUDATarget(arch)] == 1  # usable as a key


@pytest.mark.parametrize("text, message", [
    ("cuda -arch=sm_99", "unknown CUDA architecture 'sm_99'"),
    ("cuda -arch", "unknown option '-arch'"),
    ("cuda -mcpu=skylake", "unknown option '-mcpu=skylake'"),
    ("llvm", "not a CUDA target"),
    ("", "a CUDA target is a string"),
])
def test_bad_target_strings(text, message):
    with pytest.raises(CompileError, match=message):
        parse_target(text)


def test_build_takes_the_arch_from_the_target_string():
    s, args = elementwise(256, 64)
    mod = vtakit.build(s, args, target="cuda -arch=sm_90")
    assert mod.target.arch == "sm_90" and ".target sm_90" in mod.get_source("ptx")
    assert vtakit.build(s, args, target="nvptx").target.arch == "sm_80"


def test_build_rejects_a_bad_option_and_a_config():
    s, args = elementwise(256, 64)
    with pytest.raises(CompileError, match="unknown CUDA architecture 'sm_1'"):
        vtakit.build(s, args, target="cuda -arch=sm_1")
    with pytest.raises(CompileError, match="unknown option '-max_threads=64'"):
        vtakit.build(s, args, target="cuda -max_threads=64")
    with pytest.raises(CompileError, match="takes no config"):
        vtakit.build(s, args, target="cuda", config=object())


def test_lowering_for_cuda_keeps_thread_loops_and_the_current_context():
    s, args = elementwise(256, 64)
    func = vtakit.lower(s, args, target="cuda")
    assert isinstance(func, ir.PrimFunc) and "threadIdx.x" in str(func)
    with vtakit.compiler.transform.PassContext(config={"tir.disable_vectorize": True}):
        ctx = lowering_context("cuda")
    assert ctx.config == {"tir.disable_vectorize": True}
    assert set(ctx.memory_scopes) >= {"shared", "local"}


@needs_ptxas
@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture_gets_ptx_that_ptxas_accepts(arch):
    s, args = elementwise(256, 64)
    mod = vtakit.build(s, args, target=f"cuda -arch={arch}")
    assert f".target {arch}" in mod.get_source("ptx")
    assert mod.ptxas().kernels[0].registers > 0
