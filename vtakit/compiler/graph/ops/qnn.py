"""Quantised graph operators: the integer semantics of an int8 network, defined once.

:func:`vtakit.graph.quantize` and the QDQ / QOperator importers turn a float network into these
operators; the accelerator target maps ``qnn.conv2d``, ``qnn.dense`` and ``qnn.add`` onto its GEMM
core and ALU, and the CPU (``target="llvm"``) runs the same operators as integer kernels. Both
follow the numpy references registered here, bit for bit.

Arithmetic is int32 with wrap-around. A layer's int32 accumulator is requantised to int8 by
:func:`vtakit.runtime.packing.requantize`::

    t = acc + addend                      # per output channel; the bias and the rounding folded in
    t = t >> shift                        # power-of-two scales (multiplier absent)
    # or, with a fixed-point multiplier (per-channel or non-power-of-two scales):
    t = ((t >> pre_shift) * multiplier + 2**(shift-1)) >> shift
    y = clip(t, lo, hi)                   # ReLU is lo = 0

A ``qnn.conv2d`` may fuse a residual add (TVM VTA's fused shortcut): with an optional fifth input
``residual`` (int8, the output's shape) and the attributes ``residual_lshift`` (>= 0) and
``residual_shift`` (>= 0) the step before the clip becomes::

    t = ((acc + addend) >> shift) + (residual << residual_lshift)
    t = t >> residual_shift
    y = clip(t, lo, hi)

(:func:`residual_requantize`); the quantiser folds the rounding of the second shift into
``addend`` as ``rounding_addend(residual_shift) << shift``.

``>> s`` is an arithmetic shift (a left shift when ``s < 0``). Rounding is to nearest, defined
once: ``2**(s-1)`` is added before every right shift by ``s``; the quantiser folds it, with the
bias, into ``addend``.

Quantisation is symmetric on the accelerator (zero point 0); ``qnn.quantize`` and
``qnn.dequantize`` also carry a zero point so that imported QDQ models keep their exact meaning
at the float boundaries.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from vtakit.compiler import ir, ops, te
from vtakit.compiler.graph.ir import TensorType
from vtakit.compiler.graph.op import REQUIRED, Pattern, register_op
from vtakit.compiler.ops.common import static_shape
from vtakit.errors import GraphError
from vtakit.runtime.packing import requantize, rounding_addend

__all__ = ["QNN_OPS", "INT_RANGES", "quantize_values", "conv2d_accumulate", "conv2d_output_hw",
           "residual_requantize", "RESIDUAL_INPUT"]

#: the operators this module registers
QNN_OPS = ("qnn.quantize", "qnn.dequantize", "qnn.conv2d", "qnn.dense", "qnn.add")

#: the integer types a quantised tensor may have, with their ranges
INT_RANGES = {"int8": (-128, 127), "uint8": (0, 255)}

_REQUANT_ATTRS = {"shift": REQUIRED, "pre_shift": 0, "clip": (-128, 127)}
#: the input index of a ``qnn.conv2d``'s fused residual (after data, weight, addend, multiplier)
RESIDUAL_INPUT = 4


def _int_range(dtype: str) -> tuple[int, int]:
    try:
        return INT_RANGES[dtype]
    except KeyError:
        raise GraphError(f"quantised dtype {dtype!r} is not supported; expected one of {sorted(INT_RANGES)}") from None


def quantize_values(x: np.ndarray, scale: float, zero_point: int = 0, dtype: str = "int8") -> np.ndarray:
    """``saturate(round_half_even(x / scale) + zero_point)`` in float32, as ONNX's QuantizeLinear."""
    lo, hi = _int_range(dtype)
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale)) + np.float32(zero_point)
    return np.clip(q, lo, hi).astype(dtype)


# ---------------------------------------------------------------------------- TE computes (the CPU path)
# The computes below are what ``build(graph, target="llvm")`` compiles: the same integer arithmetic
# as the references, in int32 with wrap-around (the CPU backend's integer adds, multiplies and left
# shifts wrap; ``>>`` on int32 is arithmetic).
def _shift_expr(v: ir.PrimExpr, s: int) -> ir.PrimExpr:
    """The ALU's SHR by a compile-time ``s`` on an int32 expression (``s < 0``: a wrapping left shift)."""
    s = int(s)
    if s == 0:
        return v
    if s > 0:
        return v >> ir.const(s, "int32")
    if s <= -32:  # every bit shifted out (C leaves a shift by the width undefined; the ALU gives 0)
        return ir.const(0, "int32")
    return v << ir.const(-s, "int32")


