"""Every intrinsic of vtakit.compiler.intrinsics runs on the IR interpreter and the LLVM CPU back end,
and both agree with numpy (integers exactly)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler.backend.llvm_codegen import MATH_INTRINSICS
from vtakit.compiler.intrinsics import FLOAT_MATH, INTEGER_OPS, INTRINSICS

N = 16
RNG = np.random.default_rng(7)

# Inputs inside each function's domain, and numpy's meaning of it (float64, rounded to the dtype).
_DOMAIN = {"log": (0.1, 4), "log2": (0.1, 4), "log10": (0.1, 4), "log1p": (-0.5, 4), "sqrt": (0.1, 4),
           "rsqrt": (0.1, 4), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "pow": (0.1, 3)}
_NUMPY = {
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: 10.0 ** x, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "expm1": np.expm1, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": np.vectorize(math.erf), "fabs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "round": np.rint, "nearbyint": np.rint, "isnan": np.isnan, "pow": np.power, "copysign": np.copysign,
    "atan2": np.arctan2, "fmod": np.fmod, "fma": lambda a, b, c: a * b + c,
    "shift_left": np.left_shift, "shift_right": np.right_shift, "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor, "bitwise_not": np.invert,
    "popcount": np.vectorize(lambda v: bin(int(v) & 0xFFFFFFFF).count("1")),
}


def _inputs(name: str, arity: int, dtype: str) -> list[np.ndarray]:
    if dtype == "int32":
        if name.startswith("shift"):
            return [RNG.integers(-1000, 1000, N).astype(dtype), RNG.integers(0, 8, N).astype(dtype)]
        return [RNG.integers(-2**31, 2**31 - 1, N, dtype=np.int64).astype(dtype) for _ in range(arity)]
    lo, hi = _DOMAIN.get(name, (-2.5, 2.5))
    xs = [RNG.uniform(lo, hi, N).astype(dtype) for _ in range(arity)]
    if name == "isnan":
        xs[0][::3] = np.nan
    if name in ("round", "nearbyint"):
        xs[0][:4] = np.array([0.5, 1.5, -2.5, 2.5], dtype)     # ties go to even
    return xs


def _run(name: str, arity: int, dtype: str, target: str, xs: list[np.ndarray]) -> np.ndarray:
    out_dtype = "bool" if name == "isnan" else dtype
    ins = [te.placeholder((N,), dtype=dtype, name=f"x{k}") for k in range(arity)]
    out = te.compute((N,), lambda i: te.call_intrin(out_dtype, name, *[x[i] for x in ins]), name="out")
    mod = vtakit.build(te.create_schedule(out.op), [*ins, out], target=target)
    result = np.zeros(N, dtype=out_dtype)
    mod(*xs, result)
    return result


def test_the_cpu_back_end_knows_exactly_the_table():
    assert set(MATH_INTRINSICS) == set(INTRINSICS)
    assert all(i.operands in ("float", "int", "any", "special") for i in INTRINSICS.values())


@pytest.mark.parametrize("target", ["interpreter", "llvm"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(FLOAT_MATH))
def test_float_math(name, dtype, target):
    arity = FLOAT_MATH[name].arity
    xs = _inputs(name, arity, dtype)
    got = _run(name, arity, dtype, target, xs)
    want = np.asarray(_NUMPY[name](*[x.astype(np.float64) for x in xs]))
    if name == "isnan":
        np.testing.assert_array_equal(got, want)
        return
    tol = 2e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, want.astype(dtype), rtol=tol, atol=tol)


@pytest.mark.parametrize("target", ["interpreter", "llvm"])
@pytest.mark.parametrize("name", sorted(INTEGER_OPS) + ["abs"])
def test_integer_ops_are_exact(name, target):
    arity = INTEGER_OPS[name].arity if name in INTEGER_OPS else 1
    xs = _inputs(name, arity, "int32")
    if name == "abs":
        want = np.abs(xs[0])                         # wraps at -2^31, as two's complement does
    else:
        want = np.asarray(_NUMPY[name](*xs)).astype(np.int32)
    np.testing.assert_array_equal(_run(name, arity, "int32", target, xs), want)


def test_fma_rounds_once():
    a = np.array([1 + 2.0**-23], dtype=np.float32)
    c = np.array([-(1 + 2.0**-22)], dtype=np.float32)   # a*a + c = 2^-46, lost if a*a is rounded first
    for target in ("interpreter", "llvm"):
        ins = [te.placeholder((1,), name=n) for n in "abc"]
        out = te.compute((1,), lambda i: te.call_intrin("float32", "fma", *[x[i] for x in ins]), name="out")
        mod = vtakit.build(te.create_schedule(out.op), [*ins, out], target=target)
        result = np.zeros(1, np.float32)
        mod(a, a, c, result)
        assert result[0] == np.float32(2.0**-46), target
