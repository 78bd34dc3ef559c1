"""The GEMM tensor intrinsic (``vta/intrin.py``): ``uop_push``'s argument layout, and ``gemm_intrin``'s
declaration for a configuration (the (BATCH, BLOCK_OUT) int32 += int8 (BATCH, BLOCK_IN) x (BLOCK_OUT,
BLOCK_IN)^T description, its buffers' scopes and entry-sized offset factors, and the reset / update /
body statements as micro-ops on the compute queue); the description computes the product numpy does
(lowered and interpreted, exact)."""

from __future__ import annotations

import numpy as np
import pytest

import vtakit
from vtakit.compiler import ir, te
from vtakit.compiler.interpreter import run
from vtakit.compiler.vta import get_env
from vtakit.compiler.vta.env import ACC_SCOPE, INP_SCOPE, PUSH_GEMM, QID_COMPUTE, UOP_PUSH, VTA_AXIS, WGT_SCOPE
from vtakit.compiler.vta.intrin import gemm_intrin, uop_push
from vtakit.hw.config import VTAConfig

ENVS = {"small": get_env(VTAConfig.small()), "default": get_env(VTAConfig())}


def _push_of(stmt: ir.Stmt) -> ir.Call:
    """The micro-op of a ``coproc_scope(compute) { coproc_uop_scope(GEMM) { push } }`` statement."""
    assert isinstance(stmt, ir.AttrStmt) and stmt.key == "coproc_scope" and stmt.node is VTA_AXIS
    assert ir.int_value(stmt.value) == QID_COMPUTE
    uop = stmt.body
    assert isinstance(uop, ir.AttrStmt) and uop.key == "coproc_uop_scope" and uop.value == PUSH_GEMM
    assert isinstance(uop.body, ir.Evaluate) and isinstance(uop.body.value, ir.Call)
    return uop.body.value


def _ptr(arg: ir.PrimExpr) -> tuple[ir.Var, int]:
    assert isinstance(arg, ir.Call) and arg.op == "tvm_access_ptr"
    return arg.args[1], ir.int_value(arg.args[4])


def test_uop_push_lays_out_its_arguments_in_order():
    dst = ir.Var("dst", "handle")
    call = uop_push(1, 0, dst, 3, 4, alu_op=2, use_imm=1, imm=-5)
    assert call.op == UOP_PUSH and call.dtype == "int32"
    assert call.args[2] is dst
    assert [ir.int_value(a) for a in call.args if a is not dst] == [1, 0, 3, 4, 2, 1, -5]
    defaults = uop_push(0, 1, dst)
    assert [ir.int_value(a) for a in defaults.args if a is not dst] == [0, 1, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("name", sorted(ENVS))
def test_the_description_and_buffers_follow_the_configuration(name):
    env = ENVS[name]
    intrin = gemm_intrin(env)
    assert intrin.name == "vta.gemm" and env.gemm.name == "vta.gemm"
    inp, wgt = intrin.inputs
    assert [ir.int_value(ir.convert(s)) for s in inp.shape] == [env.batch, env.block_in] and inp.dtype == env.inp_dtype
    assert [ir.int_value(ir.convert(s)) for s in wgt.shape] == [env.block_out, env.block_in] and wgt.dtype == env.wgt_dtype
    out = intrin.op.output(0)
    assert [ir.int_value(ir.convert(s)) for s in out.shape] == [env.batch, env.block_out] and out.dtype == env.acc_dtype
    scopes = [(b.scope, b.offset_factor) for b in intrin.buffers]
    assert scopes == [(INP_SCOPE, env.lanes(INP_SCOPE)), (WGT_SCOPE, env.lanes(WGT_SCOPE)),
                      (ACC_SCOPE, env.lanes(ACC_SCOPE))]


def test_reset_update_and_body_are_gemm_micro_ops():
    intrin = gemm_intrin(ENVS["small"])
    dinp, dwgt, dout = intrin.buffers
    reset, update = _push_of(intrin.reduce_reset), _push_of(intrin.reduce_update)
    assert [ir.int_value(a) for a in reset.args[:2]] == [0, 1]                     # GEMM, reset
    assert _ptr(reset.args[2]) == (dout.data, 2)                                   # writes the accumulator
    assert [ir.int_value(a) for a in update.args[:2]] == [0, 0]
    assert [_ptr(a) for a in update.args[2:5]] == [(dout.data, 3), (dinp.data, 1), (dwgt.data, 1)]
    assert isinstance(intrin.body, ir.SeqStmt)
    assert [_push_of(s).args[1].value for s in intrin.body.stmts] == [1, 0]        # reset, then update


def test_the_description_computes_the_int8_product_into_int32():
    env = ENVS["default"]
    intrin = gemm_intrin(env)
    inp, wgt = intrin.inputs
    out = intrin.op.output(0)
    func = vtakit.lower(te.create_schedule(out.op), [inp, wgt, out])
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (env.batch, env.block_in)).astype(np.int8)
    w = rng.integers(-128, 128, (env.block_out, env.block_in)).astype(np.int8)
    c = np.zeros((env.batch, env.block_out), np.int32)
    run(func, a, w, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ w.astype(np.int32).T)
