"""Default GPU schedules for the operators in :mod:`.nn` and :mod:`.elemwise` (TVM's topi.cuda, simplified).

Every schedule takes the output tensor(s) and returns a :class:`~vtakit.compiler.te.Schedule` whose
loops are bound to ``blockIdx``/``threadIdx``, for :func:`vtakit.build` with ``target="cuda"``
(or the reference interpreter, which runs thread loops one after another). The patterns are TVM's:

- element-wise: all axes fused, split by the threads of a block, bound;
- dense: a block computes a tile of the output from tiles of both operands staged in ``shared``
  memory (cooperative fetches bound to the block's threads); each thread accumulates a register
  tile (a ``local`` stage) interleaved over virtual threads, as in TVM's GEMM tutorial; a batch
  too small to tile is reduced across the threads of a block instead (rfactor), one output per block;
- conv2d NCHW: the direct convolution tiled over output channels, rows and columns, input and
  weight tiles of a chunk of input channels staged in ``shared``; grouped convolutions, and tiles
  that would not fit, fall back to one output per thread;
- depthwise conv2d: a block per channel and pixel tile, its input tile in ``shared``;
- pooling: one output per thread, its window reduced in a register;
- softmax: a block per row, the max and the sum reduced across its threads;
- other reductions: each reduction its own kernel, reduced across threads when its reduction is
  long (with or without rfactor), element-wise tails in a kernel of their own.

Tiles are picked from the shape as divisors of its extents, so no guard is needed in the hot loops,
and every block stays within :data:`MAX_THREADS` threads and :data:`SHARED_BUDGET` bytes of shared
memory whatever the shape (a prime extent just gives narrow tiles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from vtakit.compiler import ir, te
from vtakit.compiler.arith.analyzer import linear_coefficients
from vtakit.compiler.lower.thread_extent import MAX_THREADS_PER_BLOCK, THREAD_LIMITS
from vtakit.compiler.ops.common import static_shape
from vtakit.compiler.ops.stages import (divisor, find_anchor, first_tagged, inline_injective_producers, inner_stages,
                                        is_injective, outputs_of, producers, size_of)
from vtakit.compiler.te.schedule import Schedule, Stage
from vtakit.compiler.te.tensor import ComputeOp, Tensor
from vtakit.errors import ScheduleError

__all__ = ["MAX_THREADS", "SHARED_BUDGET", "DEFAULT_THREADS", "AxisTile", "axis_tile", "DenseTiles", "dense_tiles",
           "ConvTiles", "conv2d_tiles", "schedule", "schedule_injective", "schedule_dense", "schedule_conv2d_nchw",
           "schedule_depthwise_conv2d_nchw", "schedule_pool", "schedule_softmax", "schedule_reduce"]

#: threads per block the schedules may use (CUDA's limit)
MAX_THREADS = MAX_THREADS_PER_BLOCK
#: static shared memory per block a schedule may use (CUDA's 48 KiB without opting in)
SHARED_BUDGET = 48 * 1024
#: threads per block of element-wise kernels and one-output-per-thread fallbacks
DEFAULT_THREADS = 256
#: a reduction at least this long is shared out across the threads of a block
CROSS_THREAD_MIN = 32


def _thread(tag: str) -> te.IterVar:
    return te.thread_axis(tag)


def _bind(stage: Stage, axis, tag: str) -> None:
    stage.bind(axis, _thread(tag))


def _dtype_bytes(dtype: str) -> int:
    if dtype == "bool":
        return 1
    return max(1, int("".join(c for c in ir.element_of(dtype) if c.isdigit()) or 32) // 8)


def _extent(iv) -> int:
    ext = iv.dom.extent
    return int(ext.value) if isinstance(ext, ir.IntImm) else int(ext)


# ---------------------------------------------------------------------------- threads over outputs
def _thread_over(stage: Stage, axes: list, size: int, threads: int = DEFAULT_THREADS):
    """Fuse ``axes`` (``size`` elements), split by ``threads`` (fewer for a small tensor) and bind the
    parts to blockIdx.x / threadIdx.x; returns the thread axis (where per-output stages attach)."""
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    threads = max(1, min(threads, size))
    if size % threads:
        # a tail block would guard every access; take a divisor when a reasonable one exists
        d = divisor(size, threads)
        threads = d if d >= threads // 4 else threads
    blocks = -(-size // threads)
    if blocks > THREAD_LIMITS["blockIdx.x"]:
        raise ScheduleError(f"{size} outputs need {blocks} blocks of {threads} threads, more than blockIdx.x allows")
    bx, tx = stage.split(fused, factor=threads)
    _bind(stage, bx, "blockIdx.x")
    _bind(stage, tx, "threadIdx.x")
    return tx


def _elementwise(s: Schedule, t: Tensor) -> None:
    stage = s[t]
    axes = list(stage.op.axis)
    if not axes:
        raise ScheduleError(f"stage {t.name!r} is a scalar (rank 0); a GPU kernel needs at least one axis to bind")
    _thread_over(stage, axes, size_of(t))


def schedule_injective(outs: Tensor | Sequence[Tensor]) -> Schedule:
    """Element-wise and broadcast ops: producers inlined; each output's axes fused, split by
    :data:`DEFAULT_THREADS` and bound to blockIdx.x / threadIdx.x."""
    outs = outputs_of(outs)
    s = te.create_schedule([t.op for t in outs])
    inline_injective_producers(s, outs, "schedule_injective")
    for t in outs:
        _elementwise(s, t)
    return s


def _anchor(s: Schedule, outs: list[Tensor], tags: tuple[str, ...]) -> tuple[Tensor, Tensor]:
    """(output stage the kernel is bound on, the anchor reduction computed per thread into registers);
    epilogue stages inlined into the output stage, the operands' element-wise stages into the anchor."""
    last = outs[0]
    main, between = find_anchor(last, tags)
    for t in {id(t): t for t in between}.values():
        s[t].compute_inline()
    for t in inner_stages(outs):   # the operands' own element-wise stages (padding, reshaped weights)
        if t is not main and is_injective(t) and all(t is not b for b in between):
            s[t].compute_inline()
    if main is last:
        return last, s.cache_write(main, "local")
    s[main].set_scope("local")
    return last, main


