"""Statement-level simplification with loop bounds in context.

Every expression is simplified knowing the ranges of the loops around it; conditions that are
provably true or false drop their ``if``; loops of extent 0 vanish and loops of extent 1 become
their body with the variable replaced (thread bindings excepted); no-op statements disappear.
"""

from __future__ import annotations

from typing import Any

from vtakit.compiler import ir
from vtakit.compiler.arith import Analyzer

__all__ = ["StmtSimplifier", "simplify_stmt", "simplify_func"]


class StmtSimplifier(ir.IRMutator):
    def __init__(self, analyzer: Analyzer | None = None) -> None:
        self.an = analyzer or Analyzer()

    # expressions: simplify as a whole
    def visit(self, node: Any) -> Any:
        if isinstance(node, ir.PrimExpr):
            return self.an.simplify(node)
        return super().visit(node)

    def visit_For(self, node: ir.For) -> ir.Stmt | None:
        mn, ext = self.an.simplify(node.min), self.an.simplify(node.extent)
        if isinstance(ext, ir.IntImm) and ext.value <= 0:
            return _NOP
        if isinstance(ext, ir.IntImm) and ext.value == 1 and node.kind is not ir.ForKind.THREAD_BINDING:
            return self.visit(ir.substitute(node.body, {node.loop_var: mn}))
        saved = self.an.bounds.get(node.loop_var)
        self.an.bind_range(node.loop_var, mn, ext)
        body = self.visit(node.body)
        if saved is None:
            self.an.bounds.pop(node.loop_var, None)
        else:
            self.an.bounds[node.loop_var] = saved
        if _is_nop(body):
            return _NOP
        return ir.For(node.loop_var, mn, ext, node.kind, body, node.thread_tag, dict(node.annotations))

    def visit_IfThenElse(self, node: ir.IfThenElse) -> ir.Stmt:
        cond = self.an.simplify(node.cond)
        if isinstance(cond, ir.Call) and cond.op == "likely":     # a hint: decided like its argument
            inner = self.an.simplify(cond.args[0])
            cond = inner if isinstance(inner, ir.IntImm) else ir.Call(cond.dtype, "likely", (inner,))
        if isinstance(cond, ir.IntImm):
            if cond.value:
                return self.visit(node.then_case)
            return self.visit(node.else_case) if node.else_case is not None else _NOP
        then = self.visit(node.then_case)
        other = self.visit(node.else_case) if node.else_case is not None else None
        if other is not None and _is_nop(other):
            other = None
        if _is_nop(then) and other is None:
            return _NOP
        return ir.IfThenElse(cond, then, other)

    def visit_LetStmt(self, node: ir.LetStmt) -> ir.Stmt:
        value = self.an.simplify(node.value)
        if isinstance(value, (ir.IntImm, ir.Var)):
            return self.visit(ir.substitute(node.body, {node.var: value}))
        if ir.is_int(value.dtype) and ir.lanes_of(value.dtype) == 1:
            lo, hi = self.an.const_int_bound(value)
            self.an.bind(node.var, lo, hi)
        return ir.LetStmt(node.var, value, self.visit(node.body))

    def visit_SeqStmt(self, node: ir.SeqStmt) -> ir.Stmt:
        stmts = [self.visit(s) for s in node.stmts]
        stmts = [s for s in stmts if not _is_nop(s)]
        return ir.seq(*stmts) if stmts else _NOP

    def visit_AttrStmt(self, node: ir.AttrStmt) -> ir.Stmt:
        value = self.an.simplify(node.value) if isinstance(node.value, ir.PrimExpr) else node.value
        body = self.visit(node.body)
        return ir.AttrStmt(node.node, node.key, value, body)

    def visit_Allocate(self, node: ir.Allocate) -> ir.Stmt:
        body = self.visit(node.body)
        return _NOP if _is_nop(body) else ir.Allocate(node.buffer, body)


_NOP = ir.Evaluate(ir.IntImm("int32", 0))


def _is_nop(s: ir.Stmt) -> bool:
    return isinstance(s, ir.Evaluate) and isinstance(s.value, ir.IntImm)


def simplify_stmt(stmt: ir.Stmt, analyzer: Analyzer | None = None) -> ir.Stmt:
    return StmtSimplifier(analyzer).visit(stmt)


def simplify_func(func: ir.PrimFunc) -> ir.PrimFunc:
    """The Simplify pass."""
    return ir.PrimFunc(func.name, func.params, simplify_stmt(func.body), dict(func.attrs))

