"""Element-wise math and activations as tensor expressions: unary functions, activations with
parameters, integer-aware division and power, comparisons and logical not.

The math intrinsics of the CPU backend take float32 and float64; ``float16`` tensors are computed in
float32 and rounded back, as onnxruntime does for most half-precision kernels. Binary operators
broadcast with numpy's rules (:func:`vtakit.compiler.ops.elemwise.binary`).
"""

from __future__ import annotations

from typing import Callable

from vtakit.compiler import ir
from vtakit.compiler import te
from vtakit.compiler.ops.elemwise import Operand, binary
from vtakit.compiler.ops.common import static_shape
from vtakit.compiler.te.tensor import Tensor
from vtakit.errors import CompileError

__all__ = ["select", "unary", "float_unary", "exp", "log", "sqrt", "erf", "tanh", "sigmoid", "negative", "absolute",
           "reciprocal", "leaky_relu", "elu", "selu", "hard_sigmoid", "hard_swish", "softplus", "softsign",
           "thresholded_relu", "celu", "shrink", "sign", "floor", "ceil", "sin", "cos", "is_nan", "is_inf", "convert",
           "logical_not",
           "true_divide", "modulo", "power", "prelu", "equal", "less", "greater", "less_equal", "greater_equal", "logical_and",
           "logical_or", "logical_xor"]

Expr = ir.PrimExpr


def select(cond: Expr, t: Expr, f: Expr) -> Expr:
    """``t`` if ``cond`` else ``f`` (both of one dtype), both evaluated: a vector select, for branches that
    are safe to evaluate (``te.if_then_else`` evaluates one branch, at the price of vectorisation)."""
    if t.dtype != f.dtype:
        raise CompileError(f"select: branches {t} and {f} differ in dtype ({t.dtype} vs {f.dtype})")
    return ir.Select(cond, t, f)


def unary(x: Tensor, fn: Callable[[Expr], Expr], name: str) -> Tensor:
    """``fn`` applied to every element of ``x`` (in ``x``'s dtype)."""
    return te.compute(static_shape(x), lambda *i: fn(x(*i)), name=name, tag="elemwise")


def float_unary(x: Tensor, fn: Callable[[Expr], Expr], name: str) -> Tensor:
    """``fn`` on float elements; float16 is computed in float32 and rounded back."""
    if not ir.is_float(x.dtype):
        raise CompileError(f"{name} needs a float tensor, got {x.dtype}")
    if x.dtype == "float16":
        return unary(x, lambda v: fn(v.astype("float32")).astype("float16"), name)
    return unary(x, fn, name)


def _c(value: float, like: Expr) -> Expr:
    return ir.const(value, like.dtype)


def exp(x: Tensor) -> Tensor:
    return float_unary(x, te.exp, "exp")


def log(x: Tensor) -> Tensor:
    return float_unary(x, te.log, "log")


def sqrt(x: Tensor) -> Tensor:
    return float_unary(x, te.sqrt, "sqrt")


def erf(x: Tensor) -> Tensor:
    return float_unary(x, te.erf, "erf")


def tanh(x: Tensor) -> Tensor:
    return float_unary(x, te.tanh, "tanh")


def sigmoid(x: Tensor) -> Tensor:
    return float_unary(x, te.sigmoid, "sigmoid")


def negative(x: Tensor) -> Tensor:
    return unary(x, lambda v: -v, "negative")


def absolute(x: Tensor) -> Tensor:
    if x.dtype.startswith("uint") or x.dtype == "bool":
        return unary(x, lambda v: v, "abs")
    return unary(x, lambda v: select(v < _c(0, v), -v, v), "abs")


def reciprocal(x: Tensor) -> Tensor:
    return float_unary(x, lambda v: _c(1.0, v) / v, "reciprocal")


def leaky_relu(x: Tensor, alpha: float) -> Tensor:
    return float_unary(x, lambda v: select(v < _c(0, v), v * _c(alpha, v), v), "leaky_relu")


