"""Element-wise graph operators: unary math, activations, broadcasting binary ops and comparisons.

Each operator registers its numpy reference and its TE compute (built from
:mod:`vtakit.compiler.ops`). Broadcasting follows numpy, as ONNX does. The operators are declared
in tables (one row per operator: reference, compute, attributes) rather than one function each,
since most differ only in the scalar function they apply.

Semantics that numpy and C disagree on follow ONNX (and onnxruntime): integer ``Div`` truncates
towards zero; ``Pow`` returns the base's dtype whatever the exponent's; ``Clip`` with ``min > max``
gives ``max``. float16 math is computed in float32 and rounded back, in the reference as in the
compute. Integer division by zero gives 0 instead of trapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Callable

import numpy as np

from vtakit.compiler import ir, ops, te
from vtakit.compiler.graph.op import Pattern, register_op
from vtakit.compiler.ops import math as tmath
from vtakit.compiler.ops import transform
from vtakit.errors import GraphError

__all__ = ["UNARY", "BINARY", "VARIADIC"]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _float_math(fn: Callable[[np.ndarray], np.ndarray], result_dtype: str | None = None
                ) -> Callable[[np.ndarray], np.ndarray]:
    """``fn`` in the input's float dtype (half precision computed in float32), the result in ``result_dtype``
    (default: the input's)."""
    def run(x: np.ndarray) -> np.ndarray:
        work = x.astype(np.float32) if x.dtype == np.float16 else x
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return np.asarray(fn(work)).astype(result_dtype or x.dtype)
    return run


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(np.zeros((), x.dtype), -x))


def _selu(x: np.ndarray, alpha: float, gamma: float) -> np.ndarray:
    return gamma * np.where(x <= 0, alpha * np.expm1(x), x)


@dataclass(frozen=True)
class Unary:
    """A one-input operator: its numpy function and TE compute, both given the attributes."""

    reference: Callable[..., np.ndarray]
    compute: Callable[..., Any]
    doc: str
    attrs: dict[str, Any] = field(default_factory=dict)
    float_only: bool = True
    result_dtype: str | None = None   # the output dtype, when not the input's


def _gelu_form(approximate: str) -> str:
    if approximate not in ("none", "tanh"):
        raise GraphError(f"Gelu: approximate={approximate!r}; expected 'none' or 'tanh'")
    return approximate


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if _gelu_form(approximate) == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / np.sqrt(2)))


def _gelu_compute(x: Any, approximate: str) -> Any:
    """TVM's relay gelu: ``0.5 x (1 + erf(x / sqrt 2))``, or ONNX's tanh approximation."""
    form = _gelu_form(approximate)

    def fn(v: Any) -> Any:
        half, one = ir.const(0.5, v.dtype), ir.const(1.0, v.dtype)
        if form == "tanh":
            inner = ir.const(math.sqrt(2 / math.pi), v.dtype) * (v + ir.const(0.044715, v.dtype) * v * v * v)
            return half * v * (one + te.tanh(inner))
        return half * v * (one + te.erf(v * ir.const(1 / math.sqrt(2), v.dtype)))
    return tmath.float_unary(x, fn, "gelu")


def _shrink(x: np.ndarray, bias: float, lambd: float) -> np.ndarray:
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


