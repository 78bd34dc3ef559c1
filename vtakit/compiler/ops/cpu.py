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
from typing import Iterable, Sequence

from vtakit.compiler import ir
from vtakit.compiler import te
from vtakit.compiler.backend.llvm_runtime import host_target
from vtakit.compiler.te.schedule import Schedule
from vtakit.compiler.te.tensor import ComputeOp, Tensor
from vtakit.errors import ScheduleError

__all__ = ["vector_lanes", "schedule", "schedule_injective", "schedule_dense", "schedule_conv2d_nchw",
           "schedule_conv2d_nchw_packed", "schedule_depthwise_conv2d_nchw", "schedule_pool", "schedule_softmax"]

# Loops with less work than this (output elements x reduction length) run on one thread:
# a parallel launch costs a few microseconds.
PARALLEL_MIN_WORK = 1 << 14


def vector_lanes(dtype: str) -> int:
    """Elements of ``dtype`` in one vector register of the host (AVX-512, AVX or 128-bit)."""
    features = host_target().features
    width = 64 if "+avx512f" in features else 32 if "+avx" in features else 16
    bits = 8 if dtype == "bool" else int(ir.element_of(dtype).lstrip("uintfloat"))
    return max(1, width * 8 // bits)


def _outputs(outs: Tensor | Sequence[Tensor]) -> list[Tensor]:
    outs = [outs] if isinstance(outs, Tensor) else list(outs)
    if not outs or not all(isinstance(t, Tensor) for t in outs):
        raise ScheduleError(f"a schedule needs the output tensor(s), got {outs!r}")
    return outs


def _shape(t: Tensor) -> tuple[int, ...]:
    return tuple(int(s.value) if isinstance(s, ir.IntImm) else int(s) for s in t.shape)


def _is_injective(t: Tensor) -> bool:
    return isinstance(t.op, ComputeOp) and not isinstance(t.op.body, ir.Reduce)


def _divisor(extent: int, limit: int) -> int:
    """The largest divisor of ``extent`` that is at most ``limit``."""
    return max(d for d in range(1, min(extent, limit) + 1) if extent % d == 0)


def _producers(t: Tensor) -> Iterable[Tensor]:
    return t.op.input_tensors if isinstance(t.op, ComputeOp) else []


def _find(last: Tensor, tags: tuple[str, ...]) -> tuple[Tensor, list[Tensor]]:
    """The stage tagged ``tags`` that ``last`` is computed from, and the element-wise stages to inline:
    those between it and ``last``, and side inputs of the epilogue (a reshaped bias, ...)."""
    def reaches(t: Tensor) -> bool:
        return t.op.tag in tags or any(reaches(p) for p in _compute_producers(t))

    inline: list[Tensor] = []
    t = last
    while t.op.tag not in tags:
        on_path = [p for p in _compute_producers(t) if reaches(p)]
        if len(on_path) != 1 or not _is_injective(t):
            raise ScheduleError(f"schedule for {tags[0]}: output {last.name!r} is not a chain of element-wise "
                                f"stages ending in a {'/'.join(tags)} stage")
        if t is not last:
            inline.append(t)
        for side in _compute_producers(t):
            if side is not on_path[0]:
                inline.extend(_side_stages(side, last))
        t = on_path[0]
    return t, inline


def _compute_producers(t: Tensor) -> list[Tensor]:
    return [p for p in _producers(t) if isinstance(p.op, ComputeOp)]


def _side_stages(t: Tensor, last: Tensor) -> list[Tensor]:
    if not _is_injective(t):
        raise ScheduleError(f"output {last.name!r} reads the reduction {t.name!r} besides its main operator; "
                            "schedule it separately")
    return [t] + [u for p in _compute_producers(t) for u in _side_stages(p, last)]


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


def _materialize(s: Schedule, t: Tensor) -> None:
    """A padding or packing stage computed once, before its consumer, in parallel (and vectorised
    for weight packing; padding's guarded loads stay scalar)."""
    stage = s[t]
    axes = list(stage.op.axis)
    inner = axes[-1]
    extent = _shape(t)[-1]
    lanes = vector_lanes(t.dtype)
    if extent % lanes == 0 and t.op.tag == "weight_pack":
        io, ii = stage.split(inner, lanes)
        stage.vectorize(ii)
        axes = axes[:-1] + [io]
    _parallel(stage, axes[:max(1, len(axes) - 2)], _size(t))


def _size(t: Tensor) -> int:
    return math.prod(_shape(t))


def _work(last: Tensor, reduction: Tensor) -> int:
    """Multiply-adds (or comparisons) to compute ``last`` from ``reduction``'s loops."""
    extents = [iv.dom.extent.value for iv in reduction.op.reduce_axis if isinstance(iv.dom.extent, ir.IntImm)]
    return _size(last) * math.prod(extents)


def _input_tagged(t: Tensor, tag: str) -> Tensor | None:
    return next((p for p in _producers(t) if isinstance(p.op, ComputeOp) and p.op.tag == tag), None)


# ---------------------------------------------------------------------------- element-wise
def schedule_injective(outs: Tensor | Sequence[Tensor]) -> Schedule:
    """Element-wise and broadcast ops: producers inlined, inner axis vectorised, outer axes parallel."""
    outs = _outputs(outs)
    s = te.create_schedule([t.op for t in outs])
    out_ops = {id(t.op) for t in outs}
    seen: set[int] = set()
    stack = list(outs)
    while stack:
        t = stack.pop()
        for p in _producers(t):
            if id(p.op) in seen or not isinstance(p.op, ComputeOp):
                continue
            seen.add(id(p.op))
            if id(p.op) not in out_ops:
                if not _is_injective(p):
                    raise ScheduleError(f"schedule_injective: stage {p.name!r} is a reduction; "
                                        "use the operator's own schedule")
                s[p].compute_inline()
            stack.append(p)
    for t in outs:
        _schedule_elementwise(s, t)
    return s


def _schedule_elementwise(s: Schedule, t: Tensor) -> None:
    """Outer axes fused and parallel; the innermost axis stays a plain loop (so indices are affine,
    no div/mod per element), explicitly vectorised when whole vectors tile it, else left to LLVM."""
    stage = s[t]
    axes = list(stage.op.axis)
    if not axes:
        return
    inner = _shape(t)[-1]
    lanes = vector_lanes(t.dtype)
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
                   k_unroll: int = 4) -> Schedule:
    """Dense / matmul. Packed weights (``pack_block`` or ``dense_packed``, the fast path): a
    ``batch_block`` x ``pack_block`` register tile, vectorised over the output features. Plain
    ``[N, K]`` weights: vector partial sums over ``K`` (rfactor), blocks of outputs in parallel."""
    outs = _outputs(outs)
    s = te.create_schedule([t.op for t in outs])
    last, dense, tag = _main_stage(s, outs, ("dense", "dense_packed"))
    batch = _shape(last)[0]
    b, n = s[last].op.axis
    packed = _input_tagged(dense, "weight_pack")
    if packed is not None:
        _materialize(s, packed)
    if tag != "dense_packed":
        _dense_plain(s, last, dense)
        return s
    block = _shape(next(p for p in _producers(dense) if len(p.shape) == 3))[-1]
    mb = batch_block or _divisor(batch, 8)
    bo, no, bi, ni = s[last].tile(b, n, mb, block)
    s[last].reorder(no, bo, bi, ni)
    fused = _parallel(s[last], [no, bo], _work(last, dense))
    s[last].vectorize(ni)
    s[dense].compute_at(s[last], fused)
    db, dn = s[dense].op.axis
    (k,) = s[dense].op.reduce_axis
    in_dim = int(k.dom.extent.value) if isinstance(k.dom.extent, ir.IntImm) else 0
    if k_unroll > 1 and in_dim % k_unroll == 0:
        ko, ki = s[dense].split(k, k_unroll)
        s[dense].reorder(ko, ki, db, dn)
        s[dense].unroll(ki)
    else:
        s[dense].reorder(k, db, dn)
    s[dense].unroll(db)
    s[dense].vectorize(dn)
    return s


