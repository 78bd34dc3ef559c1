"""InjectVirtualThread: virtual-thread loops become interleaved copies of their statements.

For each loop bound to ``vthread`` (sharing allowed) or ``cthread`` (no sharing, the VTA style),
reference/tvm_compiler.md §3.1:

1. *Touched analysis*: the variables and buffers whose values depend on the thread variable
   (through lets, loop bounds, stores and ``tvm_access_ptr`` arguments), to a fixed point.
2. *Buffer splitting*: allocations inside the loop that are touched (all of them for ``cthread``)
   get one copy per thread: size times the thread count, accesses and access pointers offset by
   ``thread * size``.
3. *Injection*: the thread loop moves down to the smallest statements that depend on the thread
   (for ``cthread`` also every store, every ``Evaluate`` and every ``coproc_scope`` /
   ``coproc_uop_scope`` attribute); it is unrolled into copies when the statement has no loops
   and there are fewer than 16 threads, else it stays a serial loop. A body ``[load; gemm]`` thus
   becomes ``[load_t0; load_t1; gemm_t0; gemm_t1]``.
"""

from __future__ import annotations

from typing import Any

from vtakit.compiler import ir
from vtakit.errors import CompileError

__all__ = ["inject_virtual_thread", "VIRTUAL_THREAD_TAGS"]

VIRTUAL_THREAD_TAGS = ("vthread", "cthread")
_COPROC_KEYS = ("coproc_scope", "coproc_uop_scope")


def _is_virtual(node: ir.For) -> bool:
    return node.kind is ir.ForKind.THREAD_BINDING and node.thread_tag.startswith(VIRTUAL_THREAD_TAGS)


def _touched(body: ir.Stmt, var: ir.Var) -> set[ir.Var]:
    """Variables (incl. buffer data variables) whose value depends on ``var``."""
    touched = {var}
    changed = True
    while changed:
        changed = False

        def dep(e: Any) -> bool:
            return ir.uses_var(e, touched)

        def visit(n: Any) -> None:
            nonlocal changed
            new: list[ir.Var] = []
            if isinstance(n, ir.LetStmt) and dep(n.value):
                new.append(n.var)
            elif isinstance(n, ir.For) and (dep(n.min) or dep(n.extent)):
                new.append(n.loop_var)
            elif isinstance(n, ir.BufferStore) and (dep(n.value) or any(dep(i) for i in n.indices)):
                new.append(n.buffer.data)
            elif isinstance(n, ir.AllReduce) and (dep(n.value) or dep(n.condition) or any(dep(i) for i in n.indices)):
                new.append(n.buffer.data)
            elif isinstance(n, ir.Call) and n.op == "tvm_access_ptr" and any(
                    isinstance(a, ir.PrimExpr) and a is not n.args[1] and dep(a) for a in n.args):
                new.append(n.args[1])
            for v in new:
                if v not in touched:
                    touched.add(v)
                    changed = True

        ir.walk(body, visit)
    return touched


class _BufferSplitter(ir.IRMutator):
    """Gives every split allocation one slice per thread."""

    def __init__(self, var: ir.Var, nthreads: int, allow_share: bool, touched: set[ir.Var]) -> None:
        self.var, self.n, self.allow_share, self.touched = var, nthreads, allow_share, touched
        self.split: dict[ir.Var, tuple[ir.Buffer, ir.PrimExpr]] = {}  # data var -> (new buffer, slice size)

    def visit_Allocate(self, node: ir.Allocate) -> ir.Stmt:
        buf = node.buffer
        if self.allow_share and buf.data not in self.touched:
            return ir.Allocate(buf, self.visit(node.body))
        if len(buf.shape) != 1:
            raise CompileError(f"virtual threads need flattened buffers; {buf.name} has shape {buf.shape}")
        size = buf.shape[0]
        new = ir.Buffer(buf.name, (size * self.n if not isinstance(size, ir.IntImm)
                                   else ir.IntImm("int32", size.value * self.n),),
                        buf.dtype, buf.scope, data=buf.data)
        self.split[buf.data] = (new, size)
        return ir.Allocate(new, self.visit(node.body))

    def _shift(self, buf: ir.Buffer, index: ir.PrimExpr) -> tuple[ir.Buffer, ir.PrimExpr]:
        hit = self.split.get(buf.data)
        if hit is None:
            return buf, index
        new, size = hit
        return new, index + self.var * size if ir.lanes_of(index.dtype) == 1 else \
            index + ir.Broadcast(self.var * size, ir.lanes_of(index.dtype))

    def visit_BufferLoad(self, node: ir.BufferLoad) -> ir.PrimExpr:
        indices = tuple(self.visit(i) for i in node.indices)
        buf, idx = self._shift(node.buffer, indices[0])
        return ir.BufferLoad(buf, (idx,) + indices[1:])

    def visit_BufferStore(self, node: ir.BufferStore) -> ir.Stmt:
        indices = tuple(self.visit(i) for i in node.indices)
        buf, idx = self._shift(node.buffer, indices[0])
        return ir.BufferStore(buf, self.visit(node.value), (idx,) + indices[1:])

    def visit_AllReduce(self, node: ir.AllReduce) -> ir.Stmt:
        indices = tuple(self.visit(i) for i in node.indices)
        buf, idx = self._shift(node.buffer, indices[0])
        return ir.AllReduce(node.combiner, self.visit(node.value), self.visit(node.condition), buf,
                            (idx,) + indices[1:], node.thread, node.thread_tag)

    def visit_Call(self, node: ir.Call) -> ir.PrimExpr:
        node = self.generic_visit(node)
        if node.op == "tvm_access_ptr" and node.args[1] in self.split:
            _, size = self.split[node.args[1]]
            args = list(node.args)
            args[2] = args[2] + self.var * size
            return ir.Call(node.dtype, node.op, tuple(args))
        return node


