"""The FuseGemmEpilogue pass (``vta/gemm_epilogue.py``) on hand-built accumulator tiles
(``[LOAD ACC bias] reset GEMM ALU... STORE``, small configuration, 3 entries of 4 lanes): with
BIAS_PRELOAD the reset becomes a bias reset from op1's micro-ops and op1 loses its addend (ADD gone,
REQUANT tensor -> immediate); with GEMM_OUT_REQUANT a lone REQUANT immediate becomes a ``requant_set``
before the reset and the GEMMs' epilogue bit; unsound tiles (bias read again, loaded after the reset,
partial visits) and tiles whose REQUANT controls differ are left as they are, and configurations
without the keys return the function itself. Semantics: a model of the compute core (ACC, OUT, the
requant register; the simulator's ALU/REQUANT operations) run by the interpreter gives the same
int8 result before and after."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from vtakit.compiler import ir
from vtakit.compiler.interpreter import Interpreter, Pointer
from vtakit.compiler.vta import get_env
from vtakit.compiler.vta.env import (ACC_SCOPE, INP_SCOPE, LOAD_2D, PUSH_ALU, PUSH_GEMM, QID_COMPUTE, QID_STORE,
                                     STORE_2D, UOP_PUSH, VTA_AXIS, WGT_SCOPE)
from vtakit.compiler.vta.gemm_epilogue import GEMM_EPILOGUE_ARG, REQUANT_SET, fuse_gemm_epilogue
from vtakit.compiler.vta.intrin import uop_push
from vtakit.compiler.vta.nest import access_ptr
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluOp, MemId, requant_imm
from vtakit.sim.machine import alu_op, requant_op

SMALL = VTAConfig.small()
BOTH = get_env(dataclasses.replace(SMALL, alu_requant=True, bias_preload=True, gemm_out_requant=True))
BIAS_ONLY = get_env(dataclasses.replace(SMALL, alu_requant=True, bias_preload=True))
NONE = get_env(dataclasses.replace(SMALL, alu_requant=True))
LN, BI, E = 4, 4, 3                                   # lanes of an ACC entry, BLOCK_IN, entries per tile
assert BOTH.lanes(ACC_SCOPE) == LN and BOTH.block_in == BI and BOTH.batch == 1
CTRL = requant_imm(3, relu=True, rounding=True)
X = ir.Buffer("X", (E * LN,), "int32")                # the bias in DRAM
Y = ir.Buffer("Y", (2 * E * LN,), "int8")             # the results of up to two tiles
INP = ir.Buffer("INP", (E * BI,), "int8", INP_SCOPE)
WGT = ir.Buffer("WGT", (LN * BI,), "int8", WGT_SCOPE)
EV = ir.Var("e")


# ---------------------------------------------------------------------------- building tiles
def _uops(kind: str, push: ir.Call, extent: int = E) -> ir.Stmt:
    loop = ir.For(EV, ir.const(0), ir.const(extent), ir.ForKind.SERIAL, ir.Evaluate(push))
    return ir.AttrStmt(VTA_AXIS, "coproc_scope", ir.const(QID_COMPUTE),
                       ir.AttrStmt(VTA_AXIS, "coproc_uop_scope", kind, loop))


def _entry(buf: ir.Buffer) -> ir.Call:
    return access_ptr(buf, EV * LN, LN, 3)


def _load(bias: ir.Buffer) -> ir.Stmt:
    call = ir.Call("int32", LOAD_2D, (ir.const(int(MemId.ACC)), access_ptr(bias, ir.const(0), E * LN, 2),
                                      access_ptr(X, ir.const(0), LN, 1), *map(ir.const, (1, E, E, 0, 0, 0, 0))))
    return ir.AttrStmt(VTA_AXIS, "coproc_scope", ir.const(QID_COMPUTE), ir.Evaluate(call))


def _store(acc: ir.Buffer, at: int) -> ir.Stmt:
    call = ir.Call("int32", STORE_2D, (access_ptr(acc, ir.const(0), E * LN, 1), access_ptr(Y, ir.const(at), LN, 2),
                                       *map(ir.const, (1, E, E))))
    return ir.AttrStmt(VTA_AXIS, "coproc_scope", ir.const(QID_STORE), ir.Evaluate(call))


def _reset(acc: ir.Buffer) -> ir.Stmt:
    return _uops(PUSH_GEMM, uop_push(0, 1, _entry(acc)))


def _gemm(acc: ir.Buffer) -> ir.Stmt:
    return _uops(PUSH_GEMM, uop_push(0, 0, _entry(acc), access_ptr(INP, EV * BI, BI, 1),
                                     access_ptr(WGT, ir.const(0), LN * BI, 1)))


def _alu(acc: ir.Buffer, op: AluOp, operand: ir.Buffer | int, control: int = 0, extent: int = E) -> ir.Stmt:
    if isinstance(operand, ir.Buffer):
        push = uop_push(1, 0, _entry(acc), access_ptr(operand, EV * LN, LN, 1), 0, int(op), 0, control)
    else:
        push = uop_push(1, 0, _entry(acc), _entry(acc), 0, int(op), 1, operand)
    return _uops(PUSH_ALU, push, extent)


def _acc(name: str) -> ir.Buffer:
    return ir.Buffer(name, (E * LN,), "int32", ACC_SCOPE)


def _func(body: ir.Stmt, *accs: ir.Buffer) -> ir.PrimFunc:
    for buf in (*accs, WGT, INP):
        body = ir.Allocate(buf, body)
    return ir.PrimFunc("f", (X, Y), body, {})


def _tile(first: str = "add", at: int = 0, control: int = CTRL, name: str = "B",
          bias: ir.Buffer | None = None) -> tuple[list[ir.Stmt], list[ir.Buffer]]:
    """bias load, reset, GEMM, op1 (ADD bias, then REQUANT imm; or REQUANT with the bias addend), store."""
    acc, bias = _acc(name), bias or _acc(name + "_bias")
    if first == "add":
        epilogue = [_alu(acc, AluOp.ADD, bias), _alu(acc, AluOp.REQUANT, control)]
    else:
        epilogue = [_alu(acc, AluOp.REQUANT, bias, control)]
    return [_load(bias), _reset(acc), _gemm(acc), *epilogue, _store(acc, at)], [acc, bias]


# ---------------------------------------------------------------------------- the core model
class _Core:
    """ACC (the interpreter's allocations), OUT (int8, per ACC allocation), the requant register."""

    def __init__(self) -> None:
        self.out: dict[int, np.ndarray] = {}
        self.reg = 0

    def intrinsics(self) -> dict[str, Any]:
        return {UOP_PUSH: self.push, REQUANT_SET: self.requant_set, LOAD_2D: self.load, STORE_2D: self.store}

    def _out(self, acc: np.ndarray) -> np.ndarray:
        return self.out.setdefault(id(acc), np.zeros(acc.size, np.int8))

    def push(self, mode, reset, dst: Pointer, src: Any, wgt: Any, op, use_imm, imm) -> int:
        s = slice(dst.offset, dst.offset + LN)
        acc, out = dst.array, self._out(dst.array)
        if mode == 0 and reset:
            bias = use_imm and isinstance(src, Pointer)
            acc[s] = src.array[src.offset:src.offset + LN] if bias else 0
            out[s] = acc[s].astype(np.int8)
        elif mode == 0:
            x = src.array[src.offset:src.offset + BI].astype(np.int64)
            w = wgt.array[wgt.offset:wgt.offset + LN * BI].astype(np.int64).reshape(LN, BI)
            acc[s] = (acc[s] + w @ x).astype(np.int64).astype(np.int32)
            out[s] = requant_op(acc[s], None, self.reg) if use_imm else acc[s].astype(np.int8)
        else:
            b = None if use_imm else src.array[src.offset:src.offset + LN].astype(np.int64)
            if op == AluOp.REQUANT:
                acc[s] = requant_op(acc[s], b, int(imm))
            else:
                acc[s] = alu_op(AluOp(op), acc[s].astype(np.int64), np.int64(imm) if use_imm else b)
            out[s] = acc[s].astype(np.int8)
        return 0

    def requant_set(self, imm) -> int:
        self.reg = int(imm)
        return 0

    def load(self, mem, sram: Pointer, dram: Pointer, *_) -> int:
        sram.array[sram.offset:sram.offset + E * LN] = dram.array[dram.offset:dram.offset + E * LN]
        return 0

    def store(self, sram: Pointer, dram: Pointer, *_) -> int:
        dram.array[dram.offset:dram.offset + E * LN] = self._out(sram.array)[sram.offset:sram.offset + E * LN]
        return 0


def result(func: ir.PrimFunc, seed: int = 0) -> np.ndarray:
    """Y after the function, with random int8 inputs/weights written into INP/WGT as it starts."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-5000, 5000, E * LN).astype(np.int32)
    inp, wgt = rng.integers(-128, 128, E * BI).astype(np.int8), rng.integers(-128, 128, LN * BI).astype(np.int8)
    fill = ir.seq(*[ir.BufferStore(INP, ir.const(int(v), "int8"), (ir.const(k),)) for k, v in enumerate(inp)],
                  *[ir.BufferStore(WGT, ir.const(int(v), "int8"), (ir.const(k),)) for k, v in enumerate(wgt)])
    body = _prepend(func.body, fill)
    y = np.zeros(2 * E * LN, np.int8)
    Interpreter(ir.PrimFunc(func.name, func.params, body, {}), _Core().intrinsics())(x, y)
    return y


def _prepend(body: ir.Stmt, fill: ir.Stmt) -> ir.Stmt:
    """``fill`` first inside the INP and WGT allocations (the two outermost)."""
    inner = body.body
    return ir.Allocate(body.buffer, ir.Allocate(inner.buffer, ir.seq(fill, inner.body)))


def _fused(func: ir.PrimFunc, env) -> ir.PrimFunc:
    after = fuse_gemm_epilogue(env)(func)
    np.testing.assert_array_equal(result(after), result(func))
    return after


def _pushes(func: ir.PrimFunc) -> list[tuple]:
    """(uop kind, mode, reset, src buffer, alu_op, use_imm/epilogue, imm) per micro-op scope, and requant_sets."""
    found: list = []

    def visit(s: Any, kind: str | None) -> None:
        if isinstance(s, ir.AttrStmt) and s.key == "coproc_uop_scope":
            kind = s.value
        if isinstance(s, ir.Call) and s.op == UOP_PUSH:
            a = s.args
            src = a[3].args[1].name if isinstance(a[3], ir.Call) else None
            found.append((kind, a[0].value, a[1].value, src, a[5].value, a[6].value, ir.int_value(a[7])))
            return
        if isinstance(s, ir.Call) and s.op == REQUANT_SET:
            found.append((REQUANT_SET, ir.int_value(s.args[0])))
        for c in ir.children(s):
            visit(c, kind)

    visit(func.body, None)
    return found


# ---------------------------------------------------------------------------- tests
def test_bias_and_requant_fuse_into_a_bias_reset_and_requantising_gemms():
    stmts, accs = _tile("add")
    after = _fused(_func(ir.seq(*stmts), *accs), BOTH)
    assert _pushes(after) == [(REQUANT_SET, CTRL),
                              (PUSH_GEMM, 0, 1, "B_bias", 0, 1, 0),          # acc[dst] = acc[bias]
                              (PUSH_GEMM, 0, 0, "INP", 0, 1, 0)]             # epilogue bit set
    assert GEMM_EPILOGUE_ARG == 6


def test_bias_preload_alone_drops_the_add_and_keeps_the_requant_on_the_alu():
    stmts, accs = _tile("add")
    after = _fused(_func(ir.seq(*stmts), *accs), BIAS_ONLY)
    assert _pushes(after) == [(PUSH_GEMM, 0, 1, "B_bias", 0, 1, 0), (PUSH_GEMM, 0, 0, "INP", 0, 0, 0),
                              (PUSH_ALU, 1, 0, "B", AluOp.REQUANT, 1, CTRL)]


def test_a_requant_with_the_bias_as_addend_becomes_requant_immediate_then_fuses():
    stmts, accs = _tile("requant")
    bias_only = _fused(_func(ir.seq(*stmts), *accs), BIAS_ONLY)
    assert _pushes(bias_only)[-1] == (PUSH_ALU, 1, 0, "B", AluOp.REQUANT, 1, CTRL)     # src = dst, immediate
    assert _pushes(bias_only)[0][:4] == (PUSH_GEMM, 0, 1, "B_bias")
    both = _fused(_func(ir.seq(*stmts), *accs), BOTH)
    assert [p[0] for p in _pushes(both)] == [REQUANT_SET, PUSH_GEMM, PUSH_GEMM]


def test_configurations_without_the_keys_return_the_function_itself():
    stmts, accs = _tile("add")
    func = _func(ir.seq(*stmts), *accs)
    assert fuse_gemm_epilogue(NONE)(func) is func


@pytest.mark.parametrize("case", ["bias-read-again", "bias-loaded-after-reset", "partial-alu"])
def test_unsound_tiles_are_left_as_they_are(case):
    stmts, accs = _tile("add")
    acc, bias = accs
    if case == "bias-read-again":           # a second ALU reads the bias: the bias reset would not be its only use
        stmts.insert(4, _alu(acc, AluOp.MAX, bias))
    elif case == "bias-loaded-after-reset":
        stmts[0], stmts[1] = stmts[1], stmts[0]
    else:                                   # op1 visits 2 of the 3 entries: a bias reset would miss one
        stmts[3] = _alu(acc, AluOp.ADD, bias, extent=2)
    func = _func(ir.seq(*stmts), *accs)
    after = _fused(func, BOTH)
    assert after.body is func.body


def test_tiles_with_different_requant_controls_keep_the_requant_on_the_alu():
    first, accs1 = _tile("add", at=0, name="B")
    second, accs2 = _tile("add", at=E * LN, name="B2", control=requant_imm(4, relu=False, rounding=False))
    func = _func(ir.seq(*first, *second), *accs1, *accs2)
    after = _fused(func, BOTH)
    pushes = _pushes(after)
    assert not any(p[0] == REQUANT_SET for p in pushes)            # the one register cannot serve both
    assert [p[1:3] + p[3:4] for p in pushes if p[0] == PUSH_GEMM and p[2] == 1] == [(0, 1, "B_bias"),
                                                                                     (0, 1, "B2_bias")]
    assert sum(p[4] == AluOp.REQUANT for p in pushes) == 2
