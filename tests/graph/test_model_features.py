"""Models with the features exporters emit and with awkward shapes, built with ``onnx.helper``,
against onnxruntime on 10 seeded inputs (within 1e-4 of the output's largest magnitude).

- framework export: weights in ``Constant`` nodes, symbolic input dims fixed by ``input_shapes``,
  a ``Shape -> Slice -> Concat -> Reshape`` chain before a ``MatMul``, hard-swish spelled
  ``Add/Clip/Mul/Div``, a squeeze-excite block, a stride-(2, 1) depthwise convolution;
- awkward shapes: odd spatial sizes, asymmetric pads, ``ceil_mode`` pooling,
  ``count_include_pad=0``, non-square kernels, a concat of three branches.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vtakit import graph as vg
from vtakit.compiler.graph.fused import FUSED
from vtakit.compiler.graph.passes import run_passes
from vtakit.compiler.graph.zoo import ModelBuilder
from vtakit.errors import GraphError


class _ConstantNodes(ModelBuilder):
    """Weights as ``Constant`` nodes, as PyTorch's exporter writes them with constant folding off."""

    def constant(self, value: np.ndarray, hint: str = "w") -> str:
        name = self.fresh(hint)
        self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value))))
        return name


def _hard_swish(b: ModelBuilder, x: str) -> str:
    three, zero, six = (b.constant(np.array(v, np.float32), "k") for v in (3.0, 0.0, 6.0))
    clipped = b.node("Clip", [b.node("Add", [x, three]), zero, six])
    return b.node("Div", [b.node("Mul", [x, clipped]), six])


def _squeeze_excite(b: ModelBuilder, x: str, channels: int) -> str:
    s = b.node("GlobalAveragePool", [x])
    s = b.node("Relu", [b.conv(s, channels, channels // 4, 1, pad=[0, 0, 0, 0], bias=True)])
    s = b.node("Sigmoid", [b.conv(s, channels // 4, channels, 1, pad=[0, 0, 0, 0], bias=True)])
    return b.node("Mul", [x, s])


def framework_export_model() -> onnx.ModelProto:
    b = _ConstantNodes(seed=5, opset=17)
    x = _hard_swish(b, b.conv("images", 3, 16, 3))
    x = b.node("Relu", [b.batch_norm(b.conv(x, 16, 16, 3, stride=(2, 1), group=16), 16)])
    x = _squeeze_excite(b, x, 16)
    shape = b.node("Shape", [x])
    batch = b.node("Slice", [shape, b.constant(np.array([0], np.int64)), b.constant(np.array([1], np.int64))])
    target = b.node("Concat", [batch, b.constant(np.array([-1], np.int64))], axis=0)
    flat = b.node("Reshape", [x, target])
    w = b.constant(b.he_normal((16 * 9 * 16, 10), 16 * 9 * 16), "fc")
    out = b.node("Add", [b.node("MatMul", [flat, w]), b.constant(np.linspace(-1, 1, 10).astype(np.float32))])
    b.nodes[-1].output[0] = "scores"
    return b.model([helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
                   [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 10])], "exported")


def awkward_shapes_model() -> onnx.ModelProto:
    b = ModelBuilder(seed=9, opset=17)
    x = b.node("Relu", [b.conv("x", 5, 8, (3, 5), stride=2, pad=[1, 2, 0, 1], bias=True)])      # 23x19 -> 11x9
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)                  # -> 6x5 (ceil)
    x = b.node("AveragePool", [x], kernel_shape=[3, 2], pads=[1, 0, 1, 1], count_include_pad=0)   # -> 6x5
    left = b.conv(x, 8, 6, 1, pad=[0, 0, 0, 0])
    middle = b.node("Relu", [b.conv(x, 8, 5, (1, 3), pad=[0, 1, 0, 1], bias=True)])
    right = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    x = b.node("Concat", [left, middle, right], axis=1)                                           # 19 channels
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    w = b.constant(b.he_normal((7, 19), 19))
    b.nodes.append(helper.make_node("Gemm", [x, w, b.constant(np.arange(7, dtype=np.float32))], ["y"], transB=1))
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 23, 19])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 7])], "awkward")


def _compare_on_ten_inputs(model: onnx.ModelProto, module, input_name: str, shape: tuple[int, ...]) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in range(10):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        want = session.run(None, {input_name: x})[0]
        got = module.run({input_name: x})[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * float(np.abs(want).max()))


def test_framework_export_features_match_onnxruntime():
    model = framework_export_model()
    g = vg.from_onnx(model, input_shapes={"images": (2, 3, 17, 16)})
    module = vg.build(g)
    _compare_on_ten_inputs(model, module, "images", (2, 3, 17, 16))
    kernels = module.profile([np.zeros((2, 3, 17, 16), np.float32)]).layers
    assert not any(set(r.ops) & {"Shape", "Slice", "Concat", "Constant"} for r in kernels)  # folded away
    assert ("Add", "Clip", "Mul", "Div") in [r.ops for r in kernels]  # hard-swish's diamond is one kernel


def test_a_symbolic_dim_without_a_shape_is_an_error():
    with pytest.raises(GraphError, match="'images' has a symbolic dim 'batch'"):
        vg.from_onnx(framework_export_model())


def test_awkward_shapes_match_onnxruntime():
    model = awkward_shapes_model()
    module = vg.build(vg.from_onnx(model))
    _compare_on_ten_inputs(model, module, "x", (1, 5, 23, 19))
    fused = run_passes(vg.from_onnx(model), ["InferType", "FoldConstant", "FuseOps"])
    assert sum(n.op == FUSED for n in fused.nodes) >= 2
