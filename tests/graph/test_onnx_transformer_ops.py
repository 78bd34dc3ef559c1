"""Operators that exported transformers and detectors use (LayerNormalization, Gelu, ArgMax/ArgMin, CumSum)
against onnxruntime on shapes beyond onnx's node tests: random shapes, negative axes, every attribute form,
integer and float types where ONNX allows them (integers compared exactly); bad attributes are errors naming
the value; and a small transformer encoder block (MatMul, LayerNormalization, Gelu, Softmax attention,
opset 20) built by ``vtakit.graph`` for the CPU."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.graph.onnx_cases import Case, check, model_of, rand
from vtakit import graph as vg
from vtakit.errors import GraphError, UnsupportedOperatorError

F32 = np.float32


# ---------------------------------------------------------------------------- LayerNormalization
@pytest.mark.parametrize("shape, axis", [((3, 17), -1), ((2, 5, 7), 1), ((2, 3, 4, 6), -2), ((4, 9), 0),
                                         ((1, 6, 33), 2)])
def test_layer_norm_with_its_statistics_equals_onnxruntime(shape, axis):
    norm = shape[axis:]
    inputs = {"x": rand(*shape, seed=1), "s": rand(*norm, seed=2), "b": rand(*norm, seed=3)}
    check(Case("LayerNormalization", inputs, {"axis": axis, "epsilon": 1e-3}, weights=("s", "b"), outputs=3),
          rtol=1e-4, atol=1e-4)


def test_layer_norm_without_bias_default_axis_and_run_time_scale():
    # (an omitted trailing "" input crashes onnxruntime 1.31's session creation, so B is left out by count)
    check(Case("LayerNormalization", {"x": rand(2, 3, 16, seed=4), "s": rand(16, seed=5)}, weights=("s",)),
          rtol=1e-4, atol=1e-4)
    check(Case("LayerNormalization", {"x": rand(3, 4, 5, seed=6), "s": rand(5, seed=7)}, {"axis": -1}, opset=18),
          rtol=1e-4, atol=1e-4)


def test_layer_norm_float16_normalises_in_float32():
    x = rand(4, 24, seed=8).astype(np.float16)
    check(Case("LayerNormalization", {"x": x, "s": rand(24, seed=9).astype(np.float16),
                                      "b": rand(24, seed=10).astype(np.float16)}, weights=("s", "b"), outputs=3),
          rtol=2e-3, atol=2e-3)


def test_layer_norm_bad_attributes_name_the_value():
    x, s = rand(2, 3), rand(3)
    with pytest.raises(GraphError, match=r"axis 2 is out of range for an input of rank 2 \(expected -2..1\)"):
        vg.from_onnx(model_of(Case("LayerNormalization", {"x": x, "s": s}, {"axis": 2}, weights=("s",))))
    with pytest.raises(UnsupportedOperatorError, match="stash_type 11 is not supported; expected 1"):
        vg.from_onnx(model_of(Case("LayerNormalization", {"x": x, "s": s}, {"stash_type": 11}, weights=("s",))))


# ---------------------------------------------------------------------------- Gelu
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_equals_onnxruntime(approximate):
    x = rand(3, 5, 19, seed=11, low=-6, high=6)
    check(Case("Gelu", {"x": x}, {"approximate": approximate}, opset=20), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_float64_equals_the_definition(approximate):
    """onnxruntime has no float64 Erf, and its float64 tanh form rounds its constants to float32 (5e-7 off):
    float64 is checked against ONNX's definition, evaluated in float64 with math.erf."""
    x = rand(4, 23, seed=18, low=-6, high=6, dtype=np.float64)
    if approximate == "tanh":
        want = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    else:
        want = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    check(Case("Gelu", {"x": x}, {"approximate": approximate}, opset=20), rtol=1e-12, atol=1e-12, want=[want])


def test_gelu_default_form_and_bad_form():
    check(Case("Gelu", {"x": rand(37, seed=12)}, opset=20), rtol=2e-6, atol=2e-6)
    with pytest.raises(GraphError, match=r"approximate='fast' is not a Gelu form; expected one of \['none', 'tanh'\]"):
        vg.from_onnx(model_of(Case("Gelu", {"x": rand(4)}, {"approximate": "fast"}, opset=20)))


# ---------------------------------------------------------------------------- ArgMax / ArgMin
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.uint8, np.float16])
@pytest.mark.parametrize("axis, keepdims, last", [(0, 1, 0), (-1, 0, 1), (1, 1, 1), (-2, 0, 0)])
def test_arg_reductions_equal_onnxruntime_exactly(op, dtype, axis, keepdims, last):
    # few distinct values, so ties are common and the first/last index rule matters
    low, high = (0, 4) if dtype == np.uint8 else (-2, 2)
    x = rand(3, 6, 5, seed=13, low=low, high=high, dtype=np.int64).astype(dtype)
    if dtype == np.float16:
        x = rand(3, 6, 5, seed=14, low=-2, high=2).astype(dtype)
    check(Case(op, {"x": x}, {"axis": axis, "keepdims": keepdims, "select_last_index": last}, opset=13))


