"""The GEMM tensor intrinsic, declared with ``te.decl_tensor_intrin`` (VTA's ``intrin.py``).

It describes one GEMM micro-op: ``out[b, o] += sum_i inp[b, i] * wgt[o, i]`` over int8 inputs
into the int32 accumulator, with the three operands in the SRAM scopes and element offsets that
are multiples of one SRAM entry. Its statements push one micro-op each on the compute queue:
``reduce_reset`` a reset micro-op, ``reduce_update`` a GEMM micro-op, ``body`` both (the whole
reduction inside the tensorized region). The VTA passes fold the loops around them into the
instruction's two-level loop and its micro-op kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vtakit.compiler import ir, te
from vtakit.compiler.ir_builder import IRBuilder
from vtakit.compiler.vta.env import PUSH_GEMM, QID_COMPUTE, UOP_PUSH, VTA_AXIS

if TYPE_CHECKING:
    from vtakit.compiler.vta.env import VTAEnv

__all__ = ["gemm_intrin", "uop_push"]


def uop_push(mode: int, reset: int, dst: ir.PrimExpr, src: ir.PrimExpr | int = 0, wgt: ir.PrimExpr | int = 0,
             alu_op: int = 0, use_imm: int = 0, imm: ir.PrimExpr | int = 0) -> ir.Call:
    """The ``vta.uop_push`` call: one micro-op (GEMM when mode 0, ALU when 1)."""
    return te.call_intrin("int32", UOP_PUSH, mode, reset, dst, src, wgt, alu_op, use_imm, imm)


def _push(stmt: ir.PrimExpr, uop_kind: str = PUSH_GEMM) -> ir.Stmt:
    ib = IRBuilder()
    ib.scope_attr(VTA_AXIS, "coproc_scope", QID_COMPUTE)
    ib.scope_attr(VTA_AXIS, "coproc_uop_scope", uop_kind)
    ib.emit(stmt)
    return ib.get()


def gemm_intrin(env: "VTAEnv") -> te.TensorIntrin:
    """The GEMM tensor intrinsic: a (BATCH, BLOCK_OUT) int32 tile += int8 (BATCH, BLOCK_IN) x (BLOCK_OUT, BLOCK_IN)^T,
    with body (reset + update), reset and update lowered to VTA micro-ops."""
    b, bi, bo = env.batch, env.block_in, env.block_out
    inp = te.placeholder((b, bi), env.inp_dtype, name="inp")
    wgt = te.placeholder((bo, bi), env.wgt_dtype, name="wgt")
    k = te.reduce_axis((0, bi), name="k")
    out = te.compute((b, bo), lambda i, j: te.sum(inp[i, k].astype(env.acc_dtype) * wgt[j, k].astype(env.acc_dtype),
                                                  axis=[k]), name="out")
    binds = {
        inp: te.decl_buffer(inp.shape, inp.dtype, "inp_tile", scope=env.inp_scope, offset_factor=b * bi),
        wgt: te.decl_buffer(wgt.shape, wgt.dtype, "wgt_tile", scope=env.wgt_scope, offset_factor=bo * bi),
        out: te.decl_buffer(out.shape, out.dtype, "acc_tile", scope=env.acc_scope, offset_factor=b * bo),
    }

    def fcompute(ins: list[ir.Buffer], outs: list[ir.Buffer]):
        dinp, dwgt = ins
        dout = outs[0]
        reset = _push(uop_push(0, 1, dout.access_ptr("w")))
        update = _push(uop_push(0, 0, dout.access_ptr("rw"), dinp.access_ptr("r"), dwgt.access_ptr("r")))
        return ir.seq(reset, update), reset, update

    return te.decl_tensor_intrin(out.op, fcompute, name="vta.gemm", binds=binds)
