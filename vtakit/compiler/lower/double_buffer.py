"""InjectDoubleBuffer: a producer attached in a loop fills the *next* iteration's half of a
two-slot buffer while the consumer reads the current one (reference/tvm_compiler.md §1.4).

Lowering marks the producer of a ``double_buffer()`` stage with ``AttrStmt double_buffer_write``;
it must be the first statement of the loop it is attached in. The loop ::

    for i: allocate B[S]; produce B(i); consume B

becomes ::

    allocate B[2*S]
    produce B(0) into slot 0      (under ``if 0 < n`` unless n is a positive constant)
    for i:
        if i + 1 < n: produce B(i + 1) into slot (i + 1) % 2
        consume B from slot i % 2

Other allocations made at the top of the loop body move out of the loop with it. Where the marked
producer is not the first statement of a serial loop (e.g. its loop had extent 1 and was
simplified away), the stage stays single-buffered, which computes the same result.
"""

from __future__ import annotations

from vtakit.compiler import ir

__all__ = ["inject_double_buffer", "DOUBLE_BUFFER_WRITE"]

DOUBLE_BUFFER_WRITE = "double_buffer_write"


class _Slot(ir.IRMutator):
    """Accesses of one storage shifted to slot ``slot`` of its doubled buffer."""

    def __init__(self, data: ir.Var, new: ir.Buffer, size: ir.PrimExpr, slot: ir.PrimExpr) -> None:
        self.data, self.new, self.shift = data, new, slot * size

    def _index(self, idx: ir.PrimExpr) -> ir.PrimExpr:
        lanes = ir.lanes_of(idx.dtype)
        return idx + (self.shift if lanes == 1 else ir.Broadcast(self.shift, lanes))

    def visit_BufferLoad(self, node: ir.BufferLoad) -> ir.PrimExpr:
        node = self.generic_visit(node)
        if node.buffer.data is not self.data:
            return node
        return ir.BufferLoad(self.new, (self._index(node.indices[0]),) + node.indices[1:])

    def visit_BufferStore(self, node: ir.BufferStore) -> ir.Stmt:
        node = self.generic_visit(node)
        if node.buffer.data is not self.data:
            return node
        return ir.BufferStore(self.new, node.value, (self._index(node.indices[0]),) + node.indices[1:])

    def visit_Call(self, node: ir.Call) -> ir.PrimExpr:
        node = self.generic_visit(node)
        if node.op == "tvm_access_ptr" and node.args[1] is self.data:
            args = list(node.args)
            args[2] = args[2] + self.shift
            return ir.Call(node.dtype, node.op, tuple(args))
        return node


class _Injector(ir.IRMutator):
    def visit_For(self, node: ir.For) -> ir.Stmt:
        node = self.generic_visit(node)
        if node.kind not in (ir.ForKind.SERIAL, ir.ForKind.UNROLLED):
            return node
        allocs: list[ir.Buffer] = []
        body = node.body
        while isinstance(body, ir.Allocate):
            allocs.append(body.buffer)
            body = body.body
        stmts = list(body.stmts) if isinstance(body, ir.SeqStmt) else [body]
        first = stmts[0]
        if not (isinstance(first, ir.AttrStmt) and first.key == DOUBLE_BUFFER_WRITE):
            return node
        target = next((b for b in allocs if b.data is first.node), None)
        if target is None:
            return node
        size = target.shape[0]
        doubled = ir.Buffer(target.name, (size * 2 if not isinstance(size, ir.IntImm)
                                          else ir.IntImm("int32", size.value * 2),),
                            target.dtype, target.scope, data=target.data)
        v, mn, end = node.loop_var, node.min, node.min + node.extent
        two = ir.IntImm(v.dtype, 2)

        def slot(stmt: ir.Stmt, which: ir.PrimExpr) -> ir.Stmt:
            return _Slot(target.data, doubled, size, which).visit(stmt)

        produce = first.body
        prologue = slot(ir.substitute(produce, {v: mn}), ir.IntImm(v.dtype, 0))
        if not (isinstance(node.extent, ir.IntImm) and node.extent.value > 0):
            prologue = ir.IfThenElse(mn < end, prologue)    # a loop that may run no iteration fetches nothing
        prefetch = ir.IfThenElse(v + 1 < end, slot(ir.substitute(produce, {v: v + 1}), ir.FloorMod(v + 1 - mn, two)))
        consume = slot(ir.seq(*stmts[1:]), ir.FloorMod(v - mn, two)) if len(stmts) > 1 else None
        loop = ir.For(v, node.min, node.extent, node.kind, ir.seq(prefetch, consume), node.thread_tag,
                      dict(node.annotations))
        out: ir.Stmt = ir.seq(prologue, loop)
        for buf in reversed(allocs):
            out = ir.Allocate(doubled if buf is target else buf, out)
        return out



class _Strip(ir.IRMutator):
    def visit_AttrStmt(self, node: ir.AttrStmt) -> ir.Stmt:
        node = self.generic_visit(node)
        return node.body if node.key == DOUBLE_BUFFER_WRITE else node


def inject_double_buffer(func: ir.PrimFunc) -> ir.PrimFunc:
    """The InjectDoubleBuffer pass (runs on flattened IR)."""
    body = _Strip().visit(_Injector().visit(func.body))
    return ir.PrimFunc(func.name, func.params, body, dict(func.attrs))
