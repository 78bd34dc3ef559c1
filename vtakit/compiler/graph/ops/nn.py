"""Neural-network graph operators: convolutions, matrix products, pooling, normalisation, softmax and
reductions, with numpy references and TE computes from :mod:`vtakit.compiler.ops` (Resize is :mod:`.resize`).

Operators follow ONNX's inputs and attributes (opset 13+ semantics; the frontend converts older
forms). Convolutions and pools are 2-D here: the frontend maps 1-D ones onto them. The computes
reuse the tagged TE operators (``conv2d_nchw``, ``dense``, ``pool2d`` ...) so that the CPU
schedules, and whatever speeds them up, apply to graph kernels; BatchNormalization is a graph
operator of its own, element-wise, so that a pass can fold it into the convolution before it.
The window arithmetic (auto_pad, ceil_mode, output sizes) is :mod:`.window`'s.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from vtakit.compiler import ir, ops, te
from vtakit.compiler.graph.op import REQUIRED, Pattern, register_op
from vtakit.compiler.graph.ops.window import Window, sliding_window, transposed_window
from vtakit.compiler.ops import nn_extra
from vtakit.compiler.ops.common import static_shape
from vtakit.errors import GraphError

__all__ = ["conv_window", "pool_window", "reduce_axes", "Reduction", "REDUCTIONS"]

_WINDOW_ATTRS = {"auto_pad": "NOTSET", "dilations": None, "kernel_shape": None, "pads": None, "strides": None}


# ---------------------------------------------------------------------------- shared helpers
def _spatial_rank(op: str, shape: Sequence[int], ranks: Sequence[int] = (4,)) -> None:
    if len(shape) not in ranks:
        raise GraphError(f"{op}: input of shape {list(shape)} has rank {len(shape)}; vtakit supports rank "
                         f"{' or '.join(map(str, ranks))} ({', '.join(f'{r - 2}-D' for r in ranks)} windows)")


def conv_window(op: str, x_shape: Sequence[int], w_shape: Sequence[int], attrs: dict[str, Any]) -> Window:
    """The window of a Conv (or ConvTranspose) of an ``x_shape`` input with an ``w_shape`` kernel."""
    kernel = tuple(w_shape[2:])
    declared = attrs.get("kernel_shape")
    if declared is not None and len(declared) and tuple(declared) != kernel:
        raise GraphError(f"{op}: kernel_shape={list(declared)} disagrees with the weight's shape {list(w_shape)}")
    if op == "ConvTranspose":
        return transposed_window(tuple(x_shape[2:]), kernel, attrs)
    return sliding_window(tuple(x_shape[2:]), kernel, attrs)


def pool_window(x_shape: Sequence[int], attrs: dict[str, Any]) -> Window:
    """The window of a MaxPool or AveragePool over an ``x_shape`` input."""
    return sliding_window(tuple(x_shape[2:]), tuple(attrs["kernel_shape"]), attrs, bool(attrs.get("ceil_mode", 0)))


def _windows(padded: np.ndarray, win: Window) -> np.ndarray:
    """View of ``padded`` (N, C, *S already padded) as (N, C, *output, *kernel)."""
    n = len(win.kernel)
    view = sliding_window_view(padded, win.extent, axis=tuple(range(2, 2 + n)))
    picks = tuple(slice(0, o * s, s) for o, s in zip(win.output, win.strides))
    taps = tuple(slice(None, None, d) for d in win.dilations)
    return view[(slice(None), slice(None)) + picks + taps]


def _pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int], value: Any) -> np.ndarray:
    return np.pad(x, [(0, 0), (0, 0)] + list(zip(begin, end)), constant_values=value)


def _per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (rank - 2))


# half-precision products accumulate in float32 (as onnxruntime does), the result is rounded once
_ACCUMULATE = {"float16": "float32"}


def _accumulator(dtype: str) -> str | None:
    return _ACCUMULATE.get(dtype)


def _finish(out: te.Tensor, bias: te.Tensor | None, dtype: str) -> te.Tensor:
    """``out`` plus the per-channel ``bias``, in ``dtype`` (one element-wise epilogue stage)."""
    if bias is None and out.dtype == dtype:
        return out

    def value(*i):
        v = out[i] if bias is None else out[i] + bias[i[1]].astype(out.dtype)
        return v.astype(dtype) if out.dtype != dtype else v

    return te.compute(static_shape(out), value, name="bias_add" if bias is not None else "cast",
                      tag="bias_add" if bias is not None else "elemwise")


def _wide(*arrays: np.ndarray) -> list[np.ndarray]:
    """Reference operands widened as the kernels accumulate them."""
    return [a.astype(np.float32) if a is not None and a.dtype == np.float16 else a for a in arrays]


def _typed_const(value: float, dtype: str) -> ir.PrimExpr:
    return ir.const(value, dtype)


# ---------------------------------------------------------------------------- convolution
def _conv_reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """ONNX Conv: grouped, dilated, strided, padded correlation plus optional bias."""
    dtype = ins[0].dtype
    x, w, bias = _wide(ins[0], ins[1], ins[2] if len(ins) > 2 else None)
    win = conv_window("Conv", x.shape, w.shape, attrs)
    g = attrs["group"]
    n_sp = len(win.kernel)
    view = _windows(_pad_spatial(x, win.pads_begin, win.pads_end, 0), win)
    view = view.reshape((x.shape[0], g, x.shape[1] // g) + view.shape[2:])
    kernel = w.reshape((g, w.shape[0] // g) + w.shape[1:])
    letters = "yxzw"[:n_sp]
    taps = "ijkl"[:n_sp]
    out = np.einsum(f"ngc{letters}{taps},goc{taps}->ngo{letters}", view, kernel, optimize=True)
    out = out.reshape((x.shape[0], w.shape[0]) + out.shape[3:])
    if bias is not None:
        out = out + _per_channel(bias, out.ndim)
    return (out.astype(dtype),)


def _conv_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    xs, ws = static_shape(x), static_shape(w)
    _spatial_rank("Conv", xs)
    win = conv_window("Conv", xs, ws, attrs)
    padding = (win.pads_begin[0], win.pads_begin[1], win.pads_end[0], win.pads_end[1])
    groups = attrs["group"]
    if groups > 1 and groups == xs[1] and ws[1] == 1:
        mult = ws[0] // groups
        kernel = te.compute((groups, mult, ws[2], ws[3]), lambda c, m, y, x_: w[c * mult + m, 0, y, x_],
                            name="depthwise_kernel")
        out = ops.depthwise_conv2d_nchw(x, kernel, win.strides, padding, win.dilations, _accumulator(x.dtype))
    else:
        out = ops.conv2d_nchw(x, w, win.strides, padding, win.dilations, groups, _accumulator(x.dtype))
    return [_finish(out, bias, x.dtype)]


register_op("Conv", pattern=Pattern.OUT_ELEMWISE_FUSABLE, attrs={**_WINDOW_ATTRS, "group": 1},
            compute=_conv_compute)(_conv_reference)


def _conv_transpose_reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """ONNX ConvTranspose: each input pixel scatters the kernel, strided and dilated, then the pads are cropped."""
    dtype = ins[0].dtype
    x, w, bias = _wide(ins[0], ins[1], ins[2] if len(ins) > 2 else None)
    win = conv_window("ConvTranspose", x.shape, w.shape, attrs)
    g = attrs["group"]
    n, c = x.shape[:2]
    cpg, opg = c // g, w.shape[1]
    spatial = x.shape[2:]
    full = [b + o + a for b, o, a in zip(win.pads_begin, win.output, win.pads_end)]
    out = np.zeros((n, g * opg, *full), dtype=np.float64 if x.dtype == np.float64 else np.float32)
    xg = x.reshape(n, g, cpg, *spatial)
    wg = w.reshape(g, cpg, opg, *win.kernel)
    for tap in np.ndindex(*win.kernel):
        contrib = np.einsum("ngc...,gco->ngo...", xg, wg[(slice(None), slice(None), slice(None)) + tap])
        where = tuple(slice(k * d, k * d + (i - 1) * s + 1, s)
                      for k, d, i, s in zip(tap, win.dilations, spatial, win.strides))
        out[(slice(None), slice(None)) + where] += contrib.reshape(n, g * opg, *spatial)
    out = _pad_spatial(out, [max(0, -b) for b in win.pads_begin], [max(0, -a) for a in win.pads_end], 0)
    crop = tuple(slice(max(0, b), max(0, b) + o) for b, o in zip(win.pads_begin, win.output))
    out = out[(slice(None), slice(None)) + crop]
    if bias is not None:
        out = out + _per_channel(bias, out.ndim)
    return (out.astype(dtype),)


def _conv_transpose_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    xs = static_shape(x)
    _spatial_rank("ConvTranspose", xs)
    win = conv_window("ConvTranspose", xs, static_shape(w), attrs)
    out = nn_extra.conv2d_transpose_nchw(x, w, win.strides, win.dilations, win.pads_begin, win.output,
                                         attrs["group"], _accumulator(x.dtype))
    return [_finish(out, bias, x.dtype)]


register_op("ConvTranspose", pattern=Pattern.OUT_ELEMWISE_FUSABLE,
            attrs={**_WINDOW_ATTRS, "group": 1, "output_padding": None, "output_shape": None},
            compute=_conv_transpose_compute)(_conv_transpose_reference)


# ---------------------------------------------------------------------------- matrix products
def _gemm_reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """alpha * A' @ B' + beta * C, A' and B' transposed as asked, C broadcast (and optional)."""
    a, b, c = _wide(ins[0], ins[1], ins[2] if len(ins) > 2 else None)
    a = a.T if attrs["transA"] else a
    b = b.T if attrs["transB"] else b
    out = np.matmul(a, b)
    if attrs["alpha"] != 1.0:
        out = out * attrs["alpha"]
    if c is not None and attrs["beta"] != 0.0:
        out = out + (c * attrs["beta"] if attrs["beta"] != 1.0 else c)
    return (out.astype(ins[0].dtype),)


def _gemm_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    if attrs["transA"]:
        k, m = static_shape(a)
        a = te.compute((m, k), lambda i, j: a[j, i], name="gemm_a_t")
    acc = _accumulator(a.dtype)
    prod = ops.dense(a, b, out_dtype=acc) if attrs["transB"] else ops.matmul(a, b, out_dtype=acc)
    alpha, beta = attrs["alpha"], attrs["beta"]
    if alpha != 1.0:
        scaled = prod
        prod = te.compute(static_shape(prod), lambda *i: scaled[i] * _typed_const(alpha, scaled.dtype), name="gemm_alpha")
    if c is None:
        return [_finish(prod, None, a.dtype)]
    out = ops.binary(prod, c, lambda p, q: p + q.astype(p.dtype) * _typed_const(beta, p.dtype), "gemm_beta")
    return [_finish(out, None, a.dtype)]


register_op("Gemm", pattern=Pattern.OUT_ELEMWISE_FUSABLE,
            attrs={"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}, compute=_gemm_compute)(_gemm_reference)


def _matmul_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    """The target-neutral form (the CPU's AlterOpLayout turns [..., M, K] x [K, N] into a PackedMatMul)."""
    a, b = ins
    acc = _accumulator(a.dtype)
    if len(a.shape) == 2 and len(b.shape) == 2:
        return [_finish(ops.matmul(a, b, out_dtype=acc), None, a.dtype)]
    return [_finish(nn_extra.batch_matmul(a, b, acc), None, a.dtype)]


@register_op("MatMul", pattern=Pattern.OUT_ELEMWISE_FUSABLE, compute=_matmul_compute)
def _matmul_reference(ins, attrs):
    """numpy's matmul: batched, broadcast, 1-D operands promoted and their dim dropped."""
    return (np.asarray(np.matmul(*_wide(ins[0], ins[1]))).astype(ins[0].dtype),)


# ---------------------------------------------------------------------------- pooling
def _max_pool_reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """Max over each (dilated) window; padding never wins."""
    x = ins[0]
    win = pool_window(x.shape, attrs)
    fill = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    view = _windows(_pad_spatial(x, win.pads_begin, win.pads_end, fill), win)
    return (view.max(axis=tuple(range(-len(win.kernel), 0))).astype(x.dtype),)


def _avg_pool_reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """Mean over each window; the declared padding counts with count_include_pad, ceil_mode's extra never."""
    x = ins[0]
    win = pool_window(x.shape, attrs)
    taps = tuple(range(-len(win.kernel), 0))
    total = _windows(_pad_spatial(x.astype(np.float64), win.pads_begin, win.pads_end, 0), win).sum(axis=taps)
    mask = np.ones((1, 1) + x.shape[2:])
    mask = _pad_spatial(mask, win.pads_begin, win.count_end, 1 if attrs["count_include_pad"] else 0)
    mask = _pad_spatial(mask, (0,) * len(win.kernel), [c - e for c, e in zip(win.pads_end, win.count_end)], 0)
    count = _windows(mask, win).sum(axis=taps)
    return ((total / count).astype(x.dtype),)


def _pool_compute(kind: str) -> Callable[[list, dict], list[te.Tensor]]:
    def compute(ins: list, attrs: dict) -> list[te.Tensor]:
        x = ins[0]
        xs = static_shape(x)
        _spatial_rank(f"{kind} pool", xs)
        win = pool_window(xs, attrs)
        return [nn_extra.pool2d_window(x, win.kernel, win.strides, win.dilations, win.pads_begin, win.pads_end,
                                       win.count_end, kind, bool(attrs.get("count_include_pad", 0)))]
    return compute


_POOL_ATTRS = {**_WINDOW_ATTRS, "kernel_shape": REQUIRED, "ceil_mode": 0}
register_op("MaxPool", pattern=Pattern.COMM_REDUCE, attrs={**_POOL_ATTRS, "storage_order": 0},
            compute=_pool_compute("max"))(_max_pool_reference)
register_op("AveragePool", pattern=Pattern.COMM_REDUCE, attrs={**_POOL_ATTRS, "count_include_pad": 0},
            compute=_pool_compute("avg"))(_avg_pool_reference)


def _global_avg_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x = ins[0]
    xs = static_shape(x)
    if len(xs) == 4:
        return [ops.global_avg_pool2d(x)]
    return _reduce_compute("ReduceMean")([x], {"axes": list(range(2, len(xs))), "keepdims": 1,
                                               "noop_with_empty_axes": 0})


@register_op("GlobalAveragePool", pattern=Pattern.COMM_REDUCE, compute=_global_avg_compute)
def _global_avg_reference(ins, attrs):
    """Mean over every spatial axis, kept as 1s."""
    x = ins[0]
    return (x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float64).astype(x.dtype),)


