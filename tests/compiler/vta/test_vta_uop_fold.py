"""The FoldUopLoop pass on hand-built micro-op loops: inside a ``coproc_uop_scope`` up to two outer
serial loops whose pointer offsets are affine become ``vta.uop_loop_begin(extent, dst, src, wgt
factors)`` ... ``vta.uop_loop_end()``; loops it cannot fold (unequal factors, a variable used outside
the offsets, non-affine offsets, an extent past the ITER field) stay. Semantics: a recorder expands
the folded loops as the instruction does and must see the same micro-ops, in the same order, as
the interpreter running the loops."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from vtakit.compiler import ir
from vtakit.compiler.interpreter import Interpreter, Pointer
from vtakit.compiler.vta.env import (ACC_SCOPE, INP_SCOPE, PUSH_GEMM, QID_COMPUTE, UOP_LOOP_BEGIN, UOP_LOOP_END,
                                     UOP_PUSH, VTA_AXIS, WGT_SCOPE)
from vtakit.compiler.vta.intrin import uop_push
from vtakit.compiler.vta.nest import access_ptr
from vtakit.compiler.vta.uop_fold import fold_uop_loops
from vtakit.hw.config import ITER_BITS

ACC = ir.Buffer("acc", (8192,), "int32", ACC_SCOPE)
INP = ir.Buffer("inp", (8192,), "int8", INP_SCOPE)
WGT = ir.Buffer("wgt", (8192,), "int8", WGT_SCOPE)
I, J, K = ir.Var("i"), ir.Var("j"), ir.Var("k")


def _gemm(dst: ir.PrimExpr, src: ir.PrimExpr, wgt: ir.PrimExpr, reset: int = 0) -> ir.Stmt:
    return ir.Evaluate(uop_push(0, reset, access_ptr(ACC, dst, 16, 3), access_ptr(INP, src, 16, 1),
                                access_ptr(WGT, wgt, 256, 1)))


def _loop(var: ir.Var, extent, body: ir.Stmt, lo: int = 0, kind: ir.ForKind = ir.ForKind.SERIAL) -> ir.For:
    return ir.For(var, ir.const(lo), extent if isinstance(extent, ir.PrimExpr) else ir.const(extent), kind, body)


def _scope(body: ir.Stmt) -> ir.Stmt:
    return ir.AttrStmt(VTA_AXIS, "coproc_scope", ir.const(QID_COMPUTE),
                       ir.AttrStmt(VTA_AXIS, "coproc_uop_scope", PUSH_GEMM, body))


def _func(body: ir.Stmt) -> ir.PrimFunc:
    return ir.PrimFunc("f", (ACC, INP, WGT), body, {})


class _Recorder:
    """The micro-ops a function issues, with uop loops expanded as the GEMM instruction runs them."""

    def __init__(self) -> None:
        self.frames: list[list[tuple]] = [[]]
        self.loops: list[tuple[int, int, int, int]] = []

    def intrinsics(self) -> dict[str, Any]:
        return {UOP_PUSH: self.push, UOP_LOOP_BEGIN: self.begin, UOP_LOOP_END: self.end}

    def push(self, mode, reset, dst, src, wgt, *rest) -> int:
        off = [p.offset if isinstance(p, Pointer) else int(p) for p in (dst, src, wgt)]
        self.frames[-1].append((int(mode), int(reset), *off, *map(int, rest)))
        return 0

    def begin(self, extent, fd, fs, fw) -> int:
        self.frames.append([])
        self.loops.append((int(extent), int(fd), int(fs), int(fw)))
        return 0

    def end(self) -> int:
        body, (extent, fd, fs, fw) = self.frames.pop(), self.loops.pop()
        for n in range(extent):
            for u in body:
                self.frames[-1].append(u[:2] + (u[2] + n * fd, u[3] + n * fs, u[4] + n * fw) + u[5:])
        return 0


def micro_ops(func: ir.PrimFunc) -> list[tuple]:
    rec = _Recorder()
    arrays = [np.zeros(8192, np.int32), np.zeros(8192, np.int8), np.zeros(8192, np.int8)]
    Interpreter(func, rec.intrinsics())(*arrays)
    assert not rec.loops, "unbalanced uop_loop_begin/end"
    return rec.frames[0]


def _calls(func: ir.PrimFunc, op: str) -> list[ir.Call]:
    found: list[ir.Call] = []
    ir.walk(func.body, lambda n: found.append(n) if isinstance(n, ir.Call) and n.op == op else None)
    return found


def _begins(func: ir.PrimFunc) -> list[tuple[int, ...]]:
    return [tuple(ir.int_value(a) for a in c.args) for c in _calls(func, UOP_LOOP_BEGIN)]


def _folded(body: ir.Stmt) -> ir.PrimFunc:
    before = _func(_scope(body))
    after = fold_uop_loops(before)
    ops = micro_ops(before)
    assert ops and micro_ops(after) == ops
    return after


def test_two_outer_loops_become_the_instruction_loops_with_their_factors():
    body = _loop(I, 3, _loop(J, 4, _gemm(I * 64 + J * 16, J * 16 + 320, I * 256)))
    after = _folded(body)
    assert _begins(after) == [(3, 64, 0, 256), (4, 16, 16, 0)]
    assert len(_calls(after, UOP_LOOP_END)) == 2 and not ir.contains(after.body, ir.For)
    (push,) = _calls(after, UOP_PUSH)
    assert not ir.uses_var(push, {I, J})


def test_a_third_loop_stays_inside_as_the_micro_op_kernel():
    body = _loop(I, 2, _loop(J, 3, _loop(K, 4, _gemm(I * 192 + J * 64 + K * 16, K * 16, J * 256))))
    after = _folded(body)
    assert _begins(after) == [(2, 192, 0, 0), (3, 64, 0, 256)]
    loops: list[ir.For] = []
    ir.walk(after.body, lambda n: loops.append(n) if isinstance(n, ir.For) else None)
    assert [lp.loop_var for lp in loops] == [K]


def test_a_loop_from_a_nonzero_min_keeps_its_first_offsets():
    after = _folded(_loop(I, 3, _gemm(I * 16, I * 16 + 32, ir.const(0)), lo=2))
    assert _begins(after) == [(3, 16, 16, 0)]
    assert micro_ops(after)[0][2:5] == (32, 64, 0)


def test_all_micro_ops_of_the_body_share_one_factor_per_operand():
    same = ir.seq(_gemm(I * 16, ir.const(0), ir.const(0), reset=1), _gemm(I * 16 + 128, ir.const(64), ir.const(512)))
    assert _begins(_folded(_loop(I, 4, same))) == [(4, 16, 0, 0)]
    # the reset's src stays at 0 but the update's steps 32: the loop cannot be one instruction loop
    differ = ir.seq(_gemm(I * 16, ir.const(0), ir.const(0), reset=1), _gemm(I * 16, I * 32, ir.const(0)))
    after = _folded(_loop(I, 4, differ))
    assert not _begins(after) and isinstance(after.body.body.body, ir.For)


def test_loops_it_cannot_fold_stay_loops():
    outside = ir.Evaluate(uop_push(1, 0, access_ptr(ACC, I * 16, 16, 3), access_ptr(ACC, I * 16, 16, 1), 0, 2, 1, I))
    for body in (_loop(I, 4, outside),                                   # i in the immediate
                 _loop(I, 4, _gemm(I * I * 16, ir.const(0), ir.const(0))),   # not affine
                 _loop(I, 4, _gemm(I * 16, I, ir.const(0)), kind=ir.ForKind.PARALLEL)):
        after = _folded(body)
        assert not _begins(after) and isinstance(after.body.body.body, ir.For)


def test_an_extent_past_the_iteration_field_is_not_folded():
    limit = 1 << ITER_BITS
    before = _func(_scope(_loop(I, limit, _gemm(ir.const(0), ir.const(0), ir.const(0)))))
    assert not _begins(fold_uop_loops(before))
    fits = _func(_scope(_loop(I, limit - 1, _gemm(ir.const(0), ir.const(0), ir.const(0)))))
    assert _begins(fold_uop_loops(fits)) == [(limit - 1, 0, 0, 0)]


def test_an_extent_one_loop_folds_and_issues_one_micro_op():
    after = _folded(_loop(I, 1, _gemm(I * 16 + 48, ir.const(0), ir.const(0))))
    assert _begins(after) == [(1, 16, 0, 0)] and len(micro_ops(after)) == 1


def test_loops_outside_a_uop_scope_and_scopes_without_loops_are_left_alone():
    plain = _func(_loop(I, 4, _gemm(I * 16, ir.const(0), ir.const(0))))
    assert fold_uop_loops(plain).body is plain.body
    flat = _func(_scope(_gemm(ir.const(0), ir.const(0), ir.const(0))))
    assert fold_uop_loops(flat).body is flat.body


@pytest.mark.parametrize("n", [0, 5])
def test_a_symbolic_extent_folds_with_its_expression(n):
    m = ir.Var("m")
    after = fold_uop_loops(_func(_scope(_loop(I, m, _gemm(I * 16, ir.const(0), ir.const(0))))))
    (begin,) = _calls(after, UOP_LOOP_BEGIN)
    assert begin.args[0] is m
    ops = micro_ops(ir.PrimFunc("f", after.params, ir.LetStmt(m, ir.const(n), after.body), {}))
    assert [u[2] for u in ops] == [16 * k for k in range(n)]
