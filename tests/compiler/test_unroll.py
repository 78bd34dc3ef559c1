"""The UnrollLoop pass on hand-built loops: explicit ``unrolled`` loops are replicated with the
variable replaced by ``min + k``, serial nests up to ``auto_max_step`` steps are unrolled too (longer
or symbolic ones stay), and the unrolled function computes what the loop did (interpreter, exact)."""

from __future__ import annotations

from tests.compiler.hand_ir import assert_same_results, nodes
from vtakit.compiler import ir
from vtakit.compiler.arith import simplify
from vtakit.compiler.lower.unroll import unroll_loops

A = ir.Buffer("A", (16,), "int32")
B = ir.Buffer("B", (16,), "int32")


def _func(body: ir.Stmt) -> ir.PrimFunc:
    return ir.PrimFunc("f", (A, B), body, {})


def _loop(var: ir.Var, lo: int, extent, kind: ir.ForKind, body: ir.Stmt) -> ir.For:
    return ir.For(var, ir.const(lo), extent if isinstance(extent, ir.PrimExpr) else ir.const(extent), kind, body)


def _copy_twice(i: ir.Var) -> ir.Stmt:
    return ir.BufferStore(B, A[i] * 2 + 1, (i,))


def test_an_unrolled_loop_becomes_one_store_per_iteration_from_its_min():
    i = ir.Var("i")
    before = _func(_loop(i, 2, 3, ir.ForKind.UNROLLED, _copy_twice(i)))
    after = unroll_loops(before)
    assert not nodes(after, ir.For)
    indices = [simplify(s.indices[0]) for s in nodes(after, ir.BufferStore)]
    assert [ir.int_value(x) for x in indices] == [2, 3, 4]
    assert not ir.uses_var(after.body, {i})
    assert_same_results(before, after)


def test_extent_one_and_extent_zero():
    i = ir.Var("i")
    one = unroll_loops(_func(_loop(i, 5, 1, ir.ForKind.UNROLLED, _copy_twice(i))))
    assert isinstance(one.body, ir.BufferStore) and ir.int_value(one.body.indices[0]) == 5
    for extent in (0, -3):                                   # no iteration: a no-op statement
        empty = unroll_loops(_func(_loop(i, 0, extent, ir.ForKind.UNROLLED, _copy_twice(i))))
        assert not nodes(empty, ir.BufferStore) and isinstance(empty.body, ir.Evaluate)
        assert_same_results(_func(_loop(i, 0, extent, ir.ForKind.UNROLLED, _copy_twice(i))), empty)


def test_a_symbolic_unrolled_loop_stays_a_serial_loop():
    i, n = ir.Var("i"), ir.Var("n")
    after = unroll_loops(_func(_loop(i, 0, n, ir.ForKind.UNROLLED, _copy_twice(i))))
    (loop,) = nodes(after, ir.For)
    assert loop.kind is ir.ForKind.SERIAL and loop.extent is n and loop.loop_var is i


def test_serial_loops_are_left_alone_without_auto_max_step():
    i = ir.Var("i")
    before = _func(_loop(i, 0, 4, ir.ForKind.SERIAL, _copy_twice(i)))
    assert unroll_loops(before).body is before.body


def test_auto_max_step_unrolls_a_short_serial_nest_and_leaves_a_longer_one():
    i, j = ir.Var("i"), ir.Var("j")

    def nest(outer: int, inner: int) -> ir.PrimFunc:
        return _func(_loop(i, 0, outer, ir.ForKind.SERIAL,
                           _loop(j, 0, inner, ir.ForKind.SERIAL, ir.BufferStore(B, A[i * 4 + j] - j, (i * 4 + j,)))))

    short = nest(2, 3)                                        # 6 steps <= 6: the whole nest unrolls
    unrolled = unroll_loops(short, auto_max_step=6)
    assert not nodes(unrolled, ir.For) and len(nodes(unrolled, ir.BufferStore)) == 6
    assert_same_results(short, unrolled)

    longer = nest(3, 3)                                       # 9 steps > 6: only the inner loop (3 steps)
    partly = unroll_loops(longer, auto_max_step=6)
    (outer,) = nodes(partly, ir.For)
    assert outer.loop_var is i and outer.kind is ir.ForKind.SERIAL and len(nodes(partly, ir.BufferStore)) == 3
    assert_same_results(longer, partly)

    none = unroll_loops(nest(3, 3), auto_max_step=2)          # even the inner loop is too long
    assert [f.loop_var for f in nodes(none, ir.For)] == [i, j]


def test_auto_unroll_counts_both_branches_of_a_guard_as_the_longer_one():
    i, k = ir.Var("i"), ir.Var("k")
    guard = ir.IfThenElse(ir.LT(i, ir.const(2)),
                          ir.seq(ir.BufferStore(B, A[i], (i,)), ir.BufferStore(B, A[i] + 1, (i + 8,))),
                          _loop(k, 0, 3, ir.ForKind.UNROLLED, ir.BufferStore(B, A[k] + i, (i + k,))))
    before = _func(_loop(i, 0, 4, ir.ForKind.SERIAL, guard))
    # the else branch is unrolled first (3 stores): 4 iterations x max(2, 3) = 12 steps
    assert nodes(unroll_loops(before, auto_max_step=11), ir.For)[0].loop_var is i
    after = unroll_loops(before, auto_max_step=12)
    assert not nodes(after, ir.For)
    assert_same_results(before, after)


def test_auto_unroll_skips_symbolic_and_non_serial_loops():
    i, j, n = ir.Var("i"), ir.Var("j"), ir.Var("n")
    symbolic = _func(_loop(i, 0, 2, ir.ForKind.SERIAL, _loop(j, 0, n, ir.ForKind.SERIAL, _copy_twice(j))))
    assert [f.loop_var for f in nodes(unroll_loops(symbolic, auto_max_step=100), ir.For)] == [i, j]
    parallel = _func(_loop(i, 0, 2, ir.ForKind.PARALLEL, _copy_twice(i)))
    assert nodes(unroll_loops(parallel, auto_max_step=100), ir.For)[0].kind is ir.ForKind.PARALLEL


def test_nested_unrolled_loops_unroll_inside_out_and_keep_the_store_order():
    i, j = ir.Var("i"), ir.Var("j")
    before = _func(_loop(i, 1, 2, ir.ForKind.UNROLLED,
                         _loop(j, 0, 3, ir.ForKind.UNROLLED,
                               ir.BufferStore(B, A[i * 5 + j] + A[0], (i * 5 + j,)))))
    after = unroll_loops(before)
    assert [ir.int_value(simplify(s.indices[0])) for s in nodes(after, ir.BufferStore)] == [5, 6, 7, 10, 11, 12]
    assert_same_results(before, after)


def test_an_allocation_inside_an_unrolled_loop_is_replicated_with_its_body():
    i = ir.Var("i")
    tmp = ir.Buffer("tmp", (1,), "int32", "local")
    body = ir.Allocate(tmp, ir.seq(ir.BufferStore(tmp, A[i] * 3, (ir.const(0),)), ir.BufferStore(B, tmp[0] - i, (i,))))
    before = _func(_loop(i, 0, 4, ir.ForKind.UNROLLED, body))
    after = unroll_loops(before)
    assert isinstance(after.body, ir.SeqStmt) and len(after.body.stmts) == 4
    assert all(isinstance(s, ir.Allocate) for s in after.body.stmts)
    assert_same_results(before, after)
