"""CPU templates ``llvm.dense`` (fp32 GEMM) and ``llvm.conv2d`` (fp32 NCHW), measured in wall time.

``llvm.dense`` is the register-tiled GEMM of :func:`vtakit.compiler.ops.cpu.schedule_dense` with
every choice that schedule fixes opened up: the row tile split three ways (parallel chunk, rows
per chunk, rows per register tile), the packed weight block (= vector tile width), the unrolled
reduction chunk, the order of the two outer tile loops, which of them run in parallel,
whether the register tile's rows are unrolled, and where the weight is packed: once, before the
GEMM (``pack_at="root"``), or panel by panel inside the parallel column-tile loop
(``"panel"``: each thread packs the panel its row tiles read next, from its own cache). Its
fallback is the hand schedule's own choice, so the hand schedule is one of the space's configs.
``llvm.conv2d`` tunes the convolution the graph compiler runs: where it packs the weight
(``alter_layout``: a channel block of at least one vector), the blocked
:func:`~vtakit.compiler.ops.cpu.schedule_conv2d_nchw_packed` on a weight packed the same way
(register tile rows and pixels, reduction order, kernel-column unrolling, parallel rows); else
the two tile sizes of :func:`~vtakit.compiler.ops.cpu.schedule_conv2d_nchw`. Both fall back to
the hand schedule's choices.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vtakit.compiler import te
from vtakit.compiler.backend.llvm_runtime import num_threads
from vtakit.compiler.autotune.space import ConfigSpace
from vtakit.compiler.autotune.task import template
from vtakit.compiler.ops import cpu, nn
from vtakit.compiler.ops.common import static_shape
from vtakit.compiler.ops.layout import pack_conv2d_kernel
from vtakit.compiler.te import Schedule, Tensor

__all__ = ["MAX_REGISTER_ROWS", "MAX_VECTOR_TILE", "MAX_K_UNROLL", "conv2d_float_reference"]

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


def _panel_needs_parallel_column_tiles(cfg: Any) -> str | None:
    """``pack_at="panel"`` packs a column panel inside the loop over column tiles: only where that
    loop is the outermost and the parallel one (elsewhere each panel would be packed again for
    every row tile, or by every thread)."""
    if cfg["pack_at"].val == "panel" and (tuple(cfg["order"].perm) != (1, 0) or cfg["parallel"].val != "outer"):
        return "pack_at='panel' needs the column tiles outermost (order [1, 0]) and parallel ('outer')"
    return None


def _hand_dense_choice(m: int, n: int, k: int, lanes: int) -> dict[str, Any]:
    """What :func:`~vtakit.compiler.ops.cpu.schedule_dense` picks by hand for the weight block the
    graph compiler packs (:func:`~vtakit.compiler.ops.cpu.dense_pack_block`): register tiles of as
    many rows as :func:`~vtakit.compiler.ops.cpu.gemm_tile` allows, k unrolled by 4, and, when
    there are enough column panels to share out (two per thread) and more than one row tile, one
    panel per thread packed right before the row tiles that read it; else the weight is packed
    first and the tiles run in one fused parallel loop."""
    block = cpu.dense_pack_block("float32", out_features=n)
    tile = cpu.gemm_tile("float32")
    rows = _largest_divisor(m, max(1, tile.rows * tile.vectors // -(-block // lanes)))
    choice: dict[str, Any] = {"tile_y": [-1, 1, rows], "tile_x": [-1, block], "tile_k": [-1, 4 if k % 4 == 0 else 1],
                              "order": [1, 0], "parallel": "fused", "ann_rows": ["unroll"], "pack_at": "root"}
    if n // block >= 2 * num_threads() and m > rows:
        choice.update(parallel="outer", pack_at="panel")
    return choice


@template("llvm.dense", reference=_dense_reference, exact=False)
def _dense_template(cfg: Any, m: int, n: int, k: int, config: Any = None) -> tuple[Schedule, list[Tensor]]:
    cfg.define_split("tile_y", m, num_outputs=3, filter=lambda e: e.size[-1] <= MAX_REGISTER_ROWS)
    cfg.define_split("tile_x", n, filter=lambda e: e.size[-1] <= MAX_VECTOR_TILE)
    cfg.define_split("tile_k", k, filter=lambda e: e.size[-1] <= MAX_K_UNROLL)
    cfg.define_reorder("order", [0, 1], policy="all")        # (row tiles, column tiles) or the other way
    cfg.define_knob("parallel", ["fused", "outer"])
    cfg.define_annotate("ann_rows", [0], policy="try_unroll")
    # added after the first logs: a record without it packed at the root
    cfg.define_knob("pack_at", ["root", "panel"], default="root")
    cfg.add_flop(2 * m * n * k)
    lanes = cpu.vector_lanes("float32")
    if isinstance(cfg, ConfigSpace):
        cfg.define_filter(_panel_needs_parallel_column_tiles)
        cfg.set_fallback(**_hand_dense_choice(m, n, k, lanes))
    data = te.placeholder((m, k), "float32", name="data")
    weight = te.placeholder((n, k), "float32", name="weight")
    block = cfg["tile_x"].size[-1]
    out = nn.dense(data, weight, pack_block=block)
    s = te.create_schedule(out.op)
    packed = out.op.input_tensors[1]
    z, pk, px = s[packed].op.axis
    panel = cfg["pack_at"].val == "panel"
    if not panel and n * k >= cpu.PARALLEL_MIN_WORK:   # a parallel launch costs microseconds
        s[packed].parallel(z)
    if block % lanes == 0:   # as the hand schedule packs: one vector at a time
        s[packed].vectorize(s[packed].split(px, lanes)[1])
    local = s.cache_write(out, "local")
    y, x = s[out].op.axis
    yo, ym, yi = cfg["tile_y"].apply(s, out, y)
    xo, xi = cfg["tile_x"].apply(s, out, x)
    outer = [[yo, xo][i] for i in cfg["order"].perm]
    s[out].reorder(*outer, ym, yi, xi)
    parallel = m * n * k >= cpu.PARALLEL_MIN_WORK
    if cfg["parallel"].val == "fused":
        fused = s[out].fuse(*outer)
        if parallel:
            s[out].parallel(fused)
    elif parallel:
        s[out].parallel(outer[0])
    if panel:   # the filter admits it only with the column tiles outermost and parallel
        s[packed].compute_at(s[out], xo)
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


def _packed_block(co: int) -> int | None:
    """The channel block the graph compiler packs this conv's weight with (``alter_layout``), or
    None where it keeps the plain NCHW kernel (a block narrower than a vector)."""
    block = cpu.conv2d_channel_block(co, "float32")
    return block if block >= cpu.vector_lanes("float32") else None


def conv2d_float_reference(h: int, w: int, ci: int, co: int, k: int, pad: int, stride: int,
                           seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """Random float32 operands of a conv2d workload and its output, computed in float64 by numpy."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (1, ci, h, w)).astype(np.float32)
    wt = rng.uniform(-1, 1, (co, ci, k, k)).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return [x, wt], np.einsum("nchwyx,ocyx->nohw", win, wt.astype(np.float64), optimize=True).astype(np.float32)


