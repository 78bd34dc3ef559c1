"""VectorizeLoop: a vectorized loop of constant extent becomes vector expressions.

The loop variable becomes ``Ramp(min, 1, lanes)``, scalars meeting vectors are broadcast, and
affine index arithmetic stays a ``Ramp`` (so backends see unit-stride loads and stores). Bodies
that cannot be vectorized faithfully (conditions or lets that depend on the lane, stores to a
lane-independent address, calls with side effects, nested allocations) fall back to a serial loop,
as TVM scalarizes them.
"""

from __future__ import annotations


from vtakit.compiler import ir
from vtakit.compiler.arith import simplify

__all__ = ["vectorize_loops"]


class _Scalarize(Exception):
    pass


def _lanes(e: ir.PrimExpr) -> int:
    return ir.lanes_of(e.dtype)


def _bcast(e: ir.PrimExpr, lanes: int) -> ir.PrimExpr:
    return e if _lanes(e) == lanes else ir.Broadcast(e, lanes)


class _Vectorizer:
    def __init__(self, var: ir.Var, start: ir.PrimExpr, lanes: int) -> None:
        self.var, self.lanes = var, lanes
        self.ramp = ir.Ramp(start, ir.IntImm(var.dtype, 1), lanes)

    # ------------------------------------------------------------------ expressions
    def expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
        if not ir.uses_var(e, {self.var}):
            return e
        if e is self.var:
            return self.ramp
        if isinstance(e, ir.BinaryOp):
            return self.binary(e)
        if isinstance(e, ir.Not):
            return ir.Not(self.expr(e.a))
        if isinstance(e, ir.Select):
            c, t, f = self.expr(e.cond), self.expr(e.true_value), self.expr(e.false_value)
            n = max(_lanes(c), _lanes(t), _lanes(f))
            return ir.Select(_bcast(c, n), _bcast(t, n), _bcast(f, n))
        if isinstance(e, ir.Cast):
            v = self.expr(e.value)
            return ir.Cast(ir.with_lanes(e.dtype, _lanes(v)), v)
        if isinstance(e, ir.BufferLoad):
            idx = tuple(self.expr(i) for i in e.indices)
            return ir.BufferLoad(e.buffer, idx)
        if isinstance(e, ir.Call):
            if e.op == "if_then_else" or e.op == "tvm_access_ptr" or not ir.is_float(e.dtype) and e.op not in (
                    "shift_left", "shift_right", "abs", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"):
                raise _Scalarize  # lazily evaluated or side-effecting calls stay scalar
            args = [self.expr(a) if isinstance(a, ir.PrimExpr) else a for a in e.args]
            return ir.Call(ir.with_lanes(e.dtype, self.lanes),
                           e.op, tuple(_bcast(a, self.lanes) if isinstance(a, ir.PrimExpr) else a for a in args))
        raise _Scalarize

    def binary(self, e: ir.BinaryOp) -> ir.PrimExpr:
        a, b = self.expr(e.a), self.expr(e.b)
        n = max(_lanes(a), _lanes(b))
        if isinstance(e, (ir.Add, ir.Sub)) and (isinstance(a, ir.Ramp) or isinstance(b, ir.Ramp)):
            ra = a if isinstance(a, ir.Ramp) else None
            rb = b if isinstance(b, ir.Ramp) else None
            if _lanes(a) == 1 or _lanes(b) == 1 or (ra is not None and rb is not None):
                base_a, stride_a = (ra.base, ra.stride) if ra is not None else (a, ir.IntImm(a.dtype, 0))
                base_b, stride_b = (rb.base, rb.stride) if rb is not None else (b, ir.IntImm(b.dtype, 0))
                op = type(e)
                return ir.Ramp(simplify(op(base_a, base_b)), simplify(op(stride_a, stride_b)), n)
        if isinstance(e, ir.Mul) and (isinstance(a, ir.Ramp) and _lanes(b) == 1 or isinstance(b, ir.Ramp)
                                      and _lanes(a) == 1):
            ramp, s = (a, b) if isinstance(a, ir.Ramp) else (b, a)
            return ir.Ramp(simplify(ramp.base * s), simplify(ramp.stride * s), n)
        return type(e)(_bcast(a, n), _bcast(b, n))

    # ------------------------------------------------------------------ statements
    def stmt(self, s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.SeqStmt):
            return ir.seq(*[self.stmt(c) for c in s.stmts])
        if not ir.uses_var(s, {self.var}):
            if ir.contains(s, (ir.BufferStore, ir.Evaluate)):
                raise _Scalarize  # would run once instead of once per lane
            return s
        if isinstance(s, ir.BufferStore):
            value = self.expr(s.value)
            idx = tuple(self.expr(i) for i in s.indices)
            n = max([_lanes(value)] + [_lanes(i) for i in idx])
            if any(_lanes(i) == 1 for i in idx):
                raise _Scalarize
            return ir.BufferStore(s.buffer, _bcast(value, n), idx)
        if isinstance(s, ir.For):
            if ir.uses_var(s.min, {self.var}) or ir.uses_var(s.extent, {self.var}):
                raise _Scalarize
            return ir.For(s.loop_var, s.min, s.extent, s.kind, self.stmt(s.body), s.thread_tag, s.annotations)
        if isinstance(s, ir.IfThenElse):
            if ir.uses_var(s.cond, {self.var}):
                raise _Scalarize
            return ir.IfThenElse(s.cond, self.stmt(s.then_case),
                                 self.stmt(s.else_case) if s.else_case is not None else None)
        if isinstance(s, ir.AttrStmt):
            if isinstance(s.value, ir.PrimExpr) and ir.uses_var(s.value, {self.var}):
                raise _Scalarize
            return ir.AttrStmt(s.node, s.key, s.value, self.stmt(s.body))
        raise _Scalarize


class _LoopVectorizer(ir.IRMutator):
    def visit_For(self, node: ir.For) -> ir.Stmt:
        node = self.generic_visit(node)
        if node.kind is not ir.ForKind.VECTORIZED:
            return node
        serial = ir.For(node.loop_var, node.min, node.extent, ir.ForKind.SERIAL, node.body,
                        node.thread_tag, dict(node.annotations))
        if not isinstance(node.extent, ir.IntImm) or node.extent.value < 2:
            return serial
        try:
            return _Vectorizer(node.loop_var, node.min, node.extent.value).stmt(node.body)
        except _Scalarize:
            return serial


def vectorize_loops(func: ir.PrimFunc) -> ir.PrimFunc:
    """The VectorizeLoop pass."""
    return ir.PrimFunc(func.name, func.params, _LoopVectorizer().visit(func.body), dict(func.attrs))