@register_op("GlobalMaxPool", pattern=Pattern.COMM_REDUCE,
             compute=lambda ins, attrs: [nn_extra.reduce(ins[0], range(2, len(ins[0].shape)), "max")])
def _global_max_reference(ins, attrs):
    """Max over every spatial axis, kept as 1s."""
    x = ins[0]
    return (x.max(axis=tuple(range(2, x.ndim)), keepdims=True),)


# ---------------------------------------------------------------------------- reductions
def reduce_axes(rank: int, axes_input: np.ndarray | None, attrs: dict[str, Any]) -> tuple[int, ...] | None:
    """The axes a Reduce* node reduces (non-negative, sorted); None when it is the identity
    (no axes and ``noop_with_empty_axes``)."""
    axes = axes_input if axes_input is not None else attrs.get("axes")
    axes = [] if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    if not axes:
        return None if attrs.get("noop_with_empty_axes") else tuple(range(rank))
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        raise GraphError(f"reduction axes {bad} are out of range for rank {rank}")
    return tuple(sorted({a % rank for a in axes}))


def _fill(kind: str, dtype: np.dtype) -> Any:
    """The identity of a max (min) reduction over ``dtype``: what an empty reduction gives."""
    if dtype == np.bool_:
        return kind != "max"
    if np.issubdtype(dtype, np.floating):
        return -np.inf if kind == "max" else np.inf
    return np.iinfo(dtype).min if kind == "max" else np.iinfo(dtype).max


