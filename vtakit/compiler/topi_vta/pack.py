"""numpy helpers: the accelerator's packed layouts and the integer reference results.

Activations are NCHW{BATCH}n{BLOCK_IN}c: ``(N/b, C/bi, H, W, b, bi)``; weights are
OIHW{BLOCK_OUT}o{BLOCK_IN}i: ``(O/bo, I/bi, KH, KW, bo, bi)``; dense operands are the 2-D
versions ``(M/b, K/bi, b, bi)`` and ``(N/bo, K/bi, bo, bi)``; a bias is ``(O/bo, b, bo)``,
the same channel bias in every batch lane. The references compute the fused requantisation the
ops do: ``clip((acc >> shift) + bias, lo, hi)`` cast to int8, with int32 wrap-around.
"""

from __future__ import annotations

import numpy as np

from vtakit.errors import CompileError

__all__ = ["pack_nchw", "unpack_nchw", "pack_oihw", "pack_matrix", "unpack_matrix", "pack_bias",
           "requantize", "conv2d_reference", "dense_reference"]


def _blocks(n: int, block: int, what: str) -> int:
    if n % block:
        raise CompileError(f"{what} = {n} is not a multiple of the accelerator's block of {block}")
    return n // block


def pack_nchw(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """``(N, C, H, W)`` -> ``(N/batch, C/block, H, W, batch, block)``."""
    n, c, h, w = x.shape
    nb, cb = _blocks(n, batch, "batch"), _blocks(c, block, "channels")
    return np.ascontiguousarray(x.reshape(nb, batch, cb, block, h, w).transpose(0, 2, 4, 5, 1, 3))


def unpack_nchw(x: np.ndarray) -> np.ndarray:
    """The inverse of :func:`pack_nchw`."""
    nb, cb, h, w, b, c = x.shape
    return np.ascontiguousarray(x.transpose(0, 4, 1, 5, 2, 3).reshape(nb * b, cb * c, h, w))


def pack_oihw(w: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    """``(O, I, KH, KW)`` -> ``(O/bo, I/bi, KH, KW, bo, bi)``."""
    o, i, kh, kw = w.shape
    ob, ib = _blocks(o, block_out, "output channels"), _blocks(i, block_in, "input channels")
    return np.ascontiguousarray(w.reshape(ob, block_out, ib, block_in, kh, kw).transpose(0, 2, 4, 5, 1, 3))


def pack_matrix(a: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``(M, K)`` -> ``(M/rows, K/cols, rows, cols)``."""
    m, k = a.shape
    mb, kb = _blocks(m, rows, "rows"), _blocks(k, cols, "columns")
    return np.ascontiguousarray(a.reshape(mb, rows, kb, cols).transpose(0, 2, 1, 3))


def unpack_matrix(a: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_matrix`: ``(M/r, K/c, r, c) -> (M, K)``."""
    mb, kb, rows, cols = a.shape
    return np.ascontiguousarray(a.transpose(0, 2, 1, 3).reshape(mb * rows, kb * cols))


def pack_bias(bias: np.ndarray, batch: int, block_out: int) -> np.ndarray:
    """``(O,)`` int32 -> ``(O/bo, batch, bo)``, replicated over the batch lanes."""
    (o,) = bias.shape
    ob = _blocks(o, block_out, "output channels")
    return np.ascontiguousarray(np.broadcast_to(bias.reshape(ob, 1, block_out), (ob, batch, block_out))
                                .astype(np.int32))


def requantize(acc: np.ndarray, shift: int, bias: np.ndarray | None, clip: tuple[int, int]) -> np.ndarray:
    """``clip((acc >> shift) + bias, *clip)`` as int8 (int32 arithmetic; bias broadcasts on axis 1)."""
    r = acc.astype(np.int32) >> np.int32(shift)
    if bias is not None:
        r = r + bias.astype(np.int32).reshape((1, -1) + (1,) * (acc.ndim - 2))
    return np.clip(r, clip[0], clip[1]).astype(np.int8)


def conv2d_reference(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """NCHW int8 x OIHW int8 -> NCHW int32 (exact)."""
    xp = np.pad(x.astype(np.int32), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, _, kh, kw = w.shape
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwyx,ocyx->nohw", win, w.astype(np.int32), optimize=True).astype(np.int32)


def dense_reference(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``(M, K) x (N, K)^T`` int8 -> int32 (exact)."""
    return (a.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)
