"""The packed graph operators of accelerator builds, with numpy references.

After :mod:`.graph_pack` a graph for the ``vta`` target holds

- accelerator layers on packed tensors: ``vta.conv2d`` (data NCHW{b}n{bi}c, weight
  OIHW{bo}o{bi}i, optional addend and multiplier ``(O/bo, b, bo)`` int32, an optional fused residual
  NCHW{b}n{bo}c int8 last, output NCHW{b}n{bo}c),
  ``vta.dense`` (data ``(M/b, K/bi, b, bi)``, weight ``(N/bo, K/bi, bo, bi)``, output
  ``(M/b, N/bo, b, bo)``) and ``vta.add`` (two packed tensors of one layout);
- CPU layout steps at the borders of accelerator regions: ``vta.pack_nchw``,
  ``vta.unpack_nchw``, ``vta.pack_matrix``, ``vta.unpack_matrix`` and ``vta.repack_nchw``
  (a BLOCK_OUT-packed tensor to BLOCK_IN, when the two differ).

The references compute exactly what the kernels do (channels zero-padded to whole blocks), so
:func:`vtakit.graph.evaluate` runs a packed graph too and gives the original graph's values.
The layout operators also have TE computes, so the ``vta`` target compiles them as ordinary CPU
kernels (kernel cache, saved modules); the accelerator operators have none: the target compiles
them with :mod:`vtakit.compiler.topi_vta`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vtakit.compiler import te
from vtakit.compiler.graph.ir import TensorType
from vtakit.compiler.graph.op import REQUIRED, Pattern, register_op
from vtakit.compiler.graph.ops.qnn import conv2d_accumulate, residual_requantize
from vtakit.errors import GraphError
from vtakit.runtime.layout_kernels import LAYOUT_KERNELS
from vtakit.runtime.packing import (pack_matrix, pack_nchw, requantize, shift_add_value, unpack_matrix,
                                    unpack_nchw)

__all__ = ["VTA_CONV2D", "VTA_DENSE", "VTA_ADD", "ACCEL_NODE_OPS", "LAYOUT_OPS", "layout_op"]

VTA_CONV2D, VTA_DENSE, VTA_ADD = "vta.conv2d", "vta.dense", "vta.add"
#: the packed operators that run on the accelerator
ACCEL_NODE_OPS = (VTA_CONV2D, VTA_DENSE, VTA_ADD)
#: graph operator -> the runtime layout kernel (:mod:`vtakit.runtime.layout_kernels`) it runs
LAYOUT_OPS = {f"vta.{name}": name for name in LAYOUT_KERNELS}


def layout_op(kernel: str) -> str:
    """The graph operator of layout kernel ``kernel``."""
    return f"vta.{kernel}"


def _out_type(types: list, consts: list, attrs: dict) -> list[TensorType]:
    return [TensorType(tuple(attrs["out_shape"]), attrs.get("out_dtype", "int8"))]


def _channels(packed: np.ndarray | None) -> np.ndarray | None:
    """A packed ``(O/bo, b, bo)`` per-channel operand as ``(O,)`` (batch lane 0)."""
    return None if packed is None else np.ascontiguousarray(packed[:, 0, :]).reshape(-1)


def _operands(ins: list, spec: Any) -> tuple[np.ndarray | None, Any]:
    k = 2
    addend = None
    if spec.with_addend:
        addend, k = _channels(ins[k]), k + 1
    mult = spec.multiplier
    if mult == "tensor":
        mult = _channels(ins[k])
    elif isinstance(mult, str):      # "shift_add:K": (O/bo, K, b, bo) SHR amounts, the multipliers they realise
        from vtakit.compiler.topi_vta.epilogue import form_terms  # noqa: PLC0415

        if ins[k].ndim != 4 or ins[k].shape[1] != form_terms(mult):
            raise GraphError(f"a {mult!r} multiplier operand must be (O/bo, {form_terms(mult)}, b, bo), "
                             f"got {ins[k].shape}")
        amounts = ins[k][:, :, 0, :].transpose(0, 2, 1).reshape(-1, ins[k].shape[1])
        mult = shift_add_value(amounts).astype(np.int32)
    return addend, mult


# spec: the LayerSpec; blocks: (BATCH, BLOCK_IN, BLOCK_OUT); source: the qnn layer's output name
_ACCEL_ATTRS = {"spec": REQUIRED, "blocks": REQUIRED, "out_shape": REQUIRED, "source": ""}


@register_op(VTA_CONV2D, pattern=Pattern.OPAQUE, attrs=_ACCEL_ATTRS, infer=_out_type)
def _vta_conv2d(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """The accelerator's packed conv2d with its requantisation epilogue (``attrs["spec"]``, a LayerSpec)."""
    spec, (b, _, bo) = attrs["spec"], attrs["blocks"]
    x = unpack_nchw(ins[0])
    cob, cib, kh, kw, bo_, bi = ins[1].shape
    w = ins[1].transpose(0, 4, 1, 5, 2, 3).reshape(cob * bo_, cib * bi, kh, kw)
    from vtakit.compiler.topi_vta.workloads import Conv2dWorkload  # noqa: PLC0415

    wl = Conv2dWorkload.from_key(spec.args)
    acc = conv2d_accumulate(x, w, {"strides": wl.stride, "pads": wl.pad, "dilations": (1, 1), "group": 1})
    addend, mult = _operands(ins, spec)
    if spec.residual is not None:        # the last input: packed like the output
        y = residual_requantize(acc, addend, spec.shift, spec.clip, unpack_nchw(ins[-1]), *spec.residual)
    else:
        y = requantize(acc, addend, spec.shift, spec.clip, multiplier=mult, pre_shift=spec.pre_shift)
    return (pack_nchw(y, b, bo),)


