"""CPU templates ``llvm.dense`` (fp32 GEMM) and ``llvm.conv2d`` (fp32 NCHW), measured in wall time.

``llvm.dense`` is the register-tiled GEMM of :func:`vtakit.compiler.ops.cpu.schedule_dense` with
every choice that schedule fixes opened up: the row tile split three ways (parallel chunk, rows
per chunk, rows per register tile), the packed weight block (= vector tile width), the unrolled
reduction chunk, the order of the two outer tile loops, which of them run in parallel, and
whether the register tile's rows are unrolled. Its fallback is the hand schedule's own choice.
``llvm.conv2d`` tunes the two tile sizes of :func:`~vtakit.compiler.ops.cpu.schedule_conv2d_nchw`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vtakit.compiler import te
from vtakit.compiler.autotune.space import ConfigSpace
from vtakit.compiler.autotune.task import template
from vtakit.compiler.ops import cpu, nn
from vtakit.compiler.te import Schedule, Tensor

__all__ = ["MAX_REGISTER_ROWS", "MAX_VECTOR_TILE", "MAX_K_UNROLL"]

MAX_REGISTER_ROWS = 32   # rows of a register tile
MAX_VECTOR_TILE = 64     # output features of a register tile (the weight's pack block)
MAX_K_UNROLL = 16        # reduction steps unrolled per iteration


def _largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _dense_reference(m: int, n: int, k: int, config: Any = None, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    return [a, w], (a.astype(np.float64) @ w.astype(np.float64).T).astype(np.float32)


@template("llvm.dense", reference=_dense_reference, exact=False)
def _dense_template(cfg: Any, m: int, n: int, k: int, config: Any = None) -> tuple[Schedule, list[Tensor]]:
    cfg.define_split("tile_y", m, num_outputs=3, filter=lambda e: e.size[-1] <= MAX_REGISTER_ROWS)
    cfg.define_split("tile_x", n, filter=lambda e: e.size[-1] <= MAX_VECTOR_TILE)
    cfg.define_split("tile_k", k, filter=lambda e: e.size[-1] <= MAX_K_UNROLL)
    cfg.define_reorder("order", [0, 1], policy="all")        # (row tiles, column tiles) or the other way
    cfg.define_knob("parallel", ["fused", "outer"])
    cfg.define_annotate("ann_rows", [0], policy="try_unroll")
    cfg.add_flop(2 * m * n * k)
    lanes = cpu.vector_lanes("float32")
    if isinstance(cfg, ConfigSpace):   # what schedule_dense picks by hand
        cfg.set_fallback(tile_y=[-1, 1, _largest_divisor(m, 8)], tile_x=[-1, _largest_divisor(n, 2 * lanes)],
                         tile_k=[-1, 4 if k % 4 == 0 else 1], order=[1, 0], parallel="fused", ann_rows=["unroll"])
    data = te.placeholder((m, k), "float32", name="data")
    weight = te.placeholder((n, k), "float32", name="weight")
    block = cfg["tile_x"].size[-1]
    out = nn.dense(data, weight, pack_block=block)
    s = te.create_schedule(out.op)
    packed = out.op.input_tensors[1]
    z, pk, px = s[packed].op.axis
    s[packed].parallel(z)
    if block % lanes == 0:
        s[packed].vectorize(px)
    local = s.cache_write(out, "local")
    y, x = s[out].op.axis
    yo, ym, yi = cfg["tile_y"].apply(s, out, y)
    xo, xi = cfg["tile_x"].apply(s, out, x)
    outer = [[yo, xo][i] for i in cfg["order"].perm]
    s[out].reorder(*outer, ym, yi, xi)
    if cfg["parallel"].val == "fused":
        s[out].parallel(s[out].fuse(*outer))
    else:
        s[out].parallel(outer[0])
    s[out].vectorize(xi)
    s[local].compute_at(s[out], ym)
    ly, lx = s[local].op.axis
    (lk,) = s[local].op.reduce_axis
    ko, ki = cfg["tile_k"].apply(s, local, lk)
    s[local].reorder(ko, ki, ly, lx)
    s[local].unroll(ki)
    cfg["ann_rows"].apply(s, local, [ly])
    s[local].vectorize(lx)
    return s, [data, weight, out]


def _conv2d_reference(h: int, w: int, ci: int, co: int, k: int, pad: int, stride: int, config: Any = None,
                      seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (1, ci, h, w)).astype(np.float32)
    wt = rng.uniform(-1, 1, (co, ci, k, k)).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    ref = np.einsum("nchwyx,ocyx->nohw", win, wt.astype(np.float64), optimize=True).astype(np.float32)
    return [x, wt], ref


@template("llvm.conv2d", reference=_conv2d_reference, exact=False)
def _conv2d_template(cfg: Any, h: int, w: int, ci: int, co: int, k: int, pad: int, stride: int,
                     config: Any = None) -> tuple[Schedule, list[Tensor]]:
    data = te.placeholder((1, ci, h, w), "float32", name="data")
    kernel = te.placeholder((co, ci, k, k), "float32", name="kernel")
    out = nn.conv2d_nchw(data, kernel, strides=stride, padding=pad)
    ow = int(out.shape[3].value) if hasattr(out.shape[3], "value") else int(out.shape[3])
    cfg.define_split("tile_oc", co, filter=lambda e: e.size[-1] <= MAX_REGISTER_ROWS)
    cfg.define_split("tile_ow", ow, filter=lambda e: e.size[-1] <= MAX_VECTOR_TILE)
    oh = int(out.shape[2].value) if hasattr(out.shape[2], "value") else int(out.shape[2])
    cfg.add_flop(2 * co * oh * ow * ci * k * k)
    if isinstance(cfg, ConfigSpace):   # what schedule_conv2d_nchw picks by hand
        cfg.set_fallback(tile_oc=[-1, _largest_divisor(co, 8)],
                         tile_ow=[-1, _largest_divisor(ow, cpu.vector_lanes("float32"))])
    s = cpu.schedule_conv2d_nchw(out, oc_block=cfg["tile_oc"].size[-1], x_block=cfg["tile_ow"].size[-1])
    return s, [data, kernel, out]
