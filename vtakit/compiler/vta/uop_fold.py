"""FoldUopLoop: loops around micro-ops become the GEMM/ALU instruction's two-level loop.

Inside each ``coproc_uop_scope``, up to two outermost serial loops whose micro-op operands
(``dst``, ``src``, ``wgt`` pointer offsets) are affine in the loop variable, with one factor
per operand shared by every micro-op below, are replaced by ``vta.uop_loop_begin(extent,
dst_factor, src_factor, wgt_factor)`` ... ``vta.uop_loop_end()``; the variable becomes the loop's
min in the body (its first iteration). Loops that stay inside expand into the micro-op kernel when
the code generator runs it.
Factors are in scalars here, like the pointer offsets; the code generator divides by the
entry size of each operand's memory.
"""

from __future__ import annotations

from vtakit.compiler import ir
from vtakit.compiler.arith import linear_coefficients
from vtakit.compiler.vta.env import UOP_LOOP_BEGIN, UOP_LOOP_END, UOP_PUSH, VTA_AXIS
from vtakit.hw.config import ITER_BITS

__all__ = ["fold_uop_loops"]

_OPERANDS = (2, 3, 4)   # dst, src, wgt positions in vta.uop_push


def _pushes(s: ir.Stmt) -> list[ir.Call]:
    out: list[ir.Call] = []
    ir.walk(s, lambda n: out.append(n) if isinstance(n, ir.Call) and n.op == UOP_PUSH else None)
    return out


def _offset(arg: ir.PrimExpr) -> ir.PrimExpr | None:
    if isinstance(arg, ir.Call) and arg.op == "tvm_access_ptr":
        return arg.args[2]
    return None


def _uses_outside_offsets(s: ir.Stmt, var: ir.Var) -> bool:
    """Whether ``var`` appears anywhere except the pointer offsets of micro-ops."""
    class _Strip(ir.IRMutator):
        def visit_Call(self, node: ir.Call) -> ir.PrimExpr:
            if node.op == "tvm_access_ptr":
                return ir.IntImm("int32", 0)
            return self.generic_visit(node)

    return ir.uses_var(_Strip().visit(s), {var})


def _fold_one(s: ir.Stmt) -> tuple[ir.For, list[int], ir.Stmt] | None:
    if not isinstance(s, ir.For) or s.kind not in (ir.ForKind.SERIAL, ir.ForKind.UNROLLED):
        return None
    if isinstance(s.extent, ir.IntImm) and s.extent.value >= 1 << ITER_BITS:
        return None
    var = s.loop_var
    pushes = _pushes(s.body)
    if not pushes or _uses_outside_offsets(s.body, var):
        return None
    factors: list[int | None] = [None, None, None]
    for call in pushes:
        for slot, pos in enumerate(_OPERANDS):
            off = _offset(call.args[pos])
            coef = 0
            if off is not None:
                res = linear_coefficients(off, [var])
                if res is None:
                    return None
                coef = res[0][0]
            if factors[slot] is None:
                factors[slot] = coef
            elif factors[slot] != coef:
                return None
    body = ir.substitute(s.body, {var: s.min})     # the first iteration; the factors step from there
    return s, [int(f or 0) for f in factors], body


class _Folder(ir.IRMutator):
    def visit_AttrStmt(self, node: ir.AttrStmt) -> ir.Stmt:
        if not (node.key == "coproc_uop_scope" and node.node is VTA_AXIS):
            return self.generic_visit(node)
        body = node.body
        begins, depth = [], 0
        while depth < 2:
            hit = _fold_one(body)
            if hit is None:
                break
            loop, factors, body = hit
            begins.append(ir.Evaluate(ir.Call("int32", UOP_LOOP_BEGIN, (loop.extent, *map(ir.convert, factors)))))
            depth += 1
        if not begins:
            return node
        ends = [ir.Evaluate(ir.Call("int32", UOP_LOOP_END, ())) for _ in begins]
        return ir.AttrStmt(node.node, node.key, node.value, ir.seq(*begins, body, *ends))


def fold_uop_loops(func: ir.PrimFunc) -> ir.PrimFunc:
    """The pass (phase 2, after virtual-thread injection)."""
    return ir.PrimFunc(func.name, func.params, _Folder().visit(func.body), dict(func.attrs))