def _requant_expr(t: ir.PrimExpr, channel: ir.PrimExpr, addend: te.Tensor | None, multiplier: te.Tensor | None,
                  attrs: dict, residual: ir.PrimExpr | None = None) -> ir.PrimExpr:
    """:func:`vtakit.runtime.packing.requantize` on one int32 accumulator of output channel ``channel``."""
    if addend is not None:
        t = t + (addend[channel] if static_shape(addend) else addend[()]).astype("int32")
    if multiplier is None:
        t = _shift_expr(t, attrs["shift"])
    else:
        m = (multiplier[channel] if static_shape(multiplier) else multiplier[()]).astype("int32")
        t = _shift_expr(t, attrs["pre_shift"]) * m
        r = rounding_addend(int(attrs["shift"]))
        if r:
            t = t + ir.const(r, "int32")
        t = _shift_expr(t, attrs["shift"])
    if residual is not None:
        t = t + _shift_expr(residual.astype("int32"), -int(attrs.get("residual_lshift", 0)))
        t = _shift_expr(t, int(attrs.get("residual_shift", 0)))
    lo, hi = (int(c) for c in attrs["clip"])
    return te.min(te.max(t, ir.const(lo, "int32")), ir.const(hi, "int32")).astype("int8")


def _requant_compute(acc: te.Tensor, ins: list, attrs: dict, name: str) -> te.Tensor:
    addend, multiplier, residual = _optional(ins, 2), _optional(ins, 3), _optional(ins, RESIDUAL_INPUT)
    return te.compute(static_shape(acc), lambda *i: _requant_expr(acc(*i), i[1], addend, multiplier, attrs,
                                                                  None if residual is None else residual(*i)),
                      name=name, tag="elemwise")


def _quantize_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x = ins[0]
    lo, hi = _int_range(attrs["dtype"])
    scale, zp = ir.const(float(np.float32(attrs["scale"])), "float32"), ir.const(float(attrs["zero_point"]), "float32")

    def value(*i):
        q = te.round(x(*i).astype("float32") / scale) + zp
        return te.min(te.max(q, ir.const(float(lo), "float32")), ir.const(float(hi), "float32")).astype(attrs["dtype"])

    return [te.compute(static_shape(x), value, name="quantize", tag="elemwise")]


def _dequantize_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x = ins[0]
    zp, scale = ir.const(int(attrs["zero_point"]), "int32"), ir.const(float(np.float32(attrs["scale"])), "float32")
    return [te.compute(static_shape(x), lambda *i: (x(*i).astype("int32") - zp).astype("float32") * scale,
                       name="dequantize", tag="elemwise")]


def _conv2d_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    acc = ops.conv2d_nchw(ins[0], ins[1], tuple(attrs["strides"]), tuple(attrs["pads"]), tuple(attrs["dilations"]),
                          int(attrs["group"]), "int32")
    return [_requant_compute(acc, ins, attrs, "qnn_conv2d_requant")]


def _dense_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    return [_requant_compute(ops.dense(ins[0], ins[1], out_dtype="int32"), ins, attrs, "qnn_dense_requant")]


def _add_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    a, b = ins[0], ins[1]

    def value(*i):
        t = _shift_expr(a(*i).astype("int32"), -int(attrs["lshift_a"])) + _shift_expr(b(*i).astype("int32"),
                                                                                       -int(attrs["lshift_b"]))
        if int(attrs["addend"]):
            t = t + ir.const(int(attrs["addend"]), "int32")
        t = _shift_expr(t, attrs["shift"])
        lo, hi = (int(c) for c in attrs["clip"])
        return te.min(te.max(t, ir.const(lo, "int32")), ir.const(hi, "int32")).astype("int8")

    return [te.compute(static_shape(a), value, name="qnn_add", tag="elemwise")]


# ---------------------------------------------------------------------------- float boundaries
def _quantize_infer(types: list, consts: list, attrs: dict) -> list[TensorType]:
    _int_range(attrs["dtype"])
    return [TensorType(types[0].shape, attrs["dtype"])]


@register_op("qnn.quantize", pattern=Pattern.ELEMWISE, attrs={"scale": REQUIRED, "zero_point": 0, "dtype": "int8"},
             infer=_quantize_infer, compute=_quantize_compute)
