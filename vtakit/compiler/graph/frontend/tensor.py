"""ONNX converters for constants and tensor manipulation (Constant, Shape, Reshape, Slice, Pad, ...).

The graph operators take ONNX's newest form, where shapes, axes, pads and slice bounds are inputs
(constant at compile time in vtakit's static graphs). Converters for older opsets, where they were
attributes, turn the attributes into constant inputs: ``Squeeze``/``Unsqueeze`` before 13, ``Split``
before 13, ``Pad`` before 11, ``Slice`` before 10, ``Clip`` before 11 (in :mod:`.elementwise`).
Inference-only operators are rewritten: ``Dropout`` becomes ``Identity`` (its mask a constant of
ones), ``CastLike`` a ``Cast``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import numpy_helper

from vtakit.compiler.graph.frontend.registry import (ConvertContext, OnnxNode, converter, onnx_dtype,
                                                     register_passthrough)
from vtakit.compiler.graph.ops.tensor import PAD_MODES
from vtakit.errors import GraphError, UnsupportedOperatorError

__all__ = ["PASSTHROUGH", "CONSTANT_FORMS"]

PASSTHROUGH: dict[str, int] = {
    "Identity": 1, "Flatten": 1, "Reshape": 5, "Squeeze": 13, "Unsqueeze": 13, "Transpose": 1,
    "Slice": 10, "Gather": 1, "Expand": 8, "Tile": 6, "ConstantOfShape": 9, "Shape": 1, "Size": 1, "Range": 11,
}

for _op, _since in PASSTHROUGH.items():
    register_passthrough(_op, since=_since)


def _ints_const(ctx: ConvertContext, node: OnnxNode, values: Any, what: str) -> str:
    return ctx.add_constant(np.asarray(values, np.int64).reshape(-1), f"{node.name or node.op_type.lower()}_{what}")


# -- constants ---------------------------------------------------------------------------------------
def _sparse_to_dense(sparse: Any) -> np.ndarray:
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dims = tuple(sparse.dims)
    dense = np.zeros(dims, values.dtype)
    flat = indices if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), dims)
    dense.reshape(-1)[flat] = values
    return dense


# attribute -> how its value becomes an array
CONSTANT_FORMS = {
    "value": np.asarray,
    "value_float": lambda v: np.asarray(v, np.float32),
    "value_floats": lambda v: np.asarray(v, np.float32),
    "value_int": lambda v: np.asarray(v, np.int64),
    "value_ints": lambda v: np.asarray(v, np.int64),
    "sparse_value": _sparse_to_dense,
}


@converter("Constant", since=1)
def _constant(ctx: ConvertContext, node: OnnxNode) -> None:
    """Every tensor form of ``Constant`` (string forms are unsupported)."""
    if len(node.attrs) != 1:
        raise GraphError(f"{node.label}: expected exactly one of {sorted(CONSTANT_FORMS)}, got {sorted(node.attrs)}")
    (key, raw), = node.attrs.items()
    if key not in CONSTANT_FORMS:
        raise UnsupportedOperatorError(f"{node.label}: the {key!r} form of Constant is not supported; "
                                       f"supported forms: {sorted(CONSTANT_FORMS)}")
    value = CONSTANT_FORMS[key](raw)
    if value.dtype.kind in "OSU":
        raise UnsupportedOperatorError(f"{node.label}: string constants are not supported")
    ctx.emit("Constant", [], node.outputs, {"value": value}, node.name)


# -- casts and inference-only operators -------------------------------------------------------------
@converter("Cast", since=6)
def _cast(ctx: ConvertContext, node: OnnxNode) -> None:
    """``to`` (an ONNX element type) as a numpy dtype name; ``saturate``/``round_mode`` concern float8 only."""
    if "to" not in node.attrs:
        raise GraphError(f"{node.label}: missing required attribute 'to'")
    to = onnx_dtype(int(node.attrs["to"]), f"{node.label}'s target type 'to'")
    ctx.emit("Cast", node.inputs[:1], node.outputs, {"to": to}, node.name)


@converter("CastLike", since=15)
def _cast_like(ctx: ConvertContext, node: OnnxNode) -> None:
    ctx.emit("Cast", node.inputs[:1], node.outputs, {"to": ctx.type_of(node.input(1)).dtype}, node.name)


def _dropout(ctx: ConvertContext, node: OnnxNode, ratio: Any, training: Any, mask_dtype: str) -> None:
    if training is not None and bool(np.asarray(training)) and float(np.asarray(ratio)) != 0.0:
        raise UnsupportedOperatorError(f"{node.label}: training-mode Dropout (random) is not supported; vtakit runs "
                                       "inference")
    ctx.emit("Identity", node.inputs[:1], node.outputs[:1], {}, node.name)
    if len(node.outputs) > 1 and node.outputs[1]:
        # opset 12 defines the inference mask as all ones; onnxruntime gives zeros for the older forms
        fill = np.ones if ctx.opset >= 12 else np.zeros
        mask = ctx.add_constant(fill(ctx.type_of(node.input(0)).shape, mask_dtype), f"{node.outputs[1]}_mask")
        ctx.emit("Identity", [mask], [node.outputs[1]], {}, f"{node.name}_mask" if node.name else "")


@converter("Dropout", since=7)
def _dropout_7(ctx: ConvertContext, node: OnnxNode) -> None:
    """Dropout-7/10 in inference: the input; the mask (float before 10, bool from 10) all zeros, as onnxruntime
    gives it."""
    _dropout(ctx, node, node.attrs.get("ratio", 0.5), None,
             "bool" if ctx.opset >= 10 else ctx.type_of(node.input(0)).dtype)


@converter("Dropout", since=12)
def _dropout_12(ctx: ConvertContext, node: OnnxNode) -> None:
    """Dropout-12: ``ratio`` and ``training_mode`` are inputs; training mode must be a constant false (or ratio 0)."""
    training = ctx.require_constant(node.input(2), f"{node.label}: training_mode") if node.input(2) else None
    ratio = ctx.constant(node.input(1)) if node.input(1) else 0.5
    if training is not None and bool(np.asarray(training)) and ratio is None:
        ratio = ctx.require_constant(node.input(1), f"{node.label}: ratio (in training mode)")
    _dropout(ctx, node, 0.5 if ratio is None else ratio, training, "bool")


@converter("Concat", since=4)
def _concat(ctx: ConvertContext, node: OnnxNode) -> None:
    """Inputs with no elements contribute nothing and are left out (a kernel cannot read them)."""
    inputs = [i for i in node.inputs if i and ctx.type_of(i).size > 0] or node.inputs[:1]
    ctx.emit("Concat", inputs, node.outputs, node.attrs, node.name)


# -- attribute forms of today's input forms ---------------------------------------------------------
def _axes_attribute(op: str):
    def convert(ctx: ConvertContext, node: OnnxNode) -> None:
        axes = node.attrs.get("axes")
        if axes is None and op == "Unsqueeze":
            raise GraphError(f"{node.label}: missing required attribute 'axes'")
        inputs = [node.input(0)] + ([_ints_const(ctx, node, axes, "axes")] if axes is not None else [])
        ctx.emit(op, inputs, node.outputs, {}, node.name)
    convert.__doc__ = f"{op} before opset 13: the ``axes`` attribute becomes a constant input."
    return convert


converter("Squeeze", since=1)(_axes_attribute("Squeeze"))
converter("Unsqueeze", since=1)(_axes_attribute("Unsqueeze"))


@converter("Split", since=2)
def _split_2(ctx: ConvertContext, node: OnnxNode) -> None:
    """Split-2/11: ``split`` is an attribute; without it, as many equal parts as outputs."""
    split = node.attrs.get("split")
    inputs = [node.input(0)] + ([_ints_const(ctx, node, split, "split")] if split else [])
    ctx.emit("Split", inputs, node.outputs, {"axis": node.attrs.get("axis", 0),
                                             "num_outputs": None if split else len(node.outputs)}, node.name)


@converter("Split", since=13)
def _split_13(ctx: ConvertContext, node: OnnxNode) -> None:
    """Split-13/18: ``split`` is an input; without it, ``num_outputs`` (18) or as many parts as outputs."""
    attrs = {"axis": node.attrs.get("axis", 0)}
    if not node.input(1):
        attrs["num_outputs"] = node.attrs.get("num_outputs", len(node.outputs))
        if attrs["num_outputs"] != len(node.outputs):
            raise GraphError(f"{node.label}: num_outputs={attrs['num_outputs']} but the node has "
                             f"{len(node.outputs)} outputs")
    ctx.emit("Split", node.inputs[:2], node.outputs, attrs, node.name)


def _pad_mode(node: OnnxNode) -> str:
    mode = node.attrs.get("mode", "constant")
    if mode not in PAD_MODES:
        raise UnsupportedOperatorError(f"{node.label}: Pad mode {mode!r} is not supported; supported modes: "
                                       f"{list(PAD_MODES)}")
    return mode


@converter("Pad", since=2)
def _pad_2(ctx: ConvertContext, node: OnnxNode) -> None:
    """Pad-2: ``pads`` and ``value`` are attributes."""
    if "pads" not in node.attrs:
        raise GraphError(f"{node.label}: missing required attribute 'pads'")
    dtype = ctx.type_of(node.input(0)).dtype
    value = ctx.add_constant(np.array(node.attrs.get("value", 0.0), dtype), f"{node.name or 'pad'}_value")
    ctx.emit("Pad", [node.input(0), _ints_const(ctx, node, node.attrs["pads"], "pads"), value], node.outputs,
             {"mode": _pad_mode(node)}, node.name)


@converter("Pad", since=11)
def _pad_11(ctx: ConvertContext, node: OnnxNode) -> None:
    """Pad-11/18/19: ``pads``, ``constant_value`` and (18) ``axes`` are inputs; ``wrap`` (19) is unsupported."""
    ctx.emit("Pad", node.inputs[:4], node.outputs, {"mode": _pad_mode(node)}, node.name)


@converter("Slice", since=1)
def _slice_1(ctx: ConvertContext, node: OnnxNode) -> None:
    """Slice-1: ``starts``, ``ends`` and ``axes`` are attributes."""
    missing = [k for k in ("starts", "ends") if k not in node.attrs]
    if missing:
        raise GraphError(f"{node.label}: missing required attribute(s) {missing}")
    inputs = [node.input(0)] + [_ints_const(ctx, node, node.attrs[k], k) for k in ("starts", "ends")]
    if "axes" in node.attrs:
        inputs.append(_ints_const(ctx, node, node.attrs["axes"], "axes"))
    ctx.emit("Slice", inputs, node.outputs, {}, node.name)


for _op, _since in (("GatherElements", 11), ("Trilu", 14), ("DepthToSpace", 1), ("SpaceToDepth", 1)):
    register_passthrough(_op, since=_since)
