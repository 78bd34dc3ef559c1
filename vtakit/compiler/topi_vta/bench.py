"""Run the accelerator ops end to end: compile, run on a device backend, check against numpy.

Used by ``vtakit bench conv2d|dense``, ``scripts/bench_vta.py`` and the tests. Every run checks
the device result against the numpy reference bit for bit; ``ideal_cycles`` is the number of
GEMM micro-ops (one per cycle on a perfect machine) and ``utilization`` their share of cycles.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from vtakit.compiler.build import build
from vtakit.compiler.topi_vta.conv2d import Conv2dKnobs, conv2d
from vtakit.compiler.topi_vta.dense import DenseKnobs, dense
from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles, choose_dense_tiles
from vtakit.compiler.topi_vta.workloads import Conv2dWorkload
from vtakit.compiler.vta.env import VTAEnv, get_env
from vtakit.hw.config import VTAConfig
from vtakit.runtime.device import Device
from vtakit.runtime.packing import (conv2d_reference, dense_reference, pack_bias, pack_matrix, pack_nchw, pack_oihw,
                                    pad_to_blocks, requantize)

__all__ = ["BenchResult", "run_conv2d", "run_dense", "conv2d_operands", "dense_operands", "SHIFT"]

SHIFT = 8


@dataclass
class BenchResult:
    """One benchmark run (``vtakit bench conv2d|dense --json`` prints exactly these keys)."""

    correct: bool
    cycles: int | None
    ideal_cycles: int
    utilization: float | None
    sim_seconds: float
    compile_seconds: float
    instructions: int
    useful_macs: int           # the multiply-accumulates the op asks for
    ideal_macs: int            # what the accelerator does, channels zero-padded to whole blocks
    knobs: dict[str, Any] = field(default_factory=dict)
    backend: str = "fsim"
    vthreads: int = 1          # virtual threads the schedule uses (at most the number asked for)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _run(config: VTAConfig, backend: str, s: Any, tensors: list, host: list[np.ndarray], expect: np.ndarray,
         knobs: Any, threads: int, compile_start: float, useful_macs: int) -> BenchResult:
    """Build ``s``, run it on a fresh device holding ``host`` and compare the output with ``expect``."""
    mod = build(s, tensors, target="vta", config=config)
    compile_seconds = time.perf_counter() - compile_start
    dev = Device(config, backend=backend, dram_size=max(32 << 20, 4 * sum(h.nbytes for h in host)
                                                        + 2 * expect.nbytes + (1 << 20)))
    arrays = [dev.array(h) for h in host] + [dev.empty(expect.shape, np.int8)]
    stats = mod(*arrays)
    got = arrays[-1].numpy()
    correct = bool(np.array_equal(got, expect))
    return BenchResult(correct, stats.cycles, stats.ideal_cycles, stats.utilization, stats.sim_seconds,
                       compile_seconds, len(mod.template.insns), useful_macs,
                       stats.ideal_cycles * config.macs_per_cycle, asdict(knobs), backend, threads)


def conv2d_operands(env: VTAEnv, wl: Conv2dWorkload, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """Random packed ``[data, kernel, bias]`` for ``wl`` and the packed numpy result of the op."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (wl.batch, wl.ci, wl.h, wl.w), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.co, wl.ci, wl.kernel, wl.kernel), dtype=np.int8)
    bias = rng.integers(-64, 64, wl.co, dtype=np.int32)
    # a batch padded to whole blocks (pack_nchw) holds the clipped bias in its padding lanes, as on
    # the device; padded channels hold zeros (a zero sum, a zero bias): every lane is checked
    xp = pad_to_blocks(x, {0: env.batch})
    ref = requantize(conv2d_reference(xp, w, wl.stride, wl.pad), SHIFT, bias, (0, 127))
    host = [pack_nchw(x, env.batch, env.block_in), pack_oihw(w, env.block_out, env.block_in),
            pack_bias(bias, env.batch, env.block_out)]
    return host, pack_nchw(ref, env.batch, env.block_out)


def dense_operands(env: VTAEnv, m: int, n: int, k: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """Random packed ``[data, weight, bias]`` of an ``m x n x k`` dense and the packed numpy result."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    bias = rng.integers(-64, 64, n, dtype=np.int32)
    ref = requantize(dense_reference(pad_to_blocks(a, {0: env.batch}), w), SHIFT, bias, (0, 127))  # as conv2d
    host = [pack_matrix(a, env.batch, env.block_in), pack_matrix(w, env.block_out, env.block_in),
            pack_bias(bias, env.batch, env.block_out)]
    return host, pack_matrix(ref, env.batch, env.block_out)


def run_conv2d(wl: Conv2dWorkload, config: VTAConfig | None = None, backend: str = "fsim", vthreads: int = 2,
               knobs: Conv2dKnobs | None = None, seed: int = 0) -> BenchResult:
    """Compile and run ``wl`` with random int8 data; compare with numpy."""
    config = config or VTAConfig()
    env = get_env(config)
    start = time.perf_counter()
    knobs = knobs or choose_conv2d_tiles(env, wl, vthreads)
    s, tensors = conv2d(env, wl, knobs, shift=SHIFT)
    host, expect = conv2d_operands(env, wl, seed)
    return _run(config, backend, s, tensors, host, expect, knobs, knobs.oc_nthread * knobs.h_nthread, start,
                wl.macs)


def run_dense(m: int, n: int, k: int, config: VTAConfig | None = None, backend: str = "fsim", vthreads: int = 2,
              knobs: DenseKnobs | None = None, seed: int = 0) -> BenchResult:
    """Compile and run an ``m x n x k`` dense with random int8 data; compare with numpy."""
    config = config or VTAConfig()
    env = get_env(config)
    start = time.perf_counter()
    knobs = knobs or choose_dense_tiles(env, m, n, k, vthreads)
    s, tensors = dense(env, m, n, k, knobs, shift=SHIFT)
    host, expect = dense_operands(env, m, n, k, seed)
    return _run(config, backend, s, tensors, host, expect, knobs, knobs.oc_nthread, start, m * n * k)