def _per_thread(s: Schedule, last: Tensor, main: Tensor) -> None:
    """The fallback for any reduction op: one output per thread, reduced in a register."""
    tx = _thread_over(s[last], list(s[last].op.axis), size_of(last))
    s[main].compute_at(s[last], tx)


# ---------------------------------------------------------------------------- dense
@dataclass(frozen=True)
class AxisTile:
    """How a block's share of one output axis is laid out: ``vthreads`` interleaved virtual threads
    x ``threads`` threads x ``inner`` consecutive elements per (virtual) thread, in registers."""

    vthreads: int
    threads: int
    inner: int

    @property
    def block(self) -> int:
        return self.vthreads * self.threads * self.inner


def axis_tile(extent: int, threads: int = 16, inner: int = 4, vthreads: int = 2) -> AxisTile:
    """The largest tile of the given shape whose parts divide ``extent`` (registers first, then threads)."""
    r = divisor(extent, inner)
    t = divisor(extent // r, threads)
    v = divisor(extent // (r * t), vthreads)
    return AxisTile(v, t, r)


@dataclass(frozen=True)
class DenseTiles:
    """A dense/matmul tiling: rows (batch) and columns (features) of a block, and ``k_block`` reduction
    elements staged in shared memory per step; ``unroll`` the inner reduction loop's unroll limit."""

    rows: AxisTile
    cols: AxisTile
    k_block: int
    unroll: bool = True

    @property
    def threads(self) -> int:
        return self.rows.threads * self.cols.threads

    def shared_bytes(self, element_bytes: int) -> int:
        return (self.rows.block + self.cols.block) * self.k_block * element_bytes

    def check(self, batch: int, features: int, in_dim: int, element_bytes: int) -> None:
        """Raise :class:`ScheduleError` when the tiling does not divide the shape or breaks a block limit."""
        for what, tile, extent in (("rows", self.rows.block, batch), ("cols", self.cols.block, features),
                                   ("k_block", self.k_block, in_dim)):
            if tile < 1 or extent % tile:
                raise ScheduleError(f"dense tiling: {what} block {tile} must divide {extent}")
        if self.threads > MAX_THREADS:
            raise ScheduleError(f"dense tiling: {self.threads} threads per block, more than {MAX_THREADS}")
        if self.shared_bytes(element_bytes) > SHARED_BUDGET:
            raise ScheduleError(f"dense tiling: {self.shared_bytes(element_bytes)} bytes of shared memory per block, "
                                f"more than {SHARED_BUDGET}")


def dense_tiles(batch: int, features: int, in_dim: int) -> DenseTiles:
    """The default tiling: up to 128 x 128 outputs per block from 16 x 16 threads, each thread 2 x 2
    virtual threads of 4 x 4 registers, and 8 reduction elements per shared-memory step, that step's
    loop not unrolled: for 4096^3 ptxas (sm_80) then gives 92 registers per thread, two blocks per SM,
    where the unrolled step takes 214 and one block (neither measured on a GPU yet)."""
    return DenseTiles(axis_tile(batch), axis_tile(features), divisor(in_dim, 8), unroll=False)


def _dense_operands(dense: Tensor) -> list[Tensor]:
    return list(dict.fromkeys(dense.op.input_tensors))


def schedule_dense(outs: Tensor | Sequence[Tensor], tiles: DenseTiles | None = None) -> Schedule:
    """Dense / matmul (bias and element-wise epilogues inlined). A batch of at least 8 rows is tiled
    (``tiles``, default :func:`dense_tiles`): shared-memory operand tiles, a register tile per thread
    interleaved over virtual threads. A smaller batch reduces each output across a block's threads."""
    outs = outputs_of(outs)
    s = te.create_schedule([o.op for o in outs])
    last = outs[0]
    main, _ = find_anchor(last, ("dense", "dense_packed"))
    batch, features = static_shape(last)
    in_dim = _extent(main.op.reduce_axis[0])
    if tiles is None and batch < 8 and main.op.tag == "dense" and divisor(in_dim, 64) >= 8:
        _dense_rows_across_threads(s, outs, main, divisor(in_dim, 64))
        return s
    last, dense = _anchor(s, outs, ("dense", "dense_packed"))
    if dense.op.tag == "dense_packed" or len(_dense_operands(dense)) != 2:
        _per_thread(s, last, dense)   # packed weights are a CPU layout: no tiling for them here
        return s
    tiles = tiles or dense_tiles(batch, features, in_dim)
    tiles.check(batch, features, in_dim, max(_dtype_bytes(t.dtype) for t in _dense_operands(dense)))
    _dense_tiled(s, last, dense, tiles)
    return s


def _dense_rows_across_threads(s: Schedule, outs: list[Tensor], dense: Tensor, threads: int) -> None:
    """A kernel with one block per output whose ``threads`` threads reduce slices of ``k`` (rfactor),
    combined across threads; an epilogue is a second, element-wise kernel (its stages inlined)."""
    last = outs[0]
    for p in inner_stages(outs):
        if p is not dense and is_injective(p):
            s[p].compute_inline()
    (k,) = s[dense].op.reduce_axis
    _, ki = s[dense].split(k, factor=threads)
    partial = s.rfactor(dense, ki)
    stage = s[dense]
    b, n = stage.op.axis
    _bind(stage, b, "blockIdx.y")
    _bind(stage, n, "blockIdx.x")
    tx = _thread("threadIdx.x")
    stage.bind(stage.op.reduce_axis[0], tx)
    s[partial].compute_at(stage, stage.op.reduce_axis[0])
    stage.set_store_predicate(tx.var.equal(0))
    if last is not dense:
        _elementwise(s, last)


def _dense_tiled(s: Schedule, last: Tensor, dense: Tensor, tiles: DenseTiles) -> None:
    data, weight = _dense_operands(dense)
    a_shared = s.cache_read(data, "shared", [dense])
    b_shared = s.cache_read(weight, "shared", [dense])
    a_local = s.cache_read(a_shared, "local", [dense])
    b_local = s.cache_read(b_shared, "local", [dense])
    out = s[last]
    y, x = out.op.axis
    by, yi = out.split(y, factor=tiles.rows.block)
    bx, xi = out.split(x, factor=tiles.cols.block)
    vy, yi = out.split(yi, nparts=tiles.rows.vthreads)
    vx, xi = out.split(xi, nparts=tiles.cols.vthreads)
    ty, yi = out.split(yi, nparts=tiles.rows.threads)
    tx, xi = out.split(xi, nparts=tiles.cols.threads)
    out.reorder(by, bx, vy, vx, ty, tx, yi, xi)
    _bind(out, by, "blockIdx.y")
    _bind(out, bx, "blockIdx.x")
    out.bind(vy, te.thread_axis("vthread", name="vy"))
    out.bind(vx, te.thread_axis("vthread", name="vx"))
    _bind(out, ty, "threadIdx.y")
    _bind(out, tx, "threadIdx.x")
    s[dense].compute_at(out, tx)
    cy, cx = s[dense].op.axis
    (k,) = s[dense].op.reduce_axis
    ko, ki = s[dense].split(k, factor=tiles.k_block)
    s[dense].reorder(ko, ki, cy, cx)
    if tiles.unroll:
        s[dense].unroll(ki)
    for shared in (a_shared, b_shared):
        s[shared].compute_at(s[dense], ko)
        _cooperative_fetch(s[shared], (("threadIdx.y", tiles.rows.threads), ("threadIdx.x", tiles.cols.threads)))
    for local in (a_local, b_local):
        s[local].compute_at(s[dense], ki)


def _cooperative_fetch(stage: Stage, threads: Sequence[tuple[str, int]]) -> None:
    """A shared-memory stage loaded by all threads of the block: its axes fused and split over
    ``threads`` (outermost tag first), the rest a loop each thread runs."""
    axes = list(stage.op.axis)
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    for tag, count in reversed(threads):
        fused, inner = stage.split(fused, factor=count)
        _bind(stage, inner, tag)


# ---------------------------------------------------------------------------- convolution
@dataclass(frozen=True)
class ConvTiles:
    """A direct conv2d tiling: per block ``channel_threads`` x ``row_threads`` x ``col_threads`` threads,
    each computing ``channel_inner`` output channels of one pixel; ``rc_block`` input channels staged in
    shared memory per step."""

    channel_threads: int
    channel_inner: int
    row_threads: int
    col_threads: int
    rc_block: int

    @property
    def threads(self) -> int:
        return self.channel_threads * self.row_threads * self.col_threads


@dataclass(frozen=True)
class _ConvShape:
    channels: int
    out_h: int
    out_w: int
    in_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]

    def shared_bytes(self, tiles: ConvTiles, element_bytes: int) -> int:
        rows = (tiles.row_threads - 1) * self.stride[0] + (self.kernel[0] - 1) * self.dilation[0] + 1
        cols = (tiles.col_threads - 1) * self.stride[1] + (self.kernel[1] - 1) * self.dilation[1] + 1
        data = tiles.rc_block * rows * cols
        weight = tiles.channel_threads * tiles.channel_inner * tiles.rc_block * self.kernel[0] * self.kernel[1]
        return (data + weight) * element_bytes


def conv2d_tiles(channels: int, out_h: int, out_w: int, in_channels: int, kernel: tuple[int, int] = (3, 3),
                 stride: tuple[int, int] = (1, 1), dilation: tuple[int, int] = (1, 1),
                 element_bytes: int = 4) -> ConvTiles:
    """The default direct-conv tiling: 8 x 8 pixels (divisors of the output's), 4 channel threads of
    4 channels each and 8 input channels a step, halved until the shared tiles fit
    :data:`SHARED_BUDGET` / 2 (two blocks per SM at least)."""
    shape = _ConvShape(channels, out_h, out_w, in_channels, kernel, stride, dilation)
    inner = divisor(channels, 4)
    tiles = ConvTiles(divisor(channels // inner, 4), inner, divisor(out_h, 8), divisor(out_w, 8),
                      divisor(in_channels, 8))
    while shape.shared_bytes(tiles, element_bytes) > SHARED_BUDGET // 2:
        if tiles.rc_block > 1:
            tiles = ConvTiles(tiles.channel_threads, tiles.channel_inner, tiles.row_threads, tiles.col_threads,
                              divisor(in_channels, tiles.rc_block // 2))
        elif tiles.row_threads > 1:
            tiles = ConvTiles(tiles.channel_threads, tiles.channel_inner, divisor(out_h, tiles.row_threads // 2),
                              tiles.col_threads, tiles.rc_block)
        elif tiles.col_threads > 1:
            tiles = ConvTiles(tiles.channel_threads, tiles.channel_inner, tiles.row_threads,
                              divisor(out_w, tiles.col_threads // 2), tiles.rc_block)
        else:
            break
    return tiles


def _loads(t: Tensor) -> list[ir.ProducerLoad]:
    found: list[ir.ProducerLoad] = []
    ir.walk(t.op.body, lambda n: found.append(n) if isinstance(n, ir.ProducerLoad) else None)
    return found


def _conv_spec(conv: Tensor) -> tuple[_ConvShape, Tensor, Tensor] | None:
    """The shape of an ungrouped conv2d_nchw stage and its (data, kernel) operands, read off its loads
    ``data[b, rc, y * sh + ry * dh, x * sw + rx * dw]`` and ``kernel[oc, rc, ry, rx]``; None for a
    grouped convolution (its input channel depends on the output channel)."""
    _, oc, y, x = (iv.var for iv in conv.op.axis)
    rc, ry, rx = (iv.var for iv in conv.op.reduce_axis)
    data_load, kernel_load = _loads(conv)[:2]
    if not (isinstance(data_load.indices[1], ir.Var) and data_load.indices[1] is rc):
        return None
    rows = linear_coefficients(data_load.indices[2], [y, ry])
    cols = linear_coefficients(data_load.indices[3], [x, rx])
    if rows is None or cols is None:
        return None
    (sh, dh), _ = rows
    (sw, dw), _ = cols
    _, channels, out_h, out_w = static_shape(conv)
    kernel = kernel_load.producer
    _, in_channels, kh, kw = static_shape(kernel)
    return (_ConvShape(channels, out_h, out_w, in_channels, (kh, kw), (sh, sw), (dh, dw)), data_load.producer,
            kernel)


def _check_conv_tiles(tiles: ConvTiles, shape: _ConvShape, element_bytes: int) -> None:
    for what, tile, extent in (("output channels", tiles.channel_threads * tiles.channel_inner, shape.channels),
                               ("rows", tiles.row_threads, shape.out_h), ("columns", tiles.col_threads, shape.out_w),
                               ("rc_block", tiles.rc_block, shape.in_channels)):
        if tile < 1 or extent % tile:
            raise ScheduleError(f"conv2d tiling: {what} block {tile} must divide {extent}")
    if tiles.threads > MAX_THREADS or tiles.channel_threads > THREAD_LIMITS["threadIdx.z"]:
        raise ScheduleError(f"conv2d tiling: {tiles.threads} threads per block ({tiles.channel_threads} on "
                            f"threadIdx.z), more than {MAX_THREADS} ({THREAD_LIMITS['threadIdx.z']})")
    used = shape.shared_bytes(tiles, element_bytes)
    if used > SHARED_BUDGET:
        raise ScheduleError(f"conv2d tiling: {used} bytes of shared memory per block, more than {SHARED_BUDGET}")


def schedule_conv2d_nchw(outs: Tensor | Sequence[Tensor], tiles: ConvTiles | None = None) -> Schedule:
    """conv2d_nchw (strides, padding, dilation, groups; epilogues inlined). Ungrouped: tiled with
    shared-memory input and weight tiles (``tiles``, default :func:`conv2d_tiles`); grouped, or a
    window so large that no default tile fits: one output per thread, reading global memory."""
    outs = outputs_of(outs)
    s = te.create_schedule([o.op for o in outs])
    last, conv = _anchor(s, outs, ("conv2d_nchw",))
    spec = _conv_spec(conv)
    if spec is None:
        _per_thread(s, last, conv)
        return s
    shape, data, kernel = spec
    element = max(_dtype_bytes(data.dtype), _dtype_bytes(kernel.dtype))
    if tiles is None:
        tiles = conv2d_tiles(shape.channels, shape.out_h, shape.out_w, shape.in_channels, shape.kernel,
                             shape.stride, shape.dilation, element)
        if shape.shared_bytes(tiles, element) > SHARED_BUDGET:   # a huge kernel window: no tile fits
            _per_thread(s, last, conv)
            return s
    _check_conv_tiles(tiles, shape, element)
    _conv_tiled(s, last, conv, data, kernel, tiles)
    return s


def _conv_tiled(s: Schedule, last: Tensor, conv: Tensor, data: Tensor, kernel: Tensor, tiles: ConvTiles) -> None:
    data_shared = s.cache_read(data, "shared", [conv])
    kernel_shared = s.cache_read(kernel, "shared", [conv])
    out = s[last]
    n, f, y, x = out.op.axis
    bf, fi = out.split(f, factor=tiles.channel_threads * tiles.channel_inner)
    tz, fi = out.split(fi, nparts=tiles.channel_threads)
    by, ty = out.split(y, factor=tiles.row_threads)
    bx, tx = out.split(x, factor=tiles.col_threads)
    out.reorder(n, bf, by, bx, tz, ty, tx, fi)
    _bind(out, out.fuse(n, bf), "blockIdx.z")
    _bind(out, by, "blockIdx.y")
    _bind(out, bx, "blockIdx.x")
    _bind(out, tz, "threadIdx.z")
    _bind(out, ty, "threadIdx.y")
    _bind(out, tx, "threadIdx.x")
    s[conv].compute_at(out, tx)
    rc, ry, rx = s[conv].op.reduce_axis
    rco, rci = s[conv].split(rc, factor=tiles.rc_block)
    cn, cf, cy, cx = s[conv].op.axis
    s[conv].reorder(rco, rci, ry, rx, cn, cf, cy, cx)
    threads = (("threadIdx.z", tiles.channel_threads), ("threadIdx.y", tiles.row_threads),
               ("threadIdx.x", tiles.col_threads))
    for shared in (data_shared, kernel_shared):
        s[shared].compute_at(s[conv], rco)
        _cooperative_fetch(s[shared], threads)


# ---------------------------------------------------------------------------- depthwise convolution
def schedule_depthwise_conv2d_nchw(outs: Tensor | Sequence[Tensor]) -> Schedule:
    """depthwise_conv2d_nchw: a block per (image, channel, tile of up to 16 x 16 pixels), one output per
    thread; the block's input window (padding inlined) is staged in shared memory."""
    outs = outputs_of(outs)
    s = te.create_schedule([o.op for o in outs])
    last, conv = _anchor(s, outs, ("depthwise_conv2d_nchw",))
    data = _loads(conv)[0].producer
    _, _, out_h, out_w = static_shape(last)
    rows, cols = divisor(out_h, 16), divisor(out_w, 16)
    data_shared = s.cache_read(data, "shared", [conv])
    out = s[last]
    n, c, y, x = out.op.axis
    by, ty = out.split(y, factor=rows)
    bx, tx = out.split(x, factor=cols)
    out.reorder(n, c, by, bx, ty, tx)
    _bind(out, out.fuse(n, c), "blockIdx.z")
    _bind(out, by, "blockIdx.y")
    _bind(out, bx, "blockIdx.x")
    _bind(out, ty, "threadIdx.y")
    _bind(out, tx, "threadIdx.x")
    s[conv].compute_at(out, tx)
    s[data_shared].compute_at(out, bx)
    _cooperative_fetch(s[data_shared], (("threadIdx.y", rows), ("threadIdx.x", cols)))
    return s


# ---------------------------------------------------------------------------- pooling
def schedule_pool(outs: Tensor | Sequence[Tensor]) -> Schedule:
    """pool2d (max, avg) and global_avg_pool2d: one output per thread, its window reduced in a register
    (padding inlined)."""
    outs = outputs_of(outs)
    s = te.create_schedule([o.op for o in outs])
    last, pool = _anchor(s, outs, ("pool2d",))
    _per_thread(s, last, pool)
    return s


# ---------------------------------------------------------------------------- softmax
def schedule_softmax(outs: Tensor | Sequence[Tensor]) -> Schedule:
    """softmax: a block per row (every axis but the softmax axis); the row's max and sum are reduced
    across the block's threads into shared memory; exp is recomputed where it is read."""
    outs = outputs_of(outs)
    out = outs[0]
    if out.op.tag != "softmax_output":
        raise ScheduleError(f"schedule_softmax: {out.name!r} is not a softmax output (tag {out.op.tag!r})")
    s = te.create_schedule([t.op for t in outs])
    stages = _softmax_stages(out)
    if stages is None:
        raise ScheduleError(f"schedule_softmax: {out.name!r} is not exp(x - max) / sum over one axis "
                            "(log-softmax and multi-axis softmax take schedule_reduce)")
    mx, ex, total = stages
    axis = out.op.attrs["axis"]
    length = static_shape(out)[axis]
    threads = divisor(length, DEFAULT_THREADS) if length >= CROSS_THREAD_MIN else 1
    if threads < 8:
        threads = min(length, 32)
    s[ex].compute_inline()
    stage = s[out]
    axes = list(stage.op.axis)
    rows = [a for k, a in enumerate(axes) if k != axis]
    if not rows:
        block = None
    else:
        stage.reorder(*rows, axes[axis])
        block = stage.fuse(*rows) if len(rows) > 1 else rows[0]
        _bind(stage, block, "blockIdx.x")
    tx = _thread("threadIdx.x")
    _, inner = stage.split(axes[axis], factor=threads)
    stage.bind(inner, tx)
    for reduced in (mx, total):
        (k,) = s[reduced].op.reduce_axis
        _, ki = s[reduced].split(k, factor=threads)
        s[reduced].bind(ki, tx)
        s[reduced].set_scope("shared")
        s[reduced].set_store_predicate(tx.var.equal(0))
        if block is not None:
            s[reduced].compute_at(stage, block)
    return s


def _softmax_stages(out: Tensor) -> tuple[Tensor, Tensor, Tensor] | None:
    """(max, exp, sum) of :func:`~vtakit.compiler.ops.nn.softmax`'s output, or None for another form."""
    inputs = out.op.input_tensors
    if len(inputs) != 2 or len(out.op.axis) < 1:
        return None
    ex, total = inputs
    mx = next((p for p in producers(ex) if p.op.tag == "softmax"), None)
    if mx is None or not is_injective(ex) or any(len(t.op.reduce_axis) != 1 for t in (mx, total)):
        return None
    return mx, ex, total


# ---------------------------------------------------------------------------- other reductions
def schedule_reduce(outs: Tensor | Sequence[Tensor], rfactor: bool = True) -> Schedule:
    """Reductions without a schedule of their own (sums and extrema over axes, batched matmul,
    normalisations that reduce several times): each reduction stage is a kernel of its own, element-wise
    stages are inlined, element-wise outputs are a kernel each. A reduction of at least
    :data:`CROSS_THREAD_MIN` elements is shared out across the threads of a block (partial results per
    thread with ``rfactor``, else the reduce axis bound to the threads directly), with blockIdx.x and
    threadIdx.y over the outputs; shorter ones reduce one output per thread."""
    outs = outputs_of(outs)
    s = te.create_schedule([t.op for t in outs])
    for p in inner_stages(outs):
        if is_injective(p):
            s[p].compute_inline()
        else:
            _reduction_kernel(s, p, rfactor)
    for t in outs:
        if is_injective(t):
            _elementwise(s, t)
        else:
            _reduction_kernel(s, t, rfactor)
    return s


def _reduction_kernel(s: Schedule, t: Tensor, rfactor: bool) -> None:
    stage = s[t]
    axes = list(stage.op.axis)
    length = math.prod(_extent(k) for k in stage.op.reduce_axis)
    if not axes:
        raise ScheduleError(f"stage {t.name!r} reduces to a scalar (rank 0); keep one axis (keepdims) for a GPU "
                            "kernel to bind")
    if length < CROSS_THREAD_MIN or not isinstance(t.op, ComputeOp):
        _thread_over(stage, axes, size_of(t))
        return
    threads = 32 if length % 32 == 0 else divisor(length, 32)
    if threads < 8:
        _thread_over(stage, axes, size_of(t))
        return
    k = stage.fuse(*stage.op.reduce_axis) if len(stage.op.reduce_axis) > 1 else stage.op.reduce_axis[0]
    _, ki = stage.split(k, factor=threads)
    tx = _thread("threadIdx.x")
    if rfactor:
        partial = s.rfactor(t, ki)
        stage = s[t]
        axes = list(stage.op.axis)
        kx = stage.op.reduce_axis[0]
    else:
        kx = ki
    size = size_of(t)
    rows = divisor(size, MAX_THREADS // threads)
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    bx, ty = stage.split(fused, factor=rows)
    _bind(stage, bx, "blockIdx.x")
    _bind(stage, ty, "threadIdx.y")
    stage.bind(kx, tx)
    if rfactor:
        s[partial].compute_at(stage, kx)
    stage.set_store_predicate(tx.var.equal(0))


# ---------------------------------------------------------------------------- dispatch
_BY_TAG = {
    "dense": schedule_dense, "dense_packed": schedule_dense, "conv2d_nchw": schedule_conv2d_nchw,
    "depthwise_conv2d_nchw": schedule_depthwise_conv2d_nchw, "pool2d": schedule_pool,
    "softmax_output": schedule_softmax, "reduce": schedule_reduce, "batch_matmul": schedule_reduce,
}


def schedule(outs: Tensor | Sequence[Tensor], target: str | None = None) -> Schedule:
    """The default GPU schedule for an operator's output (what the graph compiler calls per fused
    group): the schedule of the first tagged operator found walking back through element-wise
    stages, else the element-wise schedule; a group the operator's schedule cannot take (a
    convolution whose output also feeds a second reduction, ...) gets :func:`schedule_reduce`.
    ``target`` (a cuda target string) is taken for the same call as the CPU's
    :func:`~vtakit.compiler.ops.cpu.schedule`; every architecture shares the block limits the tiles keep."""
    outs = outputs_of(outs)
    anchor = first_tagged(outs, _BY_TAG)
    if anchor is not None:
        if len(outs) > 1:
            return schedule_reduce(outs)
        try:
            return _BY_TAG[anchor.op.tag](outs)
        except ScheduleError:
            return schedule_reduce(outs)
    if all(is_injective(p) for p in inner_stages(outs)) and all(is_injective(t) for t in outs):
        return schedule_injective(outs)
    return schedule_reduce(outs)
