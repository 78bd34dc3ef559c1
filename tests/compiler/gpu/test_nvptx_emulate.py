"""The built kernels, emulated with GPU semantics, equal numpy; without their barriers they race."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vtakit
from vtakit.compiler import ir
from vtakit.compiler.backend.nvptx.program import is_barrier
from vtakit.compiler.gpu_emulator import emulate
from vtakit.errors import SharedMemoryRaceError
from tests.compiler.gpu.nvptx_cases import elementwise, elementwise_ref, row_sum, shared_gemm

RNG = np.random.default_rng(7)


def test_elementwise():
    s, args = elementwise(1000, 128)
    mod = vtakit.build(s, args, target="cuda")
    a = RNG.uniform(-3, 3, 1000).astype("float32")
    b = np.zeros(1000, "float32")
    mod.emulate(a, b)
    np.testing.assert_allclose(b, elementwise_ref(a), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("fetch_threads, double_buffer", [(None, False), (4, False), (None, True)])
def test_shared_memory_gemm(dtype, fetch_threads, double_buffer):
    s, args = shared_gemm(16, 32, 8, dtype, fetch_threads, double_buffer)
    mod = vtakit.build(s, args, target="cuda")
    a = RNG.integers(-20, 20, (16, 32)).astype(dtype)
    b = RNG.integers(-20, 20, (32, 16)).astype(dtype)
    c = np.zeros((16, 16), dtype)
    mod.emulate(a, b, c)
    np.testing.assert_array_equal(c, a @ b)  # small integers: exact in float32 too


@pytest.mark.parametrize("rfactor", [True, False])
@pytest.mark.parametrize("factor", [16, 12])
def test_cross_thread_row_sum(rfactor, factor):
    s, args = row_sum(8, 48, factor, "int32", rfactor)
    mod = vtakit.build(s, args, target="cuda")
    a = RNG.integers(-1000, 1000, (8, 48)).astype("int32")
    out = np.zeros(8, "int32")
    mod.emulate(a, out)
    np.testing.assert_array_equal(out, a.sum(axis=1))


def _without_barriers(stmt: ir.Stmt) -> ir.Stmt:
    class Strip(ir.IRMutator):
        def visit_SeqStmt(self, node):
            return ir.seq(*(self.visit(s) for s in node.stmts if not is_barrier(s)))
    return Strip().visit(stmt)


def test_the_gemm_without_its_barriers_races():
    s, args = shared_gemm(16, 32, 8)
    program = vtakit.build(s, args, target="cuda").program
    kernels = [dataclasses.replace(k, body=_without_barriers(k.body)) for k in program.kernels]
    broken = dataclasses.replace(program, kernels=kernels)
    a, b, c = np.ones((16, 32), "float32"), np.ones((32, 16), "float32"), np.zeros((16, 16), "float32")
    race = (r"shared-memory race in kernel main_kernel0, .*: threadIdx=.* writes A\.shared\[\d+\], "
            r"which threadIdx=.* read with no barrier")
    with pytest.raises(SharedMemoryRaceError, match=race):
        emulate(broken, [a, b, c])
