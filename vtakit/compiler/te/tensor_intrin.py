"""Tensor intrinsics: ``te.decl_tensor_intrin`` and ``te.decl_buffer`` (reference/tvm_compiler.md §2).

An intrinsic pairs a small compute describing *what* a hardware instruction computes with the
statements that *do* it (``body``, and for reductions split across loops ``reduce_reset`` and
``reduce_update``), written against declared buffers. ``Stage.tensorize`` matches a loop nest
against the description and binds the buffers to the tensor regions (lowering, see
:mod:`vtakit.compiler.lower.tensorize`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from vtakit.compiler import ir
from vtakit.compiler.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor
from vtakit.errors import CompileError

__all__ = ["decl_buffer", "TensorIntrin", "decl_tensor_intrin"]


def decl_buffer(shape: Any, dtype: str = "float32", name: str = "buffer", data: ir.Var | None = None,
                strides: Sequence[Any] | None = None, elem_offset: Any = None, scope: str = "",
                data_alignment: int = -1, offset_factor: int = 0) -> ir.Buffer:
    """A buffer declaration; with ``offset_factor`` > 0 its element offset is a variable bound at
    tensorize time and required to be a multiple of the factor."""
    shape = tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)
    if not isinstance(offset_factor, int) or offset_factor < 0:
        raise CompileError(f"decl_buffer {name}: offset_factor must be a non-negative int, got {offset_factor!r}")
    if strides is not None and len(strides) != len(shape):
        raise CompileError(f"decl_buffer {name}: {len(strides)} strides for {len(shape)} dimensions")
    if elem_offset is None and offset_factor:
        elem_offset = ir.Var(f"{name}_elem_offset")
    return ir.Buffer(name, shape, dtype, scope or "global", data=data if data is not None else ir.Var(name, "handle"),
                     strides=tuple(strides or ()), elem_offset=ir.convert(elem_offset) if elem_offset is not None
                     else None, offset_factor=max(offset_factor, 1))


@dataclass(eq=False)
class TensorIntrin:
    """What ``te.decl_tensor_intrin`` returns: the description, its buffers and the statements."""
    name: str
    op: ComputeOp
    inputs: list[Tensor]
    buffers: list[ir.Buffer]          # one per input, then the output
    body: ir.Stmt | None
    reduce_reset: ir.Stmt | None
    reduce_update: ir.Stmt | None

    def __repr__(self) -> str:
        return f"TensorIntrin({self.name})"


def _as_stmt(x: Any) -> ir.Stmt | None:
    if x is None:
        return None
    if isinstance(x, ir.Stmt):
        return x
    if isinstance(x, ir.PrimExpr):
        return ir.Evaluate(x)
    raise CompileError(f"a tensor intrinsic's fcompute must return statements or expressions, got {x!r}")


def decl_tensor_intrin(op: Operation | Tensor, fcompute: Callable[[list[ir.Buffer], list[ir.Buffer]], Any],
                       name: str = "tensor_intrin", binds: dict[Tensor, ir.Buffer] | None = None,
                       scalar_params: Any = None, default_buffer_params: dict | None = None) -> TensorIntrin:
    """Declare an intrinsic computing ``op`` (a compute over placeholders).

    ``fcompute(ins, outs)`` gets the input and output buffers and returns the body statement or a
    triple ``(body, reduce_reset, reduce_update)`` (entries may be None).
    """
    if isinstance(op, Tensor):
        op = op.op
    if not isinstance(op, ComputeOp):
        raise CompileError(f"decl_tensor_intrin {name}: expected a te.compute operation, got {op!r}")
    if scalar_params:
        raise CompileError(f"decl_tensor_intrin {name}: scalar_params are not supported")
    inputs = op.input_tensors
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise CompileError(f"decl_tensor_intrin {name}: input {t.name} must be a te.placeholder; "
                               "composite intrinsic descriptions are not supported")
    binds = dict(binds or {})
    params = dict(default_buffer_params or {})
    buffers = []
    for t in inputs + [op.output(0)]:
        buf = binds.get(t)
        if buf is None:
            buf = decl_buffer(t.shape, t.dtype, t.name, **params)
        if tuple(_int_or_expr(s) for s in buf.shape) != tuple(_int_or_expr(s) for s in t.shape) or buf.dtype != t.dtype:
            raise CompileError(f"decl_tensor_intrin {name}: buffer {buf.name} {list(buf.shape)} {buf.dtype} does not "
                               f"fit tensor {t.name} {list(t.shape)} {t.dtype}")
        buffers.append(buf)
    result = fcompute(buffers[:-1], buffers[-1:])
    if isinstance(result, tuple):
        if len(result) != 3:
            raise CompileError(f"decl_tensor_intrin {name}: fcompute returned {len(result)} items; "
                               "expected a statement or (body, reduce_reset, reduce_update)")
        body, reset, update = (_as_stmt(x) for x in result)
    else:
        body, reset, update = _as_stmt(result), None, None
    return TensorIntrin(name, op, inputs, buffers, body, reset, update)


def _int_or_expr(x: Any) -> Any:
    return x.value if isinstance(x, ir.IntImm) else x