# element-wise maps applied before or after a reduction: name -> (numpy function, TE expression function)
_MAPS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], Callable[[ir.PrimExpr], ir.PrimExpr]]] = {
    "abs": (np.abs, te.abs), "square": (np.square, lambda v: v * v), "exp": (np.exp, te.exp),
    "sqrt": (np.sqrt, te.sqrt), "log": (np.log, te.log),
}


@dataclass(frozen=True)
class Reduction:
    """An ONNX reduction: an element-wise map, a commutative reduction (``sum``, ``prod``, ``max``, ``min``)
    and a map of the result (``mean`` divides by the count)."""

    reducer: str
    before: str | None = None
    after: str | None = None


REDUCTIONS: dict[str, Reduction] = {
    "ReduceSum": Reduction("sum"), "ReduceMean": Reduction("sum", after="mean"), "ReduceMax": Reduction("max"),
    "ReduceMin": Reduction("min"), "ReduceProd": Reduction("prod"), "ReduceL1": Reduction("sum", before="abs"),
    "ReduceL2": Reduction("sum", before="square", after="sqrt"), "ReduceSumSquare": Reduction("sum", before="square"),
    "ReduceLogSum": Reduction("sum", after="log"), "ReduceLogSumExp": Reduction("sum", before="exp", after="log"),
}