def elu(x: Tensor, alpha: float) -> Tensor:
    return float_unary(x, lambda v: select(v < _c(0, v), _c(alpha, v) * (te.exp(v) - _c(1, v)), v), "elu")


def selu(x: Tensor, alpha: float, gamma: float) -> Tensor:
    def fn(v: Expr) -> Expr:
        return _c(gamma, v) * select(v <= _c(0, v), _c(alpha, v) * (te.exp(v) - _c(1, v)), v)
    return float_unary(x, fn, "selu")


def hard_sigmoid(x: Tensor, alpha: float, beta: float) -> Tensor:
    return float_unary(x, lambda v: te.max(te.min(_c(alpha, v) * v + _c(beta, v), _c(1, v)), _c(0, v)),
                       "hard_sigmoid")


def hard_swish(x: Tensor) -> Tensor:
    return float_unary(x, lambda v: v * te.max(te.min(v * _c(1 / 6, v) + _c(0.5, v), _c(1, v)), _c(0, v)),
                       "hard_swish")


def softplus(x: Tensor) -> Tensor:
    """``log(1 + exp(x))``, computed as ``max(x, 0) + log(1 + exp(-|x|))`` so large inputs do not overflow."""
    def fn(v: Expr) -> Expr:
        neg_abs = select(v < _c(0, v), v, -v)
        return te.max(v, _c(0, v)) + te.log(_c(1, v) + te.exp(neg_abs))
    return float_unary(x, fn, "softplus")


def _convert(v: Expr, dtype: str) -> Expr:
    if dtype == "bool":
        return v != ir.const(0, v.dtype) if v.dtype != "bool" else v
    if v.dtype == "float64" and dtype == "float16":
        return v.astype("float32").astype("float16")  # LLVM lowers f64 -> f16 to a libcall the JIT lacks
    return v.astype(dtype)


def convert(x: Tensor, dtype: str) -> Tensor:
    """``x`` converted to ``dtype`` as numpy's ``astype`` does: floats truncate towards zero into integers,
    anything non-zero is ``True``; float64 reaches float16 through float32."""
    return unary(x, lambda v: _convert(v, dtype), "cast")


def softsign(x: Tensor) -> Tensor:
    return float_unary(x, lambda v: v / (_c(1, v) + select(v < _c(0, v), -v, v)), "softsign")


def thresholded_relu(x: Tensor, alpha: float) -> Tensor:
    return float_unary(x, lambda v: select(v > _c(alpha, v), v, _c(0, v)), "thresholded_relu")


def celu(x: Tensor, alpha: float) -> Tensor:
    def fn(v: Expr) -> Expr:
        return te.max(v, _c(0, v)) + te.min(_c(0, v), _c(alpha, v) * (te.exp(v / _c(alpha, v)) - _c(1, v)))
    return float_unary(x, fn, "celu")


def shrink(x: Tensor, bias: float, lambd: float) -> Tensor:
    """``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, else 0 (integers too, bounds as floats)."""
    def fn(v: Expr) -> Expr:
        w = v.astype("float64") if not ir.is_float(v.dtype) else v
        hi = select(w > _c(lambd, w), w - _c(bias, w), _c(0, w))
        return select(w < _c(-lambd, w), w + _c(bias, w), hi).astype(v.dtype)
    return unary(x, fn, "shrink")


def sign(x: Tensor) -> Tensor:
    return unary(x, lambda v: select(v > _c(0, v), _c(1, v), select(v < _c(0, v), _c(-1, v), _c(0, v))), "sign")


def floor(x: Tensor) -> Tensor:
    return float_unary(x, te.floor, "floor")


def ceil(x: Tensor) -> Tensor:
    return float_unary(x, te.ceil, "ceil")


def sin(x: Tensor) -> Tensor:
    return float_unary(x, te.sin, "sin")


def cos(x: Tensor) -> Tensor:
    return float_unary(x, te.cos, "cos")


def is_nan(x: Tensor) -> Tensor:
    return unary(x, lambda v: v != v, "is_nan")


