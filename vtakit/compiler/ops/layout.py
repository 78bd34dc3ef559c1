"""Weight layouts the packed operators expect, made with numpy (weights are constants)."""

from __future__ import annotations

import numpy as np

from vtakit.errors import CompileError

__all__ = ["pack_dense_weight", "pack_conv2d_kernel"]


def _check_block(extent: int, block: int, what: str) -> None:
    if block < 1 or extent % block:
        raise CompileError(f"{what}: block {block} must be positive and divide {extent}")


def pack_dense_weight(weight: np.ndarray, block: int) -> np.ndarray:
    """``[N, K]`` -> ``[N // block, K, block]`` (for :func:`~vtakit.compiler.ops.nn.dense_packed`)."""
    if weight.ndim != 2:
        raise CompileError(f"pack_dense_weight expects [out, in], got shape {weight.shape}")
    n, k = weight.shape
    _check_block(n, block, "pack_dense_weight")
    return np.ascontiguousarray(weight.reshape(n // block, block, k).transpose(0, 2, 1))


def pack_conv2d_kernel(kernel: np.ndarray, block: int) -> np.ndarray:
    """OIHW -> ``[O // block, I, KH, KW, block]`` (for :func:`~vtakit.compiler.ops.nn.conv2d_nchw_packed`)."""
    if kernel.ndim != 4:
        raise CompileError(f"pack_conv2d_kernel expects OIHW, got shape {kernel.shape}")
    o, i, kh, kw = kernel.shape
    _check_block(o, block, "pack_conv2d_kernel")
    return np.ascontiguousarray(kernel.reshape(o // block, block, i, kh, kw).transpose(0, 2, 3, 4, 1))
