"""Storage flattening: N-d buffer accesses become 1-D accesses at element offsets.

Every access ``B[i, j]`` becomes ``F[elem_offset + i*stride0 + j*stride1]`` where ``F`` is the one
1-D buffer per storage (keyed by the ``data`` variable, which parameters, allocations and views
such as tensorize-bound intrinsic buffers share). Parameters keep their N-d buffers in
``PrimFunc.params``; the body refers to their flat twins.
"""

from __future__ import annotations

from vtakit.compiler import ir

__all__ = ["flatten_storage", "flat_index", "buffer_strides", "buffer_size"]


def buffer_strides(buf: ir.Buffer) -> tuple[ir.PrimExpr, ...]:
    """Explicit strides, or row-major strides from the shape."""
    if buf.strides:
        return buf.strides
    strides: list[ir.PrimExpr] = []
    acc: ir.PrimExpr = ir.IntImm("int32", 1)
    for extent in reversed(buf.shape):
        strides.append(acc)
        acc = _mul(acc, extent)
    return tuple(reversed(strides))


def buffer_size(buf: ir.Buffer) -> ir.PrimExpr:
    """Elements of storage the buffer spans (with explicit strides: outermost stride x extent)."""
    if buf.strides and buf.shape:
        return _mul(buf.strides[0], buf.shape[0])
    size: ir.PrimExpr = ir.IntImm("int32", 1)
    for extent in buf.shape:
        size = _mul(size, extent)
    return size


def _mul(a: ir.PrimExpr, b: ir.PrimExpr) -> ir.PrimExpr:
    if isinstance(a, ir.IntImm) and isinstance(b, ir.IntImm):
        return ir.IntImm("int32", a.value * b.value)
    if isinstance(a, ir.IntImm) and a.value == 1:
        return b
    return a * b


def flat_index(buf: ir.Buffer, indices: tuple[ir.PrimExpr, ...]) -> ir.PrimExpr:
    """The 1-D element index of ``buf[indices]`` in its storage (elem_offset included)."""
    index: ir.PrimExpr = buf.elem_offset
    for i, s in zip(indices, buffer_strides(buf)):
        term = i if isinstance(s, ir.IntImm) and s.value == 1 else i * s
        index = term if isinstance(index, ir.IntImm) and index.value == 0 else index + term
    return index


class _Flattener(ir.IRMutator):
    def __init__(self, params: tuple[ir.Buffer, ...]) -> None:
        self.flat: dict[ir.Var, ir.Buffer] = {}
        for p in params:
            self._flat_of(p)

    def _flat_of(self, buf: ir.Buffer) -> ir.Buffer:
        f = self.flat.get(buf.data)
        if f is None:
            f = ir.Buffer(buf.name, (buffer_size(buf),), buf.dtype, buf.scope, data=buf.data)
            self.flat[buf.data] = f
        return f

    def _index(self, buf: ir.Buffer, indices: tuple[ir.PrimExpr, ...]) -> tuple[ir.PrimExpr, ...]:
        if buf is self.flat.get(buf.data):
            return indices  # already flat
        return (flat_index(buf, indices),)

    def visit_Allocate(self, node: ir.Allocate) -> ir.Stmt:
        flat = self._flat_of(node.buffer)
        return ir.Allocate(flat, self.visit(node.body))

    def visit_BufferLoad(self, node: ir.BufferLoad) -> ir.PrimExpr:
        indices = tuple(self.visit(i) for i in node.indices)
        return ir.BufferLoad(self._flat_of(node.buffer), self._index(node.buffer, indices))

    def visit_BufferStore(self, node: ir.BufferStore) -> ir.Stmt:
        indices = tuple(self.visit(i) for i in node.indices)
        return ir.BufferStore(self._flat_of(node.buffer), self.visit(node.value), self._index(node.buffer, indices))

    def visit_AllReduce(self, node: ir.AllReduce) -> ir.Stmt:
        indices = tuple(self.visit(i) for i in node.indices)
        return ir.AllReduce(node.combiner, self.visit(node.value), self.visit(node.condition),
                            self._flat_of(node.buffer), self._index(node.buffer, indices), node.thread,
                            node.thread_tag)


def flatten_storage(func: ir.PrimFunc) -> ir.PrimFunc:
    """The pass: see the module docstring."""
    body = _Flattener(func.params).visit(func.body)
    return ir.PrimFunc(func.name, func.params, body, dict(func.attrs))