@register_op(VTA_DENSE, pattern=Pattern.OPAQUE, attrs=_ACCEL_ATTRS, infer=_out_type)
def _vta_dense(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """The accelerator's packed dense with its requantisation epilogue."""
    spec, (b, _, bo) = attrs["spec"], attrs["blocks"]
    x, w = unpack_matrix(ins[0]), unpack_matrix(ins[1])
    acc = (x.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)
    addend, mult = _operands(ins, spec)
    y = requantize(acc, addend, spec.shift, spec.clip, multiplier=mult, pre_shift=spec.pre_shift)
    return (pack_matrix(y, b, bo),)


@register_op(VTA_ADD, pattern=Pattern.OPAQUE, attrs=_ACCEL_ATTRS, infer=_out_type)
def _vta_add(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
    """The accelerator's residual add of two tensors packed alike (``qnn.add`` element by element)."""
    spec = attrs["spec"]
    la, lb, addend = spec.add
    t = (ins[0].astype(np.int32) << np.int32(la)) + (ins[1].astype(np.int32) << np.int32(lb))
    return (requantize(t, np.int32(addend), spec.shift, spec.clip),)


# ---------------------------------------------------------------------------- layout computes (CPU kernels)
def _padded_read(x: te.Tensor, index: list, limits: list[int]) -> object:
    """``x[index]`` where every index is below its limit, else 0 (indices clamped: no read out of bounds)."""
    inside = [i < n for i, n in zip(index, limits) if n is not None]
    clamped = [i if n is None else te.min(i, n - 1) for i, n in zip(index, limits)]
    value = x[tuple(clamped)]
    return te.if_then_else(te.all(*inside), value, te.const(0, x.dtype)) if inside else value


def _pack_nchw_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x, p = ins[0], attrs["params"]
    n, c = (int(d) for d in x.shape[:2])
    b, k = p["batch"], p["block"]
    pads = [n if n % b else None, c if c % k else None]

    def value(no, co, h, w, ni, ci):
        return _padded_read(x, [no * b + ni, co * k + ci, h, w], [*pads, None, None])

    return [te.compute(tuple(attrs["out_shape"]), value, name="pack_nchw", tag="injective")]


def _unpack_nchw_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x = ins[0]
    b, k = int(x.shape[4]), int(x.shape[5])
    return [te.compute(tuple(attrs["out_shape"]), lambda n, c, h, w: x[n // b, c // k, h, w, n % b, c % k],
                       name="unpack_nchw", tag="injective")]


def _pack_matrix_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x, p = ins[0], attrs["params"]
    m, k = (int(d) for d in x.shape)
    r, c = p["rows"], p["cols"]
    pads = [m if m % r else None, k if k % c else None]
    return [te.compute(tuple(attrs["out_shape"]),
                       lambda mo, ko, mi, ki: _padded_read(x, [mo * r + mi, ko * c + ki], pads),
                       name="pack_matrix", tag="injective")]


def _unpack_matrix_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x = ins[0]
    r, c = int(x.shape[2]), int(x.shape[3])
    return [te.compute(tuple(attrs["out_shape"]), lambda m, k: x[m // r, k // c, m % r, k % c],
                       name="unpack_matrix", tag="injective")]


def _repack_nchw_compute(ins: list, attrs: dict) -> list[te.Tensor]:
    x, p = ins[0], attrs["params"]
    src, dst, channels = int(x.shape[5]), p["block"], p["channels"]

    def value(n, co, h, w, ni, ci):
        ch = te.min(co * dst + ci, channels - 1)
        inside = co * dst + ci < channels
        return te.if_then_else(inside, x[n, ch // src, h, w, ni, ch % src], te.const(0, x.dtype))

    return [te.compute(tuple(attrs["out_shape"]), value, name="repack_nchw", tag="injective")]


_LAYOUT_COMPUTES = {"pack_nchw": _pack_nchw_compute, "unpack_nchw": _unpack_nchw_compute,
                    "pack_matrix": _pack_matrix_compute, "unpack_matrix": _unpack_matrix_compute,
                    "repack_nchw": _repack_nchw_compute}


def _register_layout(op: str, kernel: str) -> None:
    def reference(ins: list, attrs: dict) -> tuple[np.ndarray, ...]:
        out = np.zeros(tuple(attrs["out_shape"]), ins[0].dtype)
        LAYOUT_KERNELS[kernel](ins[0], out, **dict(attrs["params"]))
        return (out,)

    reference.__doc__ = f"The CPU layout step {kernel!r} (vtakit.runtime.layout_kernels)."
    register_op(op, pattern=Pattern.OPAQUE, attrs={"params": {}, "out_shape": REQUIRED},
                compute=_LAYOUT_COMPUTES[kernel],
                infer=lambda types, consts, attrs: [TensorType(tuple(attrs["out_shape"]), types[0].dtype)])(reference)


for _op, _kernel in LAYOUT_OPS.items():
    _register_layout(_op, _kernel)
