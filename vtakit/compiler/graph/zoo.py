"""Networks built with ``onnx.helper``, with seeded random weights: models to test and benchmark on
without downloading anything.

``resnet18()`` is torchvision's ResNet-18 as an exporter writes it (``BatchNormalization`` as
separate nodes after every convolution, ``Flatten`` + ``Gemm`` head), with He-normal weights and
mildly random batch-norm statistics, so the network's output depends on every layer.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["resnet18", "ModelBuilder"]


class ModelBuilder:
    """Accumulates nodes and initializers with fresh names; ``model()`` makes the ``ModelProto``."""

    def __init__(self, seed: int = 0, opset: int = 17) -> None:
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def constant(self, value: np.ndarray, hint: str = "w") -> str:
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], n_outputs: int = 1, **attrs) -> str | list[str]:
        outputs = [self.fresh(op.lower()) for _ in range(n_outputs)]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=self.fresh(op), **attrs))
        return outputs[0] if n_outputs == 1 else outputs

    def he_normal(self, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return (self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    def conv(self, x: str, c_in: int, c_out: int, kernel: int | tuple[int, int], stride=1, pad=None, group: int = 1,
             bias: bool = False) -> str:
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        strides = [stride, stride] if isinstance(stride, int) else list(stride)
        pads = [kh // 2, kw // 2, kh // 2, kw // 2] if pad is None else list(pad)
        w = self.constant(self.he_normal((c_out, c_in // group, kh, kw), c_in // group * kh * kw))
        inputs = [x, w] + ([self.constant((self.rng.standard_normal(c_out) * 0.1).astype(np.float32), "b")]
                           if bias else [])
        return self.node("Conv", inputs, kernel_shape=[kh, kw], strides=strides, pads=pads, group=group)

    def batch_norm(self, x: str, channels: int) -> str:
        r = self.rng
        params = [(1 + 0.1 * r.standard_normal(channels)), 0.1 * r.standard_normal(channels),
                  0.1 * r.standard_normal(channels), 1 + 0.1 * np.abs(r.standard_normal(channels))]
        names = [self.constant(p.astype(np.float32), "bn") for p in params]
        return self.node("BatchNormalization", [x, *names], epsilon=1e-5)

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
              name: str = "net") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def resnet18(seed: int = 0, batch: int = 1, image: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """ResNet-18 (v1, torchvision's layout) for ``batch x 3 x image x image`` float32 input ``data``,
    ``logits`` output, seeded He-normal weights and separate ``BatchNormalization`` nodes."""
    b = ModelBuilder(seed)
    x = b.node("Relu", [b.batch_norm(b.conv("data", 3, 64, 7, 2, [3, 3, 3, 3]), 64)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, width in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = b.node("Relu", [b.batch_norm(b.conv(x, channels, width, 3, stride), width)])
            y = b.batch_norm(b.conv(y, width, width, 3), width)
            shortcut = x
            if stride != 1 or channels != width:
                shortcut = b.batch_norm(b.conv(x, channels, width, 1, stride, [0, 0, 0, 0]), width)
            x = b.node("Relu", [b.node("Add", [y, shortcut])])
            channels = width
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = b.constant(b.he_normal((classes, channels), channels), "fc_w")
    bias = b.constant((b.rng.standard_normal(classes) * 0.01).astype(np.float32), "fc_b")
    b.nodes.append(helper.make_node("Gemm", [x, w, bias], ["logits"], name="fc", transB=1))
    return b.model([helper.make_tensor_value_info("data", TensorProto.FLOAT, [batch, 3, image, image])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])], "resnet18")
