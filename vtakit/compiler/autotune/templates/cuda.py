"""GPU templates ``cuda.dense`` (fp32 GEMM) and ``cuda.conv2d`` (fp32 NCHW), measured in GPU wall time.

``cuda.dense`` opens up the tiling of :func:`vtakit.compiler.ops.cuda.schedule_dense`: each output
axis of a block split into (virtual threads, threads, registers per virtual thread), the reduction
elements staged in shared memory per step, and whether that step's loop is unrolled.
``cuda.conv2d`` opens up :func:`vtakit.compiler.ops.cuda.schedule_conv2d_nchw`'s: output channels
(thread rows, channels per thread), output rows and columns per block (one per thread) and input
channels staged per step. A filter rejects configs over a block's limits (1024 threads, 64 on
threadIdx.z, 48 KiB of shared memory), so no trial is spent on them. Both fall back to the
default schedules' own choices (:func:`~vtakit.compiler.ops.cuda.dense_tiles`,
:func:`~vtakit.compiler.ops.cuda.conv2d_tiles`).

Measuring needs a GPU: where the CUDA driver finds none, every trial is an error record saying so
(``RUNTIME_DEVICE``), while building (PTX generation, the block limits) still runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vtakit.compiler import te
from vtakit.compiler.autotune.space import ConfigSpace
from vtakit.compiler.autotune.task import template
from vtakit.compiler.autotune.templates.llvm import conv2d_float_reference
from vtakit.compiler.ops import cuda, nn
from vtakit.compiler.ops.common import static_shape
from vtakit.compiler.te import Schedule, Tensor

__all__ = ["MAX_INNER", "MAX_THREADS_PER_AXIS", "MAX_VTHREADS", "MAX_K_BLOCK"]

MAX_INNER = 8              # registers per (virtual) thread along one output axis
MAX_THREADS_PER_AXIS = 32  # threads along one output axis
MAX_VTHREADS = 4           # virtual threads along one output axis
MAX_K_BLOCK = 32           # reduction elements staged in shared memory per step


def _axis_filter(e: Any) -> bool:
    _, v, t, r = e.size
    return v <= MAX_VTHREADS and t <= MAX_THREADS_PER_AXIS and r <= MAX_INNER


def _dense_tiles(cfg: Any) -> cuda.DenseTiles:
    _, vy, ty, ry = cfg["tile_y"].size
    _, vx, tx, rx = cfg["tile_x"].size
    return cuda.DenseTiles(cuda.AxisTile(vy, ty, ry), cuda.AxisTile(vx, tx, rx), cfg["tile_k"].size[-1],
                           bool(cfg["unroll_k"].val))


def _dense_limits(cfg: Any) -> str | None:
    tiles = _dense_tiles(cfg)
    if tiles.threads > cuda.MAX_THREADS:
        return f"{tiles.threads} threads per block (at most {cuda.MAX_THREADS})"
    if tiles.shared_bytes(4) > cuda.SHARED_BUDGET:
        return f"{tiles.shared_bytes(4)} bytes of shared memory per block (at most {cuda.SHARED_BUDGET})"
    return None


def _dense_reference(m: int, n: int, k: int, config: Any = None, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    return [a, w], (a.astype(np.float64) @ w.astype(np.float64).T).astype(np.float32)


@template("cuda.dense", reference=_dense_reference, exact=False)
def _dense_template(cfg: Any, m: int, n: int, k: int, config: Any = None) -> tuple[Schedule, list[Tensor]]:
    cfg.define_split("tile_y", m, num_outputs=4, filter=_axis_filter)
    cfg.define_split("tile_x", n, num_outputs=4, filter=_axis_filter)
    cfg.define_split("tile_k", k, filter=lambda e: e.size[-1] <= MAX_K_BLOCK)
    cfg.define_knob("unroll_k", [1, 0])
    cfg.add_flop(2 * m * n * k)
    if isinstance(cfg, ConfigSpace):
        cfg.define_filter(_dense_limits)
        t = cuda.dense_tiles(m, n, k)
        cfg.set_fallback(tile_y=[-1, t.rows.vthreads, t.rows.threads, t.rows.inner],
                         tile_x=[-1, t.cols.vthreads, t.cols.threads, t.cols.inner],
                         tile_k=[-1, t.k_block], unroll_k=int(t.unroll))
    data = te.placeholder((m, k), "float32", name="data")
    weight = te.placeholder((n, k), "float32", name="weight")
    out = nn.dense(data, weight)
    return cuda.schedule_dense(out, tiles=_dense_tiles(cfg)), [data, weight, out]


def _conv_tiles(cfg: Any) -> cuda.ConvTiles:
    _, f_threads, f_inner = cfg["tile_f"].size
    return cuda.ConvTiles(f_threads, f_inner, cfg["tile_y"].size[-1], cfg["tile_x"].size[-1], cfg["tile_rc"].size[-1])


def _conv_limits(shape_of: Any) -> Any:
    def check(cfg: Any) -> str | None:
        tiles = _conv_tiles(cfg)
        if tiles.threads > cuda.MAX_THREADS or tiles.channel_threads > 64:
            return f"{tiles.threads} threads per block ({tiles.channel_threads} on threadIdx.z)"
        used = shape_of(tiles)
        return f"{used} bytes of shared memory per block" if used > cuda.SHARED_BUDGET else None
    return check


def _conv2d_reference(h: int, w: int, ci: int, co: int, k: int, pad: int, stride: int, config: Any = None,
                      seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    return conv2d_float_reference(h, w, ci, co, k, pad, stride, seed)


@template("cuda.conv2d", reference=_conv2d_reference, exact=False)
def _conv2d_template(cfg: Any, h: int, w: int, ci: int, co: int, k: int, pad: int, stride: int,
                     config: Any = None) -> tuple[Schedule, list[Tensor]]:
    data = te.placeholder((1, ci, h, w), "float32", name="data")
    kernel = te.placeholder((co, ci, k, k), "float32", name="kernel")
    out = nn.conv2d_nchw(data, kernel, strides=stride, padding=pad)
    _, _, oh, ow = static_shape(out)
    cfg.define_split("tile_f", co, num_outputs=3, filter=lambda e: e.size[1] <= 64 and e.size[2] <= MAX_INNER)
    cfg.define_split("tile_y", oh, filter=lambda e: e.size[-1] <= MAX_THREADS_PER_AXIS)
    cfg.define_split("tile_x", ow, filter=lambda e: e.size[-1] <= MAX_THREADS_PER_AXIS)
    cfg.define_split("tile_rc", ci, filter=lambda e: e.size[-1] <= MAX_K_BLOCK)
    cfg.add_flop(2 * co * oh * ow * ci * k * k)
    if isinstance(cfg, ConfigSpace):
        def shared(tiles: cuda.ConvTiles) -> int:
            rows = (tiles.row_threads - 1) * stride + k
            cols = (tiles.col_threads - 1) * stride + k
            return 4 * (tiles.rc_block * rows * cols + tiles.channel_threads * tiles.channel_inner * tiles.rc_block * k * k)

        cfg.define_filter(_conv_limits(shared))
        t = cuda.conv2d_tiles(co, oh, ow, ci, (k, k), (stride, stride))
        cfg.set_fallback(tile_f=[-1, t.channel_threads, t.channel_inner], tile_y=[-1, t.row_threads],
                         tile_x=[-1, t.col_threads], tile_rc=[-1, t.rc_block])
    return cuda.schedule_conv2d_nchw(out, tiles=_conv_tiles(cfg)), [data, kernel, out]
