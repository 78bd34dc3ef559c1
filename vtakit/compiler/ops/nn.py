"""Neural-network operators as tensor expressions (what TVM's TOPI ``nn`` package provides).

Each function builds the compute definition only; :mod:`vtakit.compiler.ops.cpu` has the default
CPU schedules. Layouts are NCHW for activations and OIHW for convolution weights; dense weights
are ``[out_features, in_features]`` as in TOPI. Integer inputs accumulate in ``out_dtype``.
Intermediate stages carry tags (``pad``, ``dense``, ``conv2d_nchw``, ...) so schedules find them.
"""

from __future__ import annotations

from typing import Sequence

from vtakit.compiler import ir
from vtakit.compiler import te
from vtakit.compiler.te.tensor import Tensor
from vtakit.errors import CompileError
from vtakit.compiler.ops.common import static_shape

__all__ = ["pad", "dense", "dense_packed", "matmul", "conv2d_nchw", "conv2d_nchw_packed", "depthwise_conv2d_nchw",
           "pool2d", "global_avg_pool2d", "softmax", "conv2d_output_shape", "padding_of"]


def _ints(value: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) != n or not all(isinstance(v, int) for v in values):
        raise CompileError(f"{what} must be an int or {n} ints, got {value!r}")
    return values


def padding_of(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` from an int, ``(pad_h, pad_w)`` or the four sides."""
    if isinstance(padding, int):
        sides = (padding,) * 4
    elif len(padding) == 2:
        sides = (padding[0], padding[1], padding[0], padding[1])
    elif len(padding) == 4:
        sides = tuple(padding)
    else:
        raise CompileError(f"padding must be an int, (pad_h, pad_w) or (top, left, bottom, right), got {padding!r}")
    if any(not isinstance(p, int) or p < 0 for p in sides):
        raise CompileError(f"padding must be non-negative integers, got {padding!r}")
    return sides  # type: ignore[return-value]


def _check_rank(t: Tensor, rank: int, what: str) -> tuple[int, ...]:
    shape = static_shape(t)
    if len(shape) != rank:
        raise CompileError(f"{what} {t.name!r} must have rank {rank}, got shape {shape}")
    return shape


def pad(data: Tensor, pad_before: Sequence[int], pad_after: Sequence[int] | None = None,
        pad_value: float | int = 0, name: str = "pad") -> Tensor:
    """``data`` surrounded by ``pad_value``; reads of the border never touch ``data``."""
    shape = static_shape(data)
    pad_after = pad_before if pad_after is None else pad_after
    if len(pad_before) != len(shape) or len(pad_after) != len(shape):
        raise CompileError(f"pad of {data.name!r} (rank {len(shape)}) needs {len(shape)} widths per side, "
                           f"got {list(pad_before)} and {list(pad_after)}")
    if not any(pad_before) and not any(pad_after):
        return data
    out_shape = tuple(s + b + a for s, b, a in zip(shape, pad_before, pad_after))
    value = ir.const(pad_value, data.dtype) if not isinstance(pad_value, ir.PrimExpr) else pad_value

    def fcompute(*idx):
        conds = []
        src = []
        for i, s, b, a in zip(idx, shape, pad_before, pad_after):
            if b:
                conds.append(i >= b)
            if a:
                conds.append(i < s + b)
            src.append(i - b if b else i)
        return te.if_then_else(te.all(*conds), data[tuple(src)], value) if conds else data[tuple(src)]

    return te.compute(out_shape, fcompute, name=name, tag="pad")


def _acc(x: ir.PrimExpr, out_dtype: str) -> ir.PrimExpr:
    return x.astype(out_dtype) if x.dtype != out_dtype else x


def dense(data: Tensor, weight: Tensor, bias: Tensor | None = None, out_dtype: str | None = None,
          pack_block: int | None = None) -> Tensor:
    """``out[b, n] = sum_k data[b, k] * weight[n, k] (+ bias[n])``.

    With ``pack_block`` the weight is first copied to ``[N // block, K, block]`` (stage tag
    ``weight_pack``) so that a block of output features can be computed with vector loads.
    """
    batch, in_dim = _check_rank(data, 2, "dense data")
    out_dim, w_in = _check_rank(weight, 2, "dense weight")
    if w_in != in_dim:
        raise CompileError(f"dense: weight {weight.name!r} has {w_in} input features, data {data.name!r} has {in_dim}")
    if pack_block is None:
        out_dtype = out_dtype or data.dtype
        k = te.reduce_axis((0, in_dim), name="k")
        out = te.compute((batch, out_dim), lambda b, n: te.sum(
            _acc(data[b, k], out_dtype) * _acc(weight[n, k], out_dtype), axis=k), name="dense", tag="dense")
        return _add_bias(out, bias, 1)
    _check_block(out_dim, pack_block, "dense")
    packed = te.compute((out_dim // pack_block, in_dim, pack_block), lambda z, k, x: weight[z * pack_block + x, k],
                        name="weight_pack", tag="weight_pack")
    return dense_packed(data, packed, bias, out_dtype)


def matmul(a: Tensor, b: Tensor, out_dtype: str | None = None, pack_block: int | None = None) -> Tensor:
    """``a @ b`` for ``a [M, K]`` and ``b [K, N]``; ``pack_block`` repacks ``b`` as in :func:`dense`."""
    _, k_a = _check_rank(a, 2, "matmul lhs")
    k_b, n = _check_rank(b, 2, "matmul rhs")
    if k_a != k_b:
        raise CompileError(f"matmul: {a.name!r} has {k_a} columns but {b.name!r} has {k_b} rows")
    if pack_block is None:
        out_dtype = out_dtype or a.dtype
        k = te.reduce_axis((0, k_a), name="k")
        return te.compute((static_shape(a)[0], n), lambda i, j: te.sum(_acc(a[i, k], out_dtype) * _acc(b[k, j], out_dtype),
                                                                 axis=k), name="matmul", tag="dense")
    _check_block(n, pack_block, "matmul")
    packed = te.compute((n // pack_block, k_a, pack_block), lambda z, k, x: b[k, z * pack_block + x],
                        name="weight_pack", tag="weight_pack")
    return dense_packed(a, packed, None, out_dtype)


def _check_block(extent: int, block: int, what: str) -> None:
    if not isinstance(block, int) or block < 1 or extent % block:
        raise CompileError(f"{what}: pack_block {block!r} must be a positive divisor of {extent}")


def dense_packed(data: Tensor, packed_weight: Tensor, bias: Tensor | None = None,
                 out_dtype: str | None = None) -> Tensor:
    """Dense with the weight pre-packed as ``[out // block, in, block]``.

    ``data`` is ``[batch, in]``, or ``[..., rows, in]`` (a Linear layer over N-D activations: the output
    is ``[..., rows, out]``). Pack constant weights with :func:`~vtakit.compiler.ops.layout.pack_dense_weight`.
    """
    shape = static_shape(data)
    if len(shape) < 2:
        raise CompileError(f"dense data {data.name!r} must have rank >= 2, got shape {shape}")
    in_dim = shape[-1]
    blocks, w_in, block = _check_rank(packed_weight, 3, "packed dense weight")
    if w_in != in_dim:
        raise CompileError(f"dense_packed: weight {packed_weight.name!r} has {w_in} input features, "
                           f"data {data.name!r} has {in_dim}")
    out_dtype = out_dtype or data.dtype
    k = te.reduce_axis((0, in_dim), name="k")
    out = te.compute((*shape[:-1], blocks * block), lambda *i: te.sum(
        _acc(data[(*i[:-1], k)], out_dtype) * _acc(packed_weight[i[-1] // block, k, i[-1] % block], out_dtype),
        axis=k), name="dense", tag="dense_packed", attrs={"block": block})
    return _add_bias(out, bias, len(shape) - 1)


def _add_bias(out: Tensor, bias: Tensor | None, channel_axis: int) -> Tensor:
    if bias is None:
        return out
    channels = static_shape(out)[channel_axis]
    if static_shape(bias) != (channels,):
        raise CompileError(f"bias {bias.name!r} must have shape ({channels},), got {static_shape(bias)}")
    return te.compute(static_shape(out), lambda *i: out[i] + _acc(bias[i[channel_axis]], out.dtype), name="bias_add",
                      tag="bias_add")


def conv2d_output_shape(in_hw: tuple[int, int], kernel_hw: tuple[int, int], strides: int | Sequence[int],
                        padding: int | Sequence[int], dilation: int | Sequence[int]) -> tuple[int, int]:
    """(OH, OW) of a convolution or pooling window sliding over ``in_hw``."""
    top, left, bottom, right = padding_of(padding)
    sh, sw = _ints(strides, 2, "strides")
    dh, dw = _ints(dilation, 2, "dilation")
    if min(sh, sw, dh, dw) < 1:
        raise CompileError(f"strides and dilation must be positive, got strides={strides!r} dilation={dilation!r}")
    oh = (in_hw[0] + top + bottom - (kernel_hw[0] - 1) * dh - 1) // sh + 1
    ow = (in_hw[1] + left + right - (kernel_hw[1] - 1) * dw - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise CompileError(f"a {kernel_hw} kernel (dilation {dilation}) does not fit the padded {in_hw} input")
    return oh, ow


def conv2d_nchw(data: Tensor, kernel: Tensor, strides: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                dilation: int | Sequence[int] = 1, groups: int = 1, out_dtype: str | None = None) -> Tensor:
    """2-D convolution, NCHW activations, OIHW weights (``I`` = input channels per group)."""
    n, c, h, w = _check_rank(data, 4, "conv2d data")
    o, cg, kh, kw = _check_rank(kernel, 4, "conv2d kernel")
    if groups < 1 or c % groups or o % groups:
        raise CompileError(f"conv2d: groups={groups} must divide the {c} input and {o} output channels")
    if cg != c // groups:
        raise CompileError(f"conv2d: kernel {kernel.name!r} has {cg} input channels per group, expected "
                           f"{c // groups} ({c} channels / {groups} groups)")
    oh, ow = conv2d_output_shape((h, w), (kh, kw), strides, padding, dilation)
    sh, sw = _ints(strides, 2, "strides")
    dh, dw = _ints(dilation, 2, "dilation")
    top, left, bottom, right = padding_of(padding)
    padded = pad(data, (0, 0, top, left), (0, 0, bottom, right), name="pad")
    out_dtype = out_dtype or data.dtype
    rc, ry, rx = te.reduce_axis((0, cg), "rc"), te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    opg = o // groups

    def channel(oc):
        return rc if groups == 1 else (oc // opg) * cg + rc

    return te.compute((n, o, oh, ow), lambda b, oc, y, x: te.sum(
        _acc(padded[b, channel(oc), y * sh + ry * dh, x * sw + rx * dw], out_dtype)
        * _acc(kernel[oc, rc, ry, rx], out_dtype), axis=[rc, ry, rx]), name="conv2d", tag="conv2d_nchw")


def conv2d_nchw_packed(data: Tensor, packed_kernel: Tensor, strides: int | Sequence[int] = 1,
                       padding: int | Sequence[int] = 0, out_dtype: str | None = None) -> Tensor:
    """Conv2d (groups 1, no dilation) with the weight pre-packed ``[O // ob, C, KH, KW, ob]``.

    The convolution is computed in the blocked layout ``[N, O // ob, OH, OW, ob]`` (stage tag
    ``conv2d_NCHWc``), where a block's output channels are adjacent, so a schedule keeps a tile of
    pixels x ``ob`` channels in vector registers; the output stage reads it back as NCHW. Pack the
    weight with :func:`~vtakit.compiler.ops.layout.pack_conv2d_kernel`.
    """
    n, c, h, w = _check_rank(data, 4, "conv2d data")
    blocks, kc, kh, kw, ob = _check_rank(packed_kernel, 5, "packed conv2d kernel")
    if kc != c:
        raise CompileError(f"conv2d_nchw_packed: kernel {packed_kernel.name!r} has {kc} input channels, data has {c}")
    oh, ow = conv2d_output_shape((h, w), (kh, kw), strides, padding, 1)
    sh, sw = _ints(strides, 2, "strides")
    top, left, bottom, right = padding_of(padding)
    padded = pad(data, (0, 0, top, left), (0, 0, bottom, right), name="pad")
    out_dtype = out_dtype or data.dtype
    rc, ry, rx = te.reduce_axis((0, c), "rc"), te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    blocked = te.compute((n, blocks, oh, ow, ob), lambda b, ocb, y, x, oc: te.sum(
        _acc(padded[b, rc, y * sh + ry, x * sw + rx], out_dtype) * _acc(packed_kernel[ocb, rc, ry, rx, oc], out_dtype),
        axis=[rc, ry, rx]), name="conv2d_NCHWc", tag="conv2d_NCHWc")
    return te.compute((n, blocks * ob, oh, ow), lambda b, oc, y, x: blocked[b, oc // ob, y, x, oc % ob],
                      name="conv2d", tag="conv2d_unpack")


def depthwise_conv2d_nchw(data: Tensor, kernel: Tensor, strides: int | Sequence[int] = 1,
                          padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                          out_dtype: str | None = None) -> Tensor:
    """Depthwise convolution: kernel ``[C, multiplier, KH, KW]``, output ``C * multiplier`` channels."""
    n, c, h, w = _check_rank(data, 4, "depthwise conv2d data")
    kc, mult, kh, kw = _check_rank(kernel, 4, "depthwise conv2d kernel")
    if kc != c:
        raise CompileError(f"depthwise_conv2d: kernel {kernel.name!r} has {kc} channels, data {data.name!r} has {c}")
    oh, ow = conv2d_output_shape((h, w), (kh, kw), strides, padding, dilation)
    sh, sw = _ints(strides, 2, "strides")
    dh, dw = _ints(dilation, 2, "dilation")
    top, left, bottom, right = padding_of(padding)
    padded = pad(data, (0, 0, top, left), (0, 0, bottom, right), name="pad")
    out_dtype = out_dtype or data.dtype
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    return te.compute((n, c * mult, oh, ow), lambda b, oc, y, x: te.sum(
        _acc(padded[b, oc // mult, y * sh + ry * dh, x * sw + rx * dw], out_dtype)
        * _acc(kernel[oc // mult, oc % mult, ry, rx], out_dtype), axis=[ry, rx]),
        name="depthwise_conv2d", tag="depthwise_conv2d_nchw")


def pool2d(data: Tensor, kernel: int | Sequence[int], strides: int | Sequence[int] | None = None,
           padding: int | Sequence[int] = 0, pool_type: str = "max", count_include_pad: bool = False) -> Tensor:
    """Max or average pooling over NCHW; padded cells never win a max and count only if asked."""
    if pool_type not in ("max", "avg"):
        raise CompileError(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    n, c, h, w = _check_rank(data, 4, "pool2d data")
    kh, kw = _ints(kernel, 2, "kernel")
    strides = (kh, kw) if strides is None else strides
    oh, ow = conv2d_output_shape((h, w), (kh, kw), strides, padding, 1)
    sh, sw = _ints(strides, 2, "strides")
    top, left, bottom, right = padding_of(padding)
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    if pool_type == "max":
        padded = pad(data, (0, 0, top, left), (0, 0, bottom, right), te.min_value(data.dtype), name="pad")
        return te.compute((n, c, oh, ow), lambda b, ch, y, x: te.max(padded[b, ch, y * sh + ry, x * sw + rx],
                                                                     axis=[ry, rx]), name="max_pool2d", tag="pool2d")
    padded = pad(data, (0, 0, top, left), (0, 0, bottom, right), 0, name="pad")
    total = te.compute((n, c, oh, ow), lambda b, ch, y, x: te.sum(padded[b, ch, y * sh + ry, x * sw + rx],
                                                                  axis=[ry, rx]), name="pool_sum", tag="pool2d")

    def count(y, x):
        if count_include_pad:
            return ir.const(kh * kw, "int32")
        y0, x0 = y * sh - top, x * sw - left
        rows = te.min(y0 + kh, h) - te.max(y0, 0)
        cols = te.min(x0 + kw, w) - te.max(x0, 0)
        return rows * cols

    return te.compute((n, c, oh, ow), lambda b, ch, y, x: _divide(total[b, ch, y, x], count(y, x)),
                      name="avg_pool2d", tag="pool2d_avg")


def _divide(total: ir.PrimExpr, count: ir.PrimExpr) -> ir.PrimExpr:
    if ir.is_float(total.dtype):
        return total / count.astype(total.dtype)
    return te.floordiv(total, count.astype(total.dtype))


def global_avg_pool2d(data: Tensor) -> Tensor:
    """Mean over H and W of NCHW data, keeping the dims: ``[N, C, 1, 1]``."""
    n, c, h, w = _check_rank(data, 4, "global_avg_pool2d data")
    ry, rx = te.reduce_axis((0, h), "ry"), te.reduce_axis((0, w), "rx")
    total = te.compute((n, c, 1, 1), lambda b, ch, y, x: te.sum(data[b, ch, ry, rx], axis=[ry, rx]),
                       name="pool_sum", tag="pool2d")
    return te.compute((n, c, 1, 1), lambda *i: _divide(total[i], ir.const(h * w, "int32")),
                      name="global_avg_pool2d", tag="pool2d_avg")


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (numerically stable)."""
    shape = static_shape(x)
    if not ir.is_float(x.dtype):
        raise CompileError(f"softmax needs a float tensor, {x.name!r} is {x.dtype}")
    if not -len(shape) <= axis < len(shape):
        raise CompileError(f"softmax axis {axis} is out of range for {x.name!r} of rank {len(shape)}")
    axis %= len(shape)
    k1, k2 = te.reduce_axis((0, shape[axis]), "k1"), te.reduce_axis((0, shape[axis]), "k2")
    reduced = shape[:axis] + shape[axis + 1:]

    def at(idx, k):
        return tuple(idx[:axis]) + (k,) + tuple(idx[axis:])

    mx = te.compute(reduced, lambda *i: te.max(x[at(i, k1)], axis=k1), name="softmax_max", tag="softmax")
    ex = te.compute(shape, lambda *i: te.exp(x[i] - mx[i[:axis] + i[axis + 1:]]), name="softmax_exp", tag="softmax")
    total = te.compute(reduced, lambda *i: te.sum(ex[at(i, k2)], axis=k2), name="softmax_sum", tag="softmax")
    return te.compute(shape, lambda *i: ex[i] / total[i[:axis] + i[axis + 1:]], name="softmax", tag="softmax_output",
                      attrs={"axis": axis})