UNARY: dict[str, Unary] = {
    "Sqrt": Unary(np.sqrt, tmath.sqrt, "Square root."),
    "Exp": Unary(np.exp, tmath.exp, "e ** x."),
    "Log": Unary(np.log, tmath.log, "Natural logarithm."),
    "Erf": Unary(_erf, tmath.erf, "The Gauss error function."),
    "Tanh": Unary(np.tanh, tmath.tanh, "Hyperbolic tangent."),
    "Sigmoid": Unary(_sigmoid, tmath.sigmoid, "1 / (1 + exp(-x))."),
    "Reciprocal": Unary(lambda x: 1 / x, tmath.reciprocal, "1 / x."),
    "Neg": Unary(np.negative, tmath.negative, "-x (integers wrap).", float_only=False),
    "Abs": Unary(np.abs, tmath.absolute, "|x| (integers wrap).", float_only=False),
    "Relu": Unary(lambda x: np.maximum(x, np.zeros((), x.dtype)), ops.relu, "max(x, 0).", float_only=False),
    "LeakyRelu": Unary(lambda x, alpha: np.where(x < 0, x * alpha, x), tmath.leaky_relu, "x, or alpha * x below 0.",
                       {"alpha": 0.01}),
    "Elu": Unary(lambda x, alpha: np.where(x < 0, alpha * np.expm1(x), x), tmath.elu,
                 "x, or alpha * (exp(x) - 1) below 0.", {"alpha": 1.0}),
    "Selu": Unary(_selu, tmath.selu, "gamma * (x, or alpha * (exp(x) - 1) at or below 0).",
                  {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "HardSigmoid": Unary(lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1), tmath.hard_sigmoid,
                         "max(0, min(1, alpha * x + beta)).", {"alpha": 0.2, "beta": 0.5}),
    "HardSwish": Unary(lambda x: x * np.clip(x / 6 + 0.5, 0, 1), tmath.hard_swish, "x * max(0, min(1, x / 6 + 1/2))."),
    "Softplus": Unary(lambda x: np.logaddexp(np.zeros((), x.dtype), x), tmath.softplus, "log(1 + exp(x))."),
    "Softsign": Unary(lambda x: x / (1 + np.abs(x)), tmath.softsign, "x / (1 + |x|)."),
    "ThresholdedRelu": Unary(lambda x, alpha: np.where(x > alpha, x, 0), tmath.thresholded_relu,
                             "x above alpha, else 0.", {"alpha": 1.0}),
    "Celu": Unary(lambda x, alpha: np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha)), tmath.celu,
                  "max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).", {"alpha": 1.0}),
    "Shrink": Unary(_shrink, tmath.shrink, "x + bias below -lambd, x - bias above lambd, else 0.",
                    {"bias": 0.0, "lambd": 0.5}, float_only=False),
    "Sign": Unary(np.sign, tmath.sign, "-1, 0 or 1 by the sign of x.", float_only=False),
    "Floor": Unary(np.floor, tmath.floor, "Round down."),
    "Ceil": Unary(np.ceil, tmath.ceil, "Round up."),
    "Sin": Unary(np.sin, tmath.sin, "Sine."),
    "Gelu": Unary(_gelu, _gelu_compute, "x * Phi(x) (the normal CDF by erf, or its tanh approximation).",
                  {"approximate": "none"}),
    "Cos": Unary(np.cos, tmath.cos, "Cosine."),
    "IsNaN": Unary(np.isnan, tmath.is_nan, "Whether x is NaN, as bool.", result_dtype="bool"),
    "IsInf": Unary(lambda x, detect_negative, detect_positive: (np.isneginf(x) & bool(detect_negative))
                   | (np.isposinf(x) & bool(detect_positive)), tmath.is_inf, "Whether x is an infinity (of the "
                   "detected signs), as bool.", {"detect_negative": 1, "detect_positive": 1}, result_dtype="bool"),
}


def _register_unary(name: str, spec: Unary) -> None:
    def reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
        x = ins[0]
        fn = _float_math(lambda v: spec.reference(v, **attrs), spec.result_dtype) if spec.float_only else (
            lambda v: np.asarray(spec.reference(v, **attrs)).astype(spec.result_dtype or v.dtype))
        return (np.asarray(fn(x)),)

    reference.__doc__ = spec.doc
    register_op(name, pattern=Pattern.ELEMWISE, attrs=spec.attrs,
                compute=lambda ins, attrs: [spec.compute(ins[0], **attrs)])(reference)


for _name, _spec in UNARY.items():
    _register_unary(_name, _spec)


