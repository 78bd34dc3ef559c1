"""Run the accelerator ops end to end: compile, run on a device backend, check against numpy.

Used by ``vtakit bench conv2d|dense``, ``scripts/bench_vta.py`` and the tests. Every run checks
the device result against the numpy reference bit for bit; ``ideal_cycles`` is the number of
GEMM micro-ops (one per cycle on a perfect machine) and ``utilization`` their share of cycles.
A check is only as strong as the outputs it compares: with a fixed shift most outputs would be
clipped to a bound whatever the accumulator held, so a run requantises (``requantize(acc, addend,
shift, clip)``: ``clip((acc + addend) >> shift)``) with a random per-channel addend of the
accumulator's magnitude (a bias; it sits inside the shift), a shift chosen from the range of
``acc + addend`` and the whole int8 range as clip (the same ALU instructions and cycles), and
reports the share of unsaturated outputs. ``compile_seconds`` times scheduling and building
only, not the numpy reference.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

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
                                    pad_to_blocks, requantize, shift_values)

__all__ = ["BenchResult", "Compiled", "OpData", "run_conv2d", "run_dense", "compile_conv2d", "compile_dense",
           "conv2d_data", "dense_data", "conv2d_operands", "dense_operands", "range_shift", "SHIFT", "CLIP"]

SHIFT = 8                 # the ops' default shift (the benchmarks choose theirs with range_shift)
CLIP = (-128, 127)        # the benchmarks' clip: the whole int8 range, so that no output needs to saturate


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
    shift: int = SHIFT         # the requantisation's right shift (chosen from the accumulator's range)
    unsaturated: float = 1.0   # the share of outputs strictly inside the clip range: what checks the accumulator

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def range_shift(acc: np.ndarray, addend: np.ndarray | None, clip: tuple[int, int]) -> int:
    """The smallest right shift (1 to 31) that keeps every ``(acc + addend) >> shift`` strictly
    inside ``clip`` (``addend`` per channel, on axis 1, as :func:`requantize`): the requantisation of
    a benchmark then saturates no output, so every output checks the accumulator's upper bits (as
    ``blocked_gemm.requant_shift`` does for the hand-written GEMM). 31 when none does."""
    t = acc.astype(np.int64)
    if addend is not None:
        t = t + np.asarray(addend, np.int64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    t = ((t + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)             # int32 wrap-around, as the ALU
    lo, hi = (int(t.min()), int(t.max())) if t.size else (0, 0)
    for shift in range(1, 31):
        if int(shift_values(lo, shift)) > clip[0] and int(shift_values(hi, shift)) < clip[1]:
            return shift
    return 31


def _addend(rng: np.random.Generator, acc: np.ndarray, channels: int) -> np.ndarray:
    """A random int32 per-channel addend (a bias) of up to half the accumulator's peak: large enough
    to move the outputs after the shift."""
    peak = int(np.abs(acc.astype(np.int64)).max(initial=0))
    bound = max(64, min(peak // 2, 1 << 30))
    return rng.integers(-bound, bound, channels, dtype=np.int32)


@dataclass
class OpData:
    """Random operands of an op and its exact accumulator, before requantisation."""

    host: list[np.ndarray]                     # packed [data, weight, addend]
    acc: np.ndarray                            # int32 accumulator, unpacked, batch padded to whole blocks
    addend: np.ndarray                         # (channels,) int32, added before the shift
    rows: int                                  # the useful rows (batch or m) of ``acc``
    pack: Callable[[np.ndarray], np.ndarray]   # unpacked int8 result -> packed

    def result(self, shift: int, clip: tuple[int, int]) -> np.ndarray:
        """The unpacked int8 result of the requantisation with ``shift`` and ``clip``."""
        return requantize(self.acc, self.addend, shift, clip)

    def expect(self, shift: int, clip: tuple[int, int]) -> np.ndarray:
        """The packed int8 result (padding lanes included, as the device writes them)."""
        return self.pack(self.result(shift, clip))

    def unsaturated(self, shift: int, clip: tuple[int, int]) -> float:
        """The fraction of the useful outputs strictly inside ``clip`` (not clipped to a bound)."""
        out = self.result(shift, clip)[:self.rows]
        return float(np.mean((out > clip[0]) & (out < clip[1]))) if out.size else 1.0


def conv2d_data(env: VTAEnv, wl: Conv2dWorkload, seed: int = 0) -> OpData:
    """Random int8 data, weights and int32 addend for ``wl``, packed, and the exact accumulator."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (wl.batch, wl.ci, wl.h, wl.w), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.co, wl.ci, wl.kh, wl.kw), dtype=np.int8)
    # a batch padded to whole blocks (pack_nchw) holds the requantised addend in its padding lanes,
    # as on the device; padded channels hold zeros (a zero sum, a zero addend): every lane is checked
    acc = conv2d_reference(pad_to_blocks(x, {0: env.batch}), w, wl.stride, wl.pad)
    addend = _addend(rng, acc, wl.co)
    host = [pack_nchw(x, env.batch, env.block_in), pack_oihw(w, env.block_out, env.block_in),
            pack_bias(addend, env.batch, env.block_out)]
    return OpData(host, acc, addend, wl.batch, lambda r: pack_nchw(r, env.batch, env.block_out))


