"""ONNX converters for neural-network operators (Conv, Gemm, pooling, normalisation, softmax, reductions,
Resize and Upsample).

Most map one to one onto the graph operator of the same name. The converters here do the rest:
1-D convolutions and pools become 2-D ones between two Reshapes (an H of 1), 3-D ones and the forms
vtakit does not compute (MaxPool's Indices output, training-mode BatchNormalization) are rejected
with the attribute or output named, and pre-13 Softmax/LogSoftmax, which normalise the input
flattened to 2-D at ``axis``, become the opset-13 operator between Reshapes when the two differ;
Resize-10 and Upsample become Resize with their fixed coordinate rule.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.graph.frontend.registry import ConvertContext, Converter, OnnxNode, converter, register_passthrough
from vtakit.compiler.graph.ops.nn import REDUCTIONS
from vtakit.errors import GraphError, UnsupportedOperatorError

__all__: list[str] = []

# attribute -> how a 1-D value becomes the 2-D one (H gets the neutral element)
_TO_2D = {
    "kernel_shape": lambda v: [1, *v], "strides": lambda v: [1, *v], "dilations": lambda v: [1, *v],
    "output_padding": lambda v: [0, *v], "output_shape": lambda v: [1, *v],
    "pads": lambda v: [0, v[0], 0, v[1]],
}


def _reshape(ctx: ConvertContext, value: str, shape: tuple[int, ...], hint: str) -> str:
    """``value`` reshaped to ``shape`` (a constant is reshaped at once, others get a Reshape node)."""
    known = ctx.constant(value)
    if known is not None:
        return ctx.add_constant(known.reshape(shape), hint)
    out = ctx.fresh(hint)
    ctx.emit("Reshape", [value, ctx.add_constant(np.array(shape, np.int64), f"{hint}_shape")], [out])
    return out


def _windowed(graph_op: str, weight_inputs: tuple[int, ...] = ()) -> Converter:
    """Converter of a windowed operator (Conv, ConvTranspose, pools): 2-D as is, 1-D through an H of 1."""
    def convert(ctx: ConvertContext, node: OnnxNode) -> None:
        rank = len(ctx.type_of(node.inputs[0]).shape)
        if rank == 4:
            ctx.emit(graph_op, node.inputs, node.outputs, node.attrs, node.name)
            return
        if rank != 3:
            raise UnsupportedOperatorError(f"{node.label}: a {rank - 2}-D {node.op_type} (input rank {rank}) is not "
                                           "supported; vtakit computes 1-D and 2-D windows")
        inputs = list(node.inputs)
        for i in (0, *weight_inputs):
            if i < len(inputs) and inputs[i]:
                n, c, w = ctx.type_of(inputs[i]).shape
                inputs[i] = _reshape(ctx, inputs[i], (n, c, 1, w), f"{node.name or graph_op}_2d_in{i}")
        attrs = {k: (_TO_2D[k](v) if k in _TO_2D and v is not None and len(v) else v) for k, v in node.attrs.items()}
        wide = ctx.fresh(f"{node.outputs[0]}_2d")
        ctx.emit(graph_op, inputs, [wide], attrs, node.name)
        n, c, _, w = ctx.type_of(wide).shape
        ctx.emit("Reshape", [wide, ctx.add_constant(np.array((n, c, w), np.int64), f"{wide}_shape")],
                 [node.outputs[0]])
    convert.__name__ = f"convert_{graph_op}"
    return convert


converter("Conv", since=1)(_windowed("Conv", weight_inputs=(1,)))
converter("ConvTranspose", since=1)(_windowed("ConvTranspose", weight_inputs=(1,)))


def _pool(graph_op: str) -> Converter:
    windowed = _windowed(graph_op)

    def convert(ctx: ConvertContext, node: OnnxNode) -> None:
        if len(node.outputs) > 1 and node.outputs[1]:
            raise UnsupportedOperatorError(f"{node.label}: the Indices output ({node.outputs[1]!r}) is not supported")
        windowed(ctx, node)
    convert.__name__ = f"convert_{graph_op}"
    return convert


converter("MaxPool", since=1)(_pool("MaxPool"))
converter("AveragePool", since=1)(_pool("AveragePool"))

@converter("Gemm", since=7)
def _gemm(ctx: ConvertContext, node: OnnxNode) -> None:
    """One to one; with beta = 0 the node reads no C (a NaN or inf in it is ignored, as in onnxruntime)."""
    inputs = node.inputs[:2] if node.attrs.get("beta", 1.0) == 0.0 else node.inputs
    ctx.emit("Gemm", inputs, node.outputs, node.attrs, node.name)


for _op, _since in (("MatMul", 1), ("GlobalAveragePool", 1), ("GlobalMaxPool", 1),
                    *((name, 1) for name in REDUCTIONS),
                    ("InstanceNormalization", 6), ("LRN", 1), ("Softmax", 13), ("LogSoftmax", 13)):
    register_passthrough(_op, since=_since)


@converter("BatchNormalization", since=1)
def _batch_norm(ctx: ConvertContext, node: OnnxNode) -> None:
    if node.attrs.get("training_mode", 0):
        raise UnsupportedOperatorError(f"{node.label}: training_mode=1 is not supported (inference only)")
    if not node.attrs.get("spatial", 1):
        raise UnsupportedOperatorError(f"{node.label}: spatial=0 (per-activation statistics) is not supported")
    extra = [o for o in node.outputs[1:] if o]
    if extra:
        raise UnsupportedOperatorError(f"{node.label}: the training outputs {extra} are not supported "
                                       "(inference only)")
    ctx.emit("BatchNormalization", node.inputs, node.outputs[:1], {"epsilon": node.attrs.get("epsilon", 1e-5)},
             node.name)


def _coerced_softmax(graph_op: str) -> Converter:
    """Softmax/LogSoftmax before opset 13: the input is flattened to 2-D at ``axis`` (default 1)."""
    def convert(ctx: ConvertContext, node: OnnxNode) -> None:
        shape = ctx.type_of(node.inputs[0]).shape
        axis = node.attrs.get("axis", 1)
        if not -len(shape) <= axis < max(len(shape), 1):
            raise GraphError(f"{node.label}: axis {axis} is out of range for rank {len(shape)}")
        axis %= max(len(shape), 1)
        if all(d == 1 for d in shape[axis + 1:]):
            ctx.emit(graph_op, node.inputs, node.outputs, {"axis": axis}, node.name)
            return
        rows = int(np.prod(shape[:axis], dtype=np.int64))
        flat = _reshape(ctx, node.inputs[0], (rows, -1), f"{node.outputs[0]}_2d")
        normed = ctx.fresh(f"{node.outputs[0]}_2d_out")
        ctx.emit(graph_op, [flat], [normed], {"axis": 1}, node.name)
        ctx.emit("Reshape", [normed, ctx.add_constant(np.array(shape, np.int64), f"{normed}_shape")],
                 [node.outputs[0]])
    convert.__name__ = f"convert_{graph_op}_coerced"
    return convert


converter("Softmax", since=1)(_coerced_softmax("Softmax"))
converter("LogSoftmax", since=1)(_coerced_softmax("LogSoftmax"))

register_passthrough("Resize", since=11)


@converter("Resize", since=10)
def _resize_10(ctx: ConvertContext, node: OnnxNode) -> None:
    """Resize-10: scales only, asymmetric coordinates, onnxruntime's nearest rule of that opset."""
    ctx.emit("Resize", [node.inputs[0], "", node.input(1), ""], node.outputs,
             {"mode": node.attrs.get("mode", "nearest"), "coordinate_transformation_mode": "asymmetric",
              "nearest_mode": "simple"}, node.name)