def _conv2d_reference(h: int, w: int, ci: int, co: int, k: int, pad: int, stride: int, config: Any = None,
                      seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    (x, wt), ref = conv2d_float_reference(h, w, ci, co, k, pad, stride, seed)
    block = _packed_block(co)
    return [x, wt if block is None else pack_conv2d_kernel(wt, block)], ref


@template("llvm.conv2d", reference=_conv2d_reference, exact=False)
def _conv2d_template(cfg: Any, h: int, w: int, ci: int, co: int, k: int, pad: int, stride: int,
                     config: Any = None) -> tuple[Schedule, list[Tensor]]:
    block = _packed_block(co)
    data = te.placeholder((1, ci, h, w), "float32", name="data")
    if block is not None:
        return _conv2d_packed(cfg, data, ci, co, k, pad, stride, block)
    kernel = te.placeholder((co, ci, k, k), "float32", name="kernel")
    out = nn.conv2d_nchw(data, kernel, strides=stride, padding=pad)
    _, _, oh, ow = static_shape(out)
    cfg.define_split("tile_oc", co, filter=lambda e: e.size[-1] <= MAX_REGISTER_ROWS)
    cfg.define_split("tile_ow", ow, filter=lambda e: e.size[-1] <= MAX_VECTOR_TILE)
    cfg.add_flop(2 * co * oh * ow * ci * k * k)
    if isinstance(cfg, ConfigSpace):   # what schedule_conv2d_nchw picks by hand
        cfg.set_fallback(tile_oc=[-1, _largest_divisor(co, 8)],
                         tile_ow=[-1, _largest_divisor(ow, cpu.vector_lanes("float32"))])
    s = cpu.schedule_conv2d_nchw(out, oc_block=cfg["tile_oc"].size[-1], x_block=cfg["tile_ow"].size[-1])
    return s, [data, kernel, out]


def _too_many_accumulators(vectors: int) -> Any:
    registers = cpu.default_target().vector_registers

    def check(cfg: Any) -> str | None:
        acc = cfg["tile_oh"].size[-1] * cfg["tile_ow"].size[-1] * vectors
        return f"a register tile of {acc} vectors (the CPU has {registers})" if acc > registers else None
    return check


def _conv2d_packed(cfg: Any, data: Tensor, ci: int, co: int, k: int, pad: int, stride: int,
                   block: int) -> tuple[Schedule, list[Tensor]]:
    """The weight packed ``[CO / block, CI, K, K, block]`` as the graph compiler packs it, and the
    knobs of :func:`~vtakit.compiler.ops.cpu.schedule_conv2d_nchw_packed` opened up: the register
    tile's rows and pixels, the order of the reduction loops, whether the kernel-column loop is
    unrolled, and whether output rows run in parallel besides channel blocks."""
    kernel = te.placeholder((co // block, ci, k, k, block), "float32", name="kernel")
    out = nn.conv2d_nchw_packed(data, kernel, stride, pad)
    _, _, oh, ow = static_shape(out)
    lanes = cpu.vector_lanes("float32")
    vectors = -(-block // lanes)
    cfg.define_split("tile_oh", oh, filter=lambda e: e.size[-1] <= 4)
    cfg.define_split("tile_ow", ow, filter=lambda e: e.size[-1] <= MAX_REGISTER_ROWS)
    cfg.define_knob("reduce_order", ["c_y_x", "y_x_c"])
    cfg.define_annotate("ann_kx", [0], policy="try_unroll")
    cfg.define_knob("parallel", ["rows", "blocks"])
    cfg.add_flop(2 * co * oh * ow * ci * k * k)
    if isinstance(cfg, ConfigSpace):   # what schedule_conv2d_nchw_packed picks by hand
        cfg.define_filter(_too_many_accumulators(vectors))
        tile = cpu.gemm_tile("float32")
        rows = max(1, tile.rows * tile.vectors // vectors)
        cfg.set_fallback(tile_oh=[-1, 1], tile_ow=[-1, _largest_divisor(ow, rows)], reduce_order="c_y_x",
                         ann_kx=["none"], parallel="rows")
    s = te.create_schedule(out.op)
    blocked = out.op.input_tensors[0]
    padded = blocked.op.input_tensors[0]
    if padded.op.tag == "pad":
        pn, pc, py, px = s[padded].op.axis
        fused = s[padded].fuse(pn, pc)
        if math.prod(static_shape(padded)) >= cpu.PARALLEL_MIN_WORK:
            s[padded].parallel(fused)
    n, o, y, x = s[out].op.axis
    oo, oi = s[out].split(o, block)
    yo, yi = cfg["tile_oh"].apply(s, out, y)
    xo, xi = cfg["tile_ow"].apply(s, out, x)
    s[out].reorder(n, oo, yo, xo, yi, oi, xi)
    fused = s[out].fuse(n, oo, yo) if cfg["parallel"].val == "rows" else s[out].fuse(n, oo)
    if co * oh * ow * ci * k * k >= cpu.PARALLEL_MIN_WORK:
        s[out].parallel(fused)
    s[out].unroll(oi)   # constant indices into the tile: it stays in registers
    s[out].vectorize(xi)
    s[blocked].compute_at(s[out], xo)
    bn, bb, by, bx, bc = s[blocked].op.axis
    rc, ry, rx = s[blocked].op.reduce_axis
    reduce = (rc, ry, rx) if cfg["reduce_order"].val == "c_y_x" else (ry, rx, rc)
    s[blocked].reorder(bn, bb, *reduce, by, bx, bc)
    cfg["ann_kx"].apply(s, blocked, [rx])
    s[blocked].unroll(by)
    s[blocked].unroll(bx)
    s[blocked].vectorize(bc)
    return s, [data, kernel, out]
