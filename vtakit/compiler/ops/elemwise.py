"""Element-wise and broadcasting operators (numpy broadcasting rules) as tensor expressions."""

from __future__ import annotations

from typing import Callable, Union

from vtakit.compiler import ir
from vtakit.compiler import te
from vtakit.compiler.te.tensor import Tensor
from vtakit.errors import CompileError
from vtakit.compiler.ops.common import static_shape

__all__ = ["broadcast_shape", "binary", "add", "subtract", "multiply", "divide", "maximum", "minimum", "relu",
           "clip", "cast"]

Operand = Union[Tensor, int, float]


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The numpy broadcast of two shapes; dimensions align from the right."""
    out = []
    for k in range(1, max(len(a), len(b)) + 1):
        x = a[-k] if k <= len(a) else 1
        y = b[-k] if k <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise CompileError(f"shapes {a} and {b} do not broadcast (dimension -{k}: {x} vs {y})")
        out.append(max(x, y))
    return tuple(reversed(out))


def _read(t: Operand, out_rank: int, idx: tuple) -> ir.PrimExpr:
    if not isinstance(t, Tensor):
        return t  # a Python scalar: the expression operator gives it the other side's dtype
    shape = static_shape(t)
    lead = out_rank - len(shape)
    return t[tuple(0 if s == 1 else i for s, i in zip(shape, idx[lead:]))]


def binary(a: Operand, b: Operand, fn: Callable[[ir.PrimExpr, ir.PrimExpr], ir.PrimExpr], name: str) -> Tensor:
    """``fn`` applied element-wise with broadcasting; either side may be a Python scalar."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise CompileError(f"{name}: at least one operand must be a tensor, got {a!r} and {b!r}")
    shape = broadcast_shape(static_shape(a) if isinstance(a, Tensor) else (), static_shape(b) if isinstance(b, Tensor) else ())
    return te.compute(shape, lambda *i: fn(_read(a, len(shape), i), _read(b, len(shape), i)), name=name,
                      tag="broadcast")


def add(a: Operand, b: Operand) -> Tensor:
    return binary(a, b, lambda x, y: x + y, "add")


def subtract(a: Operand, b: Operand) -> Tensor:
    return binary(a, b, lambda x, y: x - y, "subtract")


def multiply(a: Operand, b: Operand) -> Tensor:
    return binary(a, b, lambda x, y: x * y, "multiply")


def divide(a: Operand, b: Operand) -> Tensor:
    """True division for floats, floor division for integers (numpy's ``//``)."""
    def div(x, y):
        return x / y if ir.is_float(x.dtype if isinstance(x, ir.PrimExpr) else y.dtype) else te.floordiv(x, y)
    return binary(a, b, div, "divide")


def maximum(a: Operand, b: Operand) -> Tensor:
    return binary(a, b, lambda x, y: te.max(x, y), "maximum")


def minimum(a: Operand, b: Operand) -> Tensor:
    return binary(a, b, lambda x, y: te.min(x, y), "minimum")


def relu(x: Tensor) -> Tensor:
    return te.compute(static_shape(x), lambda *i: te.max(x[i], ir.const(0, x.dtype)), name="relu", tag="elemwise")


def clip(x: Tensor, a_min: int | float, a_max: int | float) -> Tensor:
    if a_min > a_max:
        raise CompileError(f"clip: a_min={a_min} is greater than a_max={a_max}")
    lo, hi = ir.const(a_min, x.dtype), ir.const(a_max, x.dtype)
    return te.compute(static_shape(x), lambda *i: te.min(te.max(x[i], lo), hi), name="clip", tag="elemwise")


def cast(x: Tensor, dtype: str) -> Tensor:
    return te.compute(static_shape(x), lambda *i: x[i].astype(dtype), name="cast", tag="elemwise")