_NUMPY_REDUCERS: dict[str, Callable[..., np.ndarray]] = {
    "sum": lambda x, axes, keep: np.sum(x, axis=axes, keepdims=keep),
    "prod": lambda x, axes, keep: np.prod(x, axis=axes, keepdims=keep),
    "max": lambda x, axes, keep: np.max(x, axis=axes, keepdims=keep, initial=_fill("max", x.dtype)),
    "min": lambda x, axes, keep: np.min(x, axis=axes, keepdims=keep, initial=_fill("min", x.dtype)),
}


def _reduce_reference(name: str) -> Callable[[list, dict], tuple[np.ndarray, ...]]:
    how = REDUCTIONS[name]

    def reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
        x = ins[0]
        axes = reduce_axes(x.ndim, ins[1] if len(ins) > 1 else None, attrs)
        mapped = _MAPS[how.before][0](x) if how.before else x
        if how.after and np.issubdtype(x.dtype, np.floating):
            mapped = mapped.astype(np.float64)
        if axes is None:  # no reduction, but the maps apply (as onnxruntime does)
            out, axes = mapped, ()
        else:
            out = np.asarray(_NUMPY_REDUCERS[how.reducer](mapped, axes, bool(attrs["keepdims"])))
        if how.after == "mean":
            out = out / max(1, int(np.prod([x.shape[a] for a in axes])))
        elif how.after:
            with np.errstate(divide="ignore", invalid="ignore"):
                out = _MAPS[how.after][0](out)
        return (np.asarray(out).astype(x.dtype),)
    reference.__doc__ = f"ONNX {name}: axes from the attribute or input, keepdims, noop_with_empty_axes."
    return reference


