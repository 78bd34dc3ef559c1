"""ONNX converters for pre-quantised models: QuantizeLinear, DequantizeLinear, QLinearConv, QLinearMatMul,
ConvInteger and MatMulInteger (docs/quantization_import.md).

* ``QuantizeLinear`` / ``DequantizeLinear`` with a per-tensor scale and zero point on an int8 or uint8
  tensor become ``qnn.quantize`` / ``qnn.dequantize``. On a constant (a QDQ model's int8 weights and
  int32 biases) they are computed at import, any granularity; a dequantised constant is recorded with
  its integer values and scale (``graph.metadata["qdq_constants"]``) for the FoldQDQ pass
  (:mod:`..passes.fold_qdq`), which :func:`from_onnx` runs afterwards. ``DequantizeLinear`` of a
  run-time tensor with per-axis or blocked scales, or of a 16-bit tensor, is ``Cast``, ``Sub``, ``Mul``
  (exact). ``QuantizeLinear`` of a run-time tensor per axis, blocked or to a 16-bit type is an
  :class:`UnsupportedOperatorError`.
* ``QLinearConv`` / ``QLinearMatMul`` with int8 data, an int8 constant weight and every zero point 0
  become ``qnn.conv2d`` / ``qnn.dense`` (2-D), the scale realised as FoldQDQ realises it. Otherwise
  they are their integer definition: the zero points subtracted in int32 (``Cast``, ``Sub``), an int32
  ``Conv`` / ``MatMul``, the accumulator times ``M = s_x * s_w / s_y`` in float32 (what onnxruntime's
  kernels compute) and ``qnn.quantize`` with scale 1 and the output zero point (round half to even,
  saturate).
* ``ConvInteger`` / ``MatMulInteger`` are exactly that integer part: ``Cast`` to int32, ``Sub`` of the
  zero points, int32 ``Conv`` / ``MatMul``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from vtakit.compiler.graph.frontend.registry import ConvertContext, OnnxNode, converter
from vtakit.compiler.graph.ir import Node
from vtakit.compiler.graph.passes.fold_qdq import (BITS_KEY, CONSTANTS_KEY, ERROR_KEY, MODE_KEY, accumulator_bound,
                                                   conv2d_attrs, realise)
from vtakit.errors import GraphError, UnsupportedOperatorError

__all__ = ["QUANTIZED_OPS"]

#: the ONNX operators this module converts
QUANTIZED_OPS = ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger")

_QTYPES = ("int8", "uint8")
_INT_TYPES = ("int8", "uint8", "int16", "uint16", "int32")


def _metadata(ctx: ConvertContext) -> dict[str, Any]:
    graph = getattr(ctx, "graph", None)
    return graph.metadata if graph is not None else {}


def _param(ctx: ConvertContext, node: OnnxNode, i: int, what: str) -> np.ndarray | None:
    """The constant value of input ``i`` (None when omitted)."""
    name = node.input(i)
    if not name:
        return None
    return np.asarray(ctx.require_constant(name, f"{node.label}: {what}"))


def _along(param: np.ndarray, shape: tuple[int, ...], axis: int, block: int, what: str) -> np.ndarray:
    """``param`` (a scale or zero point) shaped to broadcast over a tensor of ``shape``."""
    if param.size == 1 and not block:
        return param.reshape(())
    axis = axis % len(shape) if shape else 0
    if block:
        if param.ndim != len(shape):
            raise GraphError(f"{what} of rank {param.ndim} cannot block-quantise a rank-{len(shape)} tensor")
        full = np.repeat(param, block, axis=axis)
        return full[tuple(slice(0, n) for n in shape)]
    if param.ndim != 1 or param.shape[0] != shape[axis]:
        raise GraphError(f"{what} of shape {list(param.shape)} does not match axis {axis} of {list(shape)}")
    return param.reshape([-1 if a == axis else 1 for a in range(len(shape))])


def _record(ctx: ConvertContext, out: str, values: np.ndarray, scale: np.ndarray, zero_point: np.ndarray,
            axis: int) -> None:
    _metadata(ctx).setdefault(CONSTANTS_KEY, {})[out] = (values, scale, zero_point, axis)


# ---------------------------------------------------------------------------- QuantizeLinear / DequantizeLinear
@converter("DequantizeLinear", since=10)
def _dequantize_linear(ctx: ConvertContext, node: OnnxNode) -> None:
    """``(x - zero_point) * scale``: ``qnn.dequantize`` per tensor; a constant is computed at import."""
    x = node.input(0)
    ty = ctx.type_of(x)
    if ty.dtype not in _INT_TYPES:
        raise UnsupportedOperatorError(f"{node.label}: dequantising {ty.dtype} is not supported; vtakit takes "
                                       f"{', '.join(_INT_TYPES)}")
    scale = _param(ctx, node, 1, "x_scale")
    zp = _param(ctx, node, 2, "x_zero_point")
    zp = np.zeros((), ty.dtype) if zp is None else zp
    axis, block = int(node.attrs.get("axis", 1)), int(node.attrs.get("block_size", 0) or 0)
    out = node.outputs[0]
    value = ctx.constant(x)
    if value is not None:
        s = _along(scale, ty.shape, axis, block, f"{node.label}: x_scale")
        z = _along(zp, ty.shape, axis, block, f"{node.label}: x_zero_point")
        y = ((value.astype(np.int64) - z.astype(np.int64)).astype(np.float32) * s.astype(np.float32))
        ctx.emit("Identity", [ctx.add_constant(y.astype(scale.dtype), f"{out}_value")], [out], {}, node.name)
        if not block:
            _record(ctx, out, value, scale, zp, axis)
        return
    if scale.size == 1 and zp.size == 1 and not block and ty.dtype in _QTYPES and scale.dtype == np.float32:
        ctx.emit("qnn.dequantize", [x], [out], {"scale": float(scale.reshape(())),
                                                "zero_point": int(zp.reshape(()))}, node.name)
        return
    s = _along(scale, ty.shape, axis, block, f"{node.label}: x_scale")
    z = _along(zp, ty.shape, axis, block, f"{node.label}: x_zero_point")
    wide = ctx.fresh(f"{out}_int32")
    ctx.emit("Cast", [x], [wide], {"to": "int32"})
    if np.any(z != 0):
        centred = ctx.fresh(f"{out}_centred")
        ctx.emit("Sub", [wide, ctx.add_constant(z.astype(np.int32), f"{out}_zero_point")], [centred])
        wide = centred
    real = ctx.fresh(f"{out}_float")
    ctx.emit("Cast", [wide], [real], {"to": scale.dtype.name})
    ctx.emit("Mul", [real, ctx.add_constant(s, f"{out}_scale")], [out], {}, node.name)


def _quantized_type(node: OnnxNode, zp: np.ndarray | None) -> str:
    if zp is not None:
        return zp.dtype.name
    to = node.attrs.get("output_dtype", 0)
    if to:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(to))).name
    return "uint8"


@converter("QuantizeLinear", since=10)
def _quantize_linear(ctx: ConvertContext, node: OnnxNode) -> None:
    """``saturate(round_half_even(x / scale) + zero_point)``: ``qnn.quantize`` per tensor (int8, uint8)."""
    x = node.input(0)
    ty = ctx.type_of(x)
    scale = _param(ctx, node, 1, "y_scale")
    zp = _param(ctx, node, 2, "y_zero_point")
    dtype = _quantized_type(node, zp)
    axis, block = int(node.attrs.get("axis", 1)), int(node.attrs.get("block_size", 0) or 0)
    out = node.outputs[0]
    value = ctx.constant(x)
    if value is not None and dtype in ("int8", "uint8", "int16", "uint16"):
        info = np.iinfo(dtype)
        s = _along(scale, ty.shape, axis, block, f"{node.label}: y_scale")
        z = 0 if zp is None else _along(zp, ty.shape, axis, block, f"{node.label}: y_zero_point")
        q = np.rint(value / s).astype(np.int64) + np.asarray(z, np.int64)
        ctx.emit("Identity", [ctx.add_constant(np.clip(q, info.min, info.max).astype(dtype), f"{out}_value")],
                 [out], {}, node.name)
        return
    per_tensor = scale.size == 1 and (zp is None or zp.size == 1) and not block
    if not (per_tensor and dtype in _QTYPES and ty.dtype == "float32" and scale.dtype == np.float32):
        form = "blocked" if block else ("per-axis" if not per_tensor else "per-tensor")
        raise UnsupportedOperatorError(
            f"{node.label}: {form} quantisation of a {ty.dtype} run-time tensor to {dtype} is not supported; "
            "vtakit quantises float32 run-time tensors per tensor to int8 or uint8 (qnn.quantize)")
    ctx.emit("qnn.quantize", [x], [out], {"scale": float(scale.reshape(())),
                                          "zero_point": 0 if zp is None else int(zp.reshape(())),
                                          "dtype": dtype}, node.name)


# ---------------------------------------------------------------------------- integer paths
def _centred(ctx: ConvertContext, value: str, zp: np.ndarray | None, per_row_axis: int | None, hint: str) -> str:
    """``int32(value) - zp``; a 1-D ``zp`` of several values applies along ``per_row_axis``."""
    ty = ctx.type_of(value)
    known = ctx.constant(value)
    z = np.zeros((), np.int64) if zp is None else zp.astype(np.int64)
    if z.size > 1:
        if per_row_axis is None:
            raise GraphError(f"{hint}: a zero point of shape {list(z.shape)} is not supported")
        z = z.reshape([-1 if a == per_row_axis % len(ty.shape) else 1 for a in range(len(ty.shape))])
    else:
        z = z.reshape(())
    if known is not None:
        return ctx.add_constant((known.astype(np.int64) - z).astype(np.int32), f"{hint}_int32")
    wide = ctx.fresh(f"{hint}_int32")
    ctx.emit("Cast", [value], [wide], {"to": "int32"})
    if not np.any(z != 0):
        return wide
    out = ctx.fresh(f"{hint}_centred")
    ctx.emit("Sub", [wide, ctx.add_constant(z.astype(np.int32), f"{hint}_zero_point")], [out])
    return out


def _int_conv(ctx: ConvertContext, node: OnnxNode, x: str, x_zp: np.ndarray | None, w: str,
              w_zp: np.ndarray | None, bias: str, out: str) -> None:
    if len(ctx.type_of(x).shape) != 4:
        raise UnsupportedOperatorError(f"{node.label}: a {len(ctx.type_of(x).shape) - 2}-D {node.op_type} is not "
                                       "supported; vtakit imports 2-D quantised convolutions")
    base = node.name or out
    xi = _centred(ctx, x, x_zp, None, f"{base}_x")
    wi = _centred(ctx, w, w_zp, 0, f"{base}_w")
    attrs = {k: v for k, v in node.attrs.items() if k in ("auto_pad", "dilations", "group", "kernel_shape", "pads",
                                                          "strides")}
    ctx.emit("Conv", [xi, wi] + ([bias] if bias else []), [out], attrs, node.name)


def _int_matmul(ctx: ConvertContext, node: OnnxNode, a: str, a_zp: np.ndarray | None, b: str,
                b_zp: np.ndarray | None, out: str) -> None:
    base = node.name or out
    ai = _centred(ctx, a, a_zp, -2, f"{base}_a")
    bi = _centred(ctx, b, b_zp, -1, f"{base}_b")
    ctx.emit("MatMul", [ai, bi], [out], {}, node.name)


@converter("ConvInteger", since=10)
def _conv_integer(ctx: ConvertContext, node: OnnxNode) -> None:
    """``Conv(int32(x) - x_zero_point, int32(w) - w_zero_point)`` in int32 (exact)."""
    _int_conv(ctx, node, node.input(0), _param(ctx, node, 2, "x_zero_point"), node.input(1),
              _param(ctx, node, 3, "w_zero_point"), "", node.outputs[0])


@converter("MatMulInteger", since=10)
def _matmul_integer(ctx: ConvertContext, node: OnnxNode) -> None:
    """``MatMul(int32(a) - a_zero_point, int32(b) - b_zero_point)`` in int32 (exact)."""
    _int_matmul(ctx, node, node.input(0), _param(ctx, node, 2, "a_zero_point"), node.input(1),
                _param(ctx, node, 3, "b_zero_point"), node.outputs[0])


def _rescale(ctx: ConvertContext, node: OnnxNode, acc: str, m: np.ndarray, channel_axis: int, y_zp: np.ndarray | None,
             dtype: str) -> None:
    """``qnn.quantize(float32(acc) * m, scale=1, zero_point=y_zp)``: onnxruntime's requantisation."""
    base = node.name or node.outputs[0]
    shape = ctx.type_of(acc).shape
    if m.size > 1:
        m = m.reshape([-1 if a == channel_axis % len(shape) else 1 for a in range(len(shape))])
    real = ctx.fresh(f"{base}_acc_float")
    ctx.emit("Cast", [acc], [real], {"to": "float32"})
    scaled = ctx.fresh(f"{base}_scaled")
    ctx.emit("Mul", [real, ctx.add_constant(m.astype(np.float32), f"{base}_multiplier")], [scaled])
    ctx.emit("qnn.quantize", [scaled], [node.outputs[0]],
             {"scale": 1.0, "zero_point": 0 if y_zp is None else int(y_zp.reshape(())), "dtype": dtype}, node.name)


