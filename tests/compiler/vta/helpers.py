"""Helpers of the VTA backend tests: random packed operands, run on a device, compare."""

from __future__ import annotations

import numpy as np
import vtakit
from vtakit.compiler.topi_vta.bench import conv2d_operands, dense_operands
from vtakit.runtime import Device

# random packed operands and the numpy result, as the benchmarks draw them
conv_case = conv2d_operands
dense_case = dense_operands


def build_and_run(s, tensors, host, expect, config, backend="fsim"):
    """Build for the VTA target, run on a fresh device (fsim checks tokens, deadlock and races)."""
    mod = vtakit.build(s, tensors, target="vta", config=config)
    dev = Device(config, backend=backend)
    arrays = [dev.array(h) for h in host] + [dev.empty(expect.shape, np.int8)]
    stats = mod(*arrays)
    np.testing.assert_array_equal(arrays[-1].numpy(), expect)
    return mod, stats