def _quantize(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """A float tensor to int8 (or uint8): ``saturate(round_half_even(x / scale) + zero_point)``."""
    return (quantize_values(ins[0], attrs["scale"], attrs["zero_point"], attrs["dtype"]),)


@register_op("qnn.dequantize", pattern=Pattern.ELEMWISE, attrs={"scale": REQUIRED, "zero_point": 0},
             compute=_dequantize_compute, infer=lambda types, consts, attrs: [TensorType(types[0].shape, "float32")])
def _dequantize(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """An integer tensor to float32: ``(x - zero_point) * scale``."""
    x = ins[0].astype(np.int32) - np.int32(attrs["zero_point"])
    return ((x.astype(np.float32) * np.float32(attrs["scale"])).astype(np.float32),)


# ---------------------------------------------------------------------------- accelerator layers
def conv2d_output_hw(in_hw: Sequence[int], kernel_hw: Sequence[int], attrs: dict) -> tuple[int, int]:
    """The output height and width of a ``qnn.conv2d`` with ``attrs`` (strides, pads, dilations)."""
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    top, left, bottom, right = attrs["pads"]
    oh = (in_hw[0] + top + bottom - dh * (kernel_hw[0] - 1) - 1) // sh + 1
    ow = (in_hw[1] + left + right - dw * (kernel_hw[1] - 1) - 1) // sw + 1
    return oh, ow


def conv2d_accumulate(x: np.ndarray, w: np.ndarray, attrs: dict) -> np.ndarray:
    """The int32 accumulator of a grouped, strided, dilated, padded NCHW x OIHW convolution (wrapping)."""
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    top, left, bottom, right = attrs["pads"]
    g = attrs["group"]
    n, c, h, wd = x.shape
    o, cpg, kh, kw = w.shape
    oh, ow = conv2d_output_hw((h, wd), (kh, kw), attrs)
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    acc = np.zeros((n, o, oh, ow), np.int64)
    opg = o // g
    for dy in range(kh):
        for dx in range(kw):
            tap = xp[:, :, dy * dh:dy * dh + sh * (oh - 1) + 1:sh, dx * dw:dx * dw + sw * (ow - 1) + 1:sw]
            for k in range(g):
                acc[:, k * opg:(k + 1) * opg] += np.einsum(
                    "nchw,oc->nohw", tap[:, k * cpg:(k + 1) * cpg], w[k * opg:(k + 1) * opg, :, dy, dx].astype(np.int64))
    return acc.astype(np.int32)


def _optional(ins: list, k: int) -> np.ndarray | None:
    return ins[k] if len(ins) > k and ins[k] is not None else None


def residual_requantize(acc: np.ndarray, addend: np.ndarray | None, shift: int, clip: tuple[int, int],
                        residual: np.ndarray, residual_lshift: int, residual_shift: int) -> np.ndarray:
    """The fused residual epilogue of ``qnn.conv2d`` (int32 wrap-around; ``addend`` per channel, axis 1)::

        t = ((acc + addend) >> shift) + (residual << residual_lshift)
        y = int8(clip(t >> residual_shift, lo, hi))
    """
    lo, hi = (int(c) for c in clip)
    t = acc.astype(np.int64)
    if addend is not None:
        a = np.asarray(addend).astype(np.int64)
        t = t + (a.reshape((1, -1) + (1,) * (t.ndim - 2)) if a.ndim else a)
    t = _shift64(_wrap(t), int(shift))
    t = _wrap(t + _wrap(_shift64(residual.astype(np.int64), -int(residual_lshift))))
    t = _shift64(t, int(residual_shift))
    return np.clip(t, lo, hi).astype(np.int8)


def _wrap(t: np.ndarray) -> np.ndarray:
    return ((t + (1 << 31)) % (1 << 32)) - (1 << 31)


def _shift64(t: np.ndarray, s: int) -> np.ndarray:
    """The ALU's SHR on int32 values held in int64 (``s < 0``: a wrapping left shift)."""
    if s >= 0:
        return t >> min(s, 63)
    return _wrap(t << -s) if s > -32 else np.zeros_like(t)


def _requant(acc: np.ndarray, ins: list, attrs: dict) -> np.ndarray:
    residual = _optional(ins, RESIDUAL_INPUT)
    if residual is not None:
        return residual_requantize(acc, _optional(ins, 2), attrs["shift"], tuple(attrs["clip"]), residual,
                                   attrs.get("residual_lshift", 0), attrs.get("residual_shift", 0))
    return requantize(acc, _optional(ins, 2), attrs["shift"], tuple(attrs["clip"]), multiplier=_optional(ins, 3),
                      pre_shift=attrs["pre_shift"])


def _check_int8(op: str, types: Sequence[Any], names: Sequence[str]) -> None:
    for ty, what in zip(types, names):
        if ty is not None and ty.dtype != "int8":
            raise GraphError(f"{op}: {what} must be int8, got {ty.dtype}")


def _conv2d_infer(types: list, consts: list, attrs: dict) -> list[TensorType]:
    x, w = types[0], types[1]
    _check_int8("qnn.conv2d", (x, w), ("the data", "the weight"))
    if len(x.shape) != 4 or len(w.shape) != 4 or x.shape[1] != w.shape[1] * attrs["group"]:
        raise GraphError(f"qnn.conv2d: data {list(x.shape)} and weight {list(w.shape)} with group {attrs['group']} "
                         "are not an NCHW x OIHW convolution")
    oh, ow = conv2d_output_hw(x.shape[2:], w.shape[2:], attrs)
    if oh < 1 or ow < 1:
        raise GraphError(f"qnn.conv2d: a {w.shape[2]}x{w.shape[3]} kernel does not fit the input {list(x.shape)}")
    out = (x.shape[0], w.shape[0], oh, ow)
    residual = types[RESIDUAL_INPUT] if len(types) > RESIDUAL_INPUT else None
    if residual is not None:
        _check_int8("qnn.conv2d", (residual,), ("the residual",))
        if tuple(residual.shape) != out:
            raise GraphError(f"qnn.conv2d: the residual {list(residual.shape)} must have the output's shape {list(out)}")
        if len(types) > 3 and types[3] is not None:
            raise GraphError("qnn.conv2d: a residual cannot be fused with a multiplier (power-of-two scales only)")
    for k in ("residual_lshift", "residual_shift"):
        v = attrs.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 31:
            raise GraphError(f"qnn.conv2d: {k} must be an int in [0, 31], got {v!r}")
    return [TensorType(out, "int8")]


@register_op("qnn.conv2d", pattern=Pattern.OPAQUE,
             attrs={"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1, **_REQUANT_ATTRS,
                    "residual_lshift": 0, "residual_shift": 0},
             infer=_conv2d_infer, compute=_conv2d_compute)
def _conv2d(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """int8 NCHW data x int8 OIHW weight -> int32 accumulator -> requantised int8 (inputs: data, weight,
    optional per-channel int32 addend, optional per-channel multiplier, optional int8 residual of the output's
    shape, fused as :func:`residual_requantize` says; pads are (top, left, bottom, right))."""
    return (_requant(conv2d_accumulate(ins[0], ins[1], attrs), ins, attrs),)


def _dense_infer(types: list, consts: list, attrs: dict) -> list[TensorType]:
    x, w = types[0], types[1]
    _check_int8("qnn.dense", (x, w), ("the data", "the weight"))
    if len(x.shape) != 2 or len(w.shape) != 2 or x.shape[1] != w.shape[1]:
        raise GraphError(f"qnn.dense: data {list(x.shape)} and weight {list(w.shape)} are not (M, K) x (N, K)")
    return [TensorType((x.shape[0], w.shape[0]), "int8")]


@register_op("qnn.dense", pattern=Pattern.OPAQUE, attrs=dict(_REQUANT_ATTRS), infer=_dense_infer,
             compute=_dense_compute)
def _dense(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """int8 (M, K) data x int8 (N, K) weight -> int32 -> requantised int8 (inputs as ``qnn.conv2d``'s)."""
    acc = (ins[0].astype(np.int64) @ ins[1].astype(np.int64).T).astype(np.int32)
    return (_requant(acc, ins, attrs),)


def _add_infer(types: list, consts: list, attrs: dict) -> list[TensorType]:
    a, b = types
    _check_int8("qnn.add", (a, b), ("input a", "input b"))
    if a.shape != b.shape:
        raise GraphError(f"qnn.add: the inputs must have one shape, got {list(a.shape)} and {list(b.shape)}")
    return [TensorType(a.shape, "int8")]


@register_op("qnn.add", pattern=Pattern.OPAQUE,
             attrs={"lshift_a": 0, "lshift_b": 0, "addend": 0, "shift": 0, "clip": (-128, 127)}, infer=_add_infer,
             compute=_add_compute)
def _add(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """Two int8 tensors of one shape rescaled to a common scale by left shifts and added, then requantised:
    ``clip(((a << lshift_a) + (b << lshift_b) + addend) >> shift)``."""
    a = ins[0].astype(np.int32) << np.int32(attrs["lshift_a"])
    b = ins[1].astype(np.int32) << np.int32(attrs["lshift_b"])
    return (requantize(a + b, np.int32(attrs["addend"]), attrs["shift"], tuple(attrs["clip"])),)
