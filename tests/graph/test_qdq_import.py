"""Pre-quantised ONNX models: QDQ (onnxruntime's quantize_static), QLinearConv / QLinearMatMul, ConvInteger /
MatMulInteger, the FoldQDQ pass and its scale realisation, checked against onnxruntime's own run.

The QDQ models are the packaged digits CNN (conv+relu, conv+relu, maxpool, conv+relu, flatten, gemm)
quantised by onnxruntime on its packaged calibration images; the measured agreement with onnxruntime
is what docs/quantization_import.md reports.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from vtakit import datasets
import vtakit.graph
from vtakit.compiler.graph.passes import get_pass
from vtakit.compiler.graph.passes.fold_qdq import ERROR_KEY, MULTIPLIER_BITS, accumulator_bound, realise
from vtakit.errors import GraphError, UnsupportedOperatorError
from vtakit.runtime.packing import requantize

from tests.graph.qdq_models import quantize_digits

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

N_IMAGES = 100


# ---------------------------------------------------------------------------- helpers
def _quantise(tmp_path_factory, per_channel: bool, fmt: str, symmetric: bool = True) -> str:
    out = tmp_path_factory.mktemp("qdq") / f"digits_{fmt}_{per_channel}_{symmetric}.onnx"
    return quantize_digits(out, per_channel, fmt, symmetric, samples=64)


def _session(model):
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def _compare_digits(path: str, graph: vtakit.graph.Graph):
    """(max |logit difference|, fraction of logits that differ, argmax agreement) over N_IMAGES test images."""
    x, _ = datasets.load_digits_test()
    sess = _session(path)
    diffs, differing, agree = [], 0, 0
    for i in range(N_IMAGES):
        ref = sess.run(None, {"input": x[i:i + 1]})[0]
        out = vtakit.graph.evaluate(graph, {"input": x[i:i + 1]})["logits"]
        diffs.append(float(np.abs(ref - out).max()))
        differing += int(np.sum(ref != out))
        agree += int(ref.argmax() == out.argmax())
    return max(diffs), differing / (N_IMAGES * 10), agree / N_IMAGES


def _logit_step(path: str) -> float:
    """The output scale of the QDQ model (one quantisation step of the logits)."""
    model = onnx.load(path)
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    last = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "logits"][0]
    return float(init[last.input[1]])


def _ops(graph) -> list[str]:
    return [n.op for n in graph.nodes]


def _model(nodes, inputs, outputs, initializers=(), opset=17, extra_opsets=()):
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(initializers)),
                              opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    model.ir_version = 8
    return model


def _t(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


@pytest.fixture(scope="module", params=[False, True], ids=["per_tensor", "per_channel"])
def qdq_model(request, tmp_path_factory):
    return _quantise(tmp_path_factory, request.param, "QDQ")


# ---------------------------------------------------------------------------- QDQ models
def test_qdq_model_imports_as_qnn_layers(qdq_model):
    g = vtakit.graph.from_onnx(qdq_model)
    ops = _ops(g)
    assert ops.count("qnn.conv2d") == 3 and ops.count("qnn.dense") == 1
    assert not {"Conv", "Gemm", "Relu"} & set(ops)           # every layer (and its ReLU) folded
    assert ops.count("qnn.quantize") == 1 and ops.count("qnn.dequantize") == 1   # float only at the boundaries
    assert ops[ops.index("qnn.conv2d") + 2] == "MaxPool"      # the max-pool runs on int8
    assert g.type_of(g.nodes[ops.index("MaxPool")].outputs[0]).dtype == "int8"
    for node in g.nodes:
        if node.op in ("qnn.conv2d", "qnn.dense"):
            m = g.constants[node.inputs[3]]
            assert 2 ** (MULTIPLIER_BITS - 1) <= m.max() < 2 ** MULTIPLIER_BITS
            assert node.attrs["clip"] == ((0, 127) if node.op == "qnn.conv2d" else (-128, 127))
    assert g.metadata == {"qdq_scales": "exact"}      # no qdq_scale_error, and the internal records are gone


def test_qdq_model_matches_onnxruntime(qdq_model):
    """onnxruntime requantises with float32 ``round_half_even(acc * M)``; the exact realisation differs only
    where an accumulator lies within about 2**(pre_shift-1) * M + 2**-15 * |y| of a rounding boundary (under
    0.5% of a layer's outputs), so a logit differs from onnxruntime's by at most one step, and rarely."""
    g = vtakit.graph.from_onnx(qdq_model)
    max_diff, differing, agree = _compare_digits(qdq_model, g)
    step = _logit_step(qdq_model)
    print(f"{qdq_model}: max |diff| {max_diff:.4f} (step {step:.4f}), {differing:.1%} of logits differ, "
          f"argmax agreement {agree:.0%}")
    assert max_diff <= step * 1.0001
    assert differing <= 0.12
    assert agree >= 0.99


def test_power2_scales_record_their_error_and_warn(qdq_model):
    with pytest.warns(UserWarning, match=r"largest relative scale error is"):
        g = vtakit.graph.from_onnx(qdq_model, qdq_scales="power2")
    errors = g.metadata[ERROR_KEY]
    assert set(errors) == {"conv1", "conv2", "conv3", "fc"}
    assert all(0 <= e <= 2 ** 0.5 - 1 for e in errors.values())   # the nearest power of two is that close
    _, _, agree = _compare_digits(qdq_model, g)
    assert agree >= 0.9


def test_asymmetric_activations_stay_in_float_and_match_onnxruntime(tmp_path_factory):
    path = _quantise(tmp_path_factory, False, "QDQ", symmetric=False)
    g = vtakit.graph.from_onnx(path)
    ops = _ops(g)
    assert "qnn.conv2d" not in ops and "qnn.dense" not in ops and ops.count("Conv") == 3
    max_diff, differing, agree = _compare_digits(path, g)
    assert max_diff <= _logit_step(path) * 1.0001 and differing <= 0.01 and agree == 1.0


def test_qoperator_model_names_its_contrib_ops(tmp_path_factory):
    path = _quantise(tmp_path_factory, False, "QOperator")
    with pytest.raises(UnsupportedOperatorError, match=r"com\.microsoft::QGemm") as info:
        vtakit.graph.from_onnx(path)
    assert "onnxruntime extensions" in str(info.value) and "quant_format=QuantFormat.QDQ" in str(info.value)


def test_every_contrib_op_is_listed_at_once():
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("QLinearAdd", ["a", "s", "z", "a", "s", "z", "s", "z"], ["b"], domain="com.microsoft",
                              name="add"),
             helper.make_node("QLinearGlobalAveragePool", ["b", "s", "z", "s", "z"], ["c"], domain="com.microsoft",
                              name="gap")]
    model = _model(nodes, [vi("a", TensorProto.INT8, [1, 4, 2, 2])], [vi("c", TensorProto.INT8, [1, 4, 1, 1])],
                   [_t("s", np.float32(0.1)), _t("z", np.int8(0))],
                   extra_opsets=[helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(UnsupportedOperatorError) as info:
        vtakit.graph.from_onnx(model)
    text = str(info.value)
    assert "2 contrib-domain" in text and "QLinearAdd (node 'add')" in text and "QLinearGlobalAveragePool" in text


def test_qdq_scales_must_be_known():
    with pytest.raises(GraphError, match="qdq_scales must be one of"):
        vtakit.graph.from_onnx(str(datasets.digits_model_path()), qdq_scales="nearest")
    graph = vtakit.graph.Graph([], [], [], metadata={"qdq_scales": "nearest"})
    with pytest.raises(GraphError, match="qdq_scales must be one of"):
        get_pass("FoldQDQ")(graph)
    with pytest.raises(GraphError, match="qdq_scales must be one of"):
        realise(np.array([0.01]), np.zeros(1), np.array([100]), "nearest")


def test_a_float_model_has_no_quantisation_metadata():
    g = vtakit.graph.from_onnx(str(datasets.digits_model_path()))
    assert g.metadata == {} and not any(n.op.startswith("qnn.") for n in g.nodes)


# ---------------------------------------------------------------------------- the realisation
@pytest.mark.parametrize("scale", [0.0123, 3.1e-4, 0.75, 1.7e-6])
def test_exact_realisation_cannot_overflow(scale):
    """With every input at the sign of its weight (the largest |acc| possible) the requantised value is still
    the rounded product: no int32 step wrapped."""
    rng = np.random.default_rng(7)
    w = rng.integers(-128, 128, size=(4, 3 * 3 * 64)).astype(np.int8)
    bias = rng.integers(-5000, 5000, size=4)
    r = realise(np.full(4, scale), bias, accumulator_bound(w))
    assert r is not None and r.multiplier is not None and r.error <= 2.0 ** -MULTIPLIER_BITS
    assert np.all((2 ** (MULTIPLIER_BITS - 1) <= r.multiplier) & (r.multiplier < 2 ** MULTIPLIER_BITS))
    x = np.where(w >= 0, 127, -128).astype(np.int64)
    acc = np.stack([(x * w.astype(np.int64)).sum(axis=1), -(x * w.astype(np.int64)).sum(axis=1)]) + bias
    got = requantize((acc - bias).astype(np.int32), r.addend, r.shift, (-128, 127), r.multiplier, r.pre_shift)
    want = np.clip(np.rint(acc * scale), -128, 127)
    assert np.abs(got.astype(int) - want).max() <= 1


def test_power2_realisation_and_its_error():
    r = realise(np.array([0.01, 0.01]), np.array([3, -3]), np.array([1000, 1000]), "power2")
    assert r.multiplier is None and r.shift == 7 and r.pre_shift == 0       # 2**-7 = 0.0078 is the nearest
    assert r.error == pytest.approx(abs(2.0 ** -7 / 0.01 - 1))
    assert list(r.addend) == [3 + 64, -3 + 64]                               # bias plus rounding
    mixed = realise(np.array([0.01, 0.04]), np.zeros(2), np.array([1000, 1000]), "power2")
    assert list(mixed.multiplier) == [1, 4] and mixed.shift == 7
    assert realise(np.array([0.0, 1.0]), np.zeros(2), np.array([1, 1])) is None


# ---------------------------------------------------------------------------- QOperator ops
def _qlinear_conv_model(dtype=np.int8, zp=0, per_channel=True):
    rng = np.random.default_rng(3)
    elem = TensorProto.INT8 if dtype == np.int8 else TensorProto.UINT8
    lo, hi = (-128, 127) if dtype == np.int8 else (0, 255)
    w = rng.integers(lo, hi + 1, size=(8, 3, 3, 3)).astype(dtype)
    w_scale = (rng.uniform(0.002, 0.004, 8) if per_channel else np.array([0.003])).astype(np.float32)
    inits = [_t("x_scale", np.float32(0.02)), _t("x_zp", dtype(zp)), _t("w", w), _t("w_scale", w_scale),
             _t("w_zp", np.full(w_scale.shape, zp, dtype)), _t("y_scale", np.float32(0.05)), _t("y_zp", dtype(zp)),
             _t("bias", rng.integers(-3000, 3000, 8).astype(np.int32))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp",
                                              "bias"], ["yq"], pads=[1, 1, 1, 1], strides=[2, 1], name="qconv"),
             helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"])]
    vi = helper.make_tensor_value_info
    return _model(nodes, [vi("x", TensorProto.FLOAT, [2, 3, 9, 7])],
                  [vi("y", TensorProto.FLOAT, None), vi("yq", elem, None)], inits)


@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinearconv_int8_is_a_qnn_conv2d_matching_onnxruntime(per_channel):
    model = _qlinear_conv_model(per_channel=per_channel)
    g = vtakit.graph.from_onnx(model)
    assert _ops(g) == ["qnn.quantize", "qnn.conv2d", "qnn.dequantize"]
    x = np.random.default_rng(0).normal(0, 1, (2, 3, 9, 7)).astype(np.float32)
    ref = _session(model).run(["yq"], {"x": x})[0]
    got = vtakit.graph.evaluate(g, {"x": x})["yq"]
    diff = np.abs(ref.astype(int) - got.astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() <= 0.01


def test_qlinearconv_uint8_with_zero_points_is_its_integer_definition():
    model = _qlinear_conv_model(np.uint8, zp=128)
    g = vtakit.graph.from_onnx(model)
    assert "qnn.conv2d" not in _ops(g) and "Conv" in _ops(g)
    x = np.random.default_rng(1).normal(0, 1, (2, 3, 9, 7)).astype(np.float32)
    ref = _session(model).run(["yq"], {"x": x})[0]
    np.testing.assert_array_equal(vtakit.graph.evaluate(g, {"x": x})["yq"], ref)


def test_qlinearmatmul_int8_is_a_qnn_dense_matching_onnxruntime():
    rng = np.random.default_rng(5)
    b = rng.integers(-128, 128, size=(32, 10)).astype(np.int8)
    inits = [_t("a_s", np.float32(0.03)), _t("z", np.int8(0)), _t("b", b), _t("b_s", np.float32(0.004)),
             _t("y_s", np.float32(0.07))]
    vi = helper.make_tensor_value_info
    model = _model([helper.make_node("QLinearMatMul", ["a", "a_s", "z", "b", "b_s", "z", "y_s", "z"], ["y"])],
                   [vi("a", TensorProto.INT8, [4, 32])], [vi("y", TensorProto.INT8, None)], inits)
    g = vtakit.graph.from_onnx(model)
    assert _ops(g) == ["qnn.dense"]
    a = rng.integers(-128, 128, size=(4, 32)).astype(np.int8)
    diff = np.abs(_session(model).run(None, {"a": a})[0].astype(int) - vtakit.graph.evaluate(g, {"a": a})["y"])
    assert diff.max() <= 1 and (diff > 0).mean() <= 0.05


def test_conv_integer_and_matmul_integer_are_exact():
    rng = np.random.default_rng(9)
    vi = helper.make_tensor_value_info
    conv = _model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])],
                  [vi("x", TensorProto.UINT8, [1, 2, 5, 5])], [vi("y", TensorProto.INT32, None)],
                  [_t("w", rng.integers(0, 256, (3, 2, 3, 3)).astype(np.uint8)), _t("xz", np.uint8(7)),
                   _t("wz", np.uint8(131))])
    x = rng.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    g = vtakit.graph.from_onnx(conv)
    assert g.type_of("y").dtype == "int32"
    np.testing.assert_array_equal(vtakit.graph.evaluate(g, {"x": x})["y"], _session(conv).run(None, {"x": x})[0])
    # per-channel weight zero points (onnxruntime refuses them; onnx's reference evaluator takes them)
    conv.graph.initializer[2].CopyFrom(_t("wz", np.array([120, 128, 131], np.uint8)))
    want = ReferenceEvaluator(conv).run(None, {"x": x})[0]
    np.testing.assert_array_equal(vtakit.graph.evaluate(vtakit.graph.from_onnx(conv), {"x": x})["y"], want)
    mm = _model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])],
                [vi("a", TensorProto.INT8, [3, 6])], [vi("y", TensorProto.INT32, None)],
                [_t("b", rng.integers(-128, 128, (6, 4)).astype(np.int8)), _t("az", np.int8(-3)),
                 _t("bz", np.array([1, 0, -2, 5], np.int8))])
    a = rng.integers(-128, 128, (3, 6)).astype(np.int8)
    np.testing.assert_array_equal(vtakit.graph.evaluate(vtakit.graph.from_onnx(mm), {"a": a})["y"],
                                  _session(mm).run(None, {"a": a})[0])


# ---------------------------------------------------------------------------- what a user can get wrong
def _one(node, x_type=TensorProto.FLOAT, shape=(1, 3, 4, 4), inits=(), inputs=None):
    vi = helper.make_tensor_value_info
    return _model([node], inputs or [vi("x", x_type, list(shape))], [vi("y", TensorProto.UNDEFINED, None)], inits)


@pytest.mark.parametrize("model, error, match", [
    (_one(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1),
          inits=[_t("s", np.full(3, 0.1, np.float32)), _t("z", np.zeros(3, np.int8))]),
     UnsupportedOperatorError, "per-axis quantisation of a float32 run-time tensor"),
    (_one(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]),
          inits=[_t("s", np.float32(0.1)), _t("z", np.int16(0))]),
     UnsupportedOperatorError, "to int16 is not supported"),
    (_one(helper.make_node("DequantizeLinear", ["x", "s"], ["y"]), inits=[_t("s", np.float32(0.1))]),
     UnsupportedOperatorError, "dequantising float32 is not supported"),
    (_one(helper.make_node("DequantizeLinear", ["x", "s"], ["y"]), x_type=TensorProto.INT8,
          inputs=[helper.make_tensor_value_info("x", TensorProto.INT8, [1, 3, 4, 4]),
                  helper.make_tensor_value_info("s", TensorProto.FLOAT, [])]),
     GraphError, "x_scale .* must be a constant"),
    (_one(helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1), x_type=TensorProto.INT8,
          inits=[_t("s", np.full(4, 0.1, np.float32))]),
     GraphError, "does not match axis 1"),
    (_one(helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1, block_size=2), x_type=TensorProto.INT8,
          inits=[_t("s", np.full(2, 0.1, np.float32))]),
     GraphError, "cannot block-quantise"),
    (_one(helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"]), x_type=TensorProto.UINT8, shape=(1, 3, 4),
          inits=[_t("w", np.ones((2, 3, 2), np.uint8)), _t("xz", np.uint8(1))]),
     UnsupportedOperatorError, "1-D ConvInteger is not supported"),
    (_one(helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"]), x_type=TensorProto.UINT8,
          inits=[_t("w", np.ones((2, 3, 2, 2), np.uint8)), _t("xz", np.ones(3, np.uint8))]),
     GraphError, "a zero point of shape \\[3\\] is not supported"),
])
def test_user_errors(model, error, match):
    with pytest.raises(error, match=match):
        vtakit.graph.from_onnx(model)


# ---------------------------------------------------------------------------- the CPU build
def test_llvm_build_of_a_qdq_model_equals_the_reference(qdq_model, tmp_path, monkeypatch):
    monkeypatch.setenv("VTAKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VTAKIT_BUILD_JOBS", "1")
    g = vtakit.graph.from_onnx(qdq_model)
    module = vtakit.graph.build(g, "llvm", cache_dir=tmp_path / "cache")
    x, _ = datasets.load_digits_test()
    for i in range(5):
        got = module.run({"input": x[i:i + 1]})[0]
        np.testing.assert_array_equal(got, vtakit.graph.evaluate(g, {"input": x[i:i + 1]})["logits"])


# ---------------------------------------------------------------------------- hand-written QDQ patterns
def _qdq_model(body, inputs, out, inits, shapes):
    """``body`` (float nodes) between QuantizeLinear/DequantizeLinear of each input and of ``out``."""
    vi = helper.make_tensor_value_info
    nodes = []
    for name in inputs:
        nodes += [helper.make_node("QuantizeLinear", [name, f"s_{name}", "z"], [f"{name}_q"]),
                  helper.make_node("DequantizeLinear", [f"{name}_q", f"s_{name}", "z"], [f"{name}_d"])]
    nodes += body
    nodes += [helper.make_node("QuantizeLinear", [out, "s_y", "z"], ["y_q"]),
              helper.make_node("DequantizeLinear", ["y_q", "s_y", "z"], ["y"])]
    return _model(nodes, [vi(n, TensorProto.FLOAT, list(shapes[n])) for n in inputs],
                  [vi("y", TensorProto.FLOAT, None), vi("y_q", TensorProto.INT8, None)],
                  [*inits, _t("z", np.int8(0))])


def _add_model(s_a, s_b, s_y, relu=False):
    body = [helper.make_node("Add", ["a_d", "b_d"], ["s"], name="add")]
    if relu:
        body.append(helper.make_node("Relu", ["s"], ["r"]))
    return _qdq_model(body, ["a", "b"], "r" if relu else "s",
                      [_t("s_a", np.float32(s_a)), _t("s_b", np.float32(s_b)), _t("s_y", np.float32(s_y))],
                      {"a": (2, 8, 4, 4), "b": (2, 8, 4, 4)})


def _run_both(model, graph, feeds):
    return _session(model).run(["y_q"], feeds)[0].astype(int), vtakit.graph.evaluate(graph, feeds)["y_q"].astype(int)


@pytest.mark.parametrize("scales, relu", [((0.04, 0.02, 0.01), True), ((0.1, 0.05, 0.1), False),
                                          ((0.05, 0.1, 0.2), False)])
def test_add_with_power_of_two_ratios_is_a_qnn_add(scales, relu):
    """Left shifts are exact; a right shift rounds ties up (the qnn rule) where onnxruntime rounds them to even,
    so the two differ by one step exactly at ties (the sum of the rescaled inputs ending in .5)."""
    model = _add_model(*scales, relu=relu)
    g = vtakit.graph.from_onnx(model)
    assert _ops(g) == ["qnn.quantize", "qnn.quantize", "qnn.add", "qnn.dequantize"]
    rng = np.random.default_rng(0)
    feeds = {k: rng.normal(0, 3, (2, 8, 4, 4)).astype(np.float32) for k in ("a", "b")}
    ref, got = _run_both(model, g, feeds)
    env = vtakit.graph.evaluate(g, feeds, keep_all=True)
    s_a, s_b, s_y = scales
    exact = env["a_q"] * (s_a / s_y) + env["b_q"] * (s_b / s_y)
    if relu:
        exact = np.maximum(exact, 0)
    tie = np.isclose(exact - np.floor(exact), 0.5)
    assert np.abs(ref - got).max() <= 1 and np.all(tie[ref != got])
    assert np.array_equal(got, np.clip(np.floor(exact + 0.5), -128, 127))


def test_add_with_other_ratios_stays_in_float_unless_power2():
    model = _add_model(0.1, 0.07, 0.1)
    g = vtakit.graph.from_onnx(model)
    assert "qnn.add" not in _ops(g) and "Add" in _ops(g)
    with pytest.warns(UserWarning, match="powers of two"):
        g2 = vtakit.graph.from_onnx(model, qdq_scales="power2")
    assert "qnn.add" in _ops(g2)
    assert g2.metadata[ERROR_KEY]["add"] == pytest.approx(abs(0.5 / (np.float32(0.07) / np.float32(0.1)) - 1),
                                                          rel=1e-6)


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_qdq_matmul_and_gemm_become_qnn_dense(op):
    rng = np.random.default_rng(4)
    w_q = rng.integers(-127, 128, size=(24, 6)).astype(np.int8)           # (K, N): MatMul's and Gemm's B
    w_dq = helper.make_node("DequantizeLinear", ["w_q", "s_w", "z"], ["w"])
    layer = (helper.make_node("MatMul", ["x_d", "w"], ["m"], name="fc") if op == "MatMul" else
             helper.make_node("Gemm", ["x_d", "w", "bias"], ["m"], name="fc", alpha=1.0, beta=1.0))
    bias_dq = helper.make_node("DequantizeLinear", ["bias_q", "s_bias", "z32"], ["bias"])
    inits = [_t("s_x", np.float32(0.02)), _t("s_w", np.float32(0.005)), _t("s_y", np.float32(0.04)), _t("w_q", w_q),
             _t("bias_q", rng.integers(-900, 900, 6).astype(np.int32)), _t("s_bias", np.float32(0.02 * 0.005)),
             _t("z32", np.int32(0))]
    body = [w_dq, bias_dq, layer] if op == "Gemm" else [w_dq, layer]
    model = _qdq_model(body, ["x"], "m", inits, {"x": (5, 24)})
    g = vtakit.graph.from_onnx(model)
    assert _ops(g) == ["qnn.quantize", "qnn.dense", "qnn.dequantize"]
    feeds = {"x": rng.normal(0, 1, (5, 24)).astype(np.float32)}
    ref, got = _run_both(model, g, feeds)
    assert np.abs(ref - got).max() <= 1 and (ref != got).mean() <= 0.05


def test_qlinearconv_under_power2_records_its_error():
    with pytest.warns(UserWarning, match=r"layer 'qconv'"):
        g = vtakit.graph.from_onnx(_qlinear_conv_model(per_channel=False), qdq_scales="power2")
    node = g.nodes[_ops(g).index("qnn.conv2d")]
    assert len(node.inputs) == 3 and node.attrs["pre_shift"] == 0           # a plain shift: no multiplier
    m = np.float32(0.02) * np.float32(0.003) / np.float32(0.05)
    assert g.metadata[ERROR_KEY] == {"qconv": pytest.approx(abs(2.0 ** -node.attrs["shift"] / m - 1), rel=1e-5)}


def test_power2_layers_run_on_the_accelerator(tmp_path_factory, tmp_path, monkeypatch):
    """The default accelerator configuration has no ALU multiplier: exact (fixed-point) layers run on the CPU,
    power-of-two per-tensor layers on the accelerator (the functional simulator here), with the same bits."""
    monkeypatch.setenv("VTAKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VTAKIT_BUILD_JOBS", "1")
    path = _quantise(tmp_path_factory, False, "QDQ")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = vtakit.graph.from_onnx(path, qdq_scales="power2")
    module = vtakit.graph.build(g, "vta", cache_dir=tmp_path / "cache")
    assert module.is_accelerated
    assert {s.name for s in module.plan.steps if s.target == "vta"} == {"conv1", "conv2", "conv3", "fc"}
    x, _ = datasets.load_digits_test()
    for i in range(3):
        np.testing.assert_array_equal(module.run({"input": x[i:i + 1]})[0],
                                      vtakit.graph.evaluate(g, {"input": x[i:i + 1]})["logits"])
