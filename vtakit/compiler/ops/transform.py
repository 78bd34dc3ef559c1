"""Injective operators as tensor expressions: reshape, transpose, concatenation, slicing, padding,
gathering, broadcasting, tiling and selection (TVM TOPI's ``transform.py``).

Each output element reads one input element at an index computed from the output index, so these
stages inline into their consumers; every shape argument is a static Python tuple (vtakit graphs
have static shapes). The graph compiler's tensor operators (``Reshape``, ``Slice``, ``Pad``, ...)
lower to these.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from vtakit.compiler import ir
from vtakit.compiler import te
from vtakit.compiler.ops.elemwise import broadcast_shape
from vtakit.compiler.te.tensor import Tensor
from vtakit.errors import CompileError
from vtakit.compiler.ops.common import static_shape

__all__ = ["reshape", "transpose", "concatenate", "strided_slice", "pad", "take", "broadcast_to",
           "tile", "where", "PAD_MODES"]

PAD_MODES = ("constant", "edge", "reflect")


def _broadcast_read(t: Tensor, out_shape: Sequence[int], idx: Sequence) -> ir.PrimExpr:
    shape = static_shape(t)
    lead = len(out_shape) - len(shape)
    return t[tuple(0 if s == 1 else i for s, i in zip(shape, idx[lead:]))]


def reshape(x: Tensor, shape: Sequence[int]) -> Tensor:
    """``x`` with the same elements in row-major order and the new ``shape``."""
    src, dst = static_shape(x), tuple(int(s) for s in shape)
    if int(np.prod(src, dtype=np.int64)) != int(np.prod(dst, dtype=np.int64)):
        raise CompileError(f"reshape: cannot view {src} ({int(np.prod(src))} elements) as {dst}")
    if src == dst:
        return te.compute(dst, lambda *i: x(*i), name="reshape", tag="injective")

    def read(*idx):
        flat = ir.const(0, "int32")
        for i, n in zip(idx, dst):
            flat = flat * n + i
        out = []
        for n in reversed(src):
            out.append(te.floormod(flat, n) if n != 1 else ir.const(0, "int32"))
            flat = te.floordiv(flat, n)
        return x(*reversed(out))
    return te.compute(dst, read, name="reshape", tag="injective")


def transpose(x: Tensor, perm: Sequence[int]) -> Tensor:
    """Axis ``k`` of the output is axis ``perm[k]`` of ``x``."""
    shape = static_shape(x)
    if sorted(perm) != list(range(len(shape))):
        raise CompileError(f"transpose: perm {list(perm)} is not a permutation of the {len(shape)} axes of {shape}")

    def read(*idx):
        src = [None] * len(shape)
        for k, p in enumerate(perm):
            src[p] = idx[k]
        return x(*src)
    return te.compute(tuple(shape[p] for p in perm), read, name="transpose", tag="injective")


def concatenate(xs: Sequence[Tensor], axis: int) -> Tensor:
    """The tensors joined along ``axis`` (other dims equal)."""
    shapes = [static_shape(t) for t in xs]
    if not shapes:
        raise CompileError("concatenate needs at least one tensor")
    rank = len(shapes[0])
    if not 0 <= axis < rank:
        raise CompileError(f"concatenate: axis {axis} is out of range for rank {rank}")
    for s in shapes:
        if len(s) != rank or any(a != b for k, (a, b) in enumerate(zip(s, shapes[0])) if k != axis):
            raise CompileError(f"concatenate: shapes {shapes} differ outside axis {axis}")
    parts = [(t, s[axis]) for t, s in zip(xs, shapes) if s[axis] > 0] or [(xs[0], 0)]
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)

    def read(*idx):
        offsets = np.cumsum([0] + [n for _, n in parts])
        expr = None
        for (t, _), start in reversed(list(zip(parts, offsets[:-1]))):
            at = list(idx)
            at[axis] = idx[axis] - int(start)
            value = t(*at)
            expr = value if expr is None else te.if_then_else(idx[axis] < int(start) + _extent(t, axis), value, expr)
        return expr
    return te.compute(tuple(out_shape), read, name="concatenate", tag="injective")


def _extent(t: Tensor, axis: int) -> int:
    return static_shape(t)[axis]


def strided_slice(x: Tensor, begin: Sequence[int], step: Sequence[int], out_shape: Sequence[int]) -> Tensor:
    """``out[i] = x[begin + i * step]`` per axis (begin and step already resolved, steps non-zero)."""
    shape = static_shape(x)
    if not len(begin) == len(step) == len(out_shape) == len(shape):
        raise CompileError(f"strided_slice: begin {list(begin)}, step {list(step)} and shape {list(out_shape)} must "
                           f"each give one entry per axis of {shape}")
    for b, s, n, d in zip(begin, step, out_shape, shape):
        if s == 0 or (n > 0 and not (0 <= b < d and 0 <= b + (n - 1) * s < d)):
            raise CompileError(f"strided_slice: begin {list(begin)}, step {list(step)}, {list(out_shape)} elements "
                               f"reach outside {shape}")

    def read(*idx):
        return x(*(i if (b, s) == (0, 1) else b + i * s for i, b, s in zip(idx, begin, step)))
    return te.compute(tuple(int(n) for n in out_shape), read, name="strided_slice", tag="injective")


def _pad_index(i: ir.PrimExpr, before: int, n: int, mode: str) -> ir.PrimExpr:
    """The input index that output index ``i`` reads under an edge or reflect pad."""
    j = i - before
    if mode == "edge":
        return te.max(te.min(j, n - 1), 0) if n > 1 else ir.const(0, "int32")
    if n == 1:
        return ir.const(0, "int32")
    j = ir.Select(j < 0, 0 - j, j)
    return ir.Select(j >= n, 2 * (n - 1) - j, j)


def pad(x: Tensor, before: Sequence[int], after: Sequence[int], mode: str = "constant",
        value: int | float = 0) -> Tensor:
    """``x`` padded by ``before``/``after`` elements per axis: with ``value`` (``constant``), by repeating the
    border element (``edge``) or by mirroring without repeating it (``reflect``)."""
    shape = static_shape(x)
    if mode not in PAD_MODES:
        raise CompileError(f"pad: mode {mode!r} is not one of {PAD_MODES}")
    if len(before) != len(shape) or len(after) != len(shape) or min([*before, *after], default=0) < 0:
        raise CompileError(f"pad: before {list(before)} and after {list(after)} must be one non-negative count per "
                           f"axis of {shape}")
    if mode != "constant" and any(n == 0 and (b or a) for n, b, a in zip(shape, before, after)):
        raise CompileError(f"pad: {mode} padding of the empty axis of {shape}")
    if mode == "reflect" and any(max(b, a) >= n > 1 for n, b, a in zip(shape, before, after)):
        raise CompileError(f"pad: reflect padding {list(before)}/{list(after)} must be smaller than the axes of {shape}")
    out_shape = tuple(n + b + a for n, b, a in zip(shape, before, after))
    fill = ir.const(value, x.dtype)

    def read(*idx):
        if mode != "constant":
            return x(*(i if b == a == 0 else _pad_index(i, b, n, mode)
                       for i, b, n, a in zip(idx, before, shape, after)))
        inside = [c for i, b, n, a in zip(idx, before, shape, after) if b or a for c in (i >= b, i < b + n)]
        at = [i - b if b else i for i, b in zip(idx, before)]
        return te.if_then_else(te.all(*inside), x(*at), fill) if inside else x(*at)
    return te.compute(out_shape, read, name="pad", tag="injective")


def take(data: Tensor, indices: Tensor, axis: int) -> Tensor:
    """``data`` indexed along ``axis`` by the integer tensor ``indices`` (negative indices count from the end;
    numpy's ``take``). Out-of-range indices are clamped."""
    shape, ishape = static_shape(data), static_shape(indices)
    if not 0 <= axis < len(shape):
        raise CompileError(f"take: axis {axis} is out of range for rank {len(shape)}")
    n = shape[axis]
    out_shape = shape[:axis] + ishape + shape[axis + 1:]

    def read(*idx):
        k = indices(*idx[axis:axis + len(ishape)]).astype("int32")
        k = ir.Select(k < 0, k + n, k)
        k = te.max(te.min(k, n - 1), 0)
        return data(*idx[:axis], k, *idx[axis + len(ishape):])
    return te.compute(out_shape, read, name="take", tag="injective")


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """``x`` broadcast (numpy rules) to ``shape``."""
    out_shape = tuple(int(s) for s in shape)
    if broadcast_shape(static_shape(x), out_shape) != out_shape:
        raise CompileError(f"broadcast_to: {static_shape(x)} does not broadcast to {out_shape}")
    return te.compute(out_shape, lambda *i: _broadcast_read(x, out_shape, i), name="broadcast_to", tag="broadcast")


def tile(x: Tensor, reps: Sequence[int]) -> Tensor:
    """``x`` repeated ``reps[k]`` times along axis ``k``."""
    shape = static_shape(x)
    if len(reps) != len(shape) or min(reps, default=0) < 0:
        raise CompileError(f"tile: reps {list(reps)} must be one non-negative count per axis of {shape}")
    out_shape = tuple(n * r for n, r in zip(shape, reps))
    return te.compute(out_shape, lambda *i: x(*(j if r == 1 else te.floormod(j, n) for j, n, r in zip(i, shape, reps))),
                      name="tile", tag="injective")


def where(cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``a`` where ``cond`` holds, else ``b``, with numpy broadcasting of all three."""
    shape = broadcast_shape(broadcast_shape(static_shape(cond), static_shape(a)), static_shape(b))

    def read(*idx):
        c = _broadcast_read(cond, shape, idx)
        if c.dtype != "bool":
            c = c != ir.const(0, c.dtype)
        return ir.Select(c, _broadcast_read(a, shape, idx), _broadcast_read(b, shape, idx))
    return te.compute(shape, read, name="where", tag="broadcast")
