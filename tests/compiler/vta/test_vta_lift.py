"""The LiftAttrScope pass for the coprocessor attributes (``vta/lift.py``) on hand-built IR: the
``coproc_scope`` / ``coproc_uop_scope`` pair of a serial loop's whole body moves outside the loop (through
nested loops), but not over a loop whose body does more, a virtual-thread loop or an attribute
that depends on the loop; consecutive commands of one queue merge into one ``coproc_scope`` and other
queues or statements between them do not. The commands issued, in order, are the same before
and after (interpreter with a recording intrinsic)."""

from __future__ import annotations

import numpy as np

from vtakit.compiler import ir
from vtakit.compiler.interpreter import Interpreter
from vtakit.compiler.vta.env import PUSH_ALU, PUSH_GEMM, QID_COMPUTE, QID_LOAD, VTA_AXIS, coproc_scope_of
from vtakit.compiler.vta.lift import lift_coproc_scopes

OUT = ir.Buffer("out", (4,), "int32")
I, J = ir.Var("i"), ir.Var("j")


def _cmd(name: str, *args) -> ir.Stmt:
    return ir.Evaluate(ir.Call("int32", "cmd", (ir.const(sum(map(ord, name))), *map(ir.convert, args))))


def _command(qid: int, body: ir.Stmt, uop: str | None = None) -> ir.Stmt:
    if uop is not None:
        body = ir.AttrStmt(VTA_AXIS, "coproc_uop_scope", uop, body)
    return ir.AttrStmt(VTA_AXIS, "coproc_scope", ir.const(qid), body)


def _loop(var: ir.Var, extent: int, body: ir.Stmt, kind: ir.ForKind = ir.ForKind.SERIAL, tag: str = "") -> ir.For:
    return ir.For(var, ir.const(0), ir.const(extent), kind, body, tag)


def issued(stmt: ir.Stmt) -> list[tuple[int, ...]]:
    calls: list[tuple[int, ...]] = []
    Interpreter(ir.PrimFunc("f", (OUT,), stmt, {}),
                {"cmd": lambda *a: calls.append(tuple(int(x) for x in a)) or 0})(np.zeros(4, np.int32))
    return calls


def _lifted(stmt: ir.Stmt) -> ir.Stmt:
    after = lift_coproc_scopes(ir.PrimFunc("f", (OUT,), stmt, {})).body
    assert issued(after) == issued(stmt) and issued(stmt)
    return after


def _chain(s: ir.Stmt) -> tuple[list[str], ir.Stmt]:
    keys = []
    while isinstance(s, ir.AttrStmt):
        keys.append(s.key)
        s = s.body
    return keys, s


def test_the_attribute_pair_moves_outside_the_loop():
    after = _lifted(_loop(I, 4, _command(QID_COMPUTE, _cmd("gemm", I), PUSH_GEMM)))
    keys, inner = _chain(after)
    assert keys == ["coproc_scope", "coproc_uop_scope"] and after.body.value == PUSH_GEMM
    assert isinstance(inner, ir.For) and inner.loop_var is I and isinstance(inner.body, ir.Evaluate)


def test_the_pair_moves_through_nested_loops():
    after = _lifted(_loop(I, 2, _loop(J, 3, _command(QID_COMPUTE, _cmd("alu", I, J), PUSH_ALU))))
    keys, inner = _chain(after)
    assert keys == ["coproc_scope", "coproc_uop_scope"]
    assert inner.loop_var is I and inner.body.loop_var is J


def test_a_loop_whose_body_does_more_than_the_command_keeps_it():
    body = ir.seq(_command(QID_COMPUTE, _cmd("gemm", I), PUSH_GEMM), ir.BufferStore(OUT, I, (ir.const(0),)))
    after = _lifted(_loop(I, 4, body))
    assert isinstance(after, ir.For) and coproc_scope_of(after.body.stmts[0]) == QID_COMPUTE


def test_virtual_thread_loops_and_loop_dependent_attributes_are_not_crossed():
    vthread = _loop(I, 2, _command(QID_LOAD, _cmd("load", I)), ir.ForKind.THREAD_BINDING, "cthread")
    assert isinstance(_lifted(vthread), ir.For)
    dependent = _loop(I, 2, ir.AttrStmt(VTA_AXIS, "coproc_scope", I + QID_LOAD, _cmd("load", I)))
    assert isinstance(_lifted(dependent), ir.For)
    other_key = _loop(I, 2, ir.AttrStmt(VTA_AXIS, "pragma_x", ir.const(1), _cmd("load", I)))
    assert isinstance(_lifted(other_key), ir.For)


def test_consecutive_commands_of_one_queue_merge_into_one_scope():
    seq = ir.seq(_command(QID_LOAD, _cmd("inp", 0)), _command(QID_LOAD, _cmd("wgt", 0)),
                 _command(QID_COMPUTE, _cmd("gemm", 0), PUSH_GEMM), _command(QID_LOAD, _cmd("inp", 1)))
    after = _lifted(seq)
    assert [coproc_scope_of(s) for s in after.stmts] == [QID_LOAD, QID_COMPUTE, QID_LOAD]
    merged = after.stmts[0].body
    assert isinstance(merged, ir.SeqStmt) and len(merged.stmts) == 2


def test_a_statement_between_two_commands_keeps_them_apart():
    seq = ir.seq(_command(QID_LOAD, _cmd("inp", 0)), ir.BufferStore(OUT, ir.const(1), (ir.const(0),)),
                 _command(QID_LOAD, _cmd("wgt", 0)))
    after = _lifted(seq)
    assert [coproc_scope_of(s) for s in after.stmts] == [QID_LOAD, None, QID_LOAD]


def test_loads_lifted_out_of_their_loops_then_merge():
    seq = ir.seq(_loop(I, 2, _command(QID_LOAD, _cmd("inp", I))), _loop(J, 3, _command(QID_LOAD, _cmd("wgt", J))))
    after = _lifted(seq)
    assert coproc_scope_of(after) == QID_LOAD
    loops = after.body.stmts
    assert [lp.loop_var for lp in loops] == [I, J]
