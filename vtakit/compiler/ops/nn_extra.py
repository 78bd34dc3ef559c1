"""Tensor expressions for the network operators :mod:`.nn` lacks: transposed convolution, pooling with
dilation and ceil-mode windows, reductions over axes, batched matmul, multi-axis and log softmax,
local response and instance normalisation.

They exist for the ONNX graph compiler, whose operators carry more attribute forms than TOPI's
basic ops. Where an operator is a variation of an :mod:`.nn` one, it builds on it or reuses its stage
tags (``conv2d_nchw``, ``pad``, ``pool2d``, ``softmax_output``) so the same CPU schedules apply; the
new reductions are tagged ``reduce`` or ``batch_matmul`` (:func:`~vtakit.compiler.ops.cpu.schedule_reduce`).
"""

from __future__ import annotations

from typing import Callable, Sequence

from vtakit.compiler import ir
from vtakit.compiler import te
from vtakit.compiler.ops.elemwise import broadcast_shape
from vtakit.compiler.ops.nn import conv2d_nchw, pad
from vtakit.compiler.te.tensor import Tensor
from vtakit.errors import CompileError
from vtakit.compiler.ops.common import static_shape

__all__ = ["conv2d_transpose_nchw", "pool2d_window", "reduce", "REDUCERS", "batch_matmul",
           "softmax_axes", "lrn", "instance_norm"]