def _reduce_compute(name: str) -> Callable[[list, dict], list[te.Tensor]]:
    how = REDUCTIONS[name]

    def compute(ins: list, attrs: dict) -> list[te.Tensor]:
        x = ins[0]
        shape = static_shape(x)
        axes = reduce_axes(len(shape), ins[1] if len(ins) > 1 else None, attrs)
        if axes is None:
            maps = [_MAPS[m][1] for m in (how.before, how.after) if m and m != "mean"]
            return [te.compute(shape, lambda *i: functools.reduce(lambda v, f: f(v), maps, x[i]), name="reduce_noop")]
        mapped = x
        if how.before:
            mapped = te.compute(shape, lambda *i: _MAPS[how.before][1](x[i]), name=f"reduce_{how.before}")
        if x.dtype == "bool":  # TE reduces numbers: bools as uint8
            as_int = te.compute(shape, lambda *i: mapped[i].astype("uint8"), name="reduce_bool")
            total = nn_extra.reduce(as_int, axes, how.reducer, bool(attrs["keepdims"]))
            return [te.compute(static_shape(total), lambda *i: total[i] != 0, name="reduce_to_bool")]
        total = nn_extra.reduce(mapped, axes, how.reducer, bool(attrs["keepdims"]))
        if how.after == "mean":
            count = int(np.prod([shape[a] for a in axes]))
            return [te.compute(static_shape(total), lambda *i: total[i] / _typed_const(count, x.dtype), name="reduce_mean")]
        if how.after:
            after = _MAPS[how.after][1]
            return [te.compute(static_shape(total), lambda *i: after(total[i]), name=f"reduce_{how.after}")]
        return [total]
    return compute


for _name in REDUCTIONS:
    register_op(_name, pattern=Pattern.COMM_REDUCE, attrs={"axes": None, "keepdims": 1, "noop_with_empty_axes": 0},
                const_inputs=(1,), compute=_reduce_compute(_name))(_reduce_reference(_name))


# ---------------------------------------------------------------------------- normalisation
def _batch_norm_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x, scale, bias, mean, var = ins[:5]
    eps = _typed_const(attrs["epsilon"], x.dtype)
    return [te.compute(static_shape(x), lambda *i: (x[i] - mean[i[1]]) * (scale[i[1]] / te.sqrt(var[i[1]] + eps))
                       + bias[i[1]], name="batch_norm", tag="broadcast")]


@register_op("BatchNormalization", pattern=Pattern.BROADCAST, attrs={"epsilon": 1e-5}, compute=_batch_norm_compute)
def _batch_norm_reference(ins, attrs):
    """Inference batch normalisation with per-channel (axis 1) scale, bias, mean and variance."""
    x, scale, bias, mean, var = (np.asarray(v) for v in ins[:5])
    rank = x.ndim
    out = (x - _per_channel(mean, rank)) * _per_channel(scale / np.sqrt(var + attrs["epsilon"]), rank) \
        + _per_channel(bias, rank)
    return (out.astype(x.dtype),)


@register_op("InstanceNormalization", pattern=Pattern.COMM_REDUCE, attrs={"epsilon": 1e-5},
             compute=lambda ins, attrs: [nn_extra.instance_norm(ins[0], ins[1], ins[2], attrs["epsilon"])])
def _instance_norm_reference(ins, attrs):
    """Normalise each (n, c) over its spatial axes, then per-channel scale and bias."""
    x, scale, bias = ins
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + attrs["epsilon"]) * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)
    return (out.astype(x.dtype),)


@register_op("LRN", pattern=Pattern.COMM_REDUCE, attrs={"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": REQUIRED},
             compute=lambda ins, attrs: [nn_extra.lrn(ins[0], attrs["size"], attrs["alpha"], attrs["beta"],
                                                      attrs["bias"])])