def _qlinear_params(ctx: ConvertContext, node: OnnxNode, names: tuple[str, ...]) -> dict[str, np.ndarray | None]:
    return {name: _param(ctx, node, i, name) for i, name in enumerate(names) if name}


def _zero(*zps: np.ndarray | None) -> bool:
    return all(z is None or not np.any(z != 0) for z in zps)


def _power2_error(ctx: ConvertContext, label: str, error: float) -> None:
    meta = _metadata(ctx)
    if meta.get(MODE_KEY) == "power2":
        meta.setdefault(ERROR_KEY, {})[label] = error


@converter("QLinearConv", since=10)
def _qlinear_conv(ctx: ConvertContext, node: OnnxNode) -> None:
    """int8, zero points 0, constant weight: ``qnn.conv2d``; otherwise the integer definition."""
    p = _qlinear_params(ctx, node, ("", "x_scale", "x_zero_point", "", "w_scale", "w_zero_point", "y_scale",
                                    "y_zero_point"))
    x, w, bias = node.input(0), node.input(3), node.input(8)
    xt = ctx.type_of(x)
    dtype = p["y_zero_point"].dtype.name if p["y_zero_point"] is not None else xt.dtype
    channels = ctx.type_of(w).shape[0]
    s_w = np.broadcast_to(p["w_scale"].astype(np.float32).reshape(-1), (channels,))
    m = (np.float32(p["x_scale"].reshape(())) * s_w / np.float32(p["y_scale"].reshape(()))).astype(np.float32)
    weight = ctx.constant(w)
    bias_value = ctx.constant(bias) if bias else None
    if (xt.dtype == "int8" and dtype == "int8" and weight is not None and weight.dtype == np.int8
            and len(xt.shape) == 4 and _zero(p["x_zero_point"], p["w_zero_point"], p["y_zero_point"])
            and (not bias or bias_value is not None)):
        b = np.zeros(channels, np.int64) if bias_value is None else bias_value.astype(np.int64).reshape(-1)
        r = realise(m.astype(np.float64), b, accumulator_bound(weight), _metadata(ctx).get(MODE_KEY, "exact"),
                    _metadata(ctx).get(BITS_KEY))
        if r is not None:
            label = node.name or node.outputs[0]
            _power2_error(ctx, label, r.error)
            attrs = conv2d_attrs(Node("Conv", [], [], _conv_node_attrs(node)), xt.shape, weight.shape)
            inputs = [x, w, ctx.add_constant(r.addend, f"{label}_addend")]
            if r.multiplier is not None:
                inputs.append(ctx.add_constant(r.multiplier, f"{label}_multiplier"))
            ctx.emit("qnn.conv2d", inputs, node.outputs,
                     {**attrs, "shift": r.shift, "pre_shift": r.pre_shift, "clip": (-128, 127)}, node.name)
            return
    acc = ctx.fresh(f"{node.name or node.outputs[0]}_acc")
    _int_conv(ctx, node, x, p["x_zero_point"], w, p["w_zero_point"], bias, acc)
    _rescale(ctx, node, acc, m, 1, p["y_zero_point"], dtype)


