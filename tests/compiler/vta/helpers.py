"""Helpers of the VTA backend tests: random packed operands, run on a device, compare."""

from __future__ import annotations

import numpy as np
import vtakit
from vtakit.compiler.topi_vta import (conv2d_reference, dense_reference, pack_bias, pack_matrix, pack_nchw, pack_oihw,
                                      requantize)
from vtakit.runtime import Device

SHIFT = 8


def conv_case(env, wl, seed=0):
    """Host operands (packed) and the expected packed output of the conv2d op with bias."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (wl.batch, wl.ci, wl.h, wl.w), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.co, wl.ci, wl.kernel, wl.kernel), dtype=np.int8)
    bias = rng.integers(-64, 64, wl.co, dtype=np.int32)
    ref = requantize(conv2d_reference(x, w, wl.stride, wl.pad), SHIFT, bias, (0, 127))
    host = [pack_nchw(x, env.batch, env.block_in), pack_oihw(w, env.block_out, env.block_in),
            pack_bias(bias, env.batch, env.block_out)]
    return host, pack_nchw(ref, env.batch, env.block_out)


def dense_case(env, m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    bias = rng.integers(-64, 64, n, dtype=np.int32)
    ref = requantize(dense_reference(a, w), SHIFT, bias, (0, 127))
    host = [pack_matrix(a, env.batch, env.block_in), pack_matrix(w, env.block_out, env.block_in),
            pack_bias(bias, env.batch, env.block_out)]
    return host, pack_matrix(ref, env.batch, env.block_out)


def build_and_run(s, tensors, host, expect, config, backend="fsim"):
    """Build for the VTA target, run on a fresh device (fsim checks tokens, deadlock and races)."""
    mod = vtakit.build(s, tensors, target="vta", config=config)
    dev = Device(config, backend=backend)
    arrays = [dev.array(h) for h in host] + [dev.empty(expect.shape, np.int8)]
    stats = mod(*arrays)
    np.testing.assert_array_equal(arrays[-1].numpy(), expect)
    return mod, stats
