"""Element-wise operators (math, activations, broadcasting binary and variadic ops, comparisons, Clip,
Where, Not) against onnxruntime: every attribute form, several dtypes, through the importer, the numpy
references and the compiled CPU kernels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.graph.onnx_cases import Case, check, model_of, rand
from vtakit import graph as vg
from vtakit.compiler.graph.ops.elementwise import BINARY, UNARY
from vtakit.errors import GraphError

F16, F32, F64 = np.float16, np.float32, np.float64
POS = {"low": 0.1, "high": 4.0}

UNARY_CASES = [
    ("Sqrt", {}, POS), ("Exp", {}, {}), ("Log", {}, POS), ("Neg", {}, {}), ("Abs", {}, {}),
    ("Reciprocal", {}, POS), ("Erf", {}, {}), ("Sigmoid", {}, {"low": -30, "high": 30}), ("Tanh", {}, {}),
    ("Relu", {}, {}), ("LeakyRelu", {}, {}), ("LeakyRelu", {"alpha": 0.3}, {}), ("Elu", {}, {}),
    ("Elu", {"alpha": 0.5}, {}), ("Selu", {}, {}), ("Selu", {"alpha": 2.0, "gamma": 3.0}, {}),
    ("HardSigmoid", {}, {}), ("HardSigmoid", {"alpha": 0.5, "beta": 0.25}, {}), ("HardSwish", {}, {}),
    ("Softplus", {}, {"low": -40, "high": 40}), ("Softsign", {}, {}), ("ThresholdedRelu", {}, {}),
    ("ThresholdedRelu", {"alpha": -0.5}, {}), ("Celu", {}, {}), ("Celu", {"alpha": 2.0}, {}), ("Shrink", {}, {}),
    ("Shrink", {"bias": 0.5, "lambd": 1.0}, {}), ("Sign", {}, {}), ("Floor", {}, {}), ("Ceil", {}, {}),
    ("Sin", {}, {}), ("Cos", {}, {}),
]


@pytest.mark.parametrize("op, attrs, span", UNARY_CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_unary_float32(op, attrs, span):
    check(Case(op, {"x": rand(3, 17, **span)}, attrs), rtol=2e-6, atol=1e-6)


# float64 math, written independently of vtakit's references (onnxruntime lacks most double/half kernels)
IN_FLOAT64 = {
    "Sqrt": np.sqrt, "Exp": np.exp, "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Tanh": np.tanh,
    "Erf": np.vectorize(math.erf), "Softplus": lambda x: np.log1p(np.exp(x)), "Neg": np.negative,
    "HardSwish": lambda x: x * np.minimum(np.maximum(x / 6 + 0.5, 0), 1), "Relu": lambda x: np.maximum(x, 0),
}


@pytest.mark.parametrize("op", sorted(IN_FLOAT64))
@pytest.mark.parametrize("dtype", [F64, F16])
def test_unary_other_floats(op, dtype):
    x = rand(2, 9, dtype=dtype, **(POS if op == "Sqrt" else {}))
    want = IN_FLOAT64[op](x.astype(F64)).astype(dtype)
    tol = 1e-3 if dtype == F16 else 1e-12
    check(Case(op, {"x": x}), rtol=tol, atol=tol, want=[want])


@pytest.mark.parametrize("op", ["Neg", "Abs", "Relu"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_unary_ops_wrap(op, dtype):
    x = np.array([[np.iinfo(dtype).min, -5, 0, 7, np.iinfo(dtype).max]], dtype)
    if op == "Relu" and dtype == np.int64:
        pytest.skip("onnxruntime has no int64 Relu")
    check(Case(op, {"x": x}, opset=14))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3))])
def test_binary_broadcast_float(op, shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1], seed=1, low=0.5, high=3)
    check(Case(op, {"a": a, "b": b}), rtol=1e-6)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.uint64])
def test_binary_integers_wrap_and_divide_towards_zero(op, dtype):
    info = np.iinfo(dtype)
    a = np.array([info.min, -7, 7, -7, 100, info.max, 3], dtype) if info.min else np.array(
        [0, 7, 9, 200, 100, info.max, 3], dtype)
    b = np.array([3, 2, -2, -2, 3, 2, 5], dtype) if info.min else np.array([3, 2, 4, 7, 3, 2, 5], dtype)
    check(Case(op, {"a": a, "b": b}, opset=14))


def test_integer_division_by_zero_gives_zero_instead_of_trapping():
    a, b = np.array([5, -5, 0, 9], np.int32), np.array([0, 0, 0, 2], np.int32)
    check(Case("Div", {"a": a, "b": b}), want=[np.array([0, 0, 0, 4], np.int32)])


@pytest.mark.parametrize("a_dtype, b_dtype", [(F32, F32), (F32, np.int64), (F32, np.int32), (np.int32, np.int32),
                                              (np.int64, np.int64), (np.int64, F32), (np.int32, F32)])
def test_pow_keeps_the_base_dtype(a_dtype, b_dtype):
    a = np.array([[1, 2, 3, 4], [-2, 0.5 if a_dtype == F32 else 5, 7, 2]]).astype(a_dtype)
    b = np.array([[2, 3, 0, 1], [3, 2, 2, 10]]).astype(b_dtype)
    check(Case("Pow", {"a": a, "b": b}, opset=15), rtol=1e-6)


def test_pow_broadcasts_a_scalar_exponent():
    check(Case("Pow", {"a": rand(2, 5, low=0.1), "b": np.array(1.7, F32)}), rtol=1e-6)


@pytest.mark.parametrize("slope_shape", [(1,), (5,), (3, 1), (3, 5)])
def test_prelu_slope_broadcasts(slope_shape):
    check(Case("PRelu", {"x": rand(2, 3, 5), "s": rand(*slope_shape, seed=3)}, weights=("s",)), rtol=1e-6)


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [F32, np.int32, np.uint8, np.int64])
def test_comparisons_give_bool(op, dtype):
    a, b = rand(4, 6, dtype=dtype, low=0, high=4), rand(6, seed=1, dtype=dtype, low=0, high=4)
    g = check(Case(op, {"a": a, "b": b}, opset=13))
    assert g.type_of("y0").dtype == "bool"


@pytest.mark.parametrize("op", ["Min", "Max", "Sum", "Mean"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_variadic_ops_broadcast_any_number_of_inputs(op, n):
    shapes = [(2, 3, 4), (4,), (3, 1)][:n]
    check(Case(op, {f"x{i}": rand(*s, seed=i) for i, s in enumerate(shapes)}), rtol=1e-6)


@pytest.mark.parametrize("op", ["Min", "Max"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, F64])
def test_min_max_integer_and_double(op, dtype):
    check(Case(op, {"a": rand(3, 4, dtype=dtype, low=0, high=9), "b": rand(4, seed=2, dtype=dtype, low=0, high=9)}))


# -- Clip: attributes before opset 11, optional inputs since ------------------------------------------------
@pytest.mark.parametrize("attrs", [{"min": -1.0, "max": 0.5}, {"min": -0.5}, {"max": 1.0}, {}])
def test_clip_attribute_form(attrs):
    check(Case("Clip", {"x": rand(4, 5)}, attrs, opset=10))


@pytest.mark.parametrize("lo, hi", [(-1.0, 0.5), (None, 0.5), (-0.5, None), (None, None), (2.0, -2.0)])
def test_clip_input_form(lo, hi):
    inputs = {"x": rand(4, 5), "lo": None if lo is None else np.array(lo, F32),
              "hi": None if hi is None else np.array(hi, F32)}
    if hi is None:
        inputs.pop("hi")
    check(Case("Clip", inputs, weights=("lo", "hi"), opset=13))


def test_clip_bounds_may_be_run_time_tensors_and_integers():
    check(Case("Clip", {"x": rand(3, 7), "lo": np.array(-1.0, F32), "hi": np.array(1.5, F32)}, opset=13))
    x = np.array([-128, -5, 0, 5, 127], np.int8)
    check(Case("Clip", {"x": x, "lo": np.array(-3, np.int8), "hi": np.array(4, np.int8)}, weights=("lo", "hi"),
               opset=13))


def test_where_broadcasts_all_three():
    cond = rand(3, 1, 5, low=-1, high=1) > 0
    check(Case("Where", {"c": cond, "x": rand(4, 5), "y": rand(3, 1, 1, seed=2)}))
    check(Case("Where", {"c": cond, "x": rand(3, 4, 5, dtype=np.int64), "y": np.array(7, np.int64)}))


def test_not():
    check(Case("Not", {"x": rand(3, 8) > 0}, opset=9))


def test_is_nan_and_is_inf_of_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1.5, 3e38], F32)
    check(Case("IsNaN", {"x": x}, opset=13))
    for neg, pos in [(1, 1), (0, 1), (1, 0)]:
        check(Case("IsInf", {"x": x}, {"detect_negative": neg, "detect_positive": pos}, opset=10))


@pytest.mark.parametrize("op", ["Sign", "Shrink"])
@pytest.mark.parametrize("dtype", [np.int32, np.int8])
def test_sign_and_shrink_of_integers(op, dtype):
    check(Case(op, {"x": np.array([-9, -1, 0, 1, 7], dtype)}, {"lambd": 1.0, "bias": 2.0} if op == "Shrink" else {},
               opset=13))


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical_ops_broadcast(op):
    check(Case(op, {"a": rand(3, 1, 5) > 0, "b": rand(4, 5, seed=1) > 0}))


# -- registry-level checks ------------------------------------------------------------------------------------
def test_every_table_operator_has_a_reference_and_a_compute():
    ops = vg.registered_ops()
    for name in [*UNARY, *BINARY, "Min", "Max", "Sum", "Mean", "Mod", "Clip", "Where", "Not"]:
        assert ops[name].compute is not None and ops[name].doc, name


def test_an_unknown_attribute_is_a_graph_error():
    with pytest.raises(GraphError, match=r"LeakyRelu node.*unknown attribute\(s\) \['beta'\]"):
        vg.from_onnx(model_of(Case("LeakyRelu", {"x": rand(2, 2)}, {"alpha": 0.1, "beta": 1.0})))


def test_float16_math_is_computed_in_float32():
    """exp(11) overflows float16 arithmetic's intermediate only if computed in half: the result is rounded once."""
    x = np.array([0.1, 1.0, 5.5, 10.0], F16)
    g = check(Case("Exp", {"x": x}), rtol=1e-3)
    np.testing.assert_array_equal(vg.evaluate(g, {"x": x})["y0"], np.exp(x.astype(F32)).astype(F16))


