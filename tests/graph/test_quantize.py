"""vtakit.graph.quantize: post-training int8 quantisation, its options and calibration forms, its
errors, and the CPU integer path (the llvm build equals the numpy reference bit for bit)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import vtakit.graph as vg
from vtakit.compiler.graph.op import run_reference
from vtakit.compiler.graph.quantize.calibration import kl_threshold, percentile_threshold
from vtakit.compiler.graph.quantize.scales import fixed_point
from vtakit.compiler.graph.zoo import ModelBuilder
from vtakit.errors import GraphError


# ---------------------------------------------------------------------------- small models
def _model(build, inputs, outputs, seed=0):
    b = ModelBuilder(seed)
    out = build(b)
    if isinstance(out, str):
        b.nodes.append(helper.make_node("Identity", [out], ["out"]))
    graph = helper.make_graph(b.nodes, "net",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              b.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return vg.from_onnx(model)


def _cnn(b: ModelBuilder) -> str:
    """conv-bn-relu, grouped dilated conv, residual add + relu, maxpool, clip, avgpool, flatten, gemm."""
    x = b.node("Relu", [b.batch_norm(b.conv("x", 3, 8, 3), 8)])
    y = b.conv(x, 8, 8, 3, pad=[2, 2, 2, 2], group=2, bias=True)
    b.nodes[-1].attribute.append(helper.make_attribute("dilations", [2, 2]))
    y = b.node("Relu", [y])
    z = b.node("Relu", [b.node("Add", [b.conv(y, 8, 8, 1, bias=True), x])])
    z = b.node("MaxPool", [z], kernel_shape=[2, 2], strides=[2, 2])
    z = b.conv(z, 8, 8, 3, group=8, bias=True)                      # depthwise
    z = b.node("Clip", [z, b.constant(np.float32(0), "lo"), b.constant(np.float32(6), "hi")])
    z = b.node("Flatten", [b.node("GlobalAveragePool", [z])], axis=1)
    w = b.constant(b.he_normal((5, 8), 8), "fc_w")
    c = b.constant((b.rng.standard_normal(5) * 0.1).astype(np.float32), "fc_b")
    z = b.node("Gemm", [z, w, c], transB=1, alpha=0.5, beta=2.0)
    return b.node("MatMul", [z, b.constant(b.he_normal((5, 4), 5), "mm")])


@pytest.fixture(scope="module")
def cnn():
    return _model(_cnn, [("x", [1, 3, 12, 12])], ["out"])


def _data(n, shape=(1, 3, 12, 12), seed=1):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


def _ops(g):
    return [n.op for n in g.nodes]


def _assert_bit_exact(q, x, end_to_end=False):
    """Every node of the llvm build, fed the build's own inputs, computes what its numpy reference computes:
    bit for bit for the integer tensors and the qnn operators, to float rounding for float operators (whose
    summation order differs). ``end_to_end``: every integer tensor of the build also equals the reference run
    from the graph inputs (true when no float operator feeds a qnn.quantize)."""
    ref = vg.evaluate(q, x, keep_all=True)
    got = vg.build(q, "llvm", disabled_passes=("FuseOps",)).debug_run(x)
    checked = 0
    for node in q.nodes:
        ins = [(got[i] if i in got else ref[i]) if i else None for i in node.inputs]
        for out, want in zip(node.outputs, run_reference(node, ins)):
            if out not in got:
                continue
            assert got[out].dtype == want.dtype, out
            if node.op.startswith("qnn.") or np.issubdtype(want.dtype, np.integer):
                np.testing.assert_array_equal(got[out], want, err_msg=f"{node.op} {out}")
                checked += 1
            else:
                np.testing.assert_allclose(got[out], want, rtol=1e-5, atol=1e-5, err_msg=f"{node.op} {out}")
            if end_to_end and np.issubdtype(want.dtype, np.integer):
                np.testing.assert_array_equal(got[out], ref[out], err_msg=f"end to end: {node.op} {out}")
    assert checked >= sum(n.op.startswith("qnn.") for n in q.nodes) - 1
    return ref


def _snr(f, q):
    return 10 * np.log10((f ** 2).sum() / max(((f - q) ** 2).sum(), 1e-30))


# ---------------------------------------------------------------------------- structure and exactness
def test_default_quantisation_structure(cnn):
    q = vg.quantize(cnn, _data(16), fuse_residual=False)      # the residual add kept apart (fused: test_vta_target)
    ops = _ops(q)
    assert ops.count("qnn.conv2d") == 3 and ops.count("Conv") == 1         # the first conv stays float
    assert ops.count("qnn.add") == 1 and ops.count("qnn.dense") == 2       # Gemm and MatMul
    assert "Relu" not in ops[ops.index("qnn.conv2d"):ops.index("qnn.add") + 1]   # folded into the clips
    assert "Clip" not in ops
    assert q.types[q.outputs[0]].dtype == "float32" and q.outputs == cnn.outputs
    by_op = {n.op: n for n in q.nodes}
    assert by_op["MaxPool"].outputs[0].endswith("_int8")                    # maxpool on int8
    assert q.types[by_op["GlobalAveragePool"].inputs[0]].dtype == "float32"  # avg pool in float
    depthwise = [n for n in q.nodes if n.op == "qnn.conv2d" and n.attrs["group"] == 8][0]
    assert depthwise.attrs["clip"][0] == 0 and depthwise.attrs["clip"][1] <= 127
    dilated = [n for n in q.nodes if n.op == "qnn.conv2d" and n.attrs["group"] == 2][0]
    assert dilated.attrs["dilations"] == (2, 2)
    for node in q.nodes:
        if node.op in ("qnn.conv2d", "qnn.dense"):
            assert len(node.inputs) == 3 and -32 <= node.attrs["shift"] <= 31
            assert q.constants[node.inputs[1]].dtype == np.int8 and q.constants[node.inputs[2]].dtype == np.int32
        if node.op == "qnn.quantize":
            scale = node.attrs["scale"]
            assert scale == 2.0 ** round(np.log2(scale))                     # power-of-two scales


OPTION_SETS = [dict(), dict(method="percentile"), dict(method="kl"), dict(scales="float"),
               dict(weight_granularity="channel"), dict(weight_granularity="channel", scales="float", method="kl"),
               dict(skip_first_conv=False, percentile=99.0, method="percentile")]


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_llvm_integer_path_is_bit_exact_and_close_to_float(cnn, options):
    q = vg.quantize(cnn, _data(16), **options)
    x = {"x": _data(1, seed=7)[0]}
    ref = _assert_bit_exact(q, x)
    # kl clips the tiny head tensors (4 or 5 values a sample) hard: it is meant for large activations
    assert _snr(vg.evaluate(cnn, x)["out"], ref["out"]) > (5 if options.get("method") == "kl" else 12)


def _random_net(seed):
    """A random stack of convolutions (groups, dilations, strides, pads, biases), ReLUs, residual adds,
    max pools and a dense head: every tensor between the input and the output is int8 when quantised."""
    rng = np.random.default_rng(seed)

    def build(b):
        x, c, size = "x", 4, 10
        for _ in range(3):
            group = int(rng.choice([g for g in (1, 2, 4) if c % g == 0]))
            out = group * int(rng.integers(1, 4))
            k, dil, stride = int(rng.choice([1, 3])), int(rng.integers(1, 3)), int(rng.integers(1, 3))
            pad = (k - 1) * dil // 2
            y = b.conv(x, c, out, k, stride, [pad] * 4, group, bias=bool(rng.integers(2)))
            b.nodes[-1].attribute.append(helper.make_attribute("dilations", [dil, dil]))
            size = (size - 1) // stride + 1
            if rng.integers(2):
                y = b.node("Relu", [y])
            if out == c and stride == 1 and rng.integers(2):
                y = b.node("Add", [y, x])
                y = b.node("Relu", [y]) if rng.integers(2) else y
            x, c = y, out
        if size >= 2 and rng.integers(2):
            x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
            size //= 2
        x = b.node("Flatten", [x], axis=1)
        return b.node("MatMul", [x, b.constant(b.he_normal((c * size * size, 6), c * size * size), "head")])
    return _model(build, [("x", [1, 4, 10, 10])], ["out"], seed=seed)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("options", [dict(), dict(weight_granularity="channel", scales="float")],
                         ids=["power2", "multiplier"])
def test_random_graphs_bit_exact_end_to_end(seed, options):
    g = _random_net(seed)
    data = _data(8, (1, 4, 10, 10), seed=seed)
    q = vg.quantize(g, data, skip_first_conv=False, **options)
    assert "Conv" not in _ops(q)
    x = {"x": _data(1, (1, 4, 10, 10), seed=100 + seed)[0]}
    ref = _assert_bit_exact(q, x, end_to_end=True)
    assert _snr(vg.evaluate(g, x)["out"], ref["out"]) > 10


def test_multiplier_form(cnn):
    q = vg.quantize(cnn, _data(16), weight_granularity="channel")
    for node in q.nodes:
        if node.op in ("qnn.conv2d", "qnn.dense"):
            m = q.constants[node.inputs[3]]
            assert m.dtype == np.int32 and m.max() < 2 ** 15 and 2 ** 14 <= m.max() and m.min() >= 0
            assert 0 <= node.attrs["pre_shift"] <= 31 and -32 <= node.attrs["shift"] <= 31
    q = vg.quantize(cnn, _data(16), scales="float")
    conv = next(n for n in q.nodes if n.op == "qnn.conv2d")
    m = q.constants[conv.inputs[3]]
    assert len(set(m.tolist())) == 1 and 2 ** 14 <= m[0] < 2 ** 15   # per-tensor: equal multipliers


def test_fixed_point_bound():
    real = np.array([2.0 ** -9 * 1.3, 2.0 ** -12])
    m, shift, pre = fixed_point(real, np.array([2.0 ** 20, 2.0 ** 20]), "layer")
    assert 2 ** 14 <= m.max() < 2 ** 15
    assert (2.0 ** 20 / 2 ** pre) * m.max() <= 2 ** 29
    t = np.int64(2 ** 20 - 1)
    assert abs(((t >> pre) * int(m[0]) + (1 << (shift - 1)) >> shift) - t * real[0]) <= 2


def test_power2_shift_and_addend():
    """shift = log2(s_out) - log2(s_in) - log2(s_w) and addend = round(b / (s_in s_w)) + 2**(shift-1)."""
    def build(b):
        w = b.constant(np.array([[0.5, -0.25], [1.0, 0.125]], np.float32), "w")
        c = b.constant(np.array([0.3, -1.0], np.float32), "c")
        return b.node("Gemm", ["x", w, c], transB=1)
    g = _model(build, [("x", [1, 2])], ["out"])
    cal = np.array([[[1.0, -0.5]], [[0.25, 0.75]]], np.float32)  # max |x| = 1 -> s_in = 2**-6
    q = vg.quantize(g, cal)
    dense = next(n for n in q.nodes if n.op == "qnn.dense")
    quant = next(n for n in q.nodes if n.op == "qnn.quantize")
    assert quant.attrs["scale"] == 2.0 ** -6
    # max |w| = 1 -> s_w = 2**-6; max |out| = |1*1 - 0.5*0.125 - 1| ... out scale from the calibration
    out_max = np.abs(vg.evaluate(g, {"x": cal[0]})["out"]).max()
    out_max = max(out_max, np.abs(vg.evaluate(g, {"x": cal[1]})["out"]).max())
    e_out = int(np.ceil(np.log2(out_max / 127)))
    shift = e_out + 6 + 6
    assert dense.attrs["shift"] == shift
    np.testing.assert_array_equal(q.constants[dense.inputs[2]],
                                  np.rint(np.array([0.3, -1.0]) * 2 ** 12).astype(np.int32) + (1 << (shift - 1)))
    np.testing.assert_array_equal(q.constants[dense.inputs[1]], [[32, -16], [64, 8]])


def test_add_of_float_and_int8_and_passthrough_ops():
    def build(b):
        a = b.node("Relu", [b.conv("x", 2, 4, 1)])
        s = b.node("Add", [a, "x2"])                   # x2 float: quantised for the add
        r = b.node("Reshape", [s, b.constant(np.array([1, -1], np.int64), "shape")])
        r = b.node("Identity", [b.node("Relu", [r])])
        return b.node("Sigmoid", [r])                 # float: dequantised before it
    g = _model(build, [("x", [1, 2, 3, 3]), ("x2", [1, 4, 3, 3])], ["out"])
    cal = {"x": _data(4, (1, 2, 3, 3)), "x2": _data(4, (1, 4, 3, 3), seed=3)}
    q = vg.quantize(g, cal, skip_first_conv=False)
    ops = _ops(q)
    assert ops.count("qnn.add") == 1 and ops.count("qnn.quantize") == 2 and ops.count("qnn.dequantize") == 1
    for op in ("Reshape", "Identity", "Relu"):
        node = next(n for n in q.nodes if n.op == op)
        assert q.types[node.outputs[0]].dtype == "int8"
    x = {"x": cal["x"][0], "x2": cal["x2"][0]}
    ref = _assert_bit_exact(q, x, end_to_end=True)
    assert _snr(vg.evaluate(g, x)["out"], ref["out"]) > 20


def test_float_add_stays_float_and_graph_without_quantisable_ops():
    def build(b):
        return b.node("Add", [b.node("Sigmoid", ["x"]), "x"])
    g = _model(build, [("x", [1, 4])], ["out"])
    q = vg.quantize(g, _data(3, (1, 4)))
    assert not [n for n in q.nodes if n.op.startswith("qnn.")]


# ---------------------------------------------------------------------------- calibration forms
def _single_conv():
    def build(b):
        return b.node("Relu", [b.conv("x", 1, 2, 3, bias=True)])
    return _model(build, [("x", [1, 1, 6, 6])], ["out"])


def _scale(q):
    return next(n for n in q.nodes if n.op == "qnn.quantize").attrs["scale"]


def test_calibration_forms_agree(tmp_path):
    g = _single_conv()
    data = _data(5, (1, 1, 6, 6))              # (5, 1, 1, 1, 6, 6): one more dimension
    stacked = data[:, 0]                        # (5, 1, 6, 6): samples along the batch axis
    np.savez(tmp_path / "cal.npz", x=stacked)
    forms = [data, stacked, stacked.astype(np.float64), {"x": stacked}, [{"x": s} for s in data],
             list(data), iter([stacked[:2], stacked[2:]]), str(tmp_path / "cal.npz"), tmp_path / "cal.npz"]
    scales = {_scale(vg.quantize(g, form, skip_first_conv=False)) for form in forms}
    assert len(scales) == 1


@pytest.mark.parametrize("calibration, match", [
    (np.zeros((3, 1, 2, 6, 6), np.float32), r"input 'x' has shape \[3, 1, 2, 6, 6\].*float32\[1x1x6x6\]"),
    (np.zeros((3, 1, 6, 6), np.int32), r"input 'x' is int32.*must be a float array"),
    (np.zeros((3, 1, 6, 6), bool), r"input 'x' is bool"),
    (np.zeros((0, 1, 6, 6), np.float32), r"calibration data is empty"),
    ([], r"calibration data is empty"),
    ({"y": np.zeros((2, 1, 6, 6), np.float32)}, r"\['y'\], which are not inputs.*\['x'\]"),
    ({}, r"lacks the input\(s\) \['x'\]"),
    ("/nonexistent/cal.npz", r"calibration file '/nonexistent/cal.npz' does not exist"),
    (3.5, r"calibration must be an array, a dict"),
    ([3.5], r"a calibration item must be a dict of arrays or an array, got float"),
])
def test_bad_calibration(calibration, match):
    with pytest.raises(GraphError, match=match):
        vg.quantize(_single_conv(), calibration, skip_first_conv=False)


def test_bad_calibration_for_two_inputs(tmp_path):
    def build(b):
        return b.node("Add", ["a", "b"])
    g = _model(build, [("a", [1, 2]), ("b", [1, 2])], ["out"])
    with pytest.raises(GraphError, match=r"serves a one-input model only.*\['a', 'b'\]"):
        vg.quantize(g, np.zeros((2, 1, 2), np.float32))
    with pytest.raises(GraphError, match=r"serves a one-input model only"):
        vg.quantize(g, [np.zeros((1, 2), np.float32)])
    with pytest.raises(GraphError, match=r"different numbers of samples"):
        vg.quantize(g, {"a": np.zeros((2, 1, 2), np.float32), "b": np.zeros((3, 1, 2), np.float32)})
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(GraphError, match=r"cannot read the calibration file"):
        vg.quantize(g, tmp_path / "bad.npz")


def test_calibration_of_an_integer_input_must_match_its_dtype():
    def build(b):
        f = b.node("Cast", ["x"], to=TensorProto.FLOAT)
        return b.node("MatMul", [f, b.constant(np.ones((2, 2), np.float32), "w")])
    b = ModelBuilder(0)
    build(b)
    b.nodes.append(helper.make_node("Identity", [b.nodes[-1].output[0]], ["out"]))
    graph = helper.make_graph(b.nodes, "net", [helper.make_tensor_value_info("x", TensorProto.INT32, [1, 2])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], b.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    g = vg.from_onnx(model)
    with pytest.raises(GraphError, match=r"input 'x' is float32, the input is int32\[1x2\]"):
        vg.quantize(g, np.zeros((2, 1, 2), np.float32))
    q = vg.quantize(g, np.arange(8, dtype=np.int32).reshape(4, 1, 2))
    assert "qnn.dense" in _ops(q)


def test_non_finite_calibration_is_an_error():
    data = _data(2, (1, 1, 6, 6))
    data[1, 0, 0, 0, 0] = np.nan
    with pytest.raises(GraphError, match=r"tensor 'x' is not finite"):
        vg.quantize(_single_conv(), data, skip_first_conv=False)


def test_zero_calibration_gives_scale_one():
    q = vg.quantize(_single_conv(), np.zeros((2, 1, 1, 6, 6), np.float32), skip_first_conv=False)
    assert _scale(q) == 1.0


# ---------------------------------------------------------------------------- options
@pytest.mark.parametrize("options, match", [
    (dict(method="minmax"), r"method='minmax' is not supported; choose one of 'max', 'percentile', 'kl'"),
    (dict(weight_granularity="axis"), r"weight_granularity='axis'.*'tensor', 'channel'"),
    (dict(scales="pow2"), r"scales='pow2'.*'power2', 'float'"),
    (dict(percentile=0), r"percentile=0 must be a number in \(0, 100\]"),
    (dict(percentile=100.5), r"percentile=100.5"),
    (dict(percentile="99"), r"percentile='99'"),
    (dict(skip_first_conv=1), r"skip_first_conv=1 must be True or False"),
    (dict(skip_first_layer=True), r"unknown option\(s\) \['skip_first_layer'\]; the options are method, percentile, "
                                  r"weight_granularity, scales, skip_first_conv"),
])
def test_bad_options(options, match):
    with pytest.raises(GraphError, match=match):
        vg.quantize(_single_conv(), _data(2, (1, 1, 6, 6)), **options)


def test_not_a_graph():
    with pytest.raises(GraphError, match=r"expected a vtakit.graph.Graph, got ModelProto"):
        vg.quantize(vg.zoo.resnet18(image=32, classes=4), _data(1, (1, 3, 32, 32)))


def test_shift_out_of_range_names_the_layer():
    def build(b):
        w = b.constant(np.full((2, 2), 1e-12, np.float32), "w")
        c = b.constant(np.full(2, 1e6, np.float32), "c")
        return b.node("Gemm", ["x", w, c])
    g = _model(build, [("x", [1, 2])], ["out"])
    with pytest.raises(GraphError, match=r"layer 'Gemm_\d+' needs a requantisation shift of \d+, outside the "
                                         r"ALU's shift range \[-32, 31\]"):
        vg.quantize(g, _data(2, (1, 2)))
    with pytest.raises(GraphError, match=r"layer 'Gemm_\d+' needs a requantisation (pre_)?shift of \d+"):
        vg.quantize(g, _data(2, (1, 2)), scales="float")


def test_add_shift_out_of_range_names_the_layer():
    def build(b):
        a = b.conv("x", 1, 1, 1)
        return b.node("Add", [a, "y"])
    g = _model(build, [("x", [1, 1, 2, 2]), ("y", [1, 1, 2, 2])], ["out"])
    cal = {"x": _data(2, (1, 1, 2, 2)), "y": _data(2, (1, 1, 2, 2)) * 1e12}
    with pytest.raises(GraphError, match=r"layer 'Add_\d+' needs lshift_b = \d+, outside \[0, 31\]"):
        vg.quantize(g, cal, skip_first_conv=False)


def test_bias_too_large_for_int32():
    def build(b):
        w = b.constant(np.ones((2, 2), np.float32), "w")
        c = b.constant(np.full(2, 2e6, np.float32), "c")   # b / (s_in s_w) ~ 2**32 with a shift of about 25
        return b.node("Gemm", ["x", w, c])
    g = _model(build, [("x", [1, 2])], ["out"])
    with pytest.raises(GraphError, match=r"layer 'Gemm_\d+': the int32 bias .* does not fit int32"):
        vg.quantize(g, _data(2, (1, 2)))


# ---------------------------------------------------------------------------- thresholds
def test_thresholds():
    hist = np.zeros(2048, np.int64)
    hist[:1000] = 100
    hist[2000] = 1                       # one outlier
    assert percentile_threshold(hist, 2048.0, 99.99) < 1001
    assert percentile_threshold(hist, 2048.0, 100) == 2001
    assert kl_threshold(hist, 2048.0) > 2000          # a uniform range is represented exactly: no clipping
    x = np.abs(np.random.default_rng(0).laplace(size=200_000))
    x[:5] *= 40                                        # a heavy tail
    amax = float(x.max())
    heavy, _ = np.histogram(x, bins=2048, range=(0, amax))
    assert kl_threshold(heavy, amax) < amax / 4
    assert kl_threshold(np.zeros(2048), 5.0) == 5.0


# ---------------------------------------------------------------------------- networks
def test_digits_accuracy_within_one_point_of_float():
    from vtakit.datasets import digits_model_path, load_digits_calibration, load_digits_test
    g = vg.from_onnx(onnx.load(str(digits_model_path())))
    q = vg.quantize(g, load_digits_calibration())
    xs, ys = load_digits_test()
    fm, qm = vg.build(g, "llvm"), vg.build(q, "llvm")
    fp = np.array([fm.run({"input": xs[i:i + 1]})[0].argmax() for i in range(len(xs))])
    qp = np.array([qm.run({"input": xs[i:i + 1]})[0].argmax() for i in range(len(xs))])
    assert len(ys) == 450
    assert (qp == ys).mean() >= (fp == ys).mean() - 0.01


@pytest.mark.slow   # about 8 s with a cold kernel cache
def test_resnet18_small_bit_exact():
    g = vg.from_onnx(vg.zoo.resnet18(image=32, classes=10))
    q = vg.quantize(g, _data(4, (1, 3, 32, 32)))
    ops = _ops(q)
    fused = sum(n.op == "qnn.conv2d" and len(n.inputs) > 4 for n in q.nodes)     # residual adds fused into convs
    assert ops.count("qnn.conv2d") == 19 and ops.count("qnn.add") + fused == 8 and ops.count("qnn.dense") == 1
    x = {"data": _data(1, (1, 3, 32, 32), seed=9)[0]}
    ref = _assert_bit_exact(q, x)
    assert _snr(vg.evaluate(g, x)["logits"], ref["logits"]) > 10


@pytest.mark.slow
@pytest.mark.parametrize("options", [dict(), dict(method="kl", weight_granularity="channel", scales="float")])
def test_resnet18_224_bit_exact(options):
    g = vg.from_onnx(vg.zoo.resnet18())
    q = vg.quantize(g, _data(4, (1, 3, 224, 224)), **options)
    _assert_bit_exact(q, {"data": _data(1, (1, 3, 224, 224), seed=9)[0]})
