"""The VectorizeLoop pass on hand-built loops: a constant ``vectorized`` loop becomes Ramp/Broadcast
vector expressions (affine indices stay Ramps, scalars are broadcast), and bodies it cannot vectorise
faithfully (a lane-dependent guard, a lane-independent store, a lazily evaluated call, a lane-dependent
inner bound, a let) become a serial loop; the interpreter gives the same results before and after."""

from __future__ import annotations

import pytest

from tests.compiler.hand_ir import assert_same_results, nodes
from vtakit.compiler import ir
from vtakit.compiler.lower.vectorize import vectorize_loops

A = ir.Buffer("A", (32,), "int32")
B = ir.Buffer("B", (32,), "int32")
V = ir.ForKind.VECTORIZED


def _func(body: ir.Stmt) -> ir.PrimFunc:
    return ir.PrimFunc("f", (A, B), body, {})


def _vloop(var: ir.Var, lo: int, extent, body: ir.Stmt) -> ir.For:
    return ir.For(var, ir.const(lo), extent if isinstance(extent, ir.PrimExpr) else ir.const(extent), V, body)


def _ramp(e: ir.PrimExpr) -> tuple[int | None, int | None, int]:
    assert isinstance(e, ir.Ramp), f"expected a Ramp, got {e}"
    return ir.int_value(e.base), ir.int_value(e.stride), e.lanes


def assert_serialised(before: ir.PrimFunc) -> ir.PrimFunc:
    after = vectorize_loops(before)
    loops = nodes(after, ir.For)
    assert loops and loops[0].kind is ir.ForKind.SERIAL and loops[0].loop_var is before.body.loop_var
    assert not ir.contains(after.body, (ir.Ramp, ir.Broadcast))
    assert_same_results(before, after)
    return after


def test_a_unit_stride_copy_becomes_one_vector_store_from_the_loop_min():
    i = ir.Var("i")
    before = _func(_vloop(i, 3, 4, ir.BufferStore(B, A[i * 2 + 1] + i, (i,))))
    after = vectorize_loops(before)
    store = after.body
    assert isinstance(store, ir.BufferStore) and not nodes(after, ir.For)
    assert _ramp(store.indices[0]) == (3, 1, 4)
    load, lane = store.value.a, store.value.b
    assert _ramp(load.indices[0]) == (7, 2, 4) and _ramp(lane) == (3, 1, 4)
    assert store.value.dtype == "int32x4"
    assert_same_results(before, after)


