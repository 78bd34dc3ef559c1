"""Resizing (nearest and N-linear interpolation) as a tensor expression, with ONNX's coordinate rules.

Each resized axis maps an output index to a fractional input coordinate by one of ONNX's
coordinate transformations, then picks the nearest input (with one of four rounding rules) or
interpolates linearly between the two neighbours. The transformations and rounding rules are
tables of plain arithmetic, so the graph compiler's numpy reference evaluates the very same
formulas (on float32 arrays, as onnxruntime computes coordinates) that the kernel computes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from vtakit.compiler import ir
from vtakit.compiler import te
from vtakit.compiler.te.tensor import Tensor
from vtakit.errors import CompileError

__all__ = ["ResizeAxis", "COORDINATE_TRANSFORMS", "NEAREST_ROUNDING", "resize"]

COORD_DTYPE = "float32"


@dataclass(frozen=True)
class ResizeAxis:
    """One axis of a resize: input and output extents, the scale used by the coordinate transform and
    the region of interest (``tf_crop_and_resize`` only; fractions of the input)."""

    in_len: int
    out_len: int
    scale: float
    roi_start: float = 0.0
    roi_end: float = 1.0

    @property
    def moves(self) -> bool:
        """Whether output indices differ from input indices on this axis: not when it keeps its extent at
        scale 1, not even cropped by ``tf_crop_and_resize``'s region of interest (onnxruntime's rule)."""
        return not (self.in_len == self.out_len and self.scale == 1.0)


def _half_pixel(x: Any, a: ResizeAxis) -> Any:
    return (x + 0.5) / a.scale - 0.5


def _half_pixel_symmetric(x: Any, a: ResizeAxis) -> Any:
    f32 = np.float32  # the offset rounded as onnxruntime computes it: ties in nearest rounding depend on it
    adjustment = f32(a.out_len) / (f32(a.scale) * f32(a.in_len))
    offset = float(f32(a.in_len) / f32(2) * (f32(1) - adjustment))
    return offset + (x + 0.5) / a.scale - 0.5


def _tf_crop_and_resize(x: Any, a: ResizeAxis) -> Any:
    if a.out_len == 1:
        return x * 0.0 + 0.5 * (a.roi_start + a.roi_end) * (a.in_len - 1)
    return a.roi_start * (a.in_len - 1) + x * ((a.roi_end - a.roi_start) * (a.in_len - 1)) / (a.out_len - 1)


# name -> (output coordinate x, axis) -> input coordinate; x is a float32 array or expression
COORDINATE_TRANSFORMS: dict[str, Callable[[Any, ResizeAxis], Any]] = {
    "half_pixel": _half_pixel,
    "half_pixel_symmetric": _half_pixel_symmetric,
    "pytorch_half_pixel": lambda x, a: _half_pixel(x, a) if a.out_len > 1 else x * 0.0,
    "align_corners": lambda x, a: x * float(a.in_len - 1) / float(a.out_len - 1) if a.out_len > 1 else x * 0.0,
    "asymmetric": lambda x, a: x / a.scale,
    "tf_half_pixel_for_nn": lambda x, a: (x + 0.5) / a.scale,
    "tf_crop_and_resize": _tf_crop_and_resize,
}

# name -> (coordinate, axis, floor, ceil) -> the rounded coordinate (still a float)
NEAREST_ROUNDING: dict[str, Callable[[Any, ResizeAxis, Callable, Callable], Any]] = {
    "round_prefer_floor": lambda v, a, floor, ceil: ceil(v - 0.5),
    "round_prefer_ceil": lambda v, a, floor, ceil: floor(v + 0.5),
    "floor": lambda v, a, floor, ceil: floor(v),
    "ceil": lambda v, a, floor, ceil: ceil(v),
    # Resize-10 and Upsample: truncate when enlarging, round up when shrinking (onnxruntime's rule)
    "simple": lambda v, a, floor, ceil: ceil(v) if a.scale < 1 else floor(v),
}


def _clamp(v: ir.PrimExpr, hi: int) -> ir.PrimExpr:
    return te.min(te.max(v, 0), hi)


def resize(data: Tensor, axes: Sequence[ResizeAxis], mode: str = "nearest", transform: str = "half_pixel",
           nearest_mode: str = "round_prefer_floor", extrapolation_value: float = 0.0) -> Tensor:
    """``data`` resized axis by axis (``mode`` "nearest" or "linear"; linear interpolates every axis
    that moves). With ``tf_crop_and_resize``, coordinates outside the input give ``extrapolation_value``."""
    if mode not in ("nearest", "linear"):
        raise CompileError(f"resize mode {mode!r} is not one of ['linear', 'nearest']")
    if transform not in COORDINATE_TRANSFORMS:
        raise CompileError(f"coordinate transformation {transform!r} is not one of {sorted(COORDINATE_TRANSFORMS)}")
    if nearest_mode not in NEAREST_ROUNDING:
        raise CompileError(f"nearest_mode {nearest_mode!r} is not one of {sorted(NEAREST_ROUNDING)}")
    if len(axes) != len(data.shape):
        raise CompileError(f"resize of {data.name!r} needs {len(data.shape)} axes, got {len(axes)}")
    moving = [k for k, a in enumerate(axes) if a.moves]
    crop = transform == "tf_crop_and_resize"

    def body(*idx):
        coords = {k: COORDINATE_TRANSFORMS[transform](idx[k].astype(COORD_DTYPE), axes[k]) for k in moving}
        if mode == "nearest":
            src = list(idx)
            for k in moving:
                rounded = NEAREST_ROUNDING[nearest_mode](coords[k], axes[k], te.floor, te.ceil)
                src[k] = _clamp(rounded.astype("int32"), axes[k].in_len - 1)
            value = data[tuple(src)]
        else:
            corners: list[tuple[list, ir.PrimExpr | None]] = [(list(idx), None)]
            for k in moving:
                c = te.min(te.max(coords[k], ir.const(0.0, COORD_DTYPE)), ir.const(axes[k].in_len - 1.0, COORD_DTYPE))
                lo = te.floor(c).astype("int32")
                hi = te.min(lo + 1, axes[k].in_len - 1)
                frac = c - lo.astype(COORD_DTYPE)
                step = []
                for src, weight in corners:
                    for at, w in ((lo, ir.const(1.0, COORD_DTYPE) - frac), (hi, frac)):
                        step.append((src[:k] + [at] + src[k + 1:], w if weight is None else weight * w))
                corners = step
            total = None
            for src, weight in corners:
                term = data[tuple(src)].astype(COORD_DTYPE)
                term = term if weight is None else term * weight
                total = term if total is None else total + term
            value = total.astype(data.dtype)
        if crop and moving:
            inside = te.all(*[te.all(coords[k] >= 0.0, coords[k] <= float(axes[k].in_len - 1)) for k in moving])
            value = te.if_then_else(inside, value, ir.const(extrapolation_value, data.dtype))
        return value

    return te.compute(tuple(a.out_len for a in axes), body, name="resize", tag="resize")