@pytest.mark.parametrize("dtype, fmod", [(np.int32, 0), (np.int64, 1), (np.int8, 0), (np.uint16, 0), (F32, 1),
                                         (F64, 1)])
def test_mod_sign_follows_the_divisor_or_with_fmod_the_dividend(dtype, fmod):
    signed = not np.issubdtype(dtype, np.unsignedinteger)
    a = np.array([[7, -7, 7, -7, 0, 5]] if signed else [[7, 9, 7, 200, 0, 5]]).astype(dtype)
    b = np.array([3, 3, -3, -3, 2, 5] if signed else [3, 4, 5, 7, 2, 5]).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        a = a + np.array(0.25, dtype)
    check(Case("Mod", {"a": a, "b": b}, {"fmod": fmod}, opset=13))


def test_mod_of_floats_needs_fmod_and_integer_mod_by_zero_is_zero():
    with pytest.raises(GraphError, match="needs fmod=1"):
        vg.from_onnx(model_of(Case("Mod", {"a": rand(2, 2), "b": rand(2, 2)}, opset=13)))
    a, b = np.array([5, -5, 9], np.int32), np.array([0, 0, 4], np.int32)
    check(Case("Mod", {"a": a, "b": b}, opset=13), want=[np.array([0, 0, 1], np.int32)])