def conv2d_transpose_nchw(data: Tensor, kernel: Tensor, strides: Sequence[int], dilations: Sequence[int],
                          pads_begin: Sequence[int], output: Sequence[int], groups: int = 1,
                          out_dtype: str | None = None) -> Tensor:
    """Transposed convolution, kernel ``[C, O / groups, KH, KW]``, cropped by ``pads_begin`` to ``output``.

    Computed as TOPI does: the input is spread out by the strides (zeros between rows and columns,
    shifted so that the crop falls out) into a stage tagged ``pad``, then convolved with the flipped,
    transposed kernel by :func:`~.nn.conv2d_nchw`."""
    n, c, h, w = static_shape(data)
    kc, opg, kh, kw = static_shape(kernel)
    if kc != c or c % groups:
        raise CompileError(f"conv2d_transpose: kernel {kernel.name!r} has {kc} input channels, data has {c} "
                           f"(groups={groups})")
    (sh, sw), (dh, dw) = strides, dilations
    cpg = c // groups
    offset = ((kh - 1) * dh - pads_begin[0], (kw - 1) * dw - pads_begin[1])
    spread_shape = (n, c, output[0] + (kh - 1) * dh, output[1] + (kw - 1) * dw)

    def spread(b, ch, y, x):
        py, px = y - offset[0], x - offset[1]
        iy, ix = te.floordiv(py, sh), te.floordiv(px, sw)
        inside = te.all(te.floormod(py, sh) == 0, te.floormod(px, sw) == 0, py >= 0, px >= 0, iy < h, ix < w)
        return te.if_then_else(inside, data[b, ch, te.min(te.max(iy, 0), h - 1), te.min(te.max(ix, 0), w - 1)],
                               ir.const(0, data.dtype))

    spread_data = te.compute(spread_shape, spread, name="conv_transpose_spread", tag="pad")
    flipped = te.compute((opg * groups, cpg, kh, kw), lambda o, i, y, x: kernel[
        (o // opg) * cpg + i, o % opg, kh - 1 - y, kw - 1 - x], name="conv_transpose_kernel")
    return conv2d_nchw(spread_data, flipped, strides=1, padding=0, dilation=(dh, dw), groups=groups,
                       out_dtype=out_dtype)


def _tap_count(o: ir.PrimExpr, stride: int, begin: int, kernel: int, dilation: int, lo: int, hi: int) -> ir.PrimExpr:
    """How many taps ``o * stride - begin + k * dilation`` (``k < kernel``) fall in ``[lo, hi)``."""
    start = o * stride - begin
    first = te.max(te.floordiv(lo - start + dilation - 1, dilation), 0)
    last = te.min(te.floordiv(hi - 1 - start, dilation), kernel - 1)
    return te.max(last - first + 1, 0)


def pool2d_window(data: Tensor, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                  pads_begin: Sequence[int], pads_end: Sequence[int], count_end: Sequence[int] | None = None,
                  pool_type: str = "max", count_include_pad: bool = False) -> Tensor:
    """Max or average pooling of NCHW ``data`` with dilated windows; ``pads_end`` may exceed the declared
    padding ``count_end`` (ceil mode): cells there never win a max and never count in an average,
    while the declared padding counts when ``count_include_pad``."""
    if pool_type not in ("max", "avg"):
        raise CompileError(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    n, c, h, w = static_shape(data)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    count_end = pads_end if count_end is None else count_end
    oh = (h + pads_begin[0] + pads_end[0] - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pads_begin[1] + pads_end[1] - (kw - 1) * dw - 1) // sw + 1
    fill = te.min_value(data.dtype) if pool_type == "max" else 0
    padded = pad(data, (0, 0, *pads_begin), (0, 0, *pads_end), fill, name="pad")
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    reducer = te.max if pool_type == "max" else te.sum
    pooled = te.compute((n, c, oh, ow), lambda b, ch, y, x: reducer(
        padded[b, ch, y * sh + ry * dh, x * sw + rx * dw], axis=[ry, rx]),
        name="max_pool2d" if pool_type == "max" else "pool_sum", tag="pool2d")
    if pool_type == "max":
        return pooled
    lo = (-pads_begin[0], -pads_begin[1]) if count_include_pad else (0, 0)
    hi = (h + count_end[0], w + count_end[1]) if count_include_pad else (h, w)

    def average(b, ch, y, x):
        count = (_tap_count(y, sh, pads_begin[0], kh, dh, lo[0], hi[0])
                 * _tap_count(x, sw, pads_begin[1], kw, dw, lo[1], hi[1]))
        return pooled[b, ch, y, x] / count.astype(data.dtype)

    return te.compute((n, c, oh, ow), average, name="avg_pool2d", tag="pool2d_avg")


def _extreme(sign: float, finite: Callable[[str], ir.PrimExpr]) -> Callable[[str], ir.PrimExpr]:
    """The identity of max (``sign`` -1) or min (+1): infinite for floats, so an empty reduction gives
    -inf / +inf as ONNX defines it; the dtype's extreme value for integers."""
    return lambda dtype: ir.const(sign * float("inf"), dtype) if ir.is_float(dtype) else finite(dtype)


REDUCERS: dict[str, Callable] = {
    "sum": te.sum,
    "max": te.comm_reducer(lambda a, b: te.max(a, b), _extreme(-1.0, te.min_value), name="max"),
    "min": te.comm_reducer(lambda a, b: te.min(a, b), _extreme(1.0, te.max_value), name="min"),
    "prod": te.comm_reducer(lambda a, b: a * b, lambda dtype: ir.const(1, dtype), name="prod"),
}


def reduce(data: Tensor, axes: Sequence[int], kind: str, keepdims: bool = True, name: str = "reduce") -> Tensor:
    """``kind`` (a key of :data:`REDUCERS`) over ``axes``; ``keepdims`` leaves them as 1s. Stage tag ``reduce``."""
    if kind not in REDUCERS:
        raise CompileError(f"reduce kind {kind!r} is not one of {sorted(REDUCERS)}")
    shape = static_shape(data)
    axes = sorted({a % len(shape) for a in axes}) if shape else []
    raxes = {a: te.reduce_axis((0, shape[a]), f"r{a}") for a in axes}
    out_shape = tuple(1 if a in raxes else s for a, s in enumerate(shape) if keepdims or a not in raxes)

    out_axes = [a for a in range(len(shape)) if keepdims or a not in raxes]

    def body(*idx):
        where = dict(zip(out_axes, idx))
        src = tuple(raxes[a] if a in raxes else where[a] for a in range(len(shape)))
        return REDUCERS[kind](data[src], axis=list(raxes.values()))

    if not raxes:
        return te.compute(out_shape, lambda *i: data[i], name=name)
    return te.compute(out_shape, body, name=name, tag="reduce")


def batch_matmul(a: Tensor, b: Tensor, out_dtype: str | None = None) -> Tensor:
    """numpy's ``matmul``: batch dims broadcast, a 1-D operand is a row (lhs) or column (rhs) vector whose
    dim is dropped from the result; products accumulate in ``out_dtype`` (default: ``a``'s). Stage tag
    ``batch_matmul``."""
    sa, sb = static_shape(a), static_shape(b)
    if not sa or not sb:
        raise CompileError(f"matmul operands must have rank >= 1, got shapes {sa} and {sb}")
    k_a = sa[-1]
    k_b = sb[0] if len(sb) == 1 else sb[-2]
    if k_a != k_b:
        raise CompileError(f"matmul: {a.name!r} {sa} and {b.name!r} {sb} disagree on the contracted dim "
                           f"({k_a} vs {k_b})")
    batch = broadcast_shape(sa[:-2], sb[:-2])
    rows = (sa[-2],) if len(sa) > 1 else ()
    cols = (sb[-1],) if len(sb) > 1 else ()
    k = te.reduce_axis((0, k_a), "k")

    def operand(t: Tensor, shape: tuple[int, ...], bidx: tuple, tail: tuple) -> ir.PrimExpr:
        lead = shape[:-2] if len(shape) > 1 else ()
        skip = len(bidx) - len(lead)
        return t[tuple(0 if s == 1 else i for s, i in zip(lead, bidx[skip:])) + tail]

    def body(*idx):
        bidx = idx[:len(batch)]
        i = idx[len(batch):len(batch) + len(rows)]
        j = idx[len(batch) + len(rows):]
        lhs = operand(a, sa, bidx, (*i, k))
        rhs = operand(b, sb, bidx, (k, *j))
        if out_dtype and out_dtype != a.dtype:
            lhs, rhs = lhs.astype(out_dtype), rhs.astype(out_dtype)
        return te.sum(lhs * rhs, axis=k)

    # attrs["matrix"]: both operands are matrices, so the output's last two axes are (rows, cols)
    return te.compute(batch + rows + cols, body, name="batch_matmul", tag="batch_matmul",
                      attrs={"matrix": bool(rows and cols)})


def softmax_axes(x: Tensor, axes: Sequence[int], log: bool = False) -> Tensor:
    """Softmax (``log``: log-softmax) normalised jointly over the consecutive ``axes``; numerically stable.

    Its stages mirror :func:`~.nn.softmax` (max, shifted exponent or shift, sum, output tagged
    ``softmax_output`` with the first axis in ``attrs``), so :func:`~.cpu.schedule_softmax` applies."""
    shape = static_shape(x)
    if not ir.is_float(x.dtype):
        raise CompileError(f"softmax needs a float tensor, {x.name!r} is {x.dtype}")
    axes = [a % len(shape) for a in axes]
    if not axes or axes != list(range(axes[0], axes[0] + len(axes))):
        raise CompileError(f"softmax axes {axes} must be consecutive")
    first, stop = axes[0], axes[-1] + 1
    reduced = shape[:first] + shape[stop:]

    def full(idx, ks):
        return tuple(idx[:first]) + tuple(ks) + tuple(idx[first:])

    def outer(idx):
        return tuple(idx[:first]) + tuple(idx[stop:])

    # float16 is normalised in float32 and rounded once at the end, as onnxruntime does
    work = "float32" if x.dtype == "float16" else x.dtype

    def read(idx):
        v = x[idx]
        return v.astype(work) if work != x.dtype else v

    def result(v):
        return v.astype(x.dtype) if work != x.dtype else v

    k1 = [te.reduce_axis((0, shape[a]), f"k1_{a}") for a in axes]
    k2 = [te.reduce_axis((0, shape[a]), f"k2_{a}") for a in axes]
    mx = te.compute(reduced, lambda *i: te.max(read(full(i, k1)), axis=k1), name="softmax_max", tag="softmax")
    if log:
        shifted = te.compute(shape, lambda *i: read(i) - mx[outer(i)], name="log_softmax_shift", tag="softmax")
        total = te.compute(reduced, lambda *i: te.sum(te.exp(shifted[full(i, k2)]), axis=k2), name="softmax_sum",
                           tag="softmax")
        return te.compute(shape, lambda *i: result(shifted[i] - te.log(total[outer(i)])), name="log_softmax",
                          tag="softmax_output", attrs={"axis": first})
    ex = te.compute(shape, lambda *i: te.exp(read(i) - mx[outer(i)]), name="softmax_exp", tag="softmax")
    total = te.compute(reduced, lambda *i: te.sum(ex[full(i, k2)], axis=k2), name="softmax_sum", tag="softmax")
    return te.compute(shape, lambda *i: result(ex[i] / total[outer(i)]), name="softmax", tag="softmax_output",
                      attrs={"axis": first})


def lrn(x: Tensor, size: int, alpha: float, beta: float, bias: float) -> Tensor:
    """Local response normalisation across channels (axis 1):
    ``x / (bias + alpha / size * sum of x^2 over the size channels around)^beta``."""
    shape = static_shape(x)
    before, after = (size - 1) // 2, size // 2
    squares = te.compute(shape, lambda *i: x[i] * x[i], name="lrn_square")
    padded = pad(squares, (0, before) + (0,) * (len(shape) - 2), (0, after) + (0,) * (len(shape) - 2), 0,
                 name="lrn_pad")
    r = te.reduce_axis((0, size), "r")
    window = te.compute(shape, lambda *i: te.sum(padded[(i[0], i[1] + r, *i[2:])], axis=r), name="lrn_sum",
                        tag="reduce")
    scale = alpha / size
    return te.compute(shape, lambda *i: x[i] / te.power(ir.const(bias, x.dtype) + ir.const(scale, x.dtype)
                                                          * window[i], ir.const(beta, x.dtype)), name="lrn")


def instance_norm(x: Tensor, scale: Tensor, bias: Tensor, epsilon: float) -> Tensor:
    """``(x - mean) / sqrt(var + epsilon) * scale[c] + bias[c]``, mean and variance over each (n, c)'s
    spatial axes."""
    shape = static_shape(x)
    spatial = list(range(2, len(shape)))
    count = 1
    for a in spatial:
        count *= shape[a]
    total = reduce(x, spatial, "sum", name="instance_norm_sum")
    mean = te.compute(total.shape, lambda *i: total[i] / ir.const(count, x.dtype), name="instance_norm_mean")

    def centred(*i):
        return x[i] - mean[(i[0], i[1]) + (0,) * len(spatial)]

    dev = te.compute(shape, lambda *i: centred(*i) * centred(*i), name="instance_norm_dev")
    var = reduce(dev, spatial, "sum", name="instance_norm_var")
    eps = ir.const(epsilon, x.dtype)
    return te.compute(shape, lambda *i: centred(*i) / te.sqrt(var[(i[0], i[1]) + (0,) * len(spatial)]
                                                            / ir.const(count, x.dtype) + eps)
                      * scale[i[1]] + bias[i[1]], name="instance_norm")