class _Injector:
    def __init__(self, loop: ir.For, touched: set[ir.Var], allow_share: bool) -> None:
        self.var, self.n = loop.loop_var, loop.extent.value
        self.loop = loop
        self.touched, self.allow_share = touched, allow_share

    def dep(self, e: Any) -> bool:
        return ir.uses_var(e, self.touched)

    def needs(self, s: ir.Stmt) -> bool:
        if self.dep(s):
            return True
        return not self.allow_share and ir.contains(s, (ir.BufferStore, ir.AllReduce, ir.Evaluate))

    def replicate(self, s: ir.Stmt) -> ir.Stmt:
        if not ir.contains(s, ir.For) and self.n < 16:
            return ir.seq(*[ir.substitute(s, {self.var: ir.IntImm(self.var.dtype, i)}) for i in range(self.n)])
        return ir.For(self.var, ir.IntImm("int32", 0), ir.IntImm("int32", self.n), ir.ForKind.SERIAL, s)

    def inject(self, s: ir.Stmt) -> ir.Stmt:
        if not self.needs(s):
            return s
        if isinstance(s, ir.SeqStmt):
            return ir.seq(*[self.inject(c) for c in s.stmts])
        if isinstance(s, ir.For):
            if self.dep(s.min) or self.dep(s.extent) or s.loop_var in self.touched:
                return self.replicate(s)
            return ir.For(s.loop_var, s.min, s.extent, s.kind, self.inject(s.body), s.thread_tag, s.annotations)
        if isinstance(s, ir.AttrStmt):
            value_dep = self.dep(s.value) if isinstance(s.value, ir.PrimExpr) else False
            if value_dep or (not self.allow_share and s.key in _COPROC_KEYS):
                return self.replicate(s)
            return ir.AttrStmt(s.node, s.key, s.value, self.inject(s.body))
        if isinstance(s, ir.Allocate):
            return ir.Allocate(s.buffer, self.inject(s.body))
        if isinstance(s, ir.IfThenElse):
            if self.dep(s.cond):
                return self.replicate(s)
            return ir.IfThenElse(s.cond, self.inject(s.then_case),
                                 self.inject(s.else_case) if s.else_case is not None else None)
        if isinstance(s, ir.LetStmt):
            if self.dep(s.value):
                return self.replicate(s)
            return ir.LetStmt(s.var, s.value, self.inject(s.body))
        return self.replicate(s)


class _VirtualThreadPass(ir.IRMutator):
    def visit_For(self, node: ir.For) -> ir.Stmt:
        node = self.generic_visit(node)
        if not _is_virtual(node):
            return node
        if not isinstance(node.extent, ir.IntImm):
            raise CompileError(f"virtual thread {node.thread_tag} ({node.loop_var.name}) needs a constant "
                               f"extent, got {node.extent}")
        allow_share = node.thread_tag.startswith("vthread")
        touched = _touched(node.body, node.loop_var)
        splitter = _BufferSplitter(node.loop_var, node.extent.value, allow_share, touched)
        body = splitter.visit(node.body)
        touched |= set(splitter.split)
        return _Injector(node, touched, allow_share).inject(body)


def inject_virtual_thread(func: ir.PrimFunc) -> ir.PrimFunc:
    """The InjectVirtualThread pass (runs on flattened IR)."""
    return ir.PrimFunc(func.name, func.params, _VirtualThreadPass().visit(func.body), dict(func.attrs))
