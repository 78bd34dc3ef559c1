"""LiftAttrScope for the coprocessor attributes (VTA's LiftAttrScope passes).

A command statement is ``coproc_scope(q) { [coproc_uop_scope(kind)] { ... } }``. When a serial
loop's whole body is such a statement, the attributes move outside the loop, so the loop
becomes part of the command: a micro-op loop that FoldUopLoop can turn into the instruction's
iteration fields or the kernel's micro-ops, and one region for coprocessor synchronisation.
Consecutive commands of one queue in a statement sequence merge into one ``coproc_scope``, as
in TVM: virtual-thread injection then replicates the group, so a thread's input and weight
loads stay together (``[inp_t0, wgt_t0, inp_t1, wgt_t1]``) and one thread's loads never wait
behind another thread's. Virtual-thread loops are never crossed (each thread keeps its own
commands).
"""

from __future__ import annotations

from vtakit.compiler import ir
from vtakit.compiler.vta.env import VTA_AXIS, coproc_scope_of

__all__ = ["lift_coproc_scopes"]

_LIFTABLE = (ir.ForKind.SERIAL, ir.ForKind.UNROLLED)


def _attr_chain(s: ir.Stmt) -> tuple[list[ir.AttrStmt], ir.Stmt]:
    """The coproc attributes directly at the top of ``s`` and the statement below them."""
    chain = []
    while isinstance(s, ir.AttrStmt) and s.node is VTA_AXIS and s.key in ("coproc_scope", "coproc_uop_scope"):
        chain.append(s)
        s = s.body
    return chain, s


class _Lifter(ir.IRMutator):
    def visit_For(self, node: ir.For) -> ir.Stmt:
        node = self.generic_visit(node)
        if node.kind not in _LIFTABLE:
            return node
        chain, inner = _attr_chain(node.body)
        if not chain or any(isinstance(a.value, ir.PrimExpr) and ir.uses_var(a.value, {node.loop_var}) for a in chain):
            return node
        out: ir.Stmt = ir.For(node.loop_var, node.min, node.extent, node.kind, inner, node.thread_tag,
                              dict(node.annotations))
        for a in reversed(chain):
            out = ir.AttrStmt(a.node, a.key, a.value, out)
        return out

    def visit_SeqStmt(self, node: ir.SeqStmt) -> ir.Stmt:
        node = self.generic_visit(node)
        stmts = node.stmts if isinstance(node, ir.SeqStmt) else (node,)
        out: list[ir.Stmt] = []
        for s in stmts:
            q, prev = coproc_scope_of(s), out[-1] if out else None
            if q is not None and prev is not None and coproc_scope_of(prev) == q:
                out[-1] = ir.AttrStmt(prev.node, prev.key, prev.value, ir.seq(prev.body, s.body))
            else:
                out.append(s)
        return ir.seq(*out)


def lift_coproc_scopes(func: ir.PrimFunc) -> ir.PrimFunc:
    """LiftAttrScope("coproc_uop_scope") and ("coproc_scope"), over serial loops."""
    return ir.PrimFunc(func.name, func.params, _Lifter().visit(func.body), dict(func.attrs))