def test_arg_reductions_of_opset_11_and_out_of_range_axis():
    check(Case("ArgMax", {"x": rand(4, 7, seed=15)}, {"axis": 1, "keepdims": 0}, opset=11))
    check(Case("ArgMin", {"x": rand(9, seed=16)}, opset=11))
    with pytest.raises(GraphError, match=r"ArgMax: axis -3 is out of range for an input of rank 2"):
        vg.from_onnx(model_of(Case("ArgMax", {"x": rand(4, 7)}, {"axis": -3}, opset=13)))


# ---------------------------------------------------------------------------- CumSum
@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float64])
def test_cumsum_equals_onnxruntime(exclusive, reverse, dtype):
    x = rand(3, 11, 4, seed=17, low=-50, high=50).astype(dtype)
    for axis in (1, -1, 0):
        check(Case("CumSum", {"x": x, "axis": np.array(axis, np.int64)}, {"exclusive": exclusive, "reverse": reverse},
                   weights=("axis",), opset=14), rtol=1e-5, atol=1e-4)


def test_cumsum_axis_must_be_known_and_in_range():
    x = rand(3, 4)
    with pytest.raises(GraphError, match=r"CumSum: axis 2 is out of range for an input of rank 2"):
        vg.from_onnx(model_of(Case("CumSum", {"x": x, "axis": np.array(2, np.int32)}, weights=("axis",), opset=14)))
    with pytest.raises(GraphError, match="must be a constant"):
        vg.from_onnx(model_of(Case("CumSum", {"x": x, "axis": np.array(1, np.int32)}, opset=14)))


# ---------------------------------------------------------------------------- an encoder block end to end
def _encoder_block(seq: int = 6, dim: int = 16, ffn: int = 32, seed: int = 0) -> onnx.ModelProto:
    """Pre-norm self-attention (one head) and a Gelu feed-forward, each with a residual, at opset 20."""
    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(F32), name)

    inits = [weight("wq", dim, dim), weight("wk", dim, dim), weight("wv", dim, dim), weight("wo", dim, dim),
             weight("w1", dim, ffn), weight("w2", ffn, dim),
             onnx.numpy_helper.from_array((1 + 0.1 * rng.standard_normal(dim)).astype(F32), "g1"),
             onnx.numpy_helper.from_array((0.1 * rng.standard_normal(dim)).astype(F32), "b1"),
             onnx.numpy_helper.from_array((1 + 0.1 * rng.standard_normal(dim)).astype(F32), "g2"),
             onnx.numpy_helper.from_array((0.1 * rng.standard_normal(dim)).astype(F32), "b2"),
             onnx.numpy_helper.from_array(np.array(1 / np.sqrt(dim), F32), "scale")]
    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "g1", "b1"], ["h"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h", "wq"], ["q"]), n("MatMul", ["h", "wk"], ["k"]), n("MatMul", ["h", "wv"], ["v"]),
        n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        n("MatMul", ["q", "kt"], ["qk"]), n("Mul", ["qk", "scale"], ["logits"]),
        n("Softmax", ["logits"], ["attn"], axis=-1),
        n("MatMul", ["attn", "v"], ["ctx"]), n("MatMul", ["ctx", "wo"], ["proj"]),
        n("Add", ["x", "proj"], ["r1"]),
        n("LayerNormalization", ["r1", "g2", "b2"], ["h2"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h2", "w1"], ["f1"]), n("Gelu", ["f1"], ["f2"]), n("MatMul", ["f2", "w2"], ["f3"]),
        n("Add", ["r1", "f3"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "encoder_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                     (2, seq, dim))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, seq, dim))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def test_transformer_encoder_block_on_the_cpu_equals_onnxruntime():
    model = _encoder_block()
    x = np.random.default_rng(1).standard_normal((2, 6, 16)).astype(F32)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    g = vg.from_onnx(model)
    assert {"LayerNormalization", "Gelu", "Softmax", "MatMul"} <= {node.op for node in g.nodes}
    module = vg.build(g, target="llvm")
    (got,) = module.run({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    np.testing.assert_allclose(vg.evaluate(g, {"x": x})["y"], want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_transformer_encoder_block_for_cuda_emulates_onnxruntime():
    """The GPU target's default schedules (reductions for LayerNormalization, element-wise for Gelu) take the
    block; its emulated output (every kernel with GPU semantics on the CPU) equals onnxruntime's."""
    model = _encoder_block(seed=2)
    x = np.random.default_rng(3).standard_normal((2, 6, 16)).astype(F32)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = vg.build(vg.from_onnx(model), target="cuda").emulate({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