def _dense_plain(s: Schedule, last: Tensor, dense: Tensor, n_block: int = 4) -> None:
    """Dense with ``[N, K]`` weights: the reduction is factored into vector-wide partial sums
    (rfactor), so each output reads contiguous vectors of its data row and weight row."""
    b, n = s[last].op.axis
    (k,) = s[dense].op.reduce_axis
    in_dim = k.dom.extent.value if isinstance(k.dom.extent, ir.IntImm) else 0
    lanes = vector_lanes(dense.dtype)
    features = _shape(last)[1]
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
                         x_block: int | None = None) -> Schedule:
    """conv2d_nchw (any groups, dilation): tiles of ``oc_block`` channels x ``x_block`` pixels in registers."""
    outs = _outputs(outs)
    s = te.create_schedule([t.op for t in outs])
    last, conv, _ = _main_stage(s, outs, ("conv2d_nchw",))
    padded = _input_tagged(conv, "pad")
    if padded is not None:
        _materialize(s, padded)
    _, channels, _, width = _shape(last)
    lanes = vector_lanes(conv.dtype)
    _conv_tile(s, last, conv, oc_block or _divisor(channels, 8), x_block or _divisor(width, lanes))
    return s


def schedule_depthwise_conv2d_nchw(outs: Tensor | Sequence[Tensor], x_block: int | None = None) -> Schedule:
    outs = _outputs(outs)
    s = te.create_schedule([t.op for t in outs])
    last, conv, _ = _main_stage(s, outs, ("depthwise_conv2d_nchw",))
    padded = _input_tagged(conv, "pad")
    if padded is not None:
        _materialize(s, padded)
    _, channels, _, width = _shape(last)
    _conv_tile(s, last, conv, _divisor(channels, 4), x_block or _divisor(width, vector_lanes(conv.dtype)))
    return s