def test_affine_index_arithmetic_stays_a_ramp_and_scalars_are_broadcast():
    i = ir.Var("i")
    before = _func(_vloop(i, 0, 4, ir.BufferStore(B, (A[i] // 3) % 5 - A[8 - i], (16 - i * 3,))))
    after = vectorize_loops(before)
    store = after.body
    assert _ramp(store.indices[0]) == (16, -3, 4)
    assert _ramp(store.value.b.indices[0]) == (8, -1, 4)                      # 8 - i: a descending ramp
    div = store.value.a.a                                                     # (A[i] // 3)
    assert isinstance(div.b, ir.Broadcast) and ir.int_value(div.b.value) == 3 and div.b.lanes == 4
    assert_same_results(before, after)


def test_casts_shifts_and_float_math_are_vectorised():
    i = ir.Var("i")
    half = ir.Cast("int32", ir.Cast("float32", A[i]) * 0.5)
    before = _func(_vloop(i, 0, 8, ir.BufferStore(B, half + (A[i + 8] >> 1), (i,))))
    after = vectorize_loops(before)
    assert after.body.value.dtype == "int32x8" and after.body.value.a.dtype == "int32x8"
    assert after.body.value.b.op == "shift_right" and after.body.value.b.dtype == "int32x8"
    assert_same_results(before, after)


def test_a_serial_loop_inside_keeps_its_variable_and_vectorises_its_body():
    i, j = ir.Var("i"), ir.Var("j")
    inner = ir.For(j, ir.const(0), ir.const(3), ir.ForKind.SERIAL,
                   ir.BufferStore(B, B[i * 4 + j] + A[j], (i * 4 + j,)))
    before = _func(_vloop(i, 0, 4, inner))
    after = vectorize_loops(before)
    (loop,) = nodes(after, ir.For)
    assert loop.loop_var is j and loop.kind is ir.ForKind.SERIAL
    store = loop.body
    assert isinstance(store.indices[0], ir.Ramp) and store.indices[0].base is j
    assert ir.int_value(store.indices[0].stride) == 4
    assert isinstance(store.value.b, ir.Broadcast)                            # A[j]: the same for every lane
    assert_same_results(before, after)


def test_a_lane_independent_guard_stays_around_the_vector_store():
    i, k = ir.Var("i"), ir.Var("k")
    body = ir.IfThenElse(ir.GT(k, ir.const(0)), ir.BufferStore(B, A[i] + k, (i + k * 8,)))
    before = _func(ir.For(k, ir.const(0), ir.const(2), ir.ForKind.SERIAL, _vloop(i, 0, 8, body)))
    after = vectorize_loops(before)
    guard = after.body.body
    assert isinstance(guard, ir.IfThenElse) and isinstance(guard.then_case.indices[0], ir.Ramp)
    assert_same_results(before, after)


@pytest.mark.parametrize("extent", [0, 1, -2])
def test_extents_below_two_become_a_serial_loop(extent):
    i = ir.Var("i")
    after = assert_serialised(_func(_vloop(i, 0, extent, ir.BufferStore(B, A[i], (i,)))))
    assert ir.int_value(nodes(after, ir.For)[0].extent) == extent


def test_a_symbolic_extent_becomes_a_serial_loop():
    i, n = ir.Var("i"), ir.Var("n")
    after = vectorize_loops(_func(_vloop(i, 0, n, ir.BufferStore(B, A[i], (i,)))))
    (loop,) = nodes(after, ir.For)
    assert loop.kind is ir.ForKind.SERIAL and loop.extent is n


def test_a_store_to_one_address_is_serialised_not_collapsed():
    i = ir.Var("i")                       # B[0] = A[i] for each lane: the last lane's value must win
    assert_serialised(_func(_vloop(i, 0, 4, ir.BufferStore(B, A[i], (ir.const(0),)))))
    # a reduction into one element: vectorising would read B[0] once for all lanes
    assert_serialised(_func(_vloop(i, 0, 4, ir.BufferStore(B, B[0] + A[i], (ir.const(0),)))))


def test_a_lane_independent_store_in_the_body_is_serialised():
    i = ir.Var("i")                       # the counter runs once per iteration, not once per vector
    body = ir.seq(ir.BufferStore(B, A[i], (i + 1,)), ir.BufferStore(B, B[31] + 1, (ir.const(31),)))
    assert_serialised(_func(_vloop(i, 0, 4, body)))


def test_lane_dependent_control_flow_and_lazy_calls_are_serialised():
    i, j = ir.Var("i"), ir.Var("j")
    guarded = ir.IfThenElse(ir.LT(i, ir.const(2)), ir.BufferStore(B, A[i], (i,)))
    assert_serialised(_func(_vloop(i, 0, 4, guarded)))
    lazy = ir.BufferStore(B, ir.Call("int32", "if_then_else", (ir.LT(i, ir.const(2)), A[i], ir.const(0))), (i,))
    assert_serialised(_func(_vloop(i, 0, 4, lazy)))
    triangle = ir.For(j, ir.const(0), i + 1, ir.ForKind.SERIAL, ir.BufferStore(B, A[j] + i, (i * 4 + j,)))
    assert_serialised(_func(_vloop(i, 0, 4, triangle)))
    x = ir.Var("x")
    assert_serialised(_func(_vloop(i, 0, 4, ir.LetStmt(x, A[i] * 2, ir.BufferStore(B, x + 1, (i,))))))


def test_a_select_on_the_lane_becomes_a_vector_select():
    i = ir.Var("i")
    before = _func(_vloop(i, 0, 4, ir.BufferStore(B, ir.Select(ir.LT(i, ir.const(2)), A[i], A[i + 8]), (i,))))
    after = vectorize_loops(before)
    select = after.body.value
    assert isinstance(select, ir.Select) and isinstance(select.cond, ir.LT)   # the comparison of the ramp itself
    assert_same_results(before, after)
