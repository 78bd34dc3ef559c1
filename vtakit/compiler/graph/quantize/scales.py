"""Scales and the integer requantisation parameters derived from them.

Symmetric int8 throughout: a tensor with clipping threshold ``t`` gets the scale ``s = t / 127``, or,
with power-of-two scales, ``s = 2**ceil(log2(t / 127))`` (never finer than ``t / 127``, so ``t``
still fits). A conv/dense accumulates at scale ``s_in * s_w``; its requantisation to the output scale
is a right shift (power-of-two scales, one weight scale) or a fixed-point multiplier and shift
(:func:`fixed_point`). docs/quantization.md derives the formulas and the overflow bound.
"""

from __future__ import annotations

import math

import numpy as np

from vtakit.errors import GraphError
from vtakit.runtime.packing import SHIFT_RANGE, nearest_with_set_bits

__all__ = ["scale_for", "exponent", "weight_scales", "quantize_weight", "quantize_bias", "bias_in_acc_units",
           "fixed_point", "check_shift", "MULTIPLIER_ERROR_KEY", "MULTIPLIER_BITS", "OVERFLOW_BITS", "ACC_HEADROOM",
           "QMAX"]

#: the largest int8 magnitude a symmetric quantiser uses
QMAX = 127
#: multipliers are normalised to [2**(MULTIPLIER_BITS-1), 2**MULTIPLIER_BITS): the ALU's MUL reads 16 signed bits
MULTIPLIER_BITS = 15
#: |(t >> pre_shift) * multiplier| is kept at or below 2**OVERFLOW_BITS (the rounding addend, at most
#: 2**30, then still fits int32)
OVERFLOW_BITS = 29
#: ``graph.metadata`` key of the quantiser's ``multiplier_bits`` rounding: the largest relative scale error
#: of each layer's multipliers (``{layer: error}``)
MULTIPLIER_ERROR_KEY = "multiplier_bits_error"
#: the calibrated accumulator range is doubled before sizing pre_shift (inputs beyond calibration)
ACC_HEADROOM = 2.0


def scale_for(amax: float | np.ndarray, power2: bool) -> np.ndarray:
    """The scale(s) of a tensor (or of each channel) whose threshold is ``amax``; 1.0 where ``amax`` is 0."""
    a = np.asarray(amax, np.float64)
    safe = np.where(a > 0, a, QMAX)
    s = safe / QMAX
    if power2:
        s = np.exp2(np.ceil(np.log2(s)))
    return s


def exponent(scale: float) -> int:
    """``log2(scale)`` of a power-of-two scale."""
    m, e = math.frexp(float(scale))
    if m != 0.5:
        raise GraphError(f"quantize: internal error: scale {scale!r} is not a power of two")
    return e - 1


def weight_scales(w: np.ndarray, per_channel: bool, power2: bool) -> np.ndarray:
    """One scale per output channel (axis 0) of weight ``w``: equal ones for per-tensor quantisation."""
    flat = np.abs(w.reshape(w.shape[0], -1).astype(np.float64))
    amax = flat.max(axis=1) if per_channel else np.full(w.shape[0], flat.max() if flat.size else 0.0)
    return scale_for(amax, power2)


def quantize_weight(w: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """``clip(round_half_even(w / s_c), -127, 127)`` as int8, ``s_c`` per output channel (axis 0)."""
    s = scales.reshape((-1,) + (1,) * (w.ndim - 1))
    return np.clip(np.rint(w.astype(np.float64) / s), -QMAX, QMAX).astype(np.int8)


def bias_in_acc_units(bias: np.ndarray | None, acc_scales: np.ndarray) -> np.ndarray:
    """``round(b / (s_in * s_w))`` per output channel, as float64 (0 without a bias)."""
    b = np.zeros(len(acc_scales)) if bias is None else bias.astype(np.float64)
    return np.rint(b / acc_scales)


def quantize_bias(bias: np.ndarray | None, acc_scales: np.ndarray, extra: int, layer: str) -> np.ndarray:
    """The int32 addend ``round(b / (s_in * s_w)) + extra`` per output channel (``extra``: the rounding term)."""
    q = bias_in_acc_units(bias, acc_scales) + float(extra)
    if q.size and np.abs(q).max() >= 2.0 ** 31:
        raise GraphError(f"quantize: layer {layer!r}: the int32 bias ({np.abs(q).max():.4g} at most) does not fit "
                         "int32; the layer's input or weight scale is too fine for its bias")
    return q.astype(np.int32)


def check_shift(shift: int, layer: str, what: str = "shift") -> int:
    """``shift`` if it lies in the ALU's shift range, else a GraphError naming the layer."""
    lo, hi = SHIFT_RANGE
    if not lo <= shift <= hi:
        raise GraphError(f"quantize: layer {layer!r} needs a requantisation {what} of {shift}, outside the ALU's "
                         f"shift range [{lo}, {hi}]; its scales are too far apart (calibrate on representative "
                         "data, or keep the layer in float)")
    return int(shift)


def fixed_point(real: np.ndarray, acc_bound: np.ndarray, layer: str, bits: int | None = None,
                errors: dict[str, float] | None = None) -> tuple[np.ndarray, int, int]:
    """``(multiplier, shift, pre_shift)`` with ``((t >> pre_shift) * multiplier[c]) >> shift`` ~ ``t * real[c]``.

    The largest multiplier lies in [2**14, 2**15) (the others share its shift, so a channel whose
    ``real`` is 2**-k times the largest keeps k bits fewer). ``bits`` (the quantiser's
    ``multiplier_bits``): each multiplier is then rounded to the nearest value with at most ``bits``
    set bits (:func:`~vtakit.runtime.packing.nearest_with_set_bits`: fewer shift-and-add terms on
    configurations without ALU_MUL), and ``errors[layer]`` (when given) records the largest relative
    error of the realised scales against ``real``. ``pre_shift`` is the smallest non-negative
    shift with ``(acc_bound[c] / 2**pre_shift) * multiplier[c] <= 2**29`` for every channel, so that
    for ``|t| <= acc_bound`` the product, plus the final shift's rounding addend (at most 2**30),
    stays inside int32."""
    real = np.asarray(real, np.float64)
    top = float(real.max())
    k = (MULTIPLIER_BITS - 1) - math.floor(math.log2(top))
    m = np.rint(real * 2.0 ** k).astype(np.int64)
    if m.max() >= 1 << MULTIPLIER_BITS:
        k -= 1
        m = np.rint(real * 2.0 ** k).astype(np.int64)
    if bits is not None:
        m = nearest_with_set_bits(m, bits)
        if errors is not None:
            exact = real * 2.0 ** k
            errors[layer] = float(np.max(np.abs(m - exact) / np.where(exact > 0, exact, 1.0)))
    worst = float(np.max(np.asarray(acc_bound, np.float64) * m))
    pre = max(0, math.ceil(math.log2(worst)) - OVERFLOW_BITS) if worst > 0 else 0
    check_shift(pre, layer, "pre_shift")
    shift = check_shift(k - pre, layer)   # t * real = ((t / 2**pre) * real * 2**k) / 2**(k - pre)
    return m.astype(np.int32), shift, pre
