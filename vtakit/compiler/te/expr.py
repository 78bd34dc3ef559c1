"""Tensor-expression building blocks: iteration variables, reducers and intrinsic helpers.

These mirror TVM's ``te`` functions (``te.var``, ``te.reduce_axis``, ``te.sum``, ``te.exp``,
``te.if_then_else``, ...) and produce nodes of the shared loop IR (:mod:`vtakit.compiler.ir`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from vtakit.compiler import ir
from vtakit.errors import CompileError

__all__ = [
    "Range", "IterVar", "var", "size_var", "const", "reduce_axis", "thread_axis",
    "CommReducer", "Reducer", "comm_reducer", "sum", "max", "min",
    "if_then_else", "all", "any", "max_value", "min_value",
    "floordiv", "floormod", "truncdiv", "truncmod", "call_intrin",
    "exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "floor", "ceil",
    "round", "trunc", "sin", "cos", "erf", "power", "pow",
]

_builtin_max, _builtin_min, _builtin_sum = max, min, sum


@dataclass(eq=False)
class Range:
    """The half-open interval ``[min, min + extent)``."""

    min: ir.PrimExpr
    extent: ir.PrimExpr

    def __post_init__(self) -> None:
        self.min, self.extent = ir.convert(self.min), ir.convert(self.extent)

    @staticmethod
    def make(value: Any) -> "Range":
        """A Range from ``Range``, ``n`` (meaning ``[0, n)``) or ``(lo, hi)``."""
        if isinstance(value, Range):
            return value
        if isinstance(value, (tuple, list)):
            if len(value) != 2:
                raise CompileError(f"a range is (begin, end), got {value!r}")
            lo, hi = ir.convert(value[0]), ir.convert(value[1])
            return Range(lo, _fold(hi - lo))
        return Range(0, value)


def _fold(e: ir.PrimExpr) -> ir.PrimExpr:
    from vtakit.compiler.arith import simplify  # noqa: PLC0415

    return simplify(e)


_ITER_TYPES = ("data_par", "comm_reduce", "thread", "opaque")


class IterVar:
    """An iteration variable: a loop axis of a stage, a reduction axis or a thread axis.

    Used in expressions it stands for its variable ``var``.
    """

    __hash__ = object.__hash__

    def __init__(self, dom: Range | None, var: ir.Var, iter_type: str = "data_par", thread_tag: str = "") -> None:
        assert iter_type in _ITER_TYPES, iter_type
        self.dom = dom
        self.var = var
        self.iter_type = iter_type
        self.thread_tag = thread_tag

    @property
    def name(self) -> str:
        return self.var.name

    def as_expr(self) -> ir.Var:
        return self.var

    def __repr__(self) -> str:
        dom = f"[{self.dom.min}, {self.dom.extent})" if self.dom is not None else "?"
        tag = f", {self.thread_tag!r}" if self.thread_tag else ""
        return f"IterVar({self.var.name}, {dom}, {self.iter_type}{tag})"

    __str__ = __repr__


def _delegate(name: str) -> Callable:
    def method(self: IterVar, *args: Any) -> Any:
        return getattr(self.var, name)(*args)

    method.__name__ = name
    return method


def _compare(kind: type) -> Callable:
    def method(self: IterVar, other: Any) -> Any:
        other = other.var if isinstance(other, IterVar) else other
        try:
            return kind.make(self.var, other)
        except CompileError:  # not an expression (None, a string, ...): plain inequality
            return kind is ir.NE

    return method


IterVar.__eq__ = _compare(ir.EQ)  # type: ignore[method-assign,assignment]
IterVar.__ne__ = _compare(ir.NE)  # type: ignore[method-assign,assignment]

for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__neg__",
              "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__rand__", "__or__", "__ror__", "__xor__",
              "__rxor__", "__invert__", "__lshift__", "__rlshift__", "__rshift__", "__rrshift__", "astype"):
    setattr(IterVar, _name, _delegate(_name))


_counter = itertools.count()


def var(name: str = "v", dtype: str = "int32") -> ir.Var:
    """A free scalar variable."""
    return ir.Var(name, dtype)


size_var = var


def const(value: Any, dtype: str | None = None) -> ir.PrimExpr:
    """A constant; ints default to int32, floats to float32."""
    return ir.const(value, dtype)


def reduce_axis(dom: Any, name: str = "rv") -> IterVar:
    """A reduction axis over ``dom``: ``(lo, hi)`` or an extent."""
    return IterVar(Range.make(dom), ir.Var(name), "comm_reduce")


def thread_axis(dom: Any = None, tag: str = "", name: str = "") -> IterVar:
    """A thread axis: ``te.thread_axis("threadIdx.x")``, ``te.thread_axis("vthread")``,
    ``te.thread_axis((0, 2), "cthread")``."""
    if isinstance(dom, str):
        dom, tag = None, dom
    if not tag:
        raise CompileError("thread_axis needs a tag such as 'threadIdx.x', 'blockIdx.x', 'vthread' or 'cthread'")
    name = name or tag
    return IterVar(Range.make(dom) if dom is not None else None, ir.Var(name), "thread", tag)


# ---------------------------------------------------------------------------- reductions
@dataclass(eq=False)
class CommReducer:
    """A commutative reducer instantiated for one dtype: ``result(lhs, rhs)`` and its identity."""

    name: str
    lhs: ir.Var
    rhs: ir.Var
    result: ir.PrimExpr
    identity_element: ir.PrimExpr

    def combine(self, lhs: ir.PrimExpr, rhs: ir.PrimExpr) -> ir.PrimExpr:
        return ir.substitute(self.result, {self.lhs: lhs, self.rhs: rhs})


@dataclass(eq=False)
class Reducer:
    """What ``te.comm_reducer`` returns: call it as ``r(expr, axis=..., where=..., init=...)``."""

    fcombine: Callable[[ir.PrimExpr, ir.PrimExpr], ir.PrimExpr]
    fidentity: Callable[[str], Any]
    name: str = "reduce"
    _cache: dict[str, CommReducer] = field(default_factory=dict)

    def instantiate(self, dtype: str) -> CommReducer:
        if dtype not in self._cache:
            lhs, rhs = ir.Var("x", dtype), ir.Var("y", dtype)
            result = ir.convert(self.fcombine(lhs, rhs))
            if result.dtype != dtype:
                raise CompileError(f"reducer {self.name!r} combines {dtype} into {result.dtype}; "
                                   "the combiner must keep the dtype")
            self._cache[dtype] = CommReducer(self.name, lhs, rhs, result, ir.convert(self.fidentity(dtype), dtype))
        return self._cache[dtype]

    def __call__(self, expr: Any, axis: Any, where: Any = None, init: Any = None) -> ir.PrimExpr:
        """A reduction over ``axis``; with two expressions (``te.max(a, b)``) the combination itself."""
        if not isinstance(axis, (IterVar, list, tuple)):
            a, b = ir._unify(expr, axis)
            return ir.convert(self.fcombine(a, b))
        expr = ir.convert(expr)
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if not isinstance(a, IterVar) or a.iter_type != "comm_reduce":
                raise CompileError(f"{self.name}: axis {a!r} is not a reduction axis; make one with te.reduce_axis")
        if _contains_reduce(expr):
            raise CompileError(f"{self.name}: nested reductions are not supported; reduce in a separate te.compute")
        cond = ir.convert(where) if where is not None else ir.IntImm("bool", 1)
        return ir.Reduce(self.instantiate(expr.dtype), expr, axes, cond,
                         ir.convert(init, expr.dtype) if init is not None else None)


def _contains_reduce(e: Any) -> bool:
    return ir.contains(e, ir.Reduce)


def comm_reducer(fcombine: Callable, fidentity: Callable[[str], Any], name: str = "reduce") -> Reducer:
    """A commutative reducer from a combiner ``f(x, y)`` and an identity ``f(dtype)``."""
    return Reducer(fcombine, fidentity, name)


def max_value(dtype: str) -> ir.PrimExpr:
    """The largest value of ``dtype`` (the identity of ``te.min``)."""
    base = ir.element_of(dtype)
    if ir.is_float(base):
        return ir.FloatImm(base, float(np.finfo(base).max))
    return ir.IntImm(base, int(np.iinfo(base).max))


def min_value(dtype: str) -> ir.PrimExpr:
    """The smallest value of ``dtype`` (the identity of ``te.max``)."""
    base = ir.element_of(dtype)
    if ir.is_float(base):
        return ir.FloatImm(base, float(np.finfo(base).min))
    return ir.IntImm(base, int(np.iinfo(base).min))


sum = comm_reducer(lambda x, y: x + y, lambda t: ir.const(0, t), name="sum")  # noqa: A001
max = comm_reducer(lambda x, y: ir.Max.make(x, y), min_value, name="max")  # noqa: A001
min = comm_reducer(lambda x, y: ir.Min.make(x, y), max_value, name="min")  # noqa: A001


# ---------------------------------------------------------------------------- helpers
def if_then_else(cond: Any, t: Any, f: Any) -> ir.PrimExpr:
    """``t`` if ``cond`` else ``f``, evaluating only the taken branch (safe for padding loads)."""
    cond = ir.convert(cond)
    t, f = ir._unify(t, f) if isinstance(t, ir.PrimExpr) or isinstance(f, ir.PrimExpr) else (ir.convert(t), ir.convert(f))
    return ir.Call(t.dtype, "if_then_else", (cond, t, f))


def all(*conds: Any) -> ir.PrimExpr:  # noqa: A001
    """The logical and of the conditions (given as arguments or one list)."""
    return _chain(conds, ir.And)


def any(*conds: Any) -> ir.PrimExpr:  # noqa: A001
    """The logical or of the conditions (given as arguments or one list)."""
    return _chain(conds, ir.Or)


def _chain(conds: tuple, node: type) -> ir.PrimExpr:
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = tuple(conds[0])
    if not conds:
        raise CompileError("te.all / te.any need at least one condition")
    out = ir.convert(conds[0])
    for c in conds[1:]:
        out = node.make(out, c)
    return out


def floordiv(a: Any, b: Any) -> ir.PrimExpr:
    """Division rounding towards minus infinity (Python's ``//``)."""
    return ir.FloorDiv.make(a, b)


def floormod(a: Any, b: Any) -> ir.PrimExpr:
    """The remainder of :func:`floordiv` (sign of ``b``, Python's ``%``)."""
    return ir.FloorMod.make(a, b)


def truncdiv(a: Any, b: Any) -> ir.PrimExpr:
    """Division rounding towards zero (C's ``/``)."""
    return ir.Div.make(a, b)


def truncmod(a: Any, b: Any) -> ir.PrimExpr:
    """The remainder of :func:`truncdiv` (sign of ``a``, C's ``%``)."""
    return ir.Mod.make(a, b)


def call_intrin(dtype: str, op: str, *args: Any) -> ir.Call:
    """A call of a (target) intrinsic, e.g. an accelerator command."""
    return ir.Call.make(dtype, op, args)


def _unary(op: str, float_only: bool = True) -> Callable[[Any], ir.PrimExpr]:
    def fn(x: Any) -> ir.PrimExpr:
        x = ir.convert(x)
        if float_only and not ir.is_float(x.dtype):
            raise CompileError(f"te.{op} needs a float argument, got {x} of dtype {x.dtype}; cast it with .astype")
        return ir.Call(x.dtype, op, (x,))

    fn.__name__ = op
    fn.__doc__ = f"The intrinsic ``{op}(x)``."
    return fn


exp, exp2, log, log2, log10 = (_unary(n) for n in ("exp", "exp2", "log", "log2", "log10"))
sqrt, rsqrt, tanh, sigmoid = (_unary(n) for n in ("sqrt", "rsqrt", "tanh", "sigmoid"))
floor, ceil, round, trunc = (_unary(n) for n in ("floor", "ceil", "round", "trunc"))  # noqa: A001
sin, cos, erf = (_unary(n) for n in ("sin", "cos", "erf"))
abs = _unary("abs", float_only=False)  # noqa: A001


def power(x: Any, y: Any) -> ir.PrimExpr:
    """``x ** y`` on floats."""
    x, y = ir._unify(x, y)
    if not ir.is_float(x.dtype):
        raise CompileError(f"te.power needs float arguments, got {x.dtype}")
    return ir.Call(x.dtype, "pow", (x, y))


pow = power  # noqa: A001