# -- binary operators with broadcasting ------------------------------------------------------------
def _trunc_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        safe = np.where(b == 0, np.ones((), b.dtype), b)
        q = np.floor_divide(a, safe)
        q = q + ((np.remainder(a, safe) != 0) & ((a < 0) ^ (safe < 0))).astype(q.dtype)
        return np.where(b == 0, np.zeros((), q.dtype), q)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(a, b)


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.floating) and a.dtype == b.dtype and a.dtype != np.float16:
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            return np.power(a, b)
    work = np.float32 if a.dtype == np.float16 and b.dtype in (np.float16, np.float32) else np.float64
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        r = np.power(a.astype(work), b.astype(work))
    if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
        r = np.round(r)
    return r.astype(a.dtype)


@dataclass(frozen=True)
class Binary:
    """A two-input broadcasting operator; its output has the first input's dtype unless ``result_dtype`` says."""

    reference: Callable[[np.ndarray, np.ndarray], np.ndarray]
    compute: Callable[[Any, Any], Any]
    doc: str
    result_dtype: str | None = None   # the output dtype, when not the first input's


BINARY: dict[str, Binary] = {
    "Add": Binary(np.add, ops.add, "a + b (integers wrap)."),
    "Sub": Binary(np.subtract, ops.subtract, "a - b (integers wrap)."),
    "Mul": Binary(np.multiply, ops.multiply, "a * b (integers wrap)."),
    "Div": Binary(_trunc_divide, tmath.true_divide, "a / b; integer division truncates towards zero, x / 0 is 0."),
    "Pow": Binary(_power, tmath.power, "a ** b in a's dtype (the exponent may have another dtype)."),
    "PRelu": Binary(lambda x, s: np.where(x < 0, x * s, x), tmath.prelu, "x, or slope * x below 0 (slope broadcasts)."),
    "Equal": Binary(np.equal, tmath.equal, "a == b, as bool.", "bool"),
    "Less": Binary(np.less, tmath.less, "a < b, as bool.", "bool"),
    "Greater": Binary(np.greater, tmath.greater, "a > b, as bool.", "bool"),
    "LessOrEqual": Binary(np.less_equal, tmath.less_equal, "a <= b, as bool.", "bool"),
    "GreaterOrEqual": Binary(np.greater_equal, tmath.greater_equal, "a >= b, as bool.", "bool"),
    "And": Binary(np.logical_and, tmath.logical_and, "Logical and of two bool tensors.", "bool"),
    "Or": Binary(np.logical_or, tmath.logical_or, "Logical or of two bool tensors.", "bool"),
    "Xor": Binary(np.logical_xor, tmath.logical_xor, "Logical exclusive or of two bool tensors.", "bool"),
}


def _register_binary(name: str, spec: Binary) -> None:
    def reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
        a, b = ins
        with np.errstate(over="ignore"):
            out = np.asarray(spec.reference(a, b))
        return (out.astype(spec.result_dtype or a.dtype),)

    reference.__doc__ = spec.doc
    register_op(name, pattern=Pattern.BROADCAST, compute=lambda ins, attrs: [spec.compute(ins[0], ins[1])])(reference)


for _name, _bspec in BINARY.items():
    _register_binary(_name, _bspec)


# -- variadic operators (Min, Max, Sum, Mean take one or more inputs) -------------------------------
VARIADIC: dict[str, tuple[Callable, Callable, str]] = {
    "Min": (np.minimum, ops.minimum, "The element-wise minimum of the inputs (broadcast)."),
    "Max": (np.maximum, ops.maximum, "The element-wise maximum of the inputs (broadcast)."),
    "Sum": (np.add, ops.add, "The element-wise sum of the inputs (broadcast)."),
}


def _fold_inputs(ins: list, fn: Callable) -> Any:
    return reduce(fn, [x for x in ins if x is not None])


