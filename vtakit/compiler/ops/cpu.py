"""Default CPU schedules for the operators in :mod:`.nn` and :mod:`.elemwise` (TVM's topi.x86, simplified).

Every schedule takes the output tensor(s) and returns a :class:`~vtakit.compiler.te.Schedule`. The
pattern is the one TVM's x86 schedules use: element-wise epilogues (bias, relu, clip, casts) are
inlined into the output stage; the output is tiled, its outer loops fused and run in parallel;
the reduction (``dense``, ``conv2d``, pooling) is computed per tile into a small local buffer whose
loops are unrolled and vectorised, so LLVM keeps it in vector registers; padding and weight
packing stages are materialised once, in parallel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from vtakit.compiler import ir
from vtakit.compiler import te
from vtakit.compiler.backend.llvm_runtime import CPUTarget, host_target, num_threads, parse_target
from vtakit.compiler.te.schedule import Schedule
from vtakit.compiler.te.tensor import Tensor
from vtakit.errors import ScheduleError
from vtakit.compiler.ops.common import static_shape
from vtakit.compiler.ops.stages import (divisor as _divisor, find_anchor as _find, first_tagged,
                                        inner_stages as _inner_stages,
                                        inline_injective_producers, input_tagged as _input_tagged,
                                        is_injective as _is_injective,
                                        outputs_of as _outputs, producers as _producers, size_of as _size)

__all__ = ["vector_lanes", "default_target", "RegisterTile", "gemm_tile", "dense_pack_block", "conv2d_channel_block",
           "schedule", "schedule_injective", "schedule_dense", "schedule_conv2d_nchw",
           "schedule_conv2d_nchw_packed", "schedule_batch_matmul", "schedule_depthwise_conv2d_nchw", "schedule_pool", "schedule_softmax",
           "schedule_reduce"]

# Loops with less work than this (output elements x reduction length) run on one thread:
# a parallel launch costs a few microseconds.
PARALLEL_MIN_WORK = 1 << 14


def default_target() -> CPUTarget:
    """The target schedules block for when none is given: the host, at its full vector width."""
    return host_target()


def _target(target: str | CPUTarget | None) -> CPUTarget:
    return default_target() if target is None else parse_target(target)


def vector_lanes(dtype: str, target: str | CPUTarget | None = None) -> int:
    """Elements of ``dtype`` in one vector register of ``target`` (default: the host), at its
    vector width (``-vector-width=``, else the widest the CPU has)."""
    bits = 8 if dtype == "bool" else int(ir.element_of(dtype).lstrip("uintfloat"))
    return max(1, _target(target).vector_width // bits)


@dataclass(frozen=True)
class RegisterTile:
    """A micro-kernel's register tile: ``rows`` broadcast operands x ``cols`` output lanes
    (``cols`` = ``vectors`` whole vector registers), ``rows * vectors`` accumulators."""

    rows: int
    cols: int
    vectors: int


def gemm_tile(dtype: str = "float32", target: str | CPUTarget | None = None) -> RegisterTile:
    """The GEMM/conv register tile for ``target``: two vectors of output columns, and as many rows as
    keep the accumulators within half the register file (the rest holds the two column vectors, the
    broadcasts and the addresses' spill-free slack): 8x32 fp32 on AVX-512 (16 of 32 zmm), 6x16 on
    AVX2 (12 of 16 ymm). Larger tiles measured slower (spills) on both."""
    t = _target(target)
    lanes = vector_lanes(dtype, t)
    rows = min(8, (t.vector_registers - 4) // 2)
    return RegisterTile(rows, 2 * lanes, 2)


def dense_pack_block(dtype: str = "float32", target: str | CPUTarget | None = None,
                     out_features: int | None = None) -> int:
    """Columns per packed panel for :func:`~vtakit.compiler.ops.nn.dense_packed` / ``matmul(pack_block=)``
    on ``target``: the register tile's width; for ``out_features`` it does not divide, the largest
    divisor below it made of whole vectors, else the largest divisor (1000 -> 25 on AVX-512)."""
    tile = gemm_tile(dtype, target)
    if out_features is None or out_features % tile.cols == 0:
        return tile.cols
    lanes = tile.cols // tile.vectors
    whole = [d for d in range(lanes, tile.cols + 1, lanes) if out_features % d == 0]
    return max(whole) if whole else _divisor(out_features, tile.cols)


def conv2d_channel_block(out_channels: int, dtype: str = "float32", target: str | CPUTarget | None = None,
                         out_width: int | None = None) -> int:
    """Output channels per block for :func:`~vtakit.compiler.ops.nn.conv2d_nchw_packed` on ``target``:
    the register tile's width (two vectors) or one vector, whichever fills more accumulators with
    whole pixel rows of ``out_width`` (a 7-wide output on AVX2 takes 7 pixels x 1 vector rather
    than 1 pixel x 2); the largest divisor of ``out_channels`` below that if it does not divide."""
    t = _target(target)
    lanes = vector_lanes(dtype, t)
    best, best_acc = 0, -1
    for vectors in (2, 1):
        block = _divisor(out_channels, vectors * lanes)
        pixels = _tile_rows(block, dtype, t) if out_width is None else _divisor(out_width, _tile_rows(block, dtype, t))
        acc = pixels * -(-block // lanes)
        if acc > best_acc:
            best, best_acc = block, acc
    return best


def _tile_rows(block: int, dtype: str, target: CPUTarget) -> int:
    """Rows (GEMM) or output pixels (conv) of a register tile ``block`` lanes wide: as many as keep
    its accumulators within the budget of :func:`gemm_tile` (16 zmm on AVX-512, 12 ymm on AVX2)."""
    tile = gemm_tile(dtype, target)
    vectors = max(1, -(-block // vector_lanes(dtype, target)))
    return max(1, tile.rows * tile.vectors // vectors)


















def _parallel(stage, axes: list, work: int):
    """Fuse ``axes`` into one loop, parallel if ``work`` pays for a launch."""
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    if work >= PARALLEL_MIN_WORK:
        stage.parallel(fused)
    return fused


def _main_stage(s: Schedule, outs: list[Tensor], tags: tuple[str, ...]) -> tuple[Tensor, Tensor, str]:
    """(output stage to tile, reduction stage to compute per tile, the reduction's tag); epilogues inlined."""
    last = outs[0]
    main, between = _find(last, tags)
    for t in {id(t): t for t in between}.values():
        s[t].compute_inline()
    if main is last:
        return last, s.cache_write(main, "local"), main.op.tag
    return last, main, main.op.tag


def _materialize(s: Schedule, t: Tensor, target: CPUTarget) -> None:
    """A padding or packing stage computed once, before its consumer, in parallel (and vectorised
    for weight packing; padding's guarded loads stay scalar)."""
    stage = s[t]
    axes = list(stage.op.axis)
    inner = axes[-1]
    extent = static_shape(t)[-1]
    lanes = vector_lanes(t.dtype, target)
    if extent % lanes == 0 and t.op.tag == "weight_pack":
        io, ii = stage.split(inner, lanes)
        stage.vectorize(ii)
        axes = axes[:-1] + [io]
    _parallel(stage, axes[:max(1, len(axes) - 2)], _size(t))




def _work(last: Tensor, reduction: Tensor) -> int:
    """Multiply-adds (or comparisons) to compute ``last`` from ``reduction``'s loops."""
    extents = [iv.dom.extent.value for iv in reduction.op.reduce_axis if isinstance(iv.dom.extent, ir.IntImm)]
    return _size(last) * math.prod(extents)




# ---------------------------------------------------------------------------- element-wise
def schedule_injective(outs: Tensor | Sequence[Tensor], target: str | CPUTarget | None = None) -> Schedule:
    """Element-wise and broadcast ops: producers inlined, inner axis vectorised, outer axes parallel."""
    outs = _outputs(outs)
    s = te.create_schedule([t.op for t in outs])
    inline_injective_producers(s, outs, "schedule_injective")
    for t in outs:
        _schedule_elementwise(s, t, _target(target))
    return s


def _schedule_elementwise(s: Schedule, t: Tensor, target: CPUTarget) -> None:
    """Outer axes fused and parallel; the innermost axis stays a plain loop (so indices are affine,
    no div/mod per element), explicitly vectorised when whole vectors tile it, else left to LLVM."""
    stage = s[t]
    axes = list(stage.op.axis)
    if not axes:
        return
    inner = static_shape(t)[-1]
    lanes = vector_lanes(t.dtype, target)
    outer = axes[:-1]
    if inner >= lanes and inner % lanes == 0:
        io, ii = stage.split(axes[-1], lanes)
        stage.vectorize(ii)
        outer = outer or [io]  # a 1-D tensor: parallel over its vectors
    elif 1 < inner <= lanes:
        stage.vectorize(axes[-1])
    if outer:
        _parallel(stage, outer, _size(t))


# ---------------------------------------------------------------------------- dense
def schedule_dense(outs: Tensor | Sequence[Tensor], batch_block: int | None = None,
                   k_unroll: int = 4, target: str | CPUTarget | None = None) -> Schedule:
    """Dense / matmul. Packed weights (``pack_block`` or ``dense_packed``, the fast path): a
    ``batch_block`` x ``pack_block`` register tile (default: as many rows as :func:`gemm_tile`
    allows for ``target``), vectorised over the output features, k unrolled by ``k_unroll``. When
    the kernel packs its own weights (``pack_block``) and there are enough column panels to share
    out, each thread packs a panel right before the row blocks that read it, so the panel is read
    from its own L2 instead of from memory. Plain ``[N, K]`` weights: vector partial sums over
    ``K`` (rfactor), blocks of outputs in parallel."""
    outs = _outputs(outs)
    t = _target(target)
    s = te.create_schedule([o.op for o in outs])
    last, dense, tag = _main_stage(s, outs, ("dense", "dense_packed"))
    packed = _input_tagged(dense, "weight_pack")
    if tag != "dense_packed":
        if packed is not None:
            _materialize(s, packed, t)
        _dense_plain(s, last, dense, t)
        return s
    # N-D data ([..., rows, in], a Linear layer): the leading axes run outside the row blocks
    shape = static_shape(last)
    rows, features = shape[-2], shape[-1]
    *outer, b, n = s[last].op.axis
    block = first_tagged(outs, {"dense_packed": None}).op.attrs["block"]
    mb = batch_block or _divisor(rows, _tile_rows(block, dense.dtype, t))
    bo, no, bi, ni = s[last].tile(b, n, mb, block)
    s[last].reorder(no, *outer, bo, bi, ni)
    work = _work(last, dense)
    if packed is not None and features // block >= 2 * num_threads() and math.prod(shape[:-1]) > mb:
        if work >= PARALLEL_MIN_WORK:
            s[last].parallel(no)
        s[packed].compute_at(s[last], no)
        lanes = vector_lanes(packed.dtype, t)
        if block % lanes == 0:
            s[packed].vectorize(s[packed].split(s[packed].op.axis[-1], lanes)[1])
        s[dense].compute_at(s[last], bo)
    else:
        if packed is not None:
            _materialize(s, packed, t)
        s[dense].compute_at(s[last], _parallel(s[last], [no, *outer, bo], work))
    s[last].vectorize(ni)
    _register_tile(s, dense, k_unroll)
    return s


def _register_tile(s: Schedule, stage: Tensor, k_unroll: int) -> None:
    """The micro-kernel of a matrix product computed per output tile: k outermost (unrolled by
    ``k_unroll`` where it divides), the tile's rows unrolled, its columns vectorised."""
    *lead, db, dn = s[stage].op.axis
    (k,) = s[stage].op.reduce_axis
    in_dim = int(k.dom.extent.value) if isinstance(k.dom.extent, ir.IntImm) else 0
    if k_unroll > 1 and in_dim % k_unroll == 0:
        ko, ki = s[stage].split(k, k_unroll)
        s[stage].reorder(*lead, ko, ki, db, dn)
        s[stage].unroll(ki)
    else:
        s[stage].reorder(*lead, k, db, dn)
    s[stage].unroll(db)
    s[stage].vectorize(dn)


def schedule_batch_matmul(outs: Tensor | Sequence[Tensor], k_unroll: int = 4,
                          target: str | CPUTarget | None = None) -> Schedule:
    """numpy-style batched matmul (:func:`~vtakit.compiler.ops.nn_extra.batch_matmul`), as TVM's x86
    ``batch_matmul``: register tiles of rows x up to two vectors of output columns, the rhs read a
    row of columns at a time (contiguous), k outermost in the tile; the batch axes and the tiles run
    in parallel. Products with a 1-D operand (a vector) take :func:`schedule_reduce`."""
    outs = _outputs(outs)
    t = _target(target)
    anchor = first_tagged(outs, {"batch_matmul": None})
    if anchor is None or not anchor.op.attrs.get("matrix"):
        return schedule_reduce(outs, target=t)
    s = te.create_schedule([o.op for o in outs])
    last, prod, _ = _main_stage(s, outs, ("batch_matmul",))
    shape = static_shape(last)
    rows, cols = shape[-2], shape[-1]
    lanes = vector_lanes(prod.dtype, t)
    nb = _divisor(cols, 2 * lanes)
    mb = _divisor(rows, _tile_rows(nb, prod.dtype, t))
    *outer, m, n = s[last].op.axis
    mo, no, mi, ni = s[last].tile(m, n, mb, nb)
    fused = _parallel(s[last], [*outer, mo, no], _work(last, prod))
    s[last].vectorize(ni)
    s[prod].compute_at(s[last], fused)
    _register_tile(s, prod, k_unroll)
    return s


def _dense_plain(s: Schedule, last: Tensor, dense: Tensor, target: CPUTarget, n_block: int = 4) -> None:
    """Dense with ``[N, K]`` weights: the reduction is factored into vector-wide partial sums
    (rfactor), so each output reads contiguous vectors of its data row and weight row."""
    b, n = s[last].op.axis
    (k,) = s[dense].op.reduce_axis
    in_dim = k.dom.extent.value if isinstance(k.dom.extent, ir.IntImm) else 0
    lanes = vector_lanes(dense.dtype, target)
    features = static_shape(last)[1]
    if in_dim % lanes or in_dim < lanes:
        fused = _parallel(s[last], [b, n], _work(last, dense))
        s[dense].compute_at(s[last], fused)
        return
    nb = _divisor(features, n_block)
    no, ni = s[last].split(n, nb)
    fused = _parallel(s[last], [b, no], _work(last, dense))
    ko, ki = s[dense].split(k, lanes)
    partial = s.rfactor(dense, ki, factor_axis=2)
    s[dense].compute_at(s[last], fused)
    s[partial].compute_at(s[last], fused)
    pb, pn, pk = s[partial].op.axis
    (pko,) = s[partial].op.reduce_axis
    s[partial].reorder(pb, pko, pn, pk)
    s[partial].unroll(pn)
    s[partial].vectorize(pk)


# ---------------------------------------------------------------------------- convolution
def _conv_tile(s: Schedule, last: Tensor, conv: Tensor, oc_block: int, x_block: int) -> None:
    """Tile NCHW ``last`` by (oc_block channels, x_block pixels); ``conv`` per tile, vectorised over pixels."""
    n, o, y, x = s[last].op.axis
    oo, oi = s[last].split(o, oc_block)
    xo, xi = s[last].split(x, x_block)
    s[last].reorder(n, oo, y, xo, oi, xi)
    _parallel(s[last], [n, oo, y], _work(last, conv))
    s[last].vectorize(xi)
    s[conv].compute_at(s[last], xo)
    cn, co, cy, cx = s[conv].op.axis
    s[conv].reorder(cn, cy, *s[conv].op.reduce_axis, co, cx)
    s[conv].unroll(co)
    s[conv].vectorize(cx)


def schedule_conv2d_nchw(outs: Tensor | Sequence[Tensor], oc_block: int | None = None,
                         x_block: int | None = None, target: str | CPUTarget | None = None) -> Schedule:
    """conv2d_nchw (any groups, dilation): tiles of ``oc_block`` channels x ``x_block`` pixels in registers."""
    outs = _outputs(outs)
    t = _target(target)
    s = te.create_schedule([o.op for o in outs])
    last, conv, _ = _main_stage(s, outs, ("conv2d_nchw",))
    padded = _input_tagged(conv, "pad")
    if padded is not None:
        _materialize(s, padded, t)
    _, channels, _, width = static_shape(last)
    lanes = vector_lanes(conv.dtype, t)
    _conv_tile(s, last, conv, oc_block or _divisor(channels, 8), x_block or _divisor(width, lanes))
    return s


def schedule_depthwise_conv2d_nchw(outs: Tensor | Sequence[Tensor], x_block: int | None = None,
                                   target: str | CPUTarget | None = None) -> Schedule:
    """depthwise_conv2d_nchw: tiles of 4 channels x ``x_block`` pixels (a vector) in registers."""
    outs = _outputs(outs)
    t = _target(target)
    s = te.create_schedule([o.op for o in outs])
    last, conv, _ = _main_stage(s, outs, ("depthwise_conv2d_nchw",))
    padded = _input_tagged(conv, "pad")
    if padded is not None:
        _materialize(s, padded, t)
    _, channels, _, width = static_shape(last)
    _conv_tile(s, last, conv, _divisor(channels, 4), x_block or _divisor(width, vector_lanes(conv.dtype, t)))
    return s


def schedule_conv2d_nchw_packed(outs: Tensor | Sequence[Tensor], x_block: int | None = None,
                                target: str | CPUTarget | None = None) -> Schedule:
    """conv2d_nchw_packed: a tile of ``x_block`` pixels (default: as many as :func:`gemm_tile` allows
    for ``target``, dividing the output width) x one channel block (vectorised) in registers.

    The blocked result of a tile is computed into a local buffer right before the output stage
    writes it to NCHW, so the layout change costs no extra pass over memory.
    """
    outs = _outputs(outs)
    target = _target(target)
    s = te.create_schedule([t.op for t in outs])
    last = outs[0]
    unpack, between = _find(last, ("conv2d_unpack",))
    for t in {id(t): t for t in between}.values():
        s[t].compute_inline()
    if unpack is not last:
        s[unpack].compute_inline()
    blocked = _input_tagged(unpack, "conv2d_NCHWc")
    padded = _input_tagged(blocked, "pad")
    if padded is not None:
        _materialize(s, padded, target)
    block = static_shape(blocked)[-1]
    n, o, y, x = s[last].op.axis
    oo, oi = s[last].split(o, block)
    xo, xi = s[last].split(x, x_block or _divisor(static_shape(last)[3], _tile_rows(block, blocked.dtype, target)))
    s[last].reorder(n, oo, y, xo, oi, xi)
    _parallel(s[last], [n, oo, y], _work(last, blocked))
    s[last].unroll(oi)  # constant indices into the tile: it stays in registers, transposed by shuffles
    s[last].vectorize(xi)
    s[blocked].compute_at(s[last], xo)
    bn, bb, by, bx, bc = s[blocked].op.axis
    s[blocked].reorder(bn, bb, by, *s[blocked].op.reduce_axis, bx, bc)
    s[blocked].unroll(bx)
    s[blocked].vectorize(bc)
    return s


# ---------------------------------------------------------------------------- pooling and softmax
def schedule_pool(outs: Tensor | Sequence[Tensor], x_block: int | None = None,
                  target: str | CPUTarget | None = None) -> Schedule:
    """pool2d (max, avg) and global_avg_pool2d: per-tile window reductions vectorised over pixels."""
    outs = _outputs(outs)
    t = _target(target)
    s = te.create_schedule([o.op for o in outs])
    last, pool, _ = _main_stage(s, outs, ("pool2d",))
    padded = _input_tagged(pool, "pad")
    if padded is not None:
        _materialize(s, padded, t)
    n, c, y, x = s[last].op.axis
    width = static_shape(last)[3]
    xo, xi = s[last].split(x, x_block or _divisor(width, vector_lanes(last.dtype, t)))
    _parallel(s[last], [n, c, y], _work(last, pool))
    if width > 1:
        s[last].vectorize(xi)
    s[pool].compute_at(s[last], xo)
    pn, pc, py, px = s[pool].op.axis
    s[pool].reorder(pn, pc, py, *s[pool].op.reduce_axis, px)
    if width > 1:
        s[pool].vectorize(px)
    return s


def schedule_softmax(outs: Tensor | Sequence[Tensor], target: str | CPUTarget | None = None) -> Schedule:
    """softmax: the max, exp and sum stages computed per row next to the output, rows in parallel."""
    outs = _outputs(outs)
    out = outs[0]
    if out.op.tag != "softmax_output":
        raise ScheduleError(f"schedule_softmax: {out.name!r} is not a softmax output (tag {out.op.tag!r})")
    s = te.create_schedule([t.op for t in outs])
    ex, total = out.op.input_tensors
    mx = next(p for p in _producers(ex) if p.op.tag == "softmax")
    axis = out.op.attrs["axis"]
    axes = list(s[out].op.axis)
    if axis == 0:
        return s
    outer = _parallel(s[out], axes[:axis], _size(out))
    for t in (mx, ex, total):
        s[t].compute_at(s[out], outer)
    lanes = vector_lanes(out.dtype, target)
    if axis == len(axes) - 1 and static_shape(out)[-1] % lanes == 0:
        for stage in (s[out], s[ex]):
            stage.vectorize(stage.split(stage.op.axis[-1], lanes)[1])
    return s


# ---------------------------------------------------------------------------- other reductions
def schedule_reduce(outs: Tensor | Sequence[Tensor], target: str | CPUTarget | None = None) -> Schedule:
    """Reductions without a schedule of their own (sums and extrema over axes, batched matmul,
    normalisations that reduce several times): every reduction stage is computed once, whole, its
    output axes fused and parallel; element-wise stages are inlined; outputs are element-wise."""
    outs = _outputs(outs)
    s = te.create_schedule([t.op for t in outs])
    for p in _inner_stages(outs):
        if _is_injective(p):
            s[p].compute_inline()
        else:
            _whole_reduction(s, p)
    for t in outs:
        if _is_injective(t):
            _schedule_elementwise(s, t, _target(target))
        else:
            _whole_reduction(s, t)
    return s


def _whole_reduction(s: Schedule, t: Tensor) -> None:
    axes = list(s[t].op.axis)
    if axes:
        _parallel(s[t], axes, _work(t, t))


# ---------------------------------------------------------------------------- dispatch
_BY_TAG = {
    "dense": schedule_dense, "dense_packed": schedule_dense, "conv2d_nchw": schedule_conv2d_nchw,
    "conv2d_unpack": schedule_conv2d_nchw_packed, "depthwise_conv2d_nchw": schedule_depthwise_conv2d_nchw,
    "pool2d": schedule_pool, "softmax_output": schedule_softmax, "reduce": schedule_reduce,
    "batch_matmul": schedule_batch_matmul,
}


def schedule(outs: Tensor | Sequence[Tensor], target: str | CPUTarget | None = None) -> Schedule:
    """The default schedule for an operator's output (what a graph compiler calls per fused group):
    the schedule of the first tagged operator found walking back through element-wise stages,
    else the element-wise schedule. Blocking follows ``target`` (default: the host); build with
    the same target."""
    outs = _outputs(outs)
    anchor = first_tagged(outs, _BY_TAG)
    if anchor is not None:
        return _BY_TAG[anchor.op.tag](outs, target=target)
    return schedule_injective(outs, target)