def _lrn_reference(ins, attrs):
    """x / (bias + alpha / size * sum of squares over the size channels around)^beta."""
    x = ins[0]
    size = attrs["size"]
    sq = np.pad(x.astype(np.float64) ** 2, [(0, 0), ((size - 1) // 2, size // 2)] + [(0, 0)] * (x.ndim - 2))
    window = sum(sq[:, k:k + x.shape[1]] for k in range(size))
    out = x / (attrs["bias"] + attrs["alpha"] / size * window) ** attrs["beta"]
    return (out.astype(x.dtype),)


# ---------------------------------------------------------------------------- softmax
def _softmax_reference(log: bool) -> Callable[[list, dict], tuple[np.ndarray, ...]]:
    def reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
        x = ins[0]
        axis = attrs["axis"] % x.ndim
        work = x.astype(np.float32) if x.dtype == np.float16 else x  # float16 normalised in float32, as in the kernel
        shifted = work - work.max(axis=axis, keepdims=True)
        total = np.exp(shifted).sum(axis=axis, keepdims=True)
        out = shifted - np.log(total) if log else np.exp(shifted) / total
        return (out.astype(x.dtype),)
    reference.__doc__ = f"ONNX {'LogSoftmax' if log else 'Softmax'} (opset 13): normalised along one axis."
    return reference


def _softmax_compute(log: bool) -> Callable[[list, dict], list[te.Tensor]]:
    def compute(ins: list, attrs: dict) -> list[te.Tensor]:
        x = ins[0]
        rank = len(x.shape)
        if not -rank <= attrs["axis"] < rank:
            raise GraphError(f"softmax axis {attrs['axis']} is out of range for rank {rank}")
        return [nn_extra.softmax_axes(x, [attrs["axis"] % rank], log)]
    return compute


register_op("Softmax", pattern=Pattern.OPAQUE, attrs={"axis": -1},
            compute=_softmax_compute(False))(_softmax_reference(False))
register_op("LogSoftmax", pattern=Pattern.OPAQUE, attrs={"axis": -1},
            compute=_softmax_compute(True))(_softmax_reference(True))


# ---------------------------------------------------------------------------- layer normalisation
# ONNX stash_type (the element type of the statistics) -> numpy dtype name; vtakit computes float32 statistics
_STASH_TYPES = {1: "float32"}


def _norm_axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise GraphError(f"{op}: axis {axis} is out of range for an input of rank {rank} "
                         f"(expected {-rank}..{rank - 1})")
    return axis % rank


def _stash_dtype(op: str, stash_type: int) -> str:
    if stash_type not in _STASH_TYPES:
        raise GraphError(f"{op}: stash_type {stash_type} is not supported; expected 1 (float32 statistics)")
    return _STASH_TYPES[stash_type]


def _layer_norm_reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """Normalise over the axes from ``axis`` on (statistics in float32, float64 for a float64 input), then
    ``* Scale + B`` (broadcast over those axes); also the Mean and InvStdDev, 1s in the normalised axes."""
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    axis = _norm_axis("LayerNormalization", attrs["axis"], x.ndim)
    stash = _stash_dtype("LayerNormalization", attrs["stash_type"])
    work = np.float64 if x.dtype == np.float64 else np.dtype(stash).type
    axes = tuple(range(axis, x.ndim))
    xw = x.astype(work)
    mean = xw.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(((xw - mean) ** 2).mean(axis=axes, keepdims=True) + work(attrs["epsilon"]))
    y = (xw - mean) * inv * scale.astype(work)
    if bias is not None:
        y = y + bias.astype(work)
    return y.astype(x.dtype), mean.astype(stash), inv.astype(stash)


def _trailing(t: te.Tensor, idx: tuple) -> ir.PrimExpr:
    """``t`` (broadcastable to the trailing axes of ``idx``) read at ``idx``."""
    shape = static_shape(t)
    tail = idx[len(idx) - len(shape):] if shape else ()
    return t[tuple(0 if s == 1 else i for s, i in zip(shape, tail))]


def _layer_norm_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    shape = static_shape(x)
    axis = _norm_axis("LayerNormalization", attrs["axis"], len(shape))
    stash = _stash_dtype("LayerNormalization", attrs["stash_type"])
    if not ir.is_float(x.dtype):
        raise GraphError(f"LayerNormalization: input of dtype {x.dtype}; expected a float tensor")
    work = "float64" if x.dtype == "float64" else stash
    axes = list(range(axis, len(shape)))
    count = int(np.prod(shape[axis:], dtype=np.int64))
    xw = x if x.dtype == work else te.compute(shape, lambda *i: x[i].astype(work), name="layer_norm_in")
    lead = len(shape) - len(axes)

    def stat(t: te.Tensor, i: tuple) -> ir.PrimExpr:
        return t[tuple(i[:lead]) + (0,) * len(axes)]

    total = nn_extra.reduce(xw, axes, "sum", name="layer_norm_sum")
    mean = te.compute(static_shape(total), lambda *i: total[i] / ir.const(count, work), name="layer_norm_mean")
    dev = te.compute(shape, lambda *i: (xw[i] - stat(mean, i)) * (xw[i] - stat(mean, i)), name="layer_norm_dev")
    var = nn_extra.reduce(dev, axes, "sum", name="layer_norm_var")
    inv = te.compute(static_shape(var), lambda *i: ir.const(1.0, work) / te.sqrt(
        var[i] / ir.const(count, work) + ir.const(attrs["epsilon"], work)), name="layer_norm_inv")

    def out(*i):
        v = (xw[i] - stat(mean, i)) * stat(inv, i) * _trailing(scale, i).astype(work)
        if bias is not None:
            v = v + _trailing(bias, i).astype(work)
        return v.astype(x.dtype) if work != x.dtype else v

    y = te.compute(shape, out, name="layer_norm")
    stats = [t if t.dtype == stash else te.compute(static_shape(t), lambda *i, t=t: t[i].astype(stash),
                                                   name=f"{t.name}_{stash}") for t in (mean, inv)]
    return [y, *stats]


register_op("LayerNormalization", pattern=Pattern.COMM_REDUCE, attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1},
            compute=_layer_norm_compute)(_layer_norm_reference)


# ---------------------------------------------------------------------------- arg reductions
def _arg_reference(kind: str) -> Callable[[list, dict], tuple[np.ndarray, ...]]:
    def reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
        x = ins[0]
        axis = _norm_axis(f"Arg{kind.capitalize()}", attrs["axis"], max(x.ndim, 1))
        pick = np.argmax if kind == "max" else np.argmin
        if attrs["select_last_index"]:
            flipped = np.flip(x, axis)
            idx = x.shape[axis] - 1 - pick(flipped, axis=axis)
        else:
            idx = pick(x, axis=axis)
        idx = np.asarray(idx, np.int64)
        return (np.expand_dims(idx, axis) if attrs["keepdims"] else idx,)
    reference.__doc__ = (f"The index of the {kind}imum along ``axis`` (int64): the first, or the last with "
                         "select_last_index; keepdims keeps the axis as a 1.")
    return reference


def _arg_compute(kind: str) -> Callable[[list, dict], list[te.Tensor]]:
    """TVM's argmax reduces (index, value) pairs with one tuple reducer; vtakit's reducers are scalar, so this
    takes two: the extreme value along the axis, then the first (or last) index holding it."""
    def compute(ins: list, attrs: dict) -> list[te.Tensor]:
        x = ins[0]
        shape = static_shape(x)
        axis = _norm_axis(f"Arg{kind.capitalize()}", attrs["axis"], len(shape))
        n = shape[axis]
        src = x
        if x.dtype == "bool":  # compare bools as 0/1
            src = te.compute(shape, lambda *i: x[i].astype("uint8"), name="arg_bool")
        extreme = nn_extra.reduce(src, [axis], kind, keepdims=True, name=f"arg{kind}_value")
        k = te.reduce_axis((0, n), "k")
        keep = bool(attrs["keepdims"])
        out_shape = tuple(1 if a == axis else s for a, s in enumerate(shape)) if keep else \
            tuple(s for a, s in enumerate(shape) if a != axis)
        last = bool(attrs["select_last_index"])

        def body(*i):
            outer = list(i)
            if not keep:
                outer.insert(axis, 0)
            at = tuple(k if a == axis else v for a, v in enumerate(outer))
            hit = src[at] == extreme[tuple(outer[:axis]) + (0,) + tuple(outer[axis + 1:])]
            index = k.var.astype("int64")
            if last:
                return te.max(ir.Select(hit, index, ir.const(-1, "int64")), axis=k)
            return te.min(ir.Select(hit, index, ir.const(n, "int64")), axis=k)

        return [te.compute(out_shape, body, name=f"arg{kind}", tag="reduce")]
    return compute


for _kind in ("max", "min"):
    register_op(f"Arg{_kind.capitalize()}", pattern=Pattern.COMM_REDUCE,
                attrs={"axis": 0, "keepdims": 1, "select_last_index": 0},
                compute=_arg_compute(_kind))(_arg_reference(_kind))


# ---------------------------------------------------------------------------- cumulative sum
def _cumsum_axis(axis_input: Any, rank: int) -> int:
    values = np.asarray(axis_input).reshape(-1)
    if values.size != 1:
        raise GraphError(f"CumSum: axis must be a single integer, got {values.tolist()}")
    return _norm_axis("CumSum", int(values[0]), rank)


def _cumsum_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    """TVM's ``topi.cumsum`` runs a sequential scan, which vtakit's TE cannot express; here the axis is cut into
    blocks of about sqrt(n): each output sums its own block up to it (a masked reduction over the block), plus
    the totals of the blocks before it (after it, with ``reverse``): O(n sqrt n) per line, every stage a whole
    reduction. float16 accumulates in float32."""
    x = ins[0]
    shape = static_shape(x)
    axis = _cumsum_axis(ins[1], len(shape))
    work = "float32" if x.dtype == "float16" else x.dtype
    exclusive, reverse = bool(attrs["exclusive"]), bool(attrs["reverse"])
    n = shape[axis]
    if n == 0:
        return [te.compute(shape, lambda *i: x[i], name="cumsum")]
    size = max(1, math.isqrt(n - 1) + 1)  # ceil(sqrt(n))
    blocks = -(-n // size)

    def read(i: tuple, j: ir.PrimExpr) -> ir.PrimExpr:
        """x along the line of ``i`` at ``j`` (clamped: a padded position is masked out, never read past n)."""
        v = x[tuple(te.min(j, ir.const(n - 1, j.dtype)) if a == axis else w for a, w in enumerate(i))]
        return v.astype(work) if work != x.dtype else v

    r = te.reduce_axis((0, size), "r")
    block_shape = tuple(blocks if a == axis else d for a, d in enumerate(shape))

    def block_total(*b):
        j = b[axis] * size + r
        return te.sum(read(b, j), axis=r, where=j < n)

    totals = te.compute(block_shape, block_total, name="cumsum_block_total", tag="reduce")
    c = te.reduce_axis((0, blocks), "c")

    def before(*b):  # the totals of the blocks before (reverse: after) each block
        at = tuple(c if a == axis else w for a, w in enumerate(b))
        return te.sum(totals[at], axis=c, where=(c > b[axis]) if reverse else (c < b[axis]))

    carried = te.compute(block_shape, before, name="cumsum_carry", tag="reduce")
    q = te.reduce_axis((0, size), "q")

    def within(*i):
        pos = i[axis]
        j = (pos // size) * size + q
        if reverse:
            cond = j > pos if exclusive else j >= pos
        else:
            cond = j < pos if exclusive else j <= pos
        return te.sum(read(i, j), axis=q, where=te.all(j < n, cond))

    partial = te.compute(shape, within, name="cumsum_within", tag="reduce")

    def out(*i):
        v = partial[i] + carried[tuple(i[a] // size if a == axis else w for a, w in enumerate(i))]
        return v.astype(x.dtype) if work != x.dtype else v

    return [te.compute(shape, out, name="cumsum")]


@register_op("CumSum", pattern=Pattern.COMM_REDUCE, attrs={"exclusive": 0, "reverse": 0}, const_inputs=(1,),
             compute=_cumsum_compute)
def _cumsum_reference(ins, attrs):
    """Cumulative sum along the (constant) axis input; exclusive starts from 0, reverse sums from the end."""
    x = ins[0]
    axis = _cumsum_axis(ins[1], x.ndim)
    work = np.float32 if x.dtype == np.float16 else x.dtype
    v = np.flip(x, axis) if attrs["reverse"] else x
    out = np.cumsum(v, axis=axis, dtype=work)
    if attrs["exclusive"] and v.shape[axis]:
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=axis)), np.take(out, range(v.shape[axis] - 1),
                                                                                   axis=axis)], axis=axis)
    if attrs["reverse"]:
        out = np.flip(out, axis)
    return (np.ascontiguousarray(out).astype(x.dtype),)


# ---------------------------------------------------------------------------- TopK
def _topk_args(x_shape: Sequence[int], k_input: Any, attrs: dict) -> tuple[int, int]:
    axis = _norm_axis("TopK", attrs["axis"], len(x_shape))
    values = np.asarray(k_input).reshape(-1)
    if values.size != 1:
        raise GraphError(f"TopK: K must be a single integer, got {values.tolist()}")
    k = int(values[0])
    if not 0 <= k <= x_shape[axis]:
        raise GraphError(f"TopK: K = {k} for an axis of {x_shape[axis]}; expected 0..{x_shape[axis]}")
    return axis, k


def _topk_reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """The K largest (``largest``=1) or smallest elements along ``axis`` and their int64 indices, sorted; equal
    values in index order (as onnxruntime orders them)."""
    x = ins[0]
    axis, k = _topk_args(x.shape, ins[1], attrs)
    n = x.shape[axis]
    if attrs["largest"]:  # a stable ascending sort of the reversed axis, reversed: descending, ties by index
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, idx, axis=axis), idx


def _topk_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    """TVM's topk sorts with an extern; vtakit's TE has none, so each element's rank along the axis is counted
    (the elements that beat it: larger, or equal at a smaller index), then output p takes the element ranked p:
    two reductions, O(n^2) per line."""
    x = ins[0]
    shape = static_shape(x)
    axis, k = _topk_args(shape, ins[1], attrs)
    n = shape[axis]
    largest = bool(attrs["largest"])
    j = te.reduce_axis((0, n), "j")

    def rank(*i):
        other = x[tuple(j if a == axis else v for a, v in enumerate(i))]
        mine = x[i]
        beats = (other > mine) if largest else (other < mine)
        wins = ir.Or(beats, ir.And(other == mine, j.var < i[axis]))
        return te.sum(ir.Select(wins, ir.const(1, "int32"), ir.const(0, "int32")), axis=j)

    ranks = te.compute(shape, rank, name="topk_rank", tag="reduce")
    out_shape = tuple(k if a == axis else s for a, s in enumerate(shape))
    r = te.reduce_axis((0, n), "r")

    def pick(*p):
        at = tuple(r if a == axis else v for a, v in enumerate(p))
        return te.sum(ir.Select(ranks[at] == p[axis], r.var.astype("int64"), ir.const(0, "int64")), axis=r)

    indices = te.compute(out_shape, pick, name="topk_indices", tag="reduce")
    values = te.compute(out_shape, lambda *p: x[tuple(indices[p].astype("int32") if a == axis else v
                                                      for a, v in enumerate(p))], name="topk_values")
    return [values, indices]


register_op("TopK", pattern=Pattern.OPAQUE, attrs={"axis": -1, "largest": 1, "sorted": 1}, const_inputs=(1,),
            compute=_topk_compute)(_topk_reference)