def schedule_conv2d_nchw_packed(outs: Tensor | Sequence[Tensor], x_block: int | None = None) -> Schedule:
    """conv2d_nchw_packed: a tile of ``x_block`` pixels x one channel block (vectorised) in registers.

    The blocked result of a tile is computed into a local buffer right before the output stage
    writes it to NCHW, so the layout change costs no extra pass over memory.
    """
    outs = _outputs(outs)
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
        _materialize(s, padded)
    block = _shape(blocked)[-1]
    n, o, y, x = s[last].op.axis
    oo, oi = s[last].split(o, block)
    xo, xi = s[last].split(x, x_block or _divisor(_shape(last)[3], 8))
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
def schedule_pool(outs: Tensor | Sequence[Tensor], x_block: int | None = None) -> Schedule:
    """pool2d (max, avg) and global_avg_pool2d: per-tile window reductions vectorised over pixels."""
    outs = _outputs(outs)
    s = te.create_schedule([t.op for t in outs])
    last, pool, _ = _main_stage(s, outs, ("pool2d",))
    padded = _input_tagged(pool, "pad")
    if padded is not None:
        _materialize(s, padded)
    n, c, y, x = s[last].op.axis
    width = _shape(last)[3]
    xo, xi = s[last].split(x, x_block or _divisor(width, vector_lanes(last.dtype)))
    _parallel(s[last], [n, c, y], _work(last, pool))
    if width > 1:
        s[last].vectorize(xi)
    s[pool].compute_at(s[last], xo)
    pn, pc, py, px = s[pool].op.axis
    s[pool].reorder(pn, pc, py, *s[pool].op.reduce_axis, px)
    if width > 1:
        s[pool].vectorize(px)
    return s


def schedule_softmax(outs: Tensor | Sequence[Tensor]) -> Schedule:
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
    lanes = vector_lanes(out.dtype)
    if axis == len(axes) - 1 and _shape(out)[-1] % lanes == 0:
        for stage in (s[out], s[ex]):
            stage.vectorize(stage.split(stage.op.axis[-1], lanes)[1])
    return s


# ---------------------------------------------------------------------------- dispatch
_BY_TAG = {
    "dense": schedule_dense, "dense_packed": schedule_dense, "conv2d_nchw": schedule_conv2d_nchw,
    "conv2d_unpack": schedule_conv2d_nchw_packed, "depthwise_conv2d_nchw": schedule_depthwise_conv2d_nchw,
    "pool2d": schedule_pool, "softmax_output": schedule_softmax,
}


def schedule(outs: Tensor | Sequence[Tensor]) -> Schedule:
    """The default schedule for an operator's output (what a graph compiler calls per fused group):
    the schedule of the first tagged operator found walking back through element-wise stages,
    else the element-wise schedule."""
    outs = _outputs(outs)
    stack, seen = [outs[0]], set()
    while stack:
        t = stack.pop()
        if id(t.op) in seen or not isinstance(t.op, ComputeOp):
            continue
        seen.add(id(t.op))
        if t.op.tag in _BY_TAG:
            return _BY_TAG[t.op.tag](outs)
        if _is_injective(t):
            stack.extend(_producers(t))
    return schedule_injective(outs)
