"""VTA code generation on hand-written loop IR: a micro-op kernel is computed once per distinct
value of what it depends on (its free variables), as VTA's runtime caches kernels by signature,
and a kernel that does more than compute micro-ops runs every time."""

import pytest

from vtakit.compiler import ir
from vtakit.compiler.vta import codegen, get_env
from vtakit.compiler.vta.env import ACC_SCOPE, DEP_POP, DEP_PUSH, PUSH_ALU, UOP_PUSH, VTA_AXIS
from vtakit.errors import CompileError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, MemId, Opcode, Stage

ENV = get_env(VTAConfig.small())
LANES = ENV.batch * ENV.block_out


def _call(op, *args):
    return ir.Evaluate(ir.Call.make("int32", op, list(args)))


def _alu_loop(dst_of, imm_of, extra=()):
    """for i < 3: one ALU ADD micro-op on acc[dst_of(i)] with immediate imm_of(i), in a uop scope."""
    out = ir.Buffer("out", (4 * LANES,), "int8")
    acc = ir.Buffer("acc", (4 * LANES,), "int32", scope=ACC_SCOPE)
    i = ir.Var("i")
    dst = acc.access_ptr("rw", offset=dst_of(i) * LANES, extent=LANES)
    push = _call(UOP_PUSH, 1, 0, dst, dst, 0, int(AluOp.ADD), 1, imm_of(i))
    kernel = ir.AttrStmt(VTA_AXIS, "coproc_uop_scope", PUSH_ALU, ir.SeqStmt((push, *extra)))
    body = ir.Allocate(acc, ir.For(i, ir.convert(0), ir.convert(3), ir.ForKind.SERIAL, kernel))
    return ir.PrimFunc("alu_loop", (out,), body)


def _count_uop_pushes(monkeypatch):
    calls = []
    real = codegen._CodeGen._uop_push

    def counting(self, *args):
        calls.append(args)
        return real(self, *args)

    monkeypatch.setattr(codegen._CodeGen, "_uop_push", counting)
    return calls


def _alus(template):
    return [insn for insn in template.insns if isinstance(insn, AluInsn)]


def _uop_loads(template):
    return [insn for insn in template.insns if insn.opcode == Opcode.LOAD and insn.memory_type == MemId.UOP
            and insn.x_size > 0]


def test_a_kernel_that_depends_on_nothing_is_computed_once_and_pushed_every_time(monkeypatch):
    calls = _count_uop_pushes(monkeypatch)
    t = codegen.generate(_alu_loop(lambda i: 1, lambda i: 7), ENV)
    assert len(calls) == 1
    assert [(a.imm, a.uop_end - a.uop_bgn) for a in _alus(t)] == [(7, 1)] * 3
    assert len(_uop_loads(t)) == 1 and t.uops[0].dst_idx == 1


def test_a_kernel_is_recomputed_for_each_value_of_its_free_variables(monkeypatch):
    calls = _count_uop_pushes(monkeypatch)
    t = codegen.generate(_alu_loop(lambda i: i, lambda i: i + 5), ENV)
    assert len(calls) == 3
    assert [a.imm for a in _alus(t)] == [5, 6, 7]
    assert [u.dst_idx for u in t.uops] == [0, 1, 2]          # three kernels, each loaded once
    assert len(_uop_loads(t)) == 3


def test_a_kernel_with_other_effects_runs_every_time(monkeypatch):
    calls = _count_uop_pushes(monkeypatch)
    tokens = (_call(DEP_PUSH, int(Stage.COMPUTE), int(Stage.STORE)), _call(DEP_POP, int(Stage.COMPUTE),
                                                                          int(Stage.STORE)))
    t = codegen.generate(_alu_loop(lambda i: 0, lambda i: 1, extra=tokens), ENV)
    assert len(calls) == 3
    assert len(_alus(t)) == 3


def test_a_kernel_error_is_raised_on_its_first_use():
    func = _alu_loop(lambda i: 0, lambda i: 1)
    bad = ir.AttrStmt(VTA_AXIS, "coproc_uop_scope", PUSH_ALU, func.body.body.body)  # a scope in a scope
    nested = ir.PrimFunc("nested", func.params, ir.Allocate(func.body.buffer, ir.For(
        func.body.body.loop_var, ir.convert(0), ir.convert(3), ir.ForKind.SERIAL,
        ir.AttrStmt(VTA_AXIS, "coproc_uop_scope", PUSH_ALU, bad))))
    with pytest.raises(CompileError, match="nested coproc_uop_scope"):
        codegen.generate(nested, ENV)
