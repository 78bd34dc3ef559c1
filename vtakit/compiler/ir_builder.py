"""An imperative builder for loop-IR statements (TVM's ``tir.ir_builder``).

Tensor-intrinsic bodies and hand-written passes build statements with it::

    ib = IRBuilder()
    with ib.for_range(0, 4, name="i") as i:
        with ib.if_scope(i > 0):
            ib.emit(te.call_intrin("int32", "foo", i))
    ib.scope_attr(vta, "coproc_scope", 2)   # wraps every statement emitted after it, in this scope
    ib.emit(...)
    stmt = ib.get()

As in TVM, ``scope_attr``, ``allocate`` and ``let`` wrap the statements that follow them in the
current scope.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from vtakit.compiler import ir
from vtakit.errors import CompileError

__all__ = ["IRBuilder", "create"]

_NOP = ir.Evaluate(ir.IntImm("int32", 0))
_KINDS = {"serial": ir.ForKind.SERIAL, "parallel": ir.ForKind.PARALLEL, "vectorize": ir.ForKind.VECTORIZED,
          "unroll": ir.ForKind.UNROLLED}


class _Wrap:
    """A marker: wrap the rest of the scope with ``fn``."""

    def __init__(self, fn: Callable[[ir.Stmt], ir.Stmt]) -> None:
        self.fn = fn


class IRBuilder:
    """Collects statements in nested scopes; :meth:`get` returns them as one statement."""

    def __init__(self) -> None:
        self._scopes: list[list[Any]] = [[]]

    def emit(self, stmt: ir.Stmt | ir.PrimExpr) -> None:
        if isinstance(stmt, ir.PrimExpr):
            stmt = ir.Evaluate(stmt)
        if not isinstance(stmt, ir.Stmt):
            raise CompileError(f"IRBuilder.emit expects a statement or expression, got {stmt!r}")
        self._scopes[-1].append(stmt)

    def _pop(self) -> ir.Stmt:
        items = self._scopes.pop()
        body: ir.Stmt | None = None
        for item in reversed(items):
            if isinstance(item, _Wrap):
                body = item.fn(body if body is not None else _NOP)
            else:
                body = item if body is None else ir.seq(item, body)
        return body if body is not None else _NOP

    @contextmanager
    def for_range(self, begin: Any, end: Any, name: str = "i", dtype: str = "int32",
                  kind: str = "serial") -> Iterator[ir.Var]:
        if kind not in _KINDS:
            raise CompileError(f"for_range kind must be one of {list(_KINDS)}, got {kind!r}")
        var = ir.Var(name, dtype)
        begin, end = ir.convert(begin, dtype), ir.convert(end, dtype)
        self._scopes.append([])
        yield var
        body = self._pop()
        extent = end - begin if not (isinstance(begin, ir.IntImm) and begin.value == 0) else end
        if isinstance(extent, ir.BinaryOp) and isinstance(extent.a, ir.IntImm) and isinstance(extent.b, ir.IntImm):
            extent = ir.IntImm(dtype, end.value - begin.value)
        self.emit(ir.For(var, begin, extent, _KINDS[kind], body))

    @contextmanager
    def if_scope(self, cond: Any) -> Iterator[None]:
        self._scopes.append([])
        yield
        self.emit(ir.IfThenElse(ir.convert(cond), self._pop()))

    @contextmanager
    def else_scope(self) -> Iterator[None]:
        scope = self._scopes[-1]
        if not scope or not isinstance(scope[-1], ir.IfThenElse) or scope[-1].else_case is not None:
            raise CompileError("else_scope must directly follow an if_scope")
        self._scopes.append([])
        yield
        last = scope.pop()
        scope.append(ir.IfThenElse(last.cond, last.then_case, self._pop()))

    @contextmanager
    def new_scope(self) -> Iterator[None]:
        self._scopes.append([])
        yield
        self.emit(self._pop())

    def scope_attr(self, node: Any, key: str, value: Any) -> None:
        value = ir.convert(value) if isinstance(value, (int, float)) else value
        self._scopes[-1].append(_Wrap(lambda body: ir.AttrStmt(node, key, value, body)))

    def allocate(self, dtype: str, shape: Any, name: str = "buf", scope: str = "global") -> ir.Buffer:
        shape = tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)
        buf = ir.Buffer(name, shape, dtype, scope)
        self._scopes[-1].append(_Wrap(lambda body: ir.Allocate(buf, body)))
        return buf

    def let(self, name: str, value: Any) -> ir.Var:
        value = ir.convert(value)
        var = ir.Var(name, value.dtype)
        self._scopes[-1].append(_Wrap(lambda body: ir.LetStmt(var, value, body)))
        return var

    def get(self) -> ir.Stmt:
        if len(self._scopes) != 1:
            raise CompileError("IRBuilder.get inside an open scope")
        stmt = self._pop()
        self._scopes = [[]]
        return stmt


def create() -> IRBuilder:
    """A new builder (TVM's ``tir.ir_builder.create()``)."""
    return IRBuilder()
