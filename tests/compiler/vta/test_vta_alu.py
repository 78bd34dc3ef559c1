"""The InjectALUIntrin pass (``vta/alu.py``) on hand-built ``alu``-pragma nests in the accumulator
(small configuration, 4 lanes per entry): the stored expression decomposes into a chain of ALU
micro-ops (immediates, tensor operands, SHR for both shift directions, MUL with ALU_MUL, one REQUANT
with ALU_REQUANT), in place or after a reset-and-add copy, with the entry loop absorbed and the
outer loops kept around each push; ``in_place_accepts`` vetoes a chain that reads its own producer
later; what the ALU cannot do is rejected with the reason. Semantics: the interpreter runs the
micro-ops with the simulator's ALU operations and must produce the loops' int8 result exactly."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import pytest

from vtakit.compiler import ir
from vtakit.compiler.interpreter import Interpreter, Pointer
from vtakit.compiler.vta import get_env
from vtakit.compiler.vta.alu import alu_chain, in_place_accepts, inject_alu_intrin
from vtakit.compiler.vta.env import ACC_SCOPE, INP_SCOPE, PUSH_ALU, PUSH_GEMM, UOP_PUSH
from vtakit.errors import CompileError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluOp, requant_imm
from vtakit.sim.machine import alu_op, requant_op

SMALL = VTAConfig.small()
ENV = get_env(SMALL)
FULL = get_env(dataclasses.replace(SMALL, alu_mul=True, alu_requant=True))
LANES = ENV.lanes(ACC_SCOPE)
ROWS, COLS = 2, 3
SIZE = ROWS * COLS * LANES
I, J, L = ir.Var("i"), ir.Var("j"), ir.Var("l")
X = ir.Buffer("X", (SIZE,), "int32")
T = ir.Buffer("T", (SIZE,), "int32")
Y = ir.Buffer("Y", (SIZE,), "int8")
A = ir.Buffer("a", (SIZE,), "int32", ACC_SCOPE)
B = ir.Buffer("b", (SIZE,), "int32", ACC_SCOPE)
D = ir.Buffer("d", (SIZE,), "int32", ACC_SCOPE)
IDX = I * COLS * LANES + J * LANES + L


def _nest(store: ir.BufferStore, pragma: str | None = None) -> ir.Stmt:
    body: ir.Stmt = store
    for v, e in ((L, LANES), (J, COLS), (I, ROWS)):
        body = ir.For(v, ir.const(0), ir.const(e), ir.ForKind.SERIAL, body)
    return body if pragma is None else ir.AttrStmt(ir.const(0), f"pragma_{pragma}", ir.const(1), body)


def _stage(f: Callable[[ir.PrimExpr, ir.PrimExpr], ir.PrimExpr], dst: ir.Buffer = D,
           b_fill: ir.PrimExpr | None = None) -> ir.PrimFunc:
    """a = X, b = T or ``b_fill`` (plain loops); dst = f(a, b) under the alu pragma; Y = int8(dst)."""
    b_fill = T[IDX] if b_fill is None else b_fill
    body = ir.seq(_nest(ir.BufferStore(A, X[IDX], (IDX,))), _nest(ir.BufferStore(B, b_fill, (IDX,))),
                  _nest(ir.BufferStore(dst, f(A[IDX], B[IDX]), (IDX,)), ENV.alu),
                  _nest(ir.BufferStore(Y, ir.Cast("int8", dst[IDX]), (IDX,))))
    for buf in (D, B, A):
        body = ir.Allocate(buf, body)
    return ir.PrimFunc("f", (X, T, Y), body, {})


def _push(mode, reset, dst: Pointer, src: Any, wgt: Any, op, use_imm, imm) -> int:
    out = dst.array[dst.offset:dst.offset + LANES]
    if mode == 0:
        assert reset == 1, "only GEMM reset micro-ops are expected here"
        out[:] = 0
        return 0
    b = None if use_imm else src.array[src.offset:src.offset + LANES].astype(np.int64)
    if op == AluOp.REQUANT:
        out[:] = requant_op(out, b, int(imm))
    else:
        out[:] = alu_op(AluOp(op), out.astype(np.int64), np.int64(imm) if use_imm else b)
    return 0


def result(func: ir.PrimFunc, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x, t = (rng.integers(-3000, 3000, SIZE).astype(np.int32) for _ in range(2))
    y = np.zeros(SIZE, np.int8)
    Interpreter(func, {UOP_PUSH: _push})(x, t, y)
    return y


def _injected(func: ir.PrimFunc, env=ENV) -> ir.PrimFunc:
    after = inject_alu_intrin(env)(func)
    assert {s.key for s in _attrs(after)} == {"coproc_scope", "coproc_uop_scope"}     # the pragma is gone
    np.testing.assert_array_equal(result(after), result(func))
    return after


def _attrs(func: ir.PrimFunc) -> list[ir.AttrStmt]:
    found: list = []
    ir.walk(func.body, lambda n: found.append(n) if isinstance(n, ir.AttrStmt) else None)
    return found


def _ops(func: ir.PrimFunc) -> list[tuple]:
    """(uop kind, mode, alu op, use_imm, imm, src buffer name) of each micro-op, in program order."""
    found: list = []

    def visit(s: Any, kind: str | None) -> None:
        if isinstance(s, ir.AttrStmt) and s.key == "coproc_uop_scope":
            kind = s.value
        if isinstance(s, ir.Call) and s.op == UOP_PUSH:
            mode, _, _, src, _, op, use_imm, imm = s.args
            src_name = src.args[1].name if isinstance(src, ir.Call) else None
            found.append((kind, mode.value, op.value, use_imm.value, ir.int_value(imm), src_name))
        for c in ir.children(s):
            visit(c, kind)

    visit(func.body, None)
    return found


def test_a_clip_of_a_shift_in_place_is_three_immediate_alu_ops():
    after = _injected(_stage(lambda a, b: ir.Min(ir.Max(a >> 3, ir.const(0)), ir.const(127)), dst=A))
    assert _ops(after) == [(PUSH_ALU, 1, AluOp.SHR, 1, 3, "a"), (PUSH_ALU, 1, AluOp.MAX, 1, 0, "a"),
                           (PUSH_ALU, 1, AluOp.MIN, 1, 127, "a")]
    for scope in _attrs(after):                      # the entry (lane) loop is absorbed by each micro-op
        if scope.key == "coproc_uop_scope":
            assert not ir.uses_var(scope.body, {L}) and ir.contains(scope.body, ir.For)


def test_another_destination_is_reset_then_added_before_the_chain():
    after = _injected(_stage(lambda a, b: a - 7))
    assert _ops(after) == [(PUSH_GEMM, 0, 0, 0, 0, None), (PUSH_ALU, 1, AluOp.ADD, 0, 0, "a"),
                           (PUSH_ALU, 1, AluOp.ADD, 1, -7, "d")]


def test_tensor_operands_and_left_shifts():
    after = _injected(_stage(lambda a, b: ir.Max(a + b, b) << 2, dst=A))
    assert _ops(after) == [(PUSH_ALU, 1, AluOp.ADD, 0, 0, "b"), (PUSH_ALU, 1, AluOp.MAX, 0, 0, "b"),
                           (PUSH_ALU, 1, AluOp.SHR, 1, -2, "a")]


def test_a_right_shift_by_a_tensor_is_shr_tensor():
    amounts = ir.FloorMod(T[IDX], ir.const(32))         # 0..31: defined for the loops too
    after = _injected(_stage(lambda a, b: ir.Call("int32", "shift_right", (a, b)), dst=A, b_fill=amounts))
    assert _ops(after) == [(PUSH_ALU, 1, AluOp.SHR, 0, 0, "b")]


def test_a_bare_copy_in_place_still_writes_the_output():
    after = _injected(_stage(lambda a, b: a, dst=A))
    assert _ops(after) == [(PUSH_ALU, 1, AluOp.SHR, 1, 0, "a")]


def test_multiplication_needs_alu_mul():
    with pytest.raises(CompileError, match="multiplication needs a configuration with ALU_MUL enabled"):
        inject_alu_intrin(ENV)(_stage(lambda a, b: a * b, dst=A))
    after = inject_alu_intrin(FULL)(_stage(lambda a, b: a * 3 + 1, dst=A))
    assert _ops(after) == [(PUSH_ALU, 1, AluOp.MUL, 1, 3, "a"), (PUSH_ALU, 1, AluOp.ADD, 1, 1, "a")]
    func = _stage(lambda a, b: a * 3 + 1, dst=A)
    np.testing.assert_array_equal(result(after), result(func))


def test_a_requantisation_is_one_requant_with_alu_requant():
    def requant(a, b):
        return ir.Min(ir.Max(ir.Call("int32", "shift_right", (a + b + 4, ir.const(3))), ir.const(0)), ir.const(127))

    plain = inject_alu_intrin(ENV)(_stage(requant, dst=A))
    assert [op[2] for op in _ops(plain)] == [AluOp.ADD, AluOp.ADD, AluOp.SHR, AluOp.MAX, AluOp.MIN]
    fused = inject_alu_intrin(FULL)(_stage(requant, dst=A))
    assert _ops(fused) == [(PUSH_ALU, 1, AluOp.REQUANT, 0, requant_imm(3, relu=True, rounding=True), "b")]
    func = _stage(requant, dst=A)
    np.testing.assert_array_equal(result(fused), result(func))
    np.testing.assert_array_equal(result(plain), result(func))


def test_alu_chain_reads_the_simplifier_s_negation_as_mul_then_add():
    store = ir.BufferStore(A, ir.const(0), (IDX,))
    base, steps = alu_chain(ir.const(5) - A[IDX] * 3, store, "t", alu_mul=True)
    assert base.buffer is A and [(s.op, s.operand) for s in steps] == [(AluOp.MUL, -3), (AluOp.ADD, 5)]
    with pytest.raises(CompileError, match="negates, which needs a configuration with ALU_MUL"):
        alu_chain(ir.const(5) - A[IDX] * 3, store, "t", alu_mul=False)


def test_in_place_accepts_vetoes_a_chain_that_reads_its_producer_after_the_first_step():
    accept = in_place_accepts(alu_mul=False)
    ok = ir.BufferStore(D, ir.Min(A[IDX] + B[IDX], ir.const(9)), (IDX,))
    assert accept(ok, A) and not accept(ok, B)         # a is the chain's base, b only an operand
    reread = ir.BufferStore(D, ir.Min(A[IDX] + B[IDX], A[IDX]), (IDX,))
    assert not accept(reread, A)                        # the ADD would overwrite the a that MIN reads
    assert not accept(ir.BufferStore(D, A[IDX] // 2, (IDX,)), A)   # not an ALU stage at all


@pytest.mark.parametrize("f, match", [
    (lambda a, b: a // 2, r"alu stage d: \(?a\[.*\] // 2\)? is not an ALU operation"),
    (lambda a, b: a + 40000, r"immediate 40000 does not fit the ALU's 16-bit signed field"),
    (lambda a, b: a >> 40, r"shift by 40 \(right\) is outside the ALU's range \[-32, 31\]"),
    (lambda a, b: (a >> 1) + (b >> 2), r"combines two computed values; the ALU needs one operand to be a tensor"),
    (lambda a, b: a - b, r"the ALU subtracts constants only"),
], ids=["floordiv", "imm-range", "shift-range", "two-computed", "sub-tensor"])
def test_what_the_alu_cannot_do_is_rejected_with_the_reason(f, match):
    with pytest.raises(CompileError, match=match):
        inject_alu_intrin(ENV)(_stage(f))


def test_operands_and_destinations_outside_the_accumulator_are_rejected():
    inp = ir.Buffer("inp", (SIZE,), "int8", INP_SCOPE)
    bad_dst = ir.PrimFunc("f", (X,), ir.Allocate(inp, _nest(ir.BufferStore(inp, ir.Cast("int8", X[IDX]), (IDX,)),
                                                            ENV.alu)), {})
    with pytest.raises(CompileError, match=r"the ALU works in local.acc_buffer, but inp is in scope local.inp_buffer"):
        inject_alu_intrin(ENV)(bad_dst)
    from_global = ir.PrimFunc("f", (X,), ir.Allocate(D, _nest(ir.BufferStore(D, X[IDX] + 1, (IDX,)), ENV.alu)), {})
    with pytest.raises(CompileError, match=r"X is in scope global; the ALU reads local.acc_buffer only"):
        inject_alu_intrin(ENV)(from_global)
