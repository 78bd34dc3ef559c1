"""Tensorize lowering (``lower/tensorize.py``, TVM's MakeTensorize) through small schedules with toy
int32 intrinsics run by the interpreter: an element-wise intrinsic bound to each tile's region
(element offset of the tile, the real strides through stride variables), a dot-product intrinsic
emitted as the body alone (whole reduction inside), as reset/update nests, or, without a reset, as
``if (outer reduction past its first step) update else body``; a region that does not divide and a
body that does not match are rejected by message. Results equal numpy exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ir
from vtakit.compiler.arith import simplify
from vtakit.compiler.interpreter import Pointer, run
from vtakit.errors import ScheduleError

N, M, W = 3, 8, 4           # rows, row length, the intrinsics' width


def vadd_intrin(offset_factor: int = 1) -> Any:
    """``c[i] = a[i] + b[i] * 2`` over W lanes, one ``vadd(c, a, b)`` call."""
    a, b = te.placeholder((W,), "int32", name="a"), te.placeholder((W,), "int32", name="b")
    c = te.compute((W,), lambda i: a[i] + b[i] * 2, name="c")
    binds = {t: te.decl_buffer(t.shape, "int32", name=t.name.upper(), offset_factor=offset_factor) for t in (a, b, c)}
    return te.decl_tensor_intrin(
        c.op, lambda ins, outs: te.call_intrin("int32", "vadd", outs[0].access_ptr("w"), ins[0].access_ptr("r"),
                                                ins[1].access_ptr("r")), binds=binds)


def dot_intrin(parts: str) -> Any:
    """``c[0] = sum_k a[k] * b[k]`` over W; ``parts``: "body" (body only), "reset" (body, reset, update),
    "noreset" (body and update)."""
    a, b = te.placeholder((W,), "int32", name="a"), te.placeholder((W,), "int32", name="b")
    k = te.reduce_axis((0, W), name="k")
    c = te.compute((1,), lambda i: te.sum(a[k] * b[k], axis=k), name="c")
    binds = {t: te.decl_buffer(t.shape, "int32", name=t.name.upper(), offset_factor=1) for t in (a, b, c)}

    def fcompute(ins, outs):
        def call(op, *ptrs):
            return ir.Evaluate(te.call_intrin("int32", op, *ptrs))

        reset = call("dot_reset", outs[0].access_ptr("w"))
        update = call("dot_update", outs[0].access_ptr("rw"), ins[0].access_ptr("r"), ins[1].access_ptr("r"))
        body = ir.seq(reset, update)
        return {"body": (body, None, None), "reset": (body, reset, update), "noreset": (body, None, update)}[parts]

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds)


def _vadd(c: Pointer, a: Pointer, b: Pointer) -> int:
    c.array[c.offset:c.offset + W] = a.array[a.offset:a.offset + W] + b.array[b.offset:b.offset + W] * 2
    return 0


def _dot_reset(c: Pointer) -> int:
    c.array[c.offset] = 0
    return 0


def _dot_update(c: Pointer, a: Pointer, b: Pointer) -> int:
    c.array[c.offset] += int(np.dot(a.array[a.offset:a.offset + W].astype(np.int64),
                                    b.array[b.offset:b.offset + W].astype(np.int64)))
    return 0


INTRINSICS = {"vadd": _vadd, "dot_reset": _dot_reset, "dot_update": _dot_update}


def _calls(func: ir.PrimFunc, op: str) -> list[ir.Call]:
    found: list[ir.Call] = []
    ir.walk(func.body, lambda n: found.append(n) if isinstance(n, ir.Call) and n.op == op else None)
    return found


def _inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(rng.integers(-100, 100, (N, M)).astype(np.int32) for _ in range(2))


def test_an_element_wise_intrinsic_is_bound_to_each_tile():
    a, b = te.placeholder((N, M), "int32", name="A"), te.placeholder((N, M), "int32", name="B")
    c = te.compute((N, M), lambda i, j: a[i, j] + b[i, j] * 2, name="C")
    s = te.create_schedule(c.op)
    jo, ji = s[c].split(c.op.axis[1], factor=W)
    s[c].tensorize(ji, vadd_intrin())
    func = vtakit.lower(s, [a, b, c])
    (call,) = _calls(func, "vadd")
    loops: list[ir.For] = []
    ir.walk(func.body, lambda n: loops.append(n) if isinstance(n, ir.For) else None)
    assert [ir.int_value(lp.extent) for lp in loops] == [N, M // W]          # the tile loop is the call
    i, jo_var = loops[0].loop_var, loops[1].loop_var
    offset = call.args[0].args[2]                                            # C's access_ptr offset
    at = ir.substitute(offset, {i: 2, jo_var: 1})
    assert ir.int_value(simplify(at)) == 2 * M + W
    x, y = _inputs()
    out = np.full((N, M), 7, np.int32)
    run(func, x, y, out, intrinsics=INTRINSICS)
    np.testing.assert_array_equal(out, x + y * 2)


def _dot_stage():
    a, b = te.placeholder((N, M), "int32", name="A"), te.placeholder((N, M), "int32", name="B")
    k = te.reduce_axis((0, M), name="k")
    c = te.compute((N,), lambda i: te.sum(a[i, k] * b[i, k], axis=k), name="C")
    return a, b, c


def _run_dot(s, a, b, c) -> tuple[ir.PrimFunc, np.ndarray]:
    func = vtakit.lower(s, [a, b, c])
    x, y = _inputs(1)
    out = np.full(N, 7, np.int32)                       # garbage: the reduction must start from zero
    run(func, x, y, out, intrinsics=INTRINSICS)
    np.testing.assert_array_equal(out, (x.astype(np.int64) * y).sum(axis=1).astype(np.int32))
    return func, out


def test_a_reduction_split_outside_the_region_uses_reset_then_update_nests():
    a, b, c = _dot_stage()
    s = te.create_schedule(c.op)
    ko, ki = s[c].split(c.op.reduce_axis[0], factor=W)
    s[c].tensorize(ki, dot_intrin("reset"))
    func, _ = _run_dot(s, a, b, c)
    assert len(_calls(func, "dot_reset")) == 1 and len(_calls(func, "dot_update")) == 1
    assert not any(isinstance(n, ir.IfThenElse) for n in _all(func))


def test_without_a_reset_the_first_step_runs_the_body_and_later_ones_the_update():
    a, b, c = _dot_stage()
    s = te.create_schedule(c.op)
    ko, ki = s[c].split(c.op.reduce_axis[0], factor=W)
    s[c].tensorize(ki, dot_intrin("noreset"))
    func, _ = _run_dot(s, a, b, c)
    (branch,) = [n for n in _all(func) if isinstance(n, ir.IfThenElse)]
    assert isinstance(branch.cond, ir.GT) and ir.int_value(branch.cond.b) == 0
    assert _calls(ir.PrimFunc("t", (), branch.then_case, {}), "dot_update")
    assert _calls(ir.PrimFunc("e", (), branch.else_case, {}), "dot_reset")


def test_the_whole_reduction_inside_the_region_is_the_body_alone():
    a = te.placeholder((N, W), "int32", name="A")
    b = te.placeholder((N, W), "int32", name="B")
    k = te.reduce_axis((0, W), name="k")
    c = te.compute((N,), lambda i: te.sum(a[i, k] * b[i, k], axis=k), name="C")
    s = te.create_schedule(c.op)
    io, ii = s[c].split(c.op.axis[0], factor=1)
    s[c].tensorize(ii, dot_intrin("body"))
    func = vtakit.lower(s, [a, b, c])
    assert len(_calls(func, "dot_reset")) == 1 and len(_calls(func, "dot_update")) == 1
    rng = np.random.default_rng(2)
    x, y = (rng.integers(-100, 100, (N, W)).astype(np.int32) for _ in range(2))
    out = np.full(N, 7, np.int32)
    run(func, x, y, out, intrinsics=INTRINSICS)
    np.testing.assert_array_equal(out, (x * y).sum(axis=1))


def _all(func: ir.PrimFunc) -> list[Any]:
    found: list = []
    ir.walk(func.body, found.append)
    return found


def test_a_tile_that_does_not_divide_and_a_body_that_does_not_match_are_rejected():
    a, b = te.placeholder((N, 10), "int32", name="A"), te.placeholder((N, 10), "int32", name="B")
    c = te.compute((N, 10), lambda i, j: a[i, j] + b[i, j] * 2, name="C")
    s = te.create_schedule(c.op)
    jo, ji = s[c].split(c.op.axis[1], factor=W)                 # 10 = 2 x 4 + a tail of 2
    s[c].tensorize(ji, vadd_intrin())
    with pytest.raises(ScheduleError, match=r"stage C: tensorize at axis j.inner with .*: the tensorized region "
                                            r"must divide its axes evenly"):
        vtakit.lower(s, [a, b, c])
    d = te.compute((N, M), lambda i, j: a[i, j] * 2 + b[i, j], name="D")
    s = te.create_schedule(d.op)
    jo, ji = s[d].split(d.op.axis[1], factor=W)
    s[d].tensorize(ji, vadd_intrin())
    with pytest.raises(ScheduleError, match=r"stage D: .* failed to match the compute with the intrinsic"):
        vtakit.lower(s, [a, b, d])
