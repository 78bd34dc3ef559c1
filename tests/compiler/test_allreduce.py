"""The cross-thread reduction builder (``lower/allreduce.py``, TVM's MakeCrossThreadReduction) through
small schedules: ``thread_bound_reduce_axes`` finds the reduce axis bound to a thread; a bound axis
alone gives one ``AllReduce`` into a private ``reduce_temp`` whose condition carries the tail
predicate and ``where``; an unbound reduce axis runs per thread into ``normal_reduce_temp`` before an
unconditional all-reduce; a bound extent of 1 emits no all-reduce; the store is guarded by the store
predicate, which may not depend on the per-thread reduce loop (error message). Results are compared
with numpy (interpreter, integers exactly)."""

from __future__ import annotations

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ir
from vtakit.compiler.interpreter import run
from vtakit.compiler.lower.allreduce import thread_bound_reduce_axes
from vtakit.errors import ScheduleError


def _row_sum(n: int, m: int, where=None, init=None):
    a = te.placeholder((n, m), "int32", name="A")
    k = te.reduce_axis((0, m), "k")
    kwargs = {} if init is None else {"init": init}
    b = te.compute((n,), lambda i: te.sum(a[i, k], axis=k, where=where(k) if where else None, **kwargs), name="B")
    return a, b


def _nodes(func: ir.PrimFunc, kind: type) -> list:
    found: list = []
    ir.walk(func.body, lambda n: found.append(n) if isinstance(n, kind) else None)
    return found


def _lower_and_run(s, a, b, n: int, m: int, seed: int = 0) -> tuple[ir.PrimFunc, np.ndarray, np.ndarray]:
    func = vtakit.lower(s, [a, b])
    x = np.random.default_rng(seed).integers(-50, 50, (n, m)).astype(np.int32)
    out = np.zeros(n, np.int32)
    run(func, x, out)
    return func, x, out


def _stores_to(stmt: ir.Stmt, name: str) -> bool:
    found: list = []
    ir.walk(stmt, lambda n: found.append(n) if isinstance(n, ir.BufferStore) and n.buffer.name == name else None)
    return bool(found)


def _allocated(func: ir.PrimFunc) -> list[str]:
    return [al.buffer.name for al in _nodes(func, ir.Allocate)]


def test_thread_bound_reduce_axes_finds_the_bound_reduce_axis_only():
    a, b = _row_sum(4, 8)
    s = te.create_schedule(b.op)
    assert thread_bound_reduce_axes(s[b]) == []
    ko, ki = s[b].split(b.op.reduce_axis[0], factor=4)
    s[b].bind(ki, te.thread_axis("threadIdx.x"))
    s[b].bind(b.op.axis[0], te.thread_axis("blockIdx.x"))
    assert thread_bound_reduce_axes(s[b]) == [ki]


def test_a_per_thread_reduce_loop_runs_before_an_unconditional_all_reduce():
    n, m = 3, 10
    a, b = _row_sum(n, m, where=lambda k: k % 3 != 1)
    s = te.create_schedule(b.op)
    s[b].bind(b.op.axis[0], te.thread_axis("blockIdx.x"))
    tx = te.thread_axis("threadIdx.x")
    ko, ki = s[b].split(b.op.reduce_axis[0], factor=4)         # 4 threads x 3 steps over 10: a tail
    s[b].reorder(ki, ko)
    s[b].bind(ki, tx)
    func, x, out = _lower_and_run(s, a, b, n, m)
    (red,) = _nodes(func, ir.AllReduce)
    assert red.thread_tag == "threadIdx.x" and red.buffer.name.startswith("reduce_temp")
    assert ir.int_value(red.condition) == 1                   # the tail and where guard the per-thread loop
    assert isinstance(red.value, ir.BufferLoad) and red.value.buffer.name.startswith("normal_reduce_temp")
    assert any(name.startswith("normal_reduce_temp") for name in _allocated(func))
    mask = (np.arange(m) % 3 != 1)
    np.testing.assert_array_equal(out, (x * mask).sum(axis=1))


def test_without_per_thread_loops_the_condition_carries_the_predicates():
    n, m = 2, 6
    a, b = _row_sum(n, m, where=lambda k: k > 1)
    s = te.create_schedule(b.op)
    s[b].bind(b.op.axis[0], te.thread_axis("blockIdx.x"))
    s[b].bind(b.op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    func, x, out = _lower_and_run(s, a, b, n, m)
    (red,) = _nodes(func, ir.AllReduce)
    assert not isinstance(red.condition, ir.IntImm)            # where k > 1 decides who contributes
    assert not any(name.startswith("normal_reduce_temp") for name in _allocated(func))
    assert not any(ir.contains(g, ir.AllReduce) for g in _nodes(func, ir.IfThenElse))   # never guarded
    np.testing.assert_array_equal(out, x[:, 2:].sum(axis=1))


def test_a_bound_extent_of_one_emits_no_all_reduce():
    n, m = 3, 5
    a, b = _row_sum(n, m, init=7)
    s = te.create_schedule(b.op)
    ko, ki = s[b].split(b.op.reduce_axis[0], factor=1)
    s[b].bind(b.op.axis[0], te.thread_axis("blockIdx.x"))
    s[b].bind(ki, te.thread_axis("threadIdx.x"))
    func, x, out = _lower_and_run(s, a, b, n, m)
    assert not _nodes(func, ir.AllReduce)
    np.testing.assert_array_equal(out, x.sum(axis=1) + 7)


def test_the_store_predicate_guards_the_store_and_may_not_use_the_per_thread_loop():
    n, m = 2, 8
    a, b = _row_sum(n, m)
    s = te.create_schedule(b.op)
    ko, ki = s[b].split(b.op.reduce_axis[0], factor=4)
    tx = te.thread_axis("threadIdx.x")
    s[b].bind(b.op.axis[0], te.thread_axis("blockIdx.x"))
    s[b].bind(ki, tx)
    s[b].set_store_predicate(tx.var.equal(0))
    func, x, out = _lower_and_run(s, a, b, n, m)
    guards = [g for g in _nodes(func, ir.IfThenElse) if _stores_to(g.then_case, "B")]
    assert guards and not any(ir.contains(g, ir.AllReduce) for g in guards)
    np.testing.assert_array_equal(out, x.sum(axis=1))

    bad = te.create_schedule(b.op)
    ko, ki = bad[b].split(b.op.reduce_axis[0], factor=4)
    tx = te.thread_axis("threadIdx.x")
    bad[b].bind(ki, tx)
    bad[b].set_store_predicate(ko.var.equal(0))
    with pytest.raises(ScheduleError, match=r"stage B: the store predicate .* depends on the reduction loop\(s\) "
                                            r"k.outer, which each thread runs before the all-reduce over threadIdx.x"):
        vtakit.lower(bad, [a, b])
