"""The InjectDoubleBuffer pass on hand-built flat IR: the marked buffer doubles, the first tile is
fetched before the loop into slot 0, each iteration prefetches the next tile into slot
``(i + 1 - min) % 2`` (not after the last) and reads slot ``(i - min) % 2``; other allocations move out
with it; unmarked, misplaced or parallel producers stay single-buffered; and the function computes
what it did before, for loops of 0, 1 and more iterations (interpreter, exact)."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler import ir
from vtakit.compiler.arith import simplify
from vtakit.compiler.interpreter import run
from vtakit.compiler.lower.double_buffer import DOUBLE_BUFFER_WRITE, inject_double_buffer

N = ir.Var("n")
A = ir.Buffer("A", (N, 4), "int32")
B = ir.Buffer("B", (N,), "int32")
I, K = ir.Var("i"), ir.Var("k")


def _stage(tile: ir.Buffer, marked: bool = True) -> tuple[ir.Stmt, ir.Stmt]:
    """``tile[k] = A[i, k] * 3`` (the producer, marked) and ``B[i] = tile[0] + tile[1] + tile[2] - tile[3]``."""
    fill = ir.For(K, ir.const(0), ir.const(4), ir.ForKind.SERIAL, ir.BufferStore(tile, A[I * 4 + K] * 3, (K,)))
    produce = ir.AttrStmt(tile.data, DOUBLE_BUFFER_WRITE, ir.const(1), fill) if marked else fill
    consume = ir.BufferStore(B, tile[ir.const(0)] + tile[ir.const(1)] + tile[ir.const(2)] - tile[ir.const(3)], (I,))
    return produce, consume


def _func(lo: int = 0, extent: ir.PrimExpr = N, kind: ir.ForKind = ir.ForKind.SERIAL,
          order: str = "produce-first") -> tuple[ir.PrimFunc, ir.Buffer]:
    tile = ir.Buffer("S", (4,), "int32", "shared")
    produce, consume = _stage(tile)
    body = ir.seq(produce, consume) if order == "produce-first" else ir.seq(consume, produce)
    loop = ir.For(I, ir.const(lo), extent, kind, ir.Allocate(tile, body))
    return ir.PrimFunc("f", (A, B), loop, {}), tile


def _run(func: ir.PrimFunc, rows: int) -> np.ndarray:
    x = np.random.default_rng(rows).integers(-1000, 1000, (rows, 4)).astype(np.int32)
    out = np.full(rows, -7, np.int32)
    run(func, x, out)
    return out


def _stores_to(stmt: ir.Stmt, data: ir.Var) -> list[ir.BufferStore]:
    found: list[ir.BufferStore] = []
    ir.walk(stmt, lambda n: found.append(n) if isinstance(n, ir.BufferStore) and n.buffer.data is data else None)
    return found


def _at(e: ir.PrimExpr, **values: int) -> int:
    out = simplify(ir.substitute(e, {v: values[v.name] for v in (I, K, N) if v.name in values}))
    assert isinstance(out, ir.IntImm), f"{e} is not constant: {out}"
    return out.value


def test_the_buffer_doubles_and_the_slots_rotate():
    before, tile = _func()
    after = inject_double_buffer(before)
    alloc = after.body
    assert isinstance(alloc, ir.Allocate) and alloc.buffer.data is tile.data
    assert ir.int_value(alloc.buffer.shape[0]) == 8 and alloc.buffer.scope == "shared"
    prologue, loop = alloc.body.stmts
    assert isinstance(prologue, ir.IfThenElse)                  # n may be 0: nothing is fetched then
    (first,) = _stores_to(prologue, tile.data)
    assert [_at(first.indices[0], k=k) for k in range(4)] == [0, 1, 2, 3]       # slot 0
    assert isinstance(loop, ir.For) and loop.loop_var is I
    prefetch, consume = loop.body.stmts
    assert isinstance(prefetch, ir.IfThenElse) and _at(prefetch.cond, i=2, n=3) == 0 and _at(prefetch.cond, i=1, n=3) == 1
    (fill,) = _stores_to(prefetch, tile.data)
    assert [_at(fill.indices[0], i=i, k=1) for i in range(4)] == [5, 1, 5, 1]       # slot (i + 1) % 2
    reads = [x for x in _loads(consume) if x.buffer.data is tile.data]
    assert [_at(reads[0].indices[0], i=i) for i in range(4)] == [0, 4, 0, 4]       # slot i % 2
    assert not ir.contains(after.body, ir.AttrStmt)             # the marker is gone


def _loads(stmt: ir.Stmt) -> list[ir.BufferLoad]:
    found: list[ir.BufferLoad] = []
    ir.walk(stmt, lambda n: found.append(n) if isinstance(n, ir.BufferLoad) else None)
    return found


@pytest.mark.parametrize("rows", [0, 1, 2, 5])
def test_the_double_buffered_loop_computes_the_same_for_any_trip_count(rows):
    before, _ = _func()
    after = inject_double_buffer(before)
    np.testing.assert_array_equal(_run(after, rows), _run(before, rows))


def test_a_loop_from_a_nonzero_min_fetches_its_first_iteration_and_rotates_from_there():
    before, tile = _func(lo=1, extent=N - 1)
    after = inject_double_buffer(before)
    prologue, loop = after.body.body.stmts
    (first,) = _stores_to(prologue, tile.data)
    assert _at(first.value.a.indices[0], k=0) == 4              # A[1, 0]: the loop's first row
    (fill,) = _stores_to(loop.body.stmts[0], tile.data)
    assert [_at(fill.indices[0], i=i, k=0) for i in (1, 2, 3)] == [4, 0, 4]
    for rows in (1, 2, 6):
        np.testing.assert_array_equal(_run(after, rows), _run(before, rows))


def test_a_constant_trip_count_needs_no_guard_on_the_first_fetch():
    a3, b3 = ir.Buffer("A", (3, 4), "int32"), ir.Buffer("B", (3,), "int32")
    before, tile = _func(extent=ir.const(3))
    before = ir.substitute(before.body, {}, {A: a3, B: b3})
    func = ir.PrimFunc("f", (a3, b3), before, {})
    after = inject_double_buffer(func)
    prologue = after.body.body.stmts[0]
    assert isinstance(prologue, ir.For) and _stores_to(prologue, tile.data)
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    out0, out1 = np.zeros(3, np.int32), np.zeros(3, np.int32)
    run(func, x, out0)
    run(after, x, out1)
    np.testing.assert_array_equal(out1, out0)


def test_other_allocations_at_the_top_of_the_loop_move_out_with_it():
    tile = ir.Buffer("S", (4,), "int32", "shared")
    acc = ir.Buffer("acc", (1,), "int32", "local")
    produce, consume = _stage(tile)
    use_acc = ir.seq(ir.BufferStore(acc, ir.const(1), (ir.const(0),)),
                     ir.BufferStore(B, B[I] + acc[ir.const(0)], (I,)))
    loop = ir.For(I, ir.const(0), N, ir.ForKind.SERIAL, ir.Allocate(acc, ir.Allocate(tile, ir.seq(produce, consume, use_acc))))
    before = ir.PrimFunc("f", (A, B), loop, {})
    after = inject_double_buffer(before)
    assert isinstance(after.body, ir.Allocate) and after.body.buffer is acc
    assert isinstance(after.body.body, ir.Allocate) and ir.int_value(after.body.body.buffer.shape[0]) == 8
    for rows in (0, 3):
        np.testing.assert_array_equal(_run(after, rows), _run(before, rows))


@pytest.mark.parametrize("case", ["producer-second", "parallel", "unmarked-allocation"])
def test_stages_it_cannot_double_buffer_stay_single_buffered_without_the_marker(case):
    if case == "producer-second":
        before, tile = _func(order="consume-first")
    elif case == "parallel":
        before, tile = _func(kind=ir.ForKind.PARALLEL)
    else:                                   # the marker names storage the loop does not allocate
        tile, other = ir.Buffer("S", (4,), "int32", "shared"), ir.Buffer("other", (4,), "int32", "shared")
        produce, consume = _stage(tile)
        produce = ir.AttrStmt(other.data, DOUBLE_BUFFER_WRITE, ir.const(1), produce.body)
        before = ir.PrimFunc("f", (A, B), ir.For(I, ir.const(0), N, ir.ForKind.SERIAL,
                                                 ir.Allocate(tile, ir.seq(produce, consume))), {})
    after = inject_double_buffer(before)
    allocs: list[ir.Allocate] = []
    ir.walk(after.body, lambda n: allocs.append(n) if isinstance(n, ir.Allocate) else None)
    assert [ir.int_value(a.buffer.shape[0]) for a in allocs] == [4]
    assert not ir.contains(after.body, ir.AttrStmt) and not ir.contains(after.body, ir.IfThenElse)
    for rows in (1, 3):
        np.testing.assert_array_equal(_run(after, rows), _run(before, rows))


def test_access_pointers_into_the_buffer_shift_by_the_slot():
    tile = ir.Buffer("S", (4,), "int32", "shared")
    produce = ir.AttrStmt(tile.data, DOUBLE_BUFFER_WRITE, ir.const(1),
                          ir.Evaluate(ir.Call("int32", "fill", (tile.access_ptr("w"), I))))
    consume = ir.Evaluate(ir.Call("int32", "use", (tile.access_ptr("r", offset=1),)))
    before = ir.PrimFunc("f", (A, B), ir.For(I, ir.const(0), ir.const(3), ir.ForKind.SERIAL,
                                             ir.Allocate(tile, ir.seq(produce, consume))), {})
    after = inject_double_buffer(before)
    calls: list[ir.Call] = []
    ir.walk(after.body, lambda n: calls.append(n) if isinstance(n, ir.Call) and n.op in ("fill", "use") else None)
    pro, fill, use = calls
    assert _at(pro.args[0].args[2]) == 0
    assert [_at(fill.args[0].args[2], i=i) for i in range(3)] == [4, 0, 4]
    assert [_at(use.args[0].args[2], i=i) for i in range(3)] == [1, 5, 1]