def _conv_node_attrs(node: OnnxNode) -> dict[str, Any]:
    defaults = {"auto_pad": "NOTSET", "dilations": None, "kernel_shape": None, "pads": None, "strides": None,
                "group": 1}
    return {**defaults, **{k: v for k, v in node.attrs.items() if k in defaults}}


@converter("QLinearMatMul", since=10)
def _qlinear_matmul(ctx: ConvertContext, node: OnnxNode) -> None:
    """2-D int8, zero points 0, constant weight: ``qnn.dense``; otherwise the integer definition."""
    p = _qlinear_params(ctx, node, ("", "a_scale", "a_zero_point", "", "b_scale", "b_zero_point", "y_scale",
                                    "y_zero_point"))
    a, b = node.input(0), node.input(3)
    at, bt = ctx.type_of(a), ctx.type_of(b)
    dtype = p["y_zero_point"].dtype.name if p["y_zero_point"] is not None else at.dtype
    # M in the scales' own precision (float16 scales stay float16, as ONNX's definition computes it)
    m = np.asarray(p["a_scale"] * p["b_scale"] / p["y_scale"]).reshape(-1).astype(np.float32)
    weight = ctx.constant(b)
    if (at.dtype == "int8" and dtype == "int8" and weight is not None and weight.dtype == np.int8
            and len(at.shape) == 2 and len(bt.shape) == 2 and m.size in (1, bt.shape[1])
            and _zero(p["a_zero_point"], p["b_zero_point"], p["y_zero_point"])):
        rows = np.ascontiguousarray(weight.T)
        scale = np.broadcast_to(m, (rows.shape[0],)).astype(np.float64)
        r = realise(scale, np.zeros(rows.shape[0], np.int64), accumulator_bound(rows),
                    _metadata(ctx).get(MODE_KEY, "exact"), _metadata(ctx).get(BITS_KEY))
        if r is not None:
            label = node.name or node.outputs[0]
            _power2_error(ctx, label, r.error)
            inputs = [a, ctx.add_constant(rows, f"{label}_weight_t"), ctx.add_constant(r.addend, f"{label}_addend")]
            if r.multiplier is not None:
                inputs.append(ctx.add_constant(r.multiplier, f"{label}_multiplier"))
            ctx.emit("qnn.dense", inputs, node.outputs,
                     {"shift": r.shift, "pre_shift": r.pre_shift, "clip": (-128, 127)}, node.name)
            return
    acc = ctx.fresh(f"{node.name or node.outputs[0]}_acc")
    _int_matmul(ctx, node, a, p["a_zero_point"], b, p["b_zero_point"], acc)
    _rescale(ctx, node, acc, m, -1, p["y_zero_point"], dtype)
