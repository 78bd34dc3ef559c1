"""Whole networks against onnxruntime: ResNet-18 (onnx.helper, separate BatchNormalization) and every
``light_*`` model shipped in the onnx wheel, each checked on its shipped input and output and with
seeded random weights in place of its ``ConstantOfShape`` weights (logits compared to onnxruntime).

Each model is compiled once per test session (module-scoped fixtures); the kernels are shared by
both checks, since weights are kernel arguments. The 10-input sweeps of the light models, and the
two models that take longest to compile, are marked slow."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from vtakit import graph as vg
from vtakit.compiler.graph.zoo import resnet18

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
# the three whose compile (and, for VGG-19, 550 MB of random weights) takes longest are slow
LIGHT = ["bvlc_alexnet", "zfnet512", "squeezenet", "shufflenet", "resnet50", "inception_v1",
         *(pytest.param(name, marks=pytest.mark.slow) for name in ("vgg19", "inception_v2", "densenet121"))]


def _onnxruntime(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _close(got: np.ndarray, want: np.ndarray, tol: float = 1e-4) -> None:
    scale = float(np.abs(want).max())
    assert scale > 0 and np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


# -- ResNet-18 ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet():
    model = resnet18(seed=0)
    return model, vg.build(vg.from_onnx(model)), _onnxruntime(model)


def test_resnet18_matches_onnxruntime_on_ten_inputs(resnet):
    model, module, session = resnet
    for seed in range(10):
        x = np.random.default_rng(seed).standard_normal((1, 3, 224, 224)).astype(np.float32)
        _close(module.run({"data": x})[0], session.run(None, {"data": x})[0])


def test_resnet18_runs_as_fused_kernels(resnet):
    _, module, _ = resnet
    x = np.zeros((1, 3, 224, 224), np.float32)
    rows = module.profile([x]).layers
    assert len(rows) == module.num_kernels <= 24
    standalone = [r.name for r in rows if r.ops in (("BatchNormalization",), ("Add",), ("Relu",))]
    assert standalone == [] and not any("BatchNormalization" in r.ops for r in rows)
    stats = module.stats
    assert stats.arena_bytes <= 1.5 * stats.lower_bound_bytes


def test_resnet18_rebuild_and_reload_compile_nothing(resnet, tmp_path):
    model, module, _ = resnet
    again = vg.build(vg.from_onnx(model))
    assert again.stats.compiled == 0 and again.stats.unique_kernels == module.stats.unique_kernels
    module.save(tmp_path / "r18.vtapkg")
    loaded = vg.load(tmp_path / "r18.vtapkg")
    x = np.random.default_rng(11).standard_normal((1, 3, 224, 224)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run([x])[0], module.run([x])[0])


# -- the light models shipped with onnx --------------------------------------------------------------
def _light(name: str) -> onnx.ModelProto:
    return onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx"))


def _data_input(model: onnx.ModelProto) -> onnx.ValueInfoProto:
    inits = {t.name for t in model.graph.initializer}
    (value,) = [v for v in model.graph.input if v.name not in inits]
    return value


def _shape(value: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in value.type.tensor_type.shape.dim)


def _random_weight(positive: bool, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """He-normal for kernels, around 1 for batch-norm scales and variances, small for biases."""
    if len(shape) >= 2:
        return (rng.standard_normal(shape) * np.sqrt(2.0 / max(1, int(np.prod(shape[1:]))))).astype(np.float32)
    if positive:
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    return (0.1 * rng.standard_normal(shape)).astype(np.float32)


def _with_random_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """``model`` with each ConstantOfShape weight replaced by a seeded random initializer, and the
    Softmax's input (the logits) as an extra output."""
    rng = np.random.default_rng(seed)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    shapes = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    positive = {n.input[k] for n in g.node if n.op_type == "BatchNormalization" for k in (1, 4)}
    keep = []
    for node in g.node:
        if node.op_type == "ConstantOfShape":
            shape = tuple(int(d) for d in shapes[node.input[0]])
            value = _random_weight(node.output[0] in positive, shape, rng)
            g.initializer.append(numpy_helper.from_array(value, node.output[0]))
            g.input.append(helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, shape))
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    (softmax,) = [n for n in g.node if n.op_type == "Softmax"] or [None]
    if softmax is not None:
        g.output.insert(0, helper.make_tensor_value_info(softmax.input[0], onnx.TensorProto.FLOAT, None))
    return model


@pytest.fixture(scope="module", params=LIGHT)
def light(request):
    name = request.param
    randomized = _with_random_weights(_light(name), seed=1)
    return name, randomized, vg.build(vg.from_onnx(randomized))


def _check_shipped(name: str) -> None:
    """The shipped model on the input onnx's test runner feeds gives the shipped output."""
    model = _light(name)
    shape = _shape(_data_input(model))
    n = int(np.prod(shape))
    x = (np.arange(n).reshape(shape) / n).astype(np.float32)
    want = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT_DIR, f"light_{name}_output_0.pb")))
    np.testing.assert_allclose(vg.build(vg.from_onnx(model)).run([x])[0], want, rtol=1e-3, atol=1e-7)


def _check_random_weights(light, seeds) -> None:
    _, model, module = light
    session = _onnxruntime(model)
    data = _data_input(model)
    for seed in seeds:
        x = np.random.default_rng(seed).standard_normal(_shape(data)).astype(np.float32)
        want = session.run(None, {data.name: x})
        got = module.run([x])
        assert module.output_names == [o.name for o in model.graph.output]
        for g_, w_ in zip(got, want):
            _close(g_, w_)


def test_light_model_shipped_output_and_random_weight_logits(light):
    """One test per model, so that one worker compiles it (the shipped model's build reuses the
    kernels: weights are kernel arguments)."""
    _check_shipped(light[0])
    _check_random_weights(light, [0])


@pytest.mark.slow
def test_light_model_random_weights_ten_inputs(light):
    _check_random_weights(light, range(1, 11))
