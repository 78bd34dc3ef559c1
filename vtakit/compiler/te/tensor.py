"""Tensors and the operations that produce them: ``te.placeholder`` and ``te.compute``."""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable

from vtakit.compiler import ir
from vtakit.compiler.te.expr import IterVar, Range, _contains_reduce
from vtakit.errors import CompileError

_DTYPE = re.compile(r"(bool|u?int(8|16|32|64)|float(16|32|64))(x[0-9]+)?")

__all__ = ["Tensor", "Operation", "PlaceholderOp", "ComputeOp", "placeholder", "compute", "input_tensors"]


def _shape(shape: Any, what: str) -> tuple:
    shape = tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)
    out = []
    for s in shape:
        e = ir.convert(s)
        if not ir.is_int(e.dtype):
            raise CompileError(f"{what}: shape entries must be integers, got {s!r}")
        if isinstance(e, ir.IntImm):
            if e.value < 0:
                raise CompileError(f"{what}: shape entries must be non-negative, got {s!r}")
            out.append(e.value)
        else:
            out.append(e)
    return tuple(out)


class Tensor:
    """The output of an operation; index it (``A[i, j]``) inside ``te.compute``."""

    __hash__ = object.__hash__

    def __init__(self, op: "Operation", value_index: int = 0) -> None:
        self.op = op
        self.value_index = value_index

    @property
    def shape(self) -> tuple:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices: Any) -> ir.ProducerLoad:
        indices = indices if isinstance(indices, tuple) else (indices,)
        if len(indices) != self.ndim:
            raise CompileError(f"tensor {self.name} has {self.ndim} dimensions, indexed with {len(indices)}")
        idx = tuple(ir.convert(i) for i in indices)
        for i, e in zip(indices, idx):
            if not ir.is_int(e.dtype):
                raise CompileError(f"tensor {self.name}: index {i!r} is not an integer expression")
        return ir.ProducerLoad(self, idx)

    def __call__(self, *indices: Any) -> ir.ProducerLoad:
        return self[tuple(indices)]

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={list(self.shape)}, {self.dtype})"


class Operation:
    """The producer of a tensor: a placeholder or a compute."""
    name: str
    shape: tuple
    dtype: str
    tag: str = ""
    attrs: dict

    __hash__ = object.__hash__

    def output(self, index: int = 0) -> Tensor:
        if index != 0:
            raise CompileError(f"operation {self.name} has one output, asked for output {index}")
        return self._output

    @property
    def input_tensors(self) -> list[Tensor]:
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class PlaceholderOp(Operation):
    """An input: ``te.placeholder`` makes one."""
    def __init__(self, name: str, shape: tuple, dtype: str) -> None:
        self.name, self.shape, self.dtype, self.attrs = name, shape, dtype, {}
        self._output = Tensor(self)


class ComputeOp(Operation):
    """``out[axis] = body``; ``body`` may be a top-level reduction over ``reduce_axis``."""

    def __init__(self, name: str, tag: str, attrs: dict, axis: list[IterVar], body: ir.PrimExpr) -> None:
        self.name, self.tag, self.attrs = name, tag, dict(attrs)
        self.axis = list(axis)
        self.body = body
        self.reduce_axis = list(body.axis) if isinstance(body, ir.Reduce) else []
        self.shape = tuple(iv.dom.extent.value if isinstance(iv.dom.extent, ir.IntImm) else iv.dom.extent
                           for iv in axis)
        self.dtype = body.dtype
        self._output = Tensor(self)

    @property
    def input_tensors(self) -> list[Tensor]:
        return input_tensors(self.body)


def input_tensors(expr: Any) -> list[Tensor]:
    """The tensors read by ``expr``, in order of first appearance."""
    seen: dict[int, Tensor] = {}

    def visit(n: Any) -> None:
        if isinstance(n, ir.ProducerLoad) and id(n.producer) not in seen:
            seen[id(n.producer)] = n.producer

    ir.walk(expr, visit)
    return list(seen.values())


def placeholder(shape: Any, dtype: str | None = None, name: str = "placeholder") -> Tensor:
    """An input tensor (float32 unless ``dtype`` says otherwise)."""
    dtype = "float32" if dtype is None else dtype
    if not isinstance(dtype, str) or not _DTYPE.fullmatch(dtype):
        raise CompileError(f"placeholder {name}: dtype must be a type name such as 'float32' or 'int8', got {dtype!r}")
    return PlaceholderOp(name, _shape(shape, f"placeholder {name}"), dtype).output(0)


def compute(shape: Any, fcompute: Callable[..., Any], name: str = "compute", tag: str = "",
            attrs: dict | None = None) -> Tensor:
    """The tensor ``out[i, ...] = fcompute(i, ...)`` over ``shape``.

    ``fcompute`` returns an expression; a reduction (``te.sum`` ...) must be its top level.
    """
    shape = _shape(shape, f"compute {name}")
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        arg_names = [f"i{k}" for k in range(len(shape))]
    else:
        arg_names = [p.name for p in params]
        if len(arg_names) != len(shape):
            raise CompileError(f"compute {name}: fcompute takes {len(arg_names)} indices but the shape "
                               f"{list(shape)} has {len(shape)} dimensions")
    axis = [IterVar(Range(0, n), ir.Var(a), "data_par") for a, n in zip(arg_names, shape)]
    body = fcompute(*[iv.var for iv in axis])
    if isinstance(body, (list, tuple)):
        raise CompileError(f"compute {name}: multiple outputs are not supported; use one te.compute per output")
    body = ir.convert(body)
    if not isinstance(body, ir.Reduce) and _contains_reduce(body):
        raise CompileError(f"compute {name}: a reduction must be the top-level expression of the body, got {body}")
    return ComputeOp(name, tag, attrs or {}, axis, body).output(0)
