"""A ResNet-18 convolution on the accelerator, with one and with two virtual threads.

With one thread the accelerator alternates: load a tile of inputs and weights, then compute on
it. Binding an outer loop to ``cthread`` (two virtual threads) splits every on-chip buffer in two
and interleaves the threads' commands with their tokens, so one thread's loads overlap the other
thread's GEMMs. The cycle-exact simulator shows what that buys.

The layer is the packed conv2d of ``vtakit.compiler.topi_vta`` (VTA's ``vta.top.conv2d``): int8
NCHW{BATCH}n{BLOCK_IN}c data, OIHW{BLOCK_OUT}o{BLOCK_IN}i weights, an int32 bias, and the
requantisation ``clip((acc >> shift) + bias, 0, 127)`` on the vector ALU. Every run is checked
against numpy.

Run it as it is: ``python examples/conv2d_virtual_threads.py [--layer resnet18.C8]``.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import vtakit
from vtakit.compiler import topi_vta, vta
from vtakit.compiler.topi_vta import Conv2dWorkload
from vtakit.runtime.packing import (conv2d_reference, pack_bias, pack_nchw, pack_oihw, requantize,
                                    rounding_addend, unpack_nchw)
from vtakit.sim.stats import RunStats


def run(env: vta.VTAEnv, wl: Conv2dWorkload, vthreads: int, shift: int,
        x: np.ndarray, w: np.ndarray, addend: np.ndarray) -> tuple[np.ndarray, RunStats, int]:
    """Compile ``wl`` with at most ``vthreads`` virtual threads, run it on the cycle model and
    return the unpacked output, the run's statistics and the threads the tiling uses."""
    knobs = topi_vta.default_conv2d_knobs(env, wl, vthreads)
    s, tensors = topi_vta.conv2d(env, wl, knobs, shift=shift)
    mod = vtakit.build(s, tensors, target=env.target, config=env)
    dev = vtakit.Device(env.config, backend="cycle")
    data = dev.array(pack_nchw(x, env.BATCH, env.BLOCK_IN))
    kernel = dev.array(pack_oihw(w, env.BLOCK_OUT, env.BLOCK_IN))
    addend_dev = dev.array(pack_bias(addend, env.BATCH, env.BLOCK_OUT))
    out = dev.empty(tuple(int(d) for d in tensors[-1].shape), env.out_dtype)
    stats = mod(data, kernel, addend_dev, out)
    return unpack_nchw(out.numpy(), (wl.batch, wl.co, wl.oh, wl.ow)), stats, knobs.oc_nthread * knobs.h_nthread


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", default="resnet18.C8", help="resnet18.C2 ... resnet18.C11 (default C8)")
    args = parser.parse_args()
    env = vta.get_env()
    wl = topi_vta.get_workload(args.layer)
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (wl.batch, wl.ci, wl.h, wl.w), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.co, wl.ci, wl.kh, wl.kw), dtype=np.int8)
    # a random int8 dot product of length K has a spread of about 2^(6 + log2(K)/2): shift it
    # down to the int8 range, so that the check below tests values, not saturation
    shift = 6 + math.ceil(math.log2(wl.ci * wl.kh * wl.kw) / 2)
    # the epilogue computes clip((acc + addend) >> shift): a bias scaled to the accumulator, plus
    # half a unit of the shift, so that the shift rounds to nearest
    addend = rng.integers(-64, 64, wl.co, dtype=np.int32) * (1 << shift) // 4 + rounding_addend(shift)
    expect = requantize(conv2d_reference(x, w, wl.stride, wl.pad), addend, shift, (0, 127))
    inside = np.mean((expect > 0) & (expect < 127))

    print(f"{args.layer}: {wl.h}x{wl.w}x{wl.ci} -> {wl.co}, {wl.kh}x{wl.kw} stride {wl.stride_h} on "
          f"{env.config.model}; {inside:.0%} of the outputs are not saturated")
    cycles = {}
    for vthreads in (1, 2):
        got, stats, threads = run(env, wl, vthreads, shift, x, w, addend)
        np.testing.assert_array_equal(got, expect)
        cycles[vthreads] = stats.cycles
        print(f"  {threads} virtual thread{'s' if threads > 1 else ' '}: {stats.cycles:8d} cycles "
              f"(ideal {stats.ideal_cycles}), utilization {stats.utilization:.1%}, equals numpy")
    print(f"  two threads run {cycles[1] / cycles[2]:.2f}x faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
