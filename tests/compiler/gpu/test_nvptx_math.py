"""The float32 math the cuda backend builds from PTX's approximate instructions, checked on the CPU.

ptxas only says that the PTX is well formed, and the emulator computes math with numpy, so a wrong
coefficient or sign in an expansion (``tanh``, ``erf``, the split ``exp``, ...) would pass both.
Here each expansion of :data:`MATH_EXPANSIONS` is built into a host function by the same code, with
PTX's ``ex2``/``lg2``/``sin``/``cos`` instructions stood in for by LLVM's exact intrinsics, JIT
compiled, and compared with numpy in float64 over a range of inputs: what remains is the error of
the formula itself (PTX's instructions add a few ulp on a GPU).
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir as lir

from vtakit.compiler.backend import llvm_runtime as rt
from vtakit.compiler.backend.nvptx.codegen import MATH_EXPANSIONS

_F32 = lir.FloatType()
_HOST = {"llvm.nvvm.ex2.approx.f": "llvm.exp2.f32", "llvm.nvvm.lg2.approx.f": "llvm.log2.f32",
         "llvm.nvvm.sin.approx.f": "llvm.sin.f32", "llvm.nvvm.cos.approx.f": "llvm.cos.f32"}


@dataclass
class _HostGen:
    """What an expansion uses of the NVPTX code generator: its builder and its intrinsic calls."""

    module: lir.Module
    b: lir.IRBuilder

    def _nvvm(self, name, args, ret=None):
        name = _HOST.get(name, name)
        fn = self.module.globals.get(name) or lir.Function(
            self.module, lir.FunctionType(ret or args[0].type, [a.type for a in args]), name)
        return self.b.call(fn, args)


def _host_function(name: str):
    expansion = MATH_EXPANSIONS[name]
    module = lir.Module(name=name)
    module.triple = rt.host_target().triple
    fn = lir.Function(module, lir.FunctionType(_F32, [_F32] * expansion.arity), "f")
    builder = lir.IRBuilder(fn.append_basic_block())
    builder.ret(expansion.build(_HostGen(module, builder), list(fn.args)))
    with rt.LLVM_LOCK:
        parsed = llvm.parse_assembly(str(module))
        parsed.verify()
    engine = rt.jit(parsed, rt.host_target())
    cfunc = ctypes.CFUNCTYPE(ctypes.c_float, *[ctypes.c_float] * expansion.arity)(engine.get_function_address("f"))
    return engine, cfunc


X = np.concatenate([np.linspace(-20, 20, 801), np.linspace(-1e-3, 1e-3, 41)]).astype("float32")
POSITIVE = np.concatenate([np.geomspace(1e-6, 1e6, 241), np.linspace(0.5, 2, 31)]).astype("float32")
# name -> (inputs, numpy reference, relative tolerance, absolute tolerance)
CASES = {
    "exp": (X[np.abs(X) <= 80], np.exp, 2e-6, 0),
    "exp2": (X, np.exp2, 1e-6, 0),
    "exp10": (X[np.abs(X) <= 30], lambda x: 10.0 ** x, 3e-6, 0),
    "log": (POSITIVE, np.log, 1e-6, 1e-7),
    "log2": (POSITIVE, np.log2, 1e-6, 1e-7),
    "log10": (POSITIVE, np.log10, 1e-6, 1e-7),
    "sin": (X, np.sin, 1e-6, 1e-7),
    "cos": (X, np.cos, 1e-6, 1e-7),
    "tan": (X[np.abs(np.cos(X.astype(float))) > 0.1], np.tan, 1e-5, 1e-7),
    "tanh": (X, np.tanh, 1e-6, 2e-7),
    "sinh": (X[np.abs(X) <= 80], np.sinh, 3e-6, 3e-7),
    "cosh": (X[np.abs(X) <= 80], np.cosh, 3e-6, 0),
    "erf": (X, np.vectorize(math.erf), 2e-6, 2e-7),
    "log1p": (POSITIVE - np.float32(0.5), np.log1p, 1e-6, 2e-7),
    "expm1": (X, np.expm1, 2e-6, 2e-7),
}


def test_every_expansion_is_checked():
    assert set(CASES) | {"pow"} == set(MATH_EXPANSIONS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_expansion_matches_numpy(name):
    inputs, reference, rtol, atol = CASES[name]
    _engine, f = _host_function(name)
    got = np.array([f(float(x)) for x in inputs], dtype="float64")
    want = reference(inputs.astype("float64"))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("name, reference", [("erf", math.erf), ("expm1", math.expm1)])
def test_accurate_relative_to_the_value_near_zero(name, reference):
    _engine, f = _host_function(name)
    for x in (1e-6, -3e-4, 0.01, -0.2, 0.49):
        assert f(x) == pytest.approx(reference(x), rel=1e-6, abs=0)


def test_pow_of_positive_bases():
    _engine, f = _host_function("pow")
    for base, exponent in [(2.0, 10.0), (0.5, 3.0), (10.0, -2.0), (1.7, 0.25), (123.0, 1.5)]:
        assert f(base, exponent) == pytest.approx(base ** exponent, rel=2e-6)


def test_limits_at_infinity():
    _engine, tanh = _host_function("tanh")
    assert tanh(float("inf")) == 1.0 and tanh(float("-inf")) == -1.0 and tanh(-100.0) == -1.0
    _engine, erf = _host_function("erf")
    assert erf(10.0) == 1.0 and erf(-10.0) == -1.0
    _engine, exp = _host_function("exp")
    assert exp(-200.0) == 0.0 and exp(float("inf")) == float("inf")
