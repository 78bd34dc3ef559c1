"""numpy helpers: the accelerator's packed layouts and the integer reference results.

The accelerator reads tensors in blocks: activations are NCHW{BATCH}n{BLOCK_IN}c,
``(N/b, C/bi, H, W, b, bi)``; weights are OIHW{BLOCK_OUT}o{BLOCK_IN}i, ``(O/bo, I/bi, KH, KW, bo, bi)``;
matrices are ``(M/rows, K/cols, rows, cols)``; a bias is ``(O/bo, b, bo)``, the same channel bias in
every batch lane. These helpers live in the runtime because the runtime's hand-written workloads and
the compiler's ops (which the runtime may not import) both pack this way.

A count that is not a whole number of blocks is zero-padded up to the block (:func:`blocks`): a zero
input channel or weight adds nothing to a dot product, so a padded computation gives the same
values in the real lanes, and the unpackers cut the padding off when given the unpadded shape.

The references compute what the ops do, with int32 wrap-around: :func:`requantize` is the
requantisation epilogue of the accelerator's conv2d and dense (``clip((acc + addend) >> shift)``,
optionally with a multiplier and a rounding shift), :func:`add_reference` its residual add.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from vtakit.errors import ArgumentError

__all__ = ["blocks", "pad_to_blocks", "pack_nchw", "unpack_nchw", "pack_oihw", "pack_matrix", "unpack_matrix",
           "pack_bias", "requantize", "rounding_addend", "shift_values", "add_reference", "conv2d_reference",
           "dense_reference", "SHIFT_RANGE", "MULTIPLIER_RANGE", "SHIFT_ADD_TERMS", "SHIFT_ADD_MAX_TERMS",
           "multiplier_set_bits", "shift_add_terms", "shift_add_amounts", "shift_add_value", "nearest_with_set_bits"]


def blocks(n: int, block: int) -> int:
    """How many blocks of ``block`` hold ``n`` (the last one zero-padded when ``n`` is not a multiple)."""
    return -(-n // block)


def _check_ndim(x: np.ndarray, ndim: int, what: str, layout: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != ndim:
        raise ArgumentError(f"{what} must be a {ndim}-D array {layout}, got shape {x.shape}")
    return x


def pad_to_blocks(x: np.ndarray, block_of_axis: dict[int, int]) -> np.ndarray:
    """``x`` with zeros appended along the axes of ``block_of_axis`` up to a multiple of their block."""
    widths = [(0, blocks(n, block_of_axis[a]) * block_of_axis[a] - n if a in block_of_axis else 0)
              for a, n in enumerate(x.shape)]
    return np.pad(x, widths) if any(w for _, w in widths) else x


def _cut(x: np.ndarray, shape: Sequence[int] | None, what: str) -> np.ndarray:
    """``x`` without the padding beyond ``shape`` (the unpadded shape), or all of ``x``."""
    if shape is None:
        return x
    shape = tuple(shape)
    if len(shape) != x.ndim or any(not 0 < s <= n for s, n in zip(shape, x.shape)):
        raise ArgumentError(f"{what}: shape {shape} does not fit in the unpacked shape {x.shape}")
    return np.ascontiguousarray(x[tuple(slice(0, s) for s in shape)])


def pack_nchw(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """``(N, C, H, W)`` -> ``(N/batch, C/block, H, W, batch, block)``, N and C zero-padded to the blocks."""
    x = pad_to_blocks(_check_ndim(x, 4, "pack_nchw: x", "(N, C, H, W)"), {0: batch, 1: block})
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n // batch, batch, c // block, block, h, w).transpose(0, 2, 4, 5, 1, 3))


def unpack_nchw(x: np.ndarray, shape: Sequence[int] | None = None) -> np.ndarray:
    """The inverse of :func:`pack_nchw`; ``shape`` (the unpadded ``(N, C, H, W)``) cuts the padding off."""
    nb, cb, h, w, b, c = _check_ndim(x, 6, "unpack_nchw: x", "(N/b, C/bi, H, W, b, bi)").shape
    return _cut(np.ascontiguousarray(x.transpose(0, 4, 1, 5, 2, 3).reshape(nb * b, cb * c, h, w)), shape,
                "unpack_nchw")


def pack_oihw(w: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    """``(O, I, KH, KW)`` -> ``(O/bo, I/bi, KH, KW, bo, bi)``, O and I zero-padded to the blocks."""
    w = pad_to_blocks(_check_ndim(w, 4, "pack_oihw: w", "(O, I, KH, KW)"), {0: block_out, 1: block_in})
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // block_out, block_out, i // block_in, block_in, kh, kw)
                                .transpose(0, 2, 4, 5, 1, 3))


def pack_matrix(a: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``(M, K)`` -> ``(M/rows, K/cols, rows, cols)``, M and K zero-padded to the blocks."""
    a = pad_to_blocks(_check_ndim(a, 2, "pack_matrix: a", "(M, K)"), {0: rows, 1: cols})
    m, k = a.shape
    return np.ascontiguousarray(a.reshape(m // rows, rows, k // cols, cols).transpose(0, 2, 1, 3))


def unpack_matrix(a: np.ndarray, shape: Sequence[int] | None = None) -> np.ndarray:
    """Inverse of :func:`pack_matrix`; ``shape`` (the unpadded ``(M, K)``) cuts the padding off."""
    mb, kb, rows, cols = _check_ndim(a, 4, "unpack_matrix: a", "(M/rows, K/cols, rows, cols)").shape
    return _cut(np.ascontiguousarray(a.transpose(0, 2, 1, 3).reshape(mb * rows, kb * cols)), shape, "unpack_matrix")


def pack_bias(bias: np.ndarray, batch: int, block_out: int) -> np.ndarray:
    """``(O,)`` int32 -> ``(O/bo, batch, bo)``, replicated over the batch lanes, O zero-padded."""
    bias = pad_to_blocks(_check_ndim(bias, 1, "pack_bias: bias", "(O,)"), {0: block_out})
    ob = bias.shape[0] // block_out
    return np.ascontiguousarray(np.broadcast_to(bias.reshape(ob, 1, block_out), (ob, batch, block_out))
                                .astype(np.int32))


_INT32 = (-(1 << 31), (1 << 31) - 1)
SHIFT_RANGE = (-32, 31)                 # the ALU's SHR amount (6 signed bits; negative = left shift)
MULTIPLIER_RANGE = (-(1 << 15), (1 << 15) - 1)   # the ALU's MUL reads 16 signed bits of its operand


def _wrap32(x: np.ndarray) -> np.ndarray:
    """int64 values wrapped to int32 (two's complement), as int64."""
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _check_int(value: object, what: str, lo: int, hi: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ArgumentError(f"{what} must be an int in [{lo}, {hi}], got {value!r}")
    return int(value)


def _check_clip(clip: Sequence[int], what: str) -> tuple[int, int]:
    try:
        lo, hi = (int(c) for c in clip)
    except (TypeError, ValueError):
        raise ArgumentError(f"{what}: clip must be a pair (lo, hi) of ints, got {clip!r}") from None
    if not -128 <= lo <= hi <= 127:
        raise ArgumentError(f"{what}: clip {tuple(clip)} must satisfy -128 <= lo <= hi <= 127 (an int8 range)")
    return lo, hi


def _per_channel(value: object, ndim: int, channels: int, what: str, lo: int, hi: int) -> np.ndarray | int:
    """A scalar (int) or a per-channel array shaped to broadcast on axis 1 of an ``ndim``-D array."""
    if np.ndim(value) == 0:
        return _check_int(value.item() if isinstance(value, np.ndarray) else value, what, lo, hi)
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.shape[0] != channels or not np.issubdtype(arr.dtype, np.integer):
        raise ArgumentError(f"{what} must be a scalar or a 1-D integer array of {channels} channels (axis 1), "
                            f"got {arr.dtype} of shape {arr.shape}")
    if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
        raise ArgumentError(f"{what} values must lie in [{lo}, {hi}], got [{int(arr.min())}, {int(arr.max())}]")
    return arr.astype(np.int64).reshape((1, -1) + (1,) * (ndim - 2))


def shift_values(x: np.ndarray, s: int) -> np.ndarray:
    """The ALU's SHR on int32 values: ``x >> s`` (arithmetic) for ``s >= 0``, ``x << -s`` wrapped to
    32 bits for ``s < 0`` (``s`` in [-32, 31]); int64 in, int64 holding int32 values out."""
    s = _check_int(s, "shift", *SHIFT_RANGE)
    x = np.asarray(x, dtype=np.int64)
    return x >> s if s >= 0 else _wrap32(x << -s)


def rounding_addend(shift: int) -> int:
    """What to add before ``>> shift`` to round to nearest (ties up): ``1 << (shift - 1)``, 0 for
    ``shift <= 0``."""
    shift = _check_int(shift, "shift", *SHIFT_RANGE)
    return 1 << (shift - 1) if shift > 0 else 0


def requantize(acc: np.ndarray, addend: np.ndarray | int | None, shift: int, clip: tuple[int, int],
               multiplier: np.ndarray | int | None = None, pre_shift: int = 0) -> np.ndarray:
    """The accelerator ops' requantisation epilogue, as int8 (every step wraps to int32)::

        t = acc + addend
        if multiplier is None:
            t = t >> shift
        else:
            t = t >> pre_shift
            t = t * multiplier
            t = (t + rounding_addend(shift)) >> shift
        out = int8(clip(t, lo, hi))

    ``>> s`` is an arithmetic right shift for ``s >= 0`` and a left shift by ``-s`` for ``s < 0``
    (:func:`shift_values`; ``shift`` and ``pre_shift`` in [-32, 31]). ``addend`` is None (zero), an
    int32 scalar or a per-channel int32 array (broadcast on axis 1); ``multiplier`` is None, a scalar
    or a per-channel array in [-2**15, 2**15) (the ALU's MUL reads 16 signed bits); ``clip`` lies in
    the int8 range.

    The first shift truncates (rounds towards -inf). To round to nearest, a caller folds
    ``rounding_addend(shift)`` into ``addend`` (a quantiser passes ``bias + rounding_addend(shift)``):
    ``(acc + bias + 2**(shift-1)) >> shift``. With a multiplier the final shift rounds by itself.
    """
    lo, hi = _check_clip(clip, "requantize")
    shift = _check_int(shift, "requantize: shift", *SHIFT_RANGE)
    pre_shift = _check_int(pre_shift, "requantize: pre_shift", *SHIFT_RANGE)
    t = np.asarray(acc)
    if not np.issubdtype(t.dtype, np.integer):
        raise ArgumentError(f"requantize: acc must be an integer array, got {t.dtype}")
    t = _wrap32(t.astype(np.int64))
    channels = t.shape[1] if t.ndim >= 2 else 1
    if addend is not None:
        t = _wrap32(t + _per_channel(addend, max(t.ndim, 2), channels, "requantize: addend", *_INT32))
    if multiplier is None:
        t = shift_values(t, shift)
    else:
        m = _per_channel(multiplier, max(t.ndim, 2), channels, "requantize: multiplier", *MULTIPLIER_RANGE)
        t = _wrap32(shift_values(t, pre_shift) * m)
        t = shift_values(_wrap32(t + rounding_addend(shift)), shift)
    return np.clip(t, lo, hi).astype(np.int8)


#: the terms of the bare ``"shift_add"`` op form, and the set bits that ``multiplier_bits`` rounds to
#: for speed; a graph layer uses as many terms as its multipliers' most set bits (up to
#: :data:`SHIFT_ADD_MAX_TERMS`)
SHIFT_ADD_TERMS = 4
#: the most terms of the shift-and-add epilogue (no ALU_MUL): every non-negative multiplier in
#: :data:`MULTIPLIER_RANGE` (at most 15 set bits); a negative one (17+ set bits in two's complement) needs MUL
SHIFT_ADD_MAX_TERMS = 16


def multiplier_set_bits(multiplier: np.ndarray | int) -> np.ndarray | int:
    """The set bits of each multiplier's 32-bit two's complement pattern (what ``t * m`` sums
    as shifted copies of ``t``, mod 2**32): ``m > 0`` its popcount, ``m < 0`` at least 17."""
    m = np.asarray(multiplier, dtype=np.int64) & 0xFFFFFFFF
    bits = np.zeros(m.shape, np.int64)
    for b in range(32):
        bits += (m >> b) & 1
    return int(bits) if bits.ndim == 0 else bits


def shift_add_terms(multiplier: np.ndarray | int) -> int:
    """The shift-and-add terms that realise every one of ``multiplier`` (one value or per channel):
    their most set bits (32-bit pattern), at least 1 (``m = 0`` is one left shift by 32)."""
    bits = np.asarray(multiplier_set_bits(multiplier)).reshape(-1)
    return max(1, int(bits.max())) if bits.size else 1


def nearest_with_set_bits(multiplier: np.ndarray | int, bits: int, limit: int = MULTIPLIER_RANGE[1]) -> np.ndarray:
    """Each non-negative multiplier rounded to the nearest integer with at most ``bits`` set bits (ties
    and values that would exceed ``limit`` round down): keep the top ``bits`` set bits, or add one at
    the lowest kept bit when that is nearer."""
    m = np.asarray(multiplier, dtype=np.int64)
    if np.any(m < 0):
        raise ArgumentError("nearest_with_set_bits: multipliers must be non-negative")
    if not isinstance(bits, (int, np.integer)) or isinstance(bits, bool) or bits < 1:
        raise ArgumentError(f"nearest_with_set_bits: bits must be a positive int, got {bits!r}")
    out = m.copy().reshape(-1)
    for c, v in enumerate(out.tolist()):
        set_bits = [b for b in range(v.bit_length() - 1, -1, -1) if v >> b & 1]
        if len(set_bits) <= bits:
            continue
        low = set_bits[bits - 1]
        down = v >> low << low
        up = down + (1 << low)
        out[c] = up if (up - v < v - down and up <= limit) else down
    return out.reshape(m.shape)


def shift_add_amounts(multiplier: np.ndarray | int, terms: int | None = None) -> np.ndarray:
    """The ALU SHR amounts (negative: left) that compute ``t * m`` (int32, wrapped) without MUL,
    one row of ``terms`` per multiplier, for the Horner form::

        h = t >> a[0]; h = (h + t) >> a[1]; ...; h = (h + t) >> a[terms - 1]      # == t * m

    A multiplier with set bits ``b0 > b1 > ... > b(k-1)`` (32-bit pattern, ``k <= terms``) uses
    the last ``k`` steps (``-(b0 - b1), ..., -b(k-1)``); ``a[terms - k - 1] = -32`` (a left shift
    by 32 gives 0) drops the copies of ``t`` before them, and earlier amounts are 0. ``m = 0``:
    ``a[terms - 1] = -32``. ``terms`` (None: :func:`shift_add_terms`, as many as the most set bits)
    is the layer's term count; :class:`ArgumentError` when a multiplier has more set bits."""
    m = np.asarray(multiplier, dtype=np.int64).reshape(-1)
    if terms is None:
        terms = shift_add_terms(m)
    if not isinstance(terms, (int, np.integer)) or isinstance(terms, bool) or terms < 1:
        raise ArgumentError(f"shift_add_amounts: terms must be a positive int, got {terms!r}")
    terms = int(terms)
    out = np.zeros((m.size, terms), np.int32)
    for c, v in enumerate(m.tolist()):
        bits = [b for b in range(31, -1, -1) if (v & 0xFFFFFFFF) >> b & 1]
        if len(bits) > terms:
            raise ArgumentError(f"shift_add_amounts: multiplier {v} has {len(bits)} set bits, more than {terms}")
        z = terms - len(bits)
        if z:
            out[c, z - 1] = -32
        for j, b in enumerate(bits):
            out[c, z + j] = -(b - bits[j + 1]) if j + 1 < len(bits) else -b
    return out


def shift_add_value(amounts: np.ndarray, t: np.ndarray | int = 1) -> np.ndarray:
    """The Horner form of :func:`shift_add_amounts` run on ``t`` (default 1: the multipliers),
    with the ALU's SHR (-32..31, wrapped); ``amounts`` is ``(channels, terms)``."""
    a = np.asarray(amounts, dtype=np.int64)
    t = np.asarray(t, dtype=np.int64)
    h = None
    for k in range(a.shape[-1]):
        x = t if h is None else _wrap32(h + t)
        s = a[..., k]
        h = np.where(s >= 0, x >> np.maximum(s, 0), _wrap32(x << np.minimum(-s, 32)))
    return h.astype(np.int64)


def add_reference(a: np.ndarray, b: np.ndarray, lshift_a: int, lshift_b: int, addend: int, shift: int,
                  clip: tuple[int, int]) -> np.ndarray:
    """The accelerator's residual add on int8 activations (any layout, same shape), as int8::

        t = (a << lshift_a) + (b << lshift_b) + addend
        out = int8(clip(t >> shift, lo, hi))

    with int32 wrap-around, ``lshift_*`` in [0, 31], ``shift`` in [-32, 31] (negative: a left
    shift, as :func:`requantize`) and ``addend`` an int32 scalar (fold ``rounding_addend(shift)``
    into it to round to nearest)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ArgumentError(f"add_reference: a and b must have the same shape, got {a.shape} and {b.shape}")
    for what, x in (("a", a), ("b", b)):
        if x.dtype != np.int8:
            raise ArgumentError(f"add_reference: {what} must be int8, got {x.dtype}")
    lshift_a = _check_int(lshift_a, "add_reference: lshift_a", 0, SHIFT_RANGE[1])
    lshift_b = _check_int(lshift_b, "add_reference: lshift_b", 0, SHIFT_RANGE[1])
    addend = _check_int(addend, "add_reference: addend", *_INT32)
    shift = _check_int(shift, "add_reference: shift", *SHIFT_RANGE)
    lo, hi = _check_clip(clip, "add_reference")
    t = _wrap32(shift_values(a, -lshift_a) + shift_values(b, -lshift_b))
    t = shift_values(_wrap32(t + addend), shift)
    return np.clip(t, lo, hi).astype(np.int8)


def _pair(value: int | Sequence[int], n: int, what: str, minimum: int) -> tuple[int, ...]:
    vals = (value,) * n if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else tuple(value)
    if len(vals) != n or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum
                             for v in vals):
        raise ArgumentError(f"{what} must be an int or {n} ints >= {minimum}, got {value!r}")
    return tuple(int(v) for v in vals)


def conv2d_reference(x: np.ndarray, w: np.ndarray, stride: int | Sequence[int] = 1,
                     pad: int | Sequence[int] = 0) -> np.ndarray:
    """NCHW int8 x OIHW int8 -> NCHW int32 (exact). ``stride`` is an int or ``(sh, sw)``; ``pad`` an
    int or ``(top, left, bottom, right)`` (ONNX's ``pads`` order for 2-D: begin_h, begin_w, end_h, end_w)."""
    sh, sw = _pair(stride, 2, "conv2d_reference: stride", 1)
    pt, pl, pb, pr = _pair(pad, 4, "conv2d_reference: pad", 0)
    xp = np.pad(x.astype(np.int32), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    o, _, kh, kw = w.shape
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    return np.einsum("nchwyx,ocyx->nohw", win, w.astype(np.int32), optimize=True).astype(np.int32)


def dense_reference(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``(M, K) x (N, K)^T`` int8 -> int32 (wrapping, as the accelerator's accumulator).

    int8 products summed over fewer than 2**39 terms stay below 2**53, so float64 (BLAS) computes
    them exactly, and ~20x faster than numpy's integer matmul (a 4096^3 reference: 3 s, not 60 s).
    """
    if a.dtype == np.int8 and w.dtype == np.int8 and a.shape[-1] < 1 << 39:
        exact = a.astype(np.float64) @ w.astype(np.float64).T
        return exact.astype(np.int64).astype(np.int32)
    return (a.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)
