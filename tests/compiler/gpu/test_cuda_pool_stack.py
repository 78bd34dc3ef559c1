"""The pooling kernel of :func:`vtakit.compiler.ops.cuda.schedule_pool` keeps its one output per
thread in a register: no per-thread (local memory) stack.

Bound inference used to size the per-thread accumulator (``max_pool2d.local``, a ``cache_write``
attached at threadIdx.x) to the whole H x W plane: the consumer's index on an axis of the fused,
split and bound loop is ``floormod((blockIdx.x*256 + threadIdx.x) // 56, 56)``, a single point per
thread, but :func:`~vtakit.compiler.lower.bound.eval_interval` rebuilt the bounds of the point
``(blockIdx.x*256 + threadIdx.x) // 56`` as two distinct (equal) nodes, which FloorMod's identity
test took for a range and relaxed to ``[0, 55]``. Every thread then computed all 3136 outputs of
its channel into a 12,544-byte local array (ptxas: 12,592 bytes of stack for ResNet-18's MaxPool)
and stored one of them.
"""

from __future__ import annotations

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ir, ops
from vtakit.compiler.arith import Analyzer
from vtakit.compiler.backend.nvptx import ptxas_check
from vtakit.compiler.lower.bound import eval_interval
from tests.compiler.gpu.nvptx_cases import needs_ptxas
from tests.compiler.test_ops import pool_ref


def _local_allocations(func):
    found = []
    ir.walk(func.body, lambda n: found.append(n.buffer) if isinstance(n, ir.Allocate) else None)
    return [b for b in found if b.scope.startswith("local")]


def test_point_through_floordiv_stays_a_point():
    bx, tx, k = ir.Var("bx"), ir.Var("tx"), ir.Var("k")
    c56 = ir.IntImm("int32", 56)
    point = ir.FloorMod(ir.FloorDiv(bx * 256 + tx, c56), c56)
    lo, hi = eval_interval(point, {k: (ir.IntImm("int32", 0), ir.IntImm("int32", 2))}, Analyzer())
    assert lo is point and hi is point
    # with blockIdx.x relaxed it is the whole axis
    lo, hi = eval_interval(point, {bx: (ir.IntImm("int32", 0), ir.IntImm("int32", 783))}, Analyzer())
    assert (lo.value, hi.value) == (0, 55)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("shape", [(1, 64, 112, 112), (1, 3, 10, 10), (2, 4, 9, 9)])
def test_pool_accumulator_is_one_element_per_thread(kind, shape):
    x = te.placeholder(shape, "float32", name="x")
    y = ops.pool2d(x, 3, 2, 1, kind)
    (buf,) = _local_allocations(vtakit.lower(ops.cuda.schedule(y), [x, y]))
    assert [getattr(n, "value", n) for n in buf.shape] == [1]


@needs_ptxas
def test_resnet18_maxpool_kernel_has_no_stack():
    x = te.placeholder((1, 64, 112, 112), "float32", name="x")
    y = ops.pool2d(x, 3, 2, 1, "max")
    mod = vtakit.build(ops.cuda.schedule(y), [x, y], target="cuda -arch=sm_80", name="maxpool")
    (k,) = mod.kernels
    assert (k.grid, k.block) == ((784, 1, 1), (256, 1, 1))
    res = ptxas_check(mod.get_source("ptx"), "sm_80").kernel(k.name)
    assert (res.stack_bytes, res.spill_stores, res.spill_loads) == (0, 0, 0)   # was 12,592 bytes of stack
    assert res.registers <= 32                                                  # was 29; 22 now


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_emulated_equals_numpy(kind):
    rng = np.random.default_rng(0)
    x = te.placeholder((2, 4, 12, 12), "float32", name="x")
    y = ops.pool2d(x, 3, 2, 1, kind)
    mod = vtakit.build(ops.cuda.schedule(y), [x, y], target="cuda -arch=sm_80")
    a = rng.uniform(-1, 1, (2, 4, 12, 12)).astype(np.float32)
    got = np.zeros((2, 4, 6, 6), np.float32)
    mod.emulate(a, got)
    want = pool_ref(a, 3, 2, 1, kind)
    if kind == "max":
        np.testing.assert_array_equal(got, want.astype(np.float32))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
