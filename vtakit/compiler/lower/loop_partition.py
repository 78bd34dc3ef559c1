"""LoopPartition: peel the tail iterations that need a split's guard off a loop.

A split whose factor does not divide leaves ``if (xo*f + xi < n)`` around the body. For a loop
``xo`` the guard holds for every inner iteration while ``xo < p``; the loop becomes a main part
``[0, p)``, where simplification drops the guard (so inner loops can vectorize), and a guarded
tail. Only guards affine in the loop variable whose other terms are bounded by inner loops are
used. Off by default, as in TVM; enable with the PassContext config
``tir.LoopPartition.partition_const_loop``.
"""

from __future__ import annotations

import math
from typing import Any

from vtakit.compiler import ir
from vtakit.compiler.arith import Analyzer, linear_coefficients
from vtakit.compiler.lower.simplify import simplify_stmt

__all__ = ["partition_loops"]


class _Partitioner(ir.IRMutator):
    def visit_For(self, node: ir.For) -> ir.Stmt:
        if node.kind is not ir.ForKind.THREAD_BINDING and isinstance(node.extent, ir.IntImm) \
                and isinstance(node.min, ir.IntImm):
            split = self._split_point(node)
            if split is not None:
                p = split
                main = ir.For(node.loop_var, node.min, ir.IntImm("int32", p - node.min.value), node.kind, node.body,
                              node.thread_tag, dict(node.annotations))
                tail_body = ir.substitute(node.body, {node.loop_var: node.loop_var + p})
                tail = ir.For(node.loop_var, ir.IntImm("int32", 0),
                              ir.IntImm("int32", node.min.value + node.extent.value - p), node.kind, tail_body,
                              node.thread_tag, dict(node.annotations))
                return ir.seq(self.visit(simplify_stmt(main)), self.visit(simplify_stmt(tail)))
        return self.generic_visit(node)

    def _split_point(self, loop: ir.For) -> int | None:
        """The first value of the loop variable from which some guard may fail, if inside the loop."""
        v = loop.loop_var
        lo, hi = loop.min.value, loop.min.value + loop.extent.value
        best: int | None = None
        inner: dict[ir.Var, tuple[int, int]] = {}

        def visit(s: Any) -> None:
            nonlocal best
            if isinstance(s, ir.For):
                if isinstance(s.min, ir.IntImm) and isinstance(s.extent, ir.IntImm) and s.extent.value > 0:
                    inner[s.loop_var] = (s.min.value, s.min.value + s.extent.value - 1)
                visit(s.body)
                return
            if isinstance(s, ir.IfThenElse):
                for c in ir.conjuncts(s.cond):
                    p = self._guard_limit(c, v, inner)
                    if p is not None and lo < p < hi:
                        best = p if best is None else min(best, p)
            for child in ir.children(s):
                if isinstance(child, ir.Stmt):
                    visit(child)

        visit(loop.body)
        return best

    @staticmethod
    def _guard_limit(cond: ir.PrimExpr, v: ir.Var, inner: dict[ir.Var, tuple[int, int]]) -> int | None:
        """For ``a*v + r < 0`` (a > 0, r over inner loops only): the smallest v where it may fail."""
        if isinstance(cond, ir.LT):
            diff = cond.a - cond.b
        elif isinstance(cond, ir.LE):
            diff = cond.a - cond.b - 1
        elif isinstance(cond, ir.GT):
            diff = cond.b - cond.a
        elif isinstance(cond, ir.GE):
            diff = cond.b - cond.a - 1
        else:
            return None
        lin = linear_coefficients(diff, [v])
        if lin is None or lin[0][0] <= 0:
            return None
        a, rest = lin[0][0], lin[1]
        if ir.uses_var(rest, lambda x: x not in inner):
            return None
        r_max = Analyzer(inner).const_int_bound(rest)[1]
        if r_max == math.inf:
            return None
        # a*v + r_max <= -1  <=>  v <= floor((-1 - r_max) / a)
        return int((-1 - r_max) // a) + 1


def partition_loops(func: ir.PrimFunc) -> ir.PrimFunc:
    """The LoopPartition pass."""
    return ir.PrimFunc(func.name, func.params, _Partitioner().visit(func.body), dict(func.attrs))