def _upsample(ctx: ConvertContext, node: OnnxNode, scales: str) -> None:
    mode = node.attrs.get("mode", "nearest")
    ctx.emit("Resize", [node.inputs[0], "", scales, ""], node.outputs,
             {"mode": "linear" if mode == "bilinear" else mode, "coordinate_transformation_mode": "asymmetric",
              "nearest_mode": "simple"}, node.name)


@converter("Upsample", since=7)
def _upsample_7(ctx: ConvertContext, node: OnnxNode) -> None:
    """Upsample-7: scales as an attribute."""
    if "scales" not in node.attrs:
        raise GraphError(f"{node.label}: missing required attribute 'scales'")
    _upsample(ctx, node, ctx.add_constant(np.array(node.attrs["scales"], np.float32), f"{node.outputs[0]}_scales"))


@converter("Upsample", since=9)
def _upsample_9(ctx: ConvertContext, node: OnnxNode) -> None:
    """Upsample-9: scales as an input."""
    _upsample(ctx, node, node.inputs[1])


for _op, _since in (("ArgMax", 1), ("ArgMin", 1), ("CumSum", 11)):
    register_passthrough(_op, since=_since)


@converter("LayerNormalization", since=17)
def _layer_norm(ctx: ConvertContext, node: OnnxNode) -> None:
    """One to one, with the optional Mean and InvStdDev outputs (float32); ``stash_type`` must be 1 (float32)."""
    stash = node.attrs.get("stash_type", 1)
    if stash != 1:
        raise UnsupportedOperatorError(f"{node.label}: stash_type {stash} is not supported; expected 1 (float32 "
                                       "statistics)")
    ctx.emit("LayerNormalization", node.inputs, node.outputs, node.attrs, node.name)


@converter("TopK", since=10)
def _topk(ctx: ConvertContext, node: OnnxNode) -> None:
    """One to one (K a constant input); results are always sorted: with ``sorted``=0, where ONNX leaves the order
    open, they are the elements onnxruntime gives, in sorted order."""
    ctx.emit("TopK", node.inputs, node.outputs, node.attrs, node.name)


@converter("TopK", since=1)
def _topk_1(ctx: ConvertContext, node: OnnxNode) -> None:
    """TopK-1: ``k`` is an attribute (it becomes a constant input); the largest, sorted."""
    if "k" not in node.attrs:
        raise GraphError(f"{node.label}: missing required attribute 'k'")
    k = ctx.add_constant(np.array([node.attrs["k"]], np.int64), f"{node.outputs[0]}_k")
    ctx.emit("TopK", [node.inputs[0], k], node.outputs, {"axis": node.attrs.get("axis", -1)}, node.name)
