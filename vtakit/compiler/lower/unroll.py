"""UnrollLoop: loops marked ``unrolled`` with a constant extent are replicated explicitly.

With ``auto_max_step`` > 0 (PassContext config ``tir.UnrollLoop.auto_max_step``) serial loops
whose whole nest does at most that many steps are unrolled too, as TVM's auto-unroll does.
"""

from __future__ import annotations

from vtakit.compiler import ir

__all__ = ["unroll_loops"]


def _steps(s: ir.Stmt) -> int | None:
    """Dynamic statement count of a nest, or None if some loop extent is not constant."""
    if isinstance(s, ir.For):
        if not isinstance(s.extent, ir.IntImm):
            return None
        inner = _steps(s.body)
        return None if inner is None else s.extent.value * inner
    if isinstance(s, ir.SeqStmt):
        total = 0
        for c in s.stmts:
            n = _steps(c)
            if n is None:
                return None
            total += n
        return total
    if isinstance(s, (ir.Allocate, ir.AttrStmt, ir.LetStmt)):
        return _steps(s.body)
    if isinstance(s, ir.IfThenElse):
        a = _steps(s.then_case)
        b = _steps(s.else_case) if s.else_case is not None else 0
        return None if a is None or b is None else max(a, b)
    return 1


class _Unroller(ir.IRMutator):
    def __init__(self, auto_max_step: int) -> None:
        self.auto_max_step = auto_max_step

    def visit_For(self, node: ir.For) -> ir.Stmt:
        node = self.generic_visit(node)
        unroll = node.kind is ir.ForKind.UNROLLED
        if not unroll and node.kind is ir.ForKind.SERIAL and self.auto_max_step > 0:
            steps = _steps(node)
            unroll = steps is not None and steps <= self.auto_max_step
        if not unroll:
            return node
        if not isinstance(node.extent, ir.IntImm):
            return ir.For(node.loop_var, node.min, node.extent, ir.ForKind.SERIAL, node.body,
                          node.thread_tag, dict(node.annotations))
        copies = [ir.substitute(node.body, {node.loop_var: node.min + i if i else node.min})
                  for i in range(node.extent.value)]
        return ir.seq(*copies) if copies else ir.Evaluate(ir.IntImm("int32", 0))


def unroll_loops(func: ir.PrimFunc, auto_max_step: int = 0) -> ir.PrimFunc:
    """The UnrollLoop pass."""
    return ir.PrimFunc(func.name, func.params, _Unroller(auto_max_step).visit(func.body), dict(func.attrs))
