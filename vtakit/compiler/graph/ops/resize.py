"""The Resize graph operator (ONNX opset 11+ inputs and attributes; the frontend maps Resize-10 and
Upsample onto it): nearest and N-linear resizing with every coordinate transformation.

The plan (output extents, the scale each axis' coordinate transform uses, the region of interest)
follows ONNX's rules for scales, sizes, axes and keep_aspect_ratio_policy, and onnxruntime's
roundings where the specification leaves room, so that networks match onnxruntime. The numpy
reference evaluates the same coordinate formulas as the kernel (:mod:`vtakit.compiler.ops.resize`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from vtakit.compiler import te
from vtakit.compiler.graph.op import Pattern, register_op
from vtakit.compiler.ops import resize as ops_resize
from vtakit.compiler.ops.common import static_shape
from vtakit.compiler.ops.resize import COORDINATE_TRANSFORMS, NEAREST_ROUNDING, ResizeAxis
from vtakit.errors import GraphError, UnsupportedOperatorError

__all__ = ["resize_plan"]

_RESIZE_MODES = ("nearest", "linear")
_ASPECT_POLICIES: dict[str, Callable[[list[float]], float] | None] = {"stretch": None, "not_larger": min,
                                                                      "not_smaller": max}


def _given(value: np.ndarray | None) -> bool:
    return value is not None and np.asarray(value).size > 0


def resize_plan(shape: Sequence[int], roi: np.ndarray | None, scales: np.ndarray | None,
                sizes: np.ndarray | None, attrs: dict[str, Any]) -> list[ResizeAxis]:
    """Each axis of a Resize of an input of ``shape``: output extent, the scale its coordinate transform
    uses and its region of interest (ONNX's rules for scales, sizes, axes and keep_aspect_ratio_policy,
    output extents rounded as onnxruntime rounds them)."""
    if attrs["mode"] not in _RESIZE_MODES:
        raise UnsupportedOperatorError(f"Resize mode={attrs['mode']!r} is not supported; vtakit resizes with "
                                       f"{list(_RESIZE_MODES)}")
    if attrs["antialias"]:
        raise UnsupportedOperatorError("Resize antialias=1 is not supported")
    if attrs["keep_aspect_ratio_policy"] not in _ASPECT_POLICIES:
        raise GraphError(f"keep_aspect_ratio_policy={attrs['keep_aspect_ratio_policy']!r} is not one of "
                         f"{list(_ASPECT_POLICIES)}")
    rank = len(shape)
    axes = [int(a) % rank for a in attrs["axes"]] if attrs["axes"] else list(range(rank))
    if _given(scales) == _given(sizes):
        raise GraphError("Resize needs exactly one of the scales and sizes inputs")
    given = np.asarray(scales if _given(scales) else sizes).reshape(-1)
    if len(given) != len(axes):
        raise GraphError(f"Resize {'scales' if _given(scales) else 'sizes'} {given.tolist()} must have one entry "
                         f"per resized axis ({len(axes)})")
    scale = [1.0] * rank
    out = list(shape)
    if _given(scales):
        for a, s in zip(axes, given.astype(np.float32)):
            scale[a], out[a] = float(s), int(s * np.float32(shape[a]))
    else:
        ratios = [np.float32(n) / np.float32(shape[a]) for a, n in zip(axes, given)]
        pick = _ASPECT_POLICIES[attrs["keep_aspect_ratio_policy"]]
        for a, n, r in zip(axes, given, ratios):
            if pick is None:
                scale[a], out[a] = float(r), int(n)
            else:
                common = np.float32(pick(ratios))
                scale[a], out[a] = float(common), int(np.floor(common * np.float32(shape[a]) + np.float32(0.5)))
    if out == list(shape):  # the shape is kept: a copy, whatever the scales (onnxruntime's rule)
        scale = [1.0] * rank
    start, end = [0.0] * rank, [1.0] * rank
    if _given(roi) and attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        box = np.asarray(roi, np.float32).reshape(-1)
        listed = axes if len(box) == 2 * len(axes) else list(range(rank))
        if len(box) != 2 * len(listed):
            raise GraphError(f"Resize roi {box.tolist()} must hold a start and an end per resized axis")
        for k, a in enumerate(listed):
            start[a], end[a] = float(box[k]), float(box[len(listed) + k])
    return [ResizeAxis(shape[a], out[a], scale[a], start[a], end[a]) for a in range(rank)]


def _resize_reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """ONNX Resize, nearest or N-linear, coordinates computed in float32 as onnxruntime does."""
    x = ins[0]
    plan = resize_plan(x.shape, *(ins[1:4] + [None] * (4 - len(ins))), attrs)
    transform = attrs["coordinate_transformation_mode"]
    out = x
    inside = np.ones((1,) * x.ndim, bool)
    for k, axis in enumerate(plan):
        if not axis.moves:
            continue
        coord = np.asarray(COORDINATE_TRANSFORMS[transform](np.arange(axis.out_len, dtype=np.float32), axis),
                           np.float32)
        along = [1] * x.ndim
        along[k] = -1
        if attrs["mode"] == "nearest":
            rounded = NEAREST_ROUNDING[attrs["nearest_mode"]](coord, axis, np.floor, np.ceil)
            out = np.take(out, np.clip(rounded.astype(np.int64), 0, axis.in_len - 1), axis=k)
        else:
            c = np.clip(coord, np.float32(0), np.float32(axis.in_len - 1))
            lo = np.floor(c).astype(np.int64)
            frac = (c - lo.astype(np.float32)).reshape(along)
            hi = np.minimum(lo + 1, axis.in_len - 1)
            out = np.take(out, lo, axis=k) * (np.float32(1) - frac) + np.take(out, hi, axis=k) * frac
        inside = inside & ((coord >= 0) & (coord <= axis.in_len - 1)).reshape(along)
    if transform == "tf_crop_and_resize":
        out = np.where(inside, out, np.asarray(attrs["extrapolation_value"], out.dtype))
    return (np.ascontiguousarray(out).astype(x.dtype),)


def _resize_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x = ins[0]
    plan = resize_plan(static_shape(x), *(ins[1:4] + [None] * (4 - len(ins))), attrs)
    return [ops_resize.resize(x, plan, attrs["mode"], attrs["coordinate_transformation_mode"],
                              attrs["nearest_mode"], attrs["extrapolation_value"])]


register_op("Resize", pattern=Pattern.INJECTIVE, const_inputs=(1, 2, 3), compute=_resize_compute,
            attrs={"antialias": 0, "axes": None, "coordinate_transformation_mode": "half_pixel",
                   "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0,
                   "keep_aspect_ratio_policy": "stretch", "mode": "nearest",
                   "nearest_mode": "round_prefer_floor"})(_resize_reference)