def _register_variadic(name: str, np_fn: Callable, te_fn: Callable, doc: str) -> None:
    def reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
        return (np.asarray(_fold_inputs(ins, np_fn)).astype(ins[0].dtype),)

    def compute(ins: list, attrs: dict) -> list:
        if len(ins) == 1:
            return [tmath.unary(ins[0], lambda v: v, name.lower())]
        return [_fold_inputs(ins, te_fn)]

    reference.__doc__ = doc
    register_op(name, pattern=Pattern.BROADCAST, compute=compute)(reference)


for _name, (_np_fn, _te_fn, _doc) in VARIADIC.items():
    _register_variadic(_name, _np_fn, _te_fn, _doc)


def _mean_compute(ins: list, attrs: dict) -> list:
    total = ins[0] if len(ins) == 1 else _fold_inputs(ins, ops.add)
    n = len(ins)
    return [tmath.unary(total, lambda v: v / n if v.dtype.startswith("float") else v // n, "mean")]


@register_op("Mean", pattern=Pattern.BROADCAST, compute=_mean_compute)
def _mean(ins, attrs):
    """The element-wise mean of the inputs (broadcast)."""
    total = _fold_inputs(ins, np.add)
    return (np.asarray(total / len(ins) if np.issubdtype(total.dtype, np.floating) else total // len(ins))
            .astype(ins[0].dtype),)


def _mod_args(dtype: Any, attrs: dict) -> bool:
    fmod = bool(attrs["fmod"])
    if np.issubdtype(np.dtype(dtype), np.floating) and not fmod:
        raise GraphError(f"Mod of {np.dtype(dtype).name} tensors needs fmod=1 (C's fmod), got fmod=0")
    return fmod


@register_op("Mod", pattern=Pattern.BROADCAST, attrs={"fmod": 0},
             compute=lambda ins, attrs: [tmath.modulo(ins[0], ins[1], _mod_args(ins[0].dtype, attrs))])
def _mod(ins, attrs):
    """The remainder of a / b: sign of a with fmod=1 (the only form for floats), of b with fmod=0; x % 0 is 0."""
    a, b = ins
    fmod = _mod_args(a.dtype, attrs)
    if np.issubdtype(a.dtype, np.floating):
        work = np.float32 if a.dtype == np.float16 else a.dtype
        with np.errstate(invalid="ignore", divide="ignore"):
            return (np.fmod(a.astype(work), b.astype(work)).astype(a.dtype),)
    safe = np.where(b == 0, np.ones((), b.dtype), b)
    r = np.fmod(a, safe) if fmod else np.mod(a, safe)
    return (np.where(b == 0, np.zeros((), r.dtype), r).astype(a.dtype),)


# -- clip, selection and logic -----------------------------------------------------------------------
def _clip_compute(ins: list, attrs: dict) -> list:
    x, lo, hi = (ins + [None, None])[:3]
    y = x
    if lo is not None:
        y = ops.maximum(y, lo)
    if hi is not None:
        y = ops.minimum(y, hi)
    return [y if y is not x else tmath.unary(x, lambda v: v, "clip")]


@register_op("Clip", pattern=Pattern.BROADCAST, compute=_clip_compute)
def _clip(ins, attrs):
    """min(max(x, lo), hi) with optional 0-d bounds (inputs 1 and 2); max wins where lo > hi."""
    x, lo, hi = (list(ins) + [None, None])[:3]
    y = x if lo is None else np.maximum(x, lo)
    y = y if hi is None else np.minimum(y, hi)
    return (np.asarray(y).astype(x.dtype),)


@register_op("Where", pattern=Pattern.BROADCAST,
             compute=lambda ins, attrs: [transform.where(ins[0], ins[1], ins[2])])
def _where(ins, attrs):
    """x where condition, else y (all three broadcast)."""
    return (np.where(ins[0], ins[1], ins[2]).astype(ins[1].dtype),)


@register_op("Not", pattern=Pattern.ELEMWISE, compute=lambda ins, attrs: [tmath.logical_not(ins[0])])
def _not(ins, attrs):
    """Logical not of a bool tensor."""
    return (np.logical_not(ins[0]),)