def dense_data(env: VTAEnv, m: int, n: int, k: int, seed: int = 0) -> OpData:
    """Random int8 ``m x k`` data, ``n x k`` weights and int32 addend, packed, and the exact accumulator."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    acc = dense_reference(pad_to_blocks(a, {0: env.batch}), w)      # padded rows as conv2d's batch
    addend = _addend(rng, acc, n)
    host = [pack_matrix(a, env.batch, env.block_in), pack_matrix(w, env.block_out, env.block_in),
            pack_bias(addend, env.batch, env.block_out)]
    return OpData(host, acc, addend, m, lambda r: pack_matrix(r, env.batch, env.block_out))


def conv2d_operands(env: VTAEnv, wl: Conv2dWorkload, seed: int = 0, shift: int = SHIFT,
                    clip: tuple[int, int] = (0, 127)) -> tuple[list[np.ndarray], np.ndarray]:
    """Random packed ``[data, kernel, addend]`` for ``wl`` and the packed numpy result of the op
    (``conv2d(env, wl, shift=shift, clip=clip)``'s)."""
    data = conv2d_data(env, wl, seed)
    return data.host, data.expect(shift, clip)


def dense_operands(env: VTAEnv, m: int, n: int, k: int, seed: int = 0, shift: int = SHIFT,
                   clip: tuple[int, int] = (0, 127)) -> tuple[list[np.ndarray], np.ndarray]:
    """Random packed ``[data, weight, addend]`` of an ``m x n x k`` dense and the packed numpy result."""
    data = dense_data(env, m, n, k, seed)
    return data.host, data.expect(shift, clip)


@dataclass
class Compiled:
    """A built op, its knobs, the virtual threads it uses and the seconds that scheduling and
    building took (numpy work for the operands is not included), also as CPU seconds of this
    process, which other load on a shared machine disturbs less."""

    module: Any
    knobs: Any
    threads: int
    seconds: float
    cpu_seconds: float = 0.0


def compile_conv2d(wl: Conv2dWorkload, config: VTAConfig | None = None, vthreads: int = 2,
                   knobs: Conv2dKnobs | None = None, shift: int = SHIFT, clip: tuple[int, int] = CLIP) -> Compiled:
    """Schedule and build ``wl`` for the accelerator, timed."""
    config = config or VTAConfig()
    env = get_env(config)
    start, cpu = time.perf_counter(), time.process_time()
    knobs = knobs or choose_conv2d_tiles(env, wl, vthreads)
    s, tensors = conv2d(env, wl, knobs, shift=shift, clip=clip)
    mod = build(s, tensors, target="vta", config=config)
    return Compiled(mod, knobs, knobs.oc_nthread * knobs.h_nthread, time.perf_counter() - start,
                    time.process_time() - cpu)


def compile_dense(m: int, n: int, k: int, config: VTAConfig | None = None, vthreads: int = 2,
                  knobs: DenseKnobs | None = None, shift: int = SHIFT, clip: tuple[int, int] = CLIP) -> Compiled:
    """Schedule and build an ``m x n x k`` dense for the accelerator, timed."""
    config = config or VTAConfig()
    env = get_env(config)
    start, cpu = time.perf_counter(), time.process_time()
    knobs = knobs or choose_dense_tiles(env, m, n, k, vthreads)
    s, tensors = dense(env, m, n, k, knobs, shift=shift, clip=clip)
    mod = build(s, tensors, target="vta", config=config)
    return Compiled(mod, knobs, knobs.oc_nthread, time.perf_counter() - start, time.process_time() - cpu)


def _run(config: VTAConfig, backend: str, compiled: Compiled, data: OpData, shift: int,
         useful_macs: int) -> BenchResult:
    """Run ``compiled`` on a fresh device holding ``data`` and compare the output with numpy."""
    expect = data.expect(shift, CLIP)
    host = data.host
    dev = Device(config, backend=backend, dram_size=max(32 << 20, 4 * sum(h.nbytes for h in host)
                                                        + 2 * expect.nbytes + (1 << 20)))
    arrays = [dev.array(h) for h in host] + [dev.empty(expect.shape, np.int8)]
    stats = compiled.module(*arrays)
    correct = bool(np.array_equal(arrays[-1].numpy(), expect))
    return BenchResult(correct, stats.cycles, stats.ideal_cycles, stats.utilization, stats.sim_seconds,
                       compiled.seconds, len(compiled.module.template.insns), useful_macs,
                       stats.ideal_cycles * config.macs_per_cycle, asdict(compiled.knobs), backend, compiled.threads,
                       shift, data.unsaturated(shift, CLIP))


def run_conv2d(wl: Conv2dWorkload, config: VTAConfig | None = None, backend: str = "fsim", vthreads: int = 2,
               knobs: Conv2dKnobs | None = None, seed: int = 0) -> BenchResult:
    """Compile and run ``wl`` with random int8 data and a shift chosen from its accumulator's range
    (:func:`range_shift`); compare with numpy."""
    config = config or VTAConfig()
    data = conv2d_data(get_env(config), wl, seed)
    shift = range_shift(data.acc, data.addend, CLIP)
    compiled = compile_conv2d(wl, config, vthreads, knobs, shift, CLIP)
    return _run(config, backend, compiled, data, shift, wl.macs)


def run_dense(m: int, n: int, k: int, config: VTAConfig | None = None, backend: str = "fsim", vthreads: int = 2,
              knobs: DenseKnobs | None = None, seed: int = 0) -> BenchResult:
    """Compile and run an ``m x n x k`` dense with random int8 data and a shift chosen from its
    accumulator's range (:func:`range_shift`); compare with numpy."""
    config = config or VTAConfig()
    data = dense_data(get_env(config), m, n, k, seed)
    shift = range_shift(data.acc, data.addend, CLIP)
    compiled = compile_dense(m, n, k, config, vthreads, knobs, shift, CLIP)
    return _run(config, backend, compiled, data, shift, m * n * k)