def is_inf(x: Tensor, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
    def fn(v: Expr) -> Expr:
        inf = ir.const(float("inf"), v.dtype)
        checks = [c for c, on in ((v == inf, detect_positive), (v == -inf, detect_negative)) if on]
        return te.any(*checks) if checks else ir.const(False, "bool")
    return unary(x, fn, "is_inf")


def logical_not(x: Tensor) -> Tensor:
    return unary(x, lambda v: v == ir.const(False, "bool") if v.dtype == "bool" else v == _c(0, v), "logical_not")


def true_divide(a: Operand, b: Operand) -> Tensor:
    """``a / b``: true division on floats, division truncating towards zero on integers (C's ``/``), where
    ``x / 0`` is 0 rather than a trap."""
    def div(x: Expr, y: Expr) -> Expr:
        if ir.is_float(x.dtype):
            return x / y
        zero = y == ir.const(0, y.dtype)
        q = te.truncdiv(x, select(zero, ir.const(1, y.dtype), y))
        return select(zero, ir.const(0, q.dtype), q)
    return binary(a, b, div, "divide")


def modulo(a: Tensor, b: Tensor, fmod: bool) -> Tensor:
    """The remainder of ``a / b``: with the sign of ``a`` (C's ``fmod``, ``fmod=True``; the only form for floats)
    or of ``b`` (Python's ``%``); an integer ``x % 0`` is 0 rather than a trap."""
    def mod(x: Expr, y: Expr) -> Expr:
        if ir.is_float(x.dtype):
            if x.dtype == "float16":
                return te.truncmod(x.astype("float32"), y.astype("float32")).astype("float16")
            return te.truncmod(x, y)
        zero = y == ir.const(0, y.dtype)
        safe = select(zero, ir.const(1, y.dtype), y)
        r = te.truncmod(x, safe) if fmod else te.floormod(x, safe)
        return select(zero, ir.const(0, r.dtype), r)
    return binary(a, b, mod, "mod")


def power(a: Tensor, b: Tensor) -> Tensor:
    """``a ** b`` in ``a``'s dtype, for any mix of integer and float operands (computed in float64 when
    either side is an integer, then converted, so integer results are exact up to 2**53)."""
    out = a.dtype

    def pw(x: Expr, y: Expr) -> Expr:
        if out in ("float32", "float64") and y.dtype == out:
            return te.power(x, y)
        work = "float32" if out == "float16" and y.dtype in ("float16", "float32") else "float64"
        r = te.power(x.astype(work), y.astype(work))
        if not ir.is_float(out) and not ir.is_float(y.dtype):
            r = te.round(r)  # integer ** integer: exact, whatever the last bit of libm's pow
        return r.astype(out)
    return binary(a, b, pw, "power")


def prelu(x: Tensor, slope: Tensor) -> Tensor:
    """``x`` where positive, ``slope * x`` elsewhere; ``slope`` broadcasts to ``x``."""
    return binary(x, slope, lambda v, s: select(v < ir.const(0, v.dtype), v * s, v), "prelu")


def equal(a: Operand, b: Operand) -> Tensor:
    return binary(a, b, lambda x, y: x == y, "equal")


def less(a: Operand, b: Operand) -> Tensor:
    return binary(a, b, lambda x, y: x < y, "less")


def greater(a: Operand, b: Operand) -> Tensor:
    return binary(a, b, lambda x, y: x > y, "greater")


def less_equal(a: Operand, b: Operand) -> Tensor:
    return binary(a, b, lambda x, y: x <= y, "less_equal")


def greater_equal(a: Operand, b: Operand) -> Tensor:
    return binary(a, b, lambda x, y: x >= y, "greater_equal")


def logical_and(a: Tensor, b: Tensor) -> Tensor:
    return binary(a, b, lambda x, y: te.all(x, y), "logical_and")


def logical_or(a: Tensor, b: Tensor) -> Tensor:
    return binary(a, b, lambda x, y: te.any(x, y), "logical_or")


def logical_xor(a: Tensor, b: Tensor) -> Tensor:
    return binary(a, b, lambda x, y: x != y, "logical_xor")

