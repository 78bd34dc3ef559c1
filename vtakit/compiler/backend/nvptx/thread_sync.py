"""ThreadSync("shared"): barriers where threads of a block hand shared memory to each other.

TVM's ThreadSync pass, for the kernels of a :class:`DeviceProgram`. Walking a kernel in program
order, it keeps the shared-memory accesses made since the last barrier; a statement that reads
what one of them wrote, or writes what one of them touched, gets a barrier
(``tvm_storage_sync("shared")``) in front of it. Two accesses do not conflict when they index the
same buffer with the same expression and that expression depends on a thread index (each thread
then touches its own element), as in TVM. A loop body is walked again with the accesses left
over from its end until nothing changes, so a loop that writes what the previous iteration read
(the next tile of a GEMM over the one just used) gets a barrier at the start of its body.

A barrier must be reached by every thread of the block, so none is placed where threads may
diverge: inside a condition or a loop whose bounds depend on a thread index (or on loaded data).
Such a statement is treated as one access of everything it touches, and a barrier goes in front
of it when needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vtakit.compiler import ir
from vtakit.compiler.arith import structural_key
from vtakit.compiler.backend.nvptx.program import DeviceKernel, barrier, is_barrier

__all__ = ["thread_sync", "is_divergent"]

_Pending = frozenset  # of _Access


@dataclass(frozen=True)
class _Access:
    data: ir.Var
    write: bool
    index: Any  # the structural key of the indices (None: anywhere in the buffer)
    per_thread: bool  # the index depends on a thread index

    def conflicts(self, other: "_Access") -> bool:
        if self.data is not other.data or not (self.write or other.write):
            return False
        same = self.index is not None and self.index == other.index
        return not (same and self.per_thread and other.per_thread)


def thread_sync(kernel: DeviceKernel) -> DeviceKernel:
    """``kernel`` with the barriers its shared-memory accesses need."""
    shared: set[ir.Var] = set()
    ir.walk(kernel.body, lambda n: isinstance(n, ir.Allocate) and n.buffer.scope == "shared"
            and shared.add(n.buffer.data))
    if not shared:
        return kernel
    threads = {v for tag, v in kernel.thread_vars.items() if tag.startswith("threadIdx.")}
    body, _ = _Sync(shared, threads).stmt(kernel.body, _Pending())
    return DeviceKernel(kernel.name, kernel.params, body, kernel.thread_vars, kernel.grid, kernel.block,
                        kernel.shared_bytes)


def is_divergent(e: ir.PrimExpr, divergent_vars: set[ir.Var]) -> bool:
    """Whether ``e`` may differ between the threads of a block: it uses a variable of
    ``divergent_vars`` (thread indices and what is derived from them) or reads memory."""
    return ir.uses_var(e, divergent_vars) or ir.contains(e, ir.BufferLoad)


class _Sync:
    def __init__(self, shared: set[ir.Var], threads: set[ir.Var]) -> None:
        self.shared = shared
        self.threads = threads
        self.divergent = set(threads)  # variables that may differ between the threads of a block

    # ------------------------------------------------------------ accesses
    def accesses(self, node: Any) -> _Pending:
        out: set[_Access] = set()

        def visit(n: Any) -> None:
            if isinstance(n, (ir.BufferLoad, ir.BufferStore)) and n.buffer.data in self.shared:
                out.add(_Access(n.buffer.data, isinstance(n, ir.BufferStore), structural_key(n.indices),
                                any(ir.uses_var(i, self.threads) for i in n.indices)))
            elif isinstance(n, ir.Call) and n.op == "tvm_access_ptr" and n.args[1] in self.shared:
                out.update(_Access(n.args[1], w, None, False) for w in (False, True))
        for root in node if isinstance(node, tuple) else (node,):
            ir.walk(root, visit)
        return _Pending(out)

    @staticmethod
    def _conflict(pending: _Pending, new: _Pending) -> bool:
        return any(p.conflicts(n) for p in pending for n in new)

    def _guarded(self, stmt: ir.Stmt, new: _Pending, pending: _Pending) -> tuple[ir.Stmt, _Pending]:
        """``stmt`` making accesses ``new``: a barrier in front of it if they conflict with ``pending``."""
        if self._conflict(pending, new):
            return ir.seq(barrier(), stmt), new
        return stmt, pending | new

    # ------------------------------------------------------------ statements
    def stmt(self, s: ir.Stmt, pending: _Pending) -> tuple[ir.Stmt, _Pending]:
        if is_barrier(s):
            return s, _Pending()
        method = getattr(self, f"_{type(s).__name__}", None)
        if method is None:
            return self._guarded(s, self.accesses(s), pending)
        return method(s, pending)

    def _SeqStmt(self, s: ir.SeqStmt, pending: _Pending) -> tuple[ir.Stmt, _Pending]:
        out = []
        for child in s.stmts:
            child, pending = self.stmt(child, pending)
            out.append(child)
        return ir.seq(*out), pending

    def _Allocate(self, s: ir.Allocate, pending: _Pending) -> tuple[ir.Stmt, _Pending]:
        body, pending = self.stmt(s.body, pending)
        return ir.Allocate(s.buffer, body), pending

    def _AttrStmt(self, s: ir.AttrStmt, pending: _Pending) -> tuple[ir.Stmt, _Pending]:
        body, pending = self.stmt(s.body, pending)
        return ir.AttrStmt(s.node, s.key, s.value, body), pending

    def _with_header(self, s: ir.Stmt, header: tuple[ir.PrimExpr, ...], pending: _Pending,
                     rebuild: Any) -> tuple[ir.Stmt, _Pending]:
        """A statement evaluating ``header`` expressions before its body(ies); ``rebuild(pending)``
        walks the body(ies) and returns the new statement and what is pending after it."""
        front = self._conflict(pending, self.accesses(s))  # one barrier in front, not one per iteration
        pending = self.accesses(header) | (_Pending() if front else pending)
        stmt, pending = rebuild(pending)
        return (ir.seq(barrier(), stmt) if front else stmt), pending

    def _LetStmt(self, s: ir.LetStmt, pending: _Pending) -> tuple[ir.Stmt, _Pending]:
        if is_divergent(s.value, self.divergent):
            self.divergent.add(s.var)

        def rebuild(p: _Pending) -> tuple[ir.Stmt, _Pending]:
            body, p = self.stmt(s.body, p)
            return ir.LetStmt(s.var, s.value, body), p
        return self._with_header(s, (s.value,), pending, rebuild)

    def _IfThenElse(self, s: ir.IfThenElse, pending: _Pending) -> tuple[ir.Stmt, _Pending]:
        if is_divergent(s.cond, self.divergent):
            return self._guarded(s, self.accesses(s), pending)

        def rebuild(p: _Pending) -> tuple[ir.Stmt, _Pending]:
            then, after = self.stmt(s.then_case, p)
            if s.else_case is None:
                return ir.IfThenElse(s.cond, then), after | p
            other, after_else = self.stmt(s.else_case, p)
            return ir.IfThenElse(s.cond, then, other), after | after_else
        return self._with_header(s, (s.cond,), pending, rebuild)

    def _For(self, s: ir.For, pending: _Pending) -> tuple[ir.Stmt, _Pending]:
        if is_divergent(s.min, self.divergent) or is_divergent(s.extent, self.divergent):
            self.divergent.add(s.loop_var)
            return self._guarded(s, self.accesses(s), pending)

        def rebuild(entry: _Pending) -> tuple[ir.Stmt, _Pending]:
            while True:  # the accesses pending at the end of an iteration flow into the next one
                body, out = self.stmt(s.body, entry)
                if out <= entry:
                    break
                entry = entry | out
            return ir.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, dict(s.annotations)), entry
        stmt, after = self._with_header(s, (s.min, s.extent), pending, rebuild)
        return _without_front_barrier(stmt), after


def _first(stmt: ir.Stmt) -> ir.Stmt:
    while isinstance(stmt, (ir.SeqStmt, ir.Allocate, ir.AttrStmt)):
        stmt = stmt.stmts[0] if isinstance(stmt, ir.SeqStmt) else stmt.body
    return stmt


def _without_front_barrier(stmt: ir.Stmt) -> ir.Stmt:
    """``barrier; for ...: barrier; ...`` without the first barrier when the loop runs at least once
    (a software-pipelined loop, whose body starts with the barrier its back edge needs)."""
    if not (isinstance(stmt, ir.SeqStmt) and len(stmt.stmts) == 2 and is_barrier(stmt.stmts[0])):
        return stmt
    loop = stmt.stmts[1]
    runs = isinstance(loop.extent, ir.IntImm) and loop.extent.value >= 1 and not ir.contains(loop.extent, ir.BufferLoad) \
        and not ir.contains(loop.min, ir.BufferLoad)
    return loop if runs and is_barrier(_first(loop.body)) else stmt
