"""The LoopPartition pass on hand-built loops, and the guard terms it reads (``ir.conjuncts``)."""

from __future__ import annotations

from tests.compiler.hand_ir import nodes
from vtakit.compiler import ir
from vtakit.compiler.lower import phase_passes
from vtakit.compiler.lower.loop_partition import partition_loops
from vtakit.compiler.transform import BUILTIN_PASSES, PassContext


def _guarded_loop(cond_of) -> ir.PrimFunc:
    """``for i in [0, 10): if cond_of(i): f(i)``."""
    i = ir.Var("i")
    body = ir.IfThenElse(cond_of(i), ir.Evaluate(ir.Call("int32", "f", (i,))))
    loop = ir.For(i, ir.const(0), ir.const(10), ir.ForKind.SERIAL, body)
    return ir.PrimFunc("guarded", [], loop, {})


def _loops(func: ir.PrimFunc) -> list[tuple[int, int]]:
    return [(loop.min.value, loop.extent.value) for loop in nodes(func, ir.For)]


def _guards(func: ir.PrimFunc) -> int:
    return len(nodes(func, ir.IfThenElse))


def test_conjuncts_flattens_and_chains_and_drops_likely():
    a, b, c = (ir.LT(ir.Var(n), ir.const(3)) for n in "abc")
    likely = ir.Call("bool", "likely", (ir.And(a, b),))
    assert ir.conjuncts(ir.And(likely, c)) == [a, b, c]
    assert ir.conjuncts(a) == [a]


def test_a_guard_splits_the_loop_where_it_starts_to_fail():
    split = partition_loops(_guarded_loop(lambda i: ir.LT(i, ir.const(7))))
    assert _loops(split) == [(0, 7)] and _guards(split) == 0   # the tail [7, 10), always false, is gone


def test_a_likely_guard_splits_like_a_plain_one():
    plain = partition_loops(_guarded_loop(lambda i: ir.And(ir.GE(i, ir.const(0)), ir.LT(i, ir.const(7)))))
    hinted = partition_loops(_guarded_loop(
        lambda i: ir.Call("bool", "likely", (ir.And(ir.GE(i, ir.const(0)), ir.LT(i, ir.const(7))),))))
    assert _loops(hinted) == _loops(plain) == [(0, 7)]
    assert _guards(hinted) == _guards(plain) == 0


def test_loop_partition_is_opt_in_and_the_pass_names_match_the_context_s_list():
    names = [[n for n, _ in phase] for phase in phase_passes(PassContext())]
    assert "LoopPartition" not in sum(names, [])
    opted = phase_passes(PassContext(config={"tir.LoopPartition": {"partition_const_loop": True}}))
    assert tuple(n for phase in opted for n, _ in phase) == BUILTIN_PASSES   # what disabled_pass accepts
    no_partition = phase_passes(PassContext(config={"tir.LoopPartition.partition_const_loop": True},
                                            disabled_pass=["LoopPartition"]))
    assert "LoopPartition" not in [n for phase in no_partition for n, _ in phase]
