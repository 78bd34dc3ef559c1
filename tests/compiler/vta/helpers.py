"""Helpers of the VTA backend tests: random packed operands, run on a device, compare."""

from __future__ import annotations

import numpy as np
import vtakit
from vtakit.compiler.topi_vta import Conv2dWorkload
from vtakit.compiler.topi_vta.bench import conv2d_operands, dense_operands
from vtakit.runtime import Device
from vtakit.runtime.packing import conv2d_reference, dense_reference, pack_matrix, pack_nchw, pack_oihw

# random packed operands and the numpy result, as the benchmarks draw them
conv_case = conv2d_operands
dense_case = dense_operands


#: a small conv2d with a non-square kernel, asymmetric pads and per-axis strides (the epilogue tests' layer)
EPILOGUE_CONV = Conv2dWorkload(5, 6, 6, 10, (3, 2), (1, 0, 1, 1), (1, 2))


def random_layer(env, op, rng):
    """Random int8 operands of :data:`EPILOGUE_CONV` (``op="conv2d"``) or of a 3x6x10 dense, packed:
    ``(host [data, weight], int32 accumulator, output channels, packer of the int8 result)``."""
    if op == "conv2d":
        wl = EPILOGUE_CONV
        x = rng.integers(-128, 128, (1, wl.ci, wl.h, wl.w), dtype=np.int8)
        w = rng.integers(-128, 128, (wl.co, wl.ci, wl.kh, wl.kw), dtype=np.int8)
        host = [pack_nchw(x, env.batch, env.block_in), pack_oihw(w, env.block_out, env.block_in)]
        return host, conv2d_reference(x, w, wl.stride, wl.pad), wl.co, lambda r: pack_nchw(r, env.batch, env.block_out)
    a = rng.integers(-128, 128, (3, 10), dtype=np.int8)
    w = rng.integers(-128, 128, (6, 10), dtype=np.int8)
    host = [pack_matrix(a, env.batch, env.block_in), pack_matrix(w, env.block_out, env.block_in)]
    return host, dense_reference(a, w), 6, lambda r: pack_matrix(r, env.batch, env.block_out)


def build_and_run(s, tensors, host, expect, config, backend="fsim"):
    """Build for the VTA target, run on a fresh device (fsim checks tokens, deadlock and races)."""
    mod = vtakit.build(s, tensors, target="vta", config=config)
    dev = Device(config, backend=backend)
    arrays = [dev.array(h) for h in host] + [dev.empty(expect.shape, np.int8)]
    stats = mod(*arrays)
    np.testing.assert_array_equal(arrays[-1].numpy(), expect)
    return mod, stats
