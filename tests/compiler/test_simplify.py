"""The Simplify pass (``lower/simplify.py``) on hand-built statements: expressions fold with the
enclosing loops' ranges, provable conditions (plain or under a ``likely`` hint) drop their ``if``,
loops of extent <= 0 vanish, extent-1 loops become their body (thread bindings stay), lets of
constants inline and others bound what follows, no-ops disappear; the interpreter gives the same
results before and after (exact)."""

from __future__ import annotations

from tests.compiler.hand_ir import assert_same_results, nodes
from vtakit.compiler import ir
from vtakit.compiler.lower.simplify import simplify_func

A = ir.Buffer("A", (16,), "int32")
B = ir.Buffer("B", (16,), "int32")
I, N, X = ir.Var("i"), ir.Var("n"), ir.Var("x")


def _func(body: ir.Stmt) -> ir.PrimFunc:
    return ir.PrimFunc("f", (A, B), body, {})


def _loop(lo: int, extent, body: ir.Stmt, kind: ir.ForKind = ir.ForKind.SERIAL, tag: str = "") -> ir.For:
    return ir.For(I, ir.const(lo), extent if isinstance(extent, ir.PrimExpr) else ir.const(extent), kind, body, tag)


def _store(index: ir.PrimExpr, value: ir.PrimExpr) -> ir.BufferStore:
    return ir.BufferStore(B, value, (index,))


def _likely(cond: ir.PrimExpr) -> ir.Call:
    return ir.Call("bool", "likely", (cond,))


def _simplified(body: ir.Stmt) -> ir.PrimFunc:
    before = _func(body)
    after = simplify_func(before)
    assert_same_results(before, after)
    return after


def test_constant_arithmetic_in_a_store_folds():
    after = _simplified(_loop(0, 10, _store(I, A[I] + ir.const(0) * 3 + (ir.const(2) + 3))))
    store = after.body.body
    assert isinstance(store.value, ir.Add) and ir.int_value(store.value.b) == 5 and store.value.a.buffer is A


def test_a_condition_the_loop_range_proves_drops_its_if():
    kept = _simplified(_loop(0, 10, ir.IfThenElse(ir.And(ir.GE(I, ir.const(0)), ir.LT(I, ir.const(10))),
                                                   _store(I, A[I]))))
    assert not nodes(kept, ir.IfThenElse) and len(nodes(kept, ir.BufferStore)) == 1
    other = _simplified(_loop(0, 10, ir.IfThenElse(ir.GE(I, ir.const(10)), _store(I, A[I]), _store(I, A[I] + 1))))
    assert not nodes(other, ir.IfThenElse) and isinstance(other.body.body.value, ir.Add)   # the else branch
    gone = _simplified(_loop(0, 10, ir.IfThenElse(ir.GT(I, ir.const(9)), _store(I, A[I]))))
    assert not nodes(gone, ir.BufferStore) and not nodes(gone, ir.For)       # an empty loop vanishes too


def test_a_likely_hint_is_decided_like_its_argument_and_kept_when_undecided():
    true = _simplified(_loop(0, 10, ir.IfThenElse(_likely(ir.LT(I, ir.const(10))), _store(I, A[I]))))
    assert not nodes(true, ir.IfThenElse) and len(nodes(true, ir.BufferStore)) == 1
    false = _simplified(_loop(0, 4, ir.IfThenElse(_likely(ir.GE(I, ir.const(4))), _store(I, A[I]))))
    assert not nodes(false, ir.BufferStore)
    undecided = simplify_func(_func(_loop(0, 10, ir.IfThenElse(_likely(ir.LT(I, N)), _store(I, A[I])))))
    guard = undecided.body.body
    assert isinstance(guard, ir.IfThenElse) and isinstance(guard.cond, ir.Call) and guard.cond.op == "likely"
    assert isinstance(guard.cond.args[0], ir.LT)


def test_loops_of_extent_zero_or_less_vanish():
    for extent in (ir.const(0), ir.const(-3), N - N):
        after = simplify_func(_func(_loop(0, extent, _store(I, A[I]))))
        assert not nodes(after, ir.For) and not nodes(after, ir.BufferStore)


def test_an_extent_one_loop_becomes_its_body_at_the_loop_min():
    after = _simplified(_loop(3, 1, _store(I, A[I] * 2)))
    assert isinstance(after.body, ir.BufferStore) and ir.int_value(after.body.indices[0]) == 3
    assert not ir.uses_var(after.body, {I})


def test_an_extent_one_thread_binding_stays_a_loop():
    after = _simplified(_loop(0, 1, _store(I, A[I]), ir.ForKind.THREAD_BINDING, "threadIdx.x"))
    assert isinstance(after.body, ir.For) and after.body.thread_tag == "threadIdx.x"
    assert ir.int_value(after.body.extent) == 1


def test_each_loop_s_range_holds_only_inside_it():
    # the same variable over [0, 4) then [2, 8): i < 4 is proved in the first loop only
    body = ir.seq(_loop(0, 4, ir.IfThenElse(ir.LT(I, ir.const(4)), _store(I, A[I]))),
                  _loop(2, 8, ir.IfThenElse(ir.LT(I, ir.const(4)), _store(I, A[I] + 1))))
    after = _simplified(body)
    first, second = after.body.stmts
    assert isinstance(first.body, ir.BufferStore) and isinstance(second.body, ir.IfThenElse)


def test_lets_of_constants_inline_and_others_bound_their_body():
    const_let = _simplified(_loop(0, 4, ir.LetStmt(X, ir.const(2) + 1, _store(I, A[I] + X))))
    assert not nodes(const_let, ir.LetStmt) and ir.int_value(const_let.body.body.value.b) == 3
    # x = i % 4 lies in [0, 3]: the guard x < 4 is provably true
    bounded = _simplified(_loop(0, 10, ir.LetStmt(X, ir.FloorMod(I, ir.const(4)),
                                                  ir.IfThenElse(ir.LT(X, ir.const(4)), _store(I, A[X])))))
    let = bounded.body.body
    assert isinstance(let, ir.LetStmt) and isinstance(let.body, ir.BufferStore)


def test_no_op_statements_allocations_and_empty_branches_disappear():
    tmp = ir.Buffer("tmp", (4,), "int32", "local")
    nop = ir.Evaluate(ir.const(0))
    body = ir.seq(nop, ir.Allocate(tmp, _loop(0, 4, nop)),
                  _loop(0, 4, ir.IfThenElse(ir.LT(I, N), nop, nop)), _store(ir.const(1), A[ir.const(2)]))
    after = simplify_func(_func(body))
    assert isinstance(after.body, ir.BufferStore)
    assert not nodes(after, ir.Allocate) and not nodes(after, ir.IfThenElse)


def test_a_nested_guard_uses_both_loops_ranges():
    j = ir.Var("j")
    inner = ir.For(j, ir.const(0), ir.const(4), ir.ForKind.SERIAL,
                   ir.IfThenElse(ir.LT(I * 4 + j, ir.const(16)), _store(I * 4 + j, A[I * 4 + j] - j)))
    after = _simplified(_loop(0, 4, inner))
    assert not nodes(after, ir.IfThenElse) and len(nodes(after, ir.For)) == 2
    tail = ir.For(j, ir.const(0), ir.const(4), ir.ForKind.SERIAL,
                  ir.IfThenElse(ir.LT(I * 4 + j, ir.const(14)), _store(I * 4 + j, A[I * 4 + j] - j)))
    assert len(nodes(_simplified(_loop(0, 4, tail)), ir.IfThenElse)) == 1     # the last row's tail is real
