"""Layout choice for the CPU: convolutions with constant weights run on blocked, pre-packed weights.

The CPU's fast convolution (:func:`vtakit.compiler.ops.nn.conv2d_nchw_packed`, TVM's
``conv2d_NCHWc``) computes in the blocked layout ``[N, C/b, H, W, b]``, keeping a tile of pixels x
``b`` output channels in vector registers, and wants its weight packed as ``[O/b, I, KH, KW, b]``.
This pass rewrites each ``Conv`` where that pays (2-D, one group, no dilation, float32, a constant
weight, a channel block of at least one vector: :func:`vtakit.compiler.ops.cpu.conv2d_channel_block`)
into a ``PackedConv`` node whose weight is packed here, once, at compile time. The kernel reads
and writes NCHW, so no layout transform runs between layers: the packing transform is hoisted out
of the network entirely, into the constants.

``MatMul`` of ``[..., M, K]`` by a ``[K, N]`` matrix (a Linear layer) becomes a ``PackedMatMul``: one
dense kernel over the rows of every batch (:func:`vtakit.compiler.ops.nn.dense_packed`), its right
operand packed ``[N/b, K, b]`` here when it is a float32 constant, else by the kernel at run time.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from vtakit.compiler import ops, te
from vtakit.compiler.graph.ir import Graph, Node, TensorType, unique_name
from vtakit.compiler.graph.op import Pattern, get_op, normalize_attrs, register_op
from vtakit.compiler.graph.ops.nn import _accumulator, conv_window
from vtakit.compiler.graph.passes.registry import graph_pass
from vtakit.compiler.ops import cpu
from vtakit.compiler.ops.layout import pack_conv2d_kernel, pack_dense_weight

__all__ = ["alter_layout", "PACKED_CONV", "PACKED_MATMUL", "REWRITES"]

PACKED_CONV = "PackedConv"
PACKED_MATMUL = "PackedMatMul"


def _unpack(packed: np.ndarray) -> np.ndarray:
    blocks, c, kh, kw, block = packed.shape
    return packed.transpose(0, 4, 1, 2, 3).reshape(blocks * block, c, kh, kw)


def _conv_attrs(packed_shape: tuple[int, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    return normalize_attrs("Conv", {"kernel_shape": list(packed_shape[2:4]), "strides": list(attrs["strides"]),
                                    "pads": list(attrs["pads"])})


def _reference(ins: list[Any], attrs: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """Conv with a weight packed ``[O/b, I, KH, KW, b]``; pads ``(top, left, bottom, right)``."""
    x, packed = ins[0], ins[1]
    return get_op("Conv").reference([x, _unpack(packed), *ins[2:]], _conv_attrs(packed.shape, attrs))


def _compute(ins: list[Any], attrs: dict[str, Any]) -> list[te.Tensor]:
    x, packed = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    out = ops.conv2d_nchw_packed(x, packed, tuple(attrs["strides"]), tuple(attrs["pads"]))
    if bias is None:
        return [out]
    return [te.compute(out.shape, lambda n, c, y, x_: out[n, c, y, x_] + bias[c], name="bias_add", tag="bias_add")]


register_op(PACKED_CONV, pattern=Pattern.OUT_ELEMWISE_FUSABLE, attrs={"strides": (1, 1), "pads": (0, 0, 0, 0)},
            compute=_compute)(_reference)


def _pack_conv(g: Graph, node: Node) -> Node | None:
    if len(node.inputs) < 2 or node.inputs[1] not in g.constants or node.attrs.get("group", 1) != 1:
        return None
    x_type, weight = g.type_of(node.inputs[0]), g.constants[node.inputs[1]]
    if len(x_type.shape) != 4 or weight.ndim != 4 or x_type.dtype != "float32" or weight.dtype != np.float32:
        return None
    window = conv_window("Conv", x_type.shape, weight.shape, node.attrs)
    if any(d != 1 for d in window.dilations):
        return None
    block = cpu.conv2d_channel_block(weight.shape[0], "float32")
    if block < cpu.vector_lanes("float32"):
        return None  # a block narrower than a vector does not pay
    name = unique_name(f"{node.inputs[1]}_packed{block}", g.types.keys() | g.constants.keys())
    g.constants[name] = pack_conv2d_kernel(weight, block)
    g.types[name] = TensorType(g.constants[name].shape, "float32")
    pads = (window.pads_begin[0], window.pads_begin[1], window.pads_end[0], window.pads_end[1])
    return Node(PACKED_CONV, [node.inputs[0], name, *node.inputs[2:3]], list(node.outputs),
                {"strides": tuple(window.strides), "pads": pads}, node.name)


def _matmul_reference(ins: list[Any], attrs: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """MatMul of ``[..., M, K]`` by a weight packed ``[N/b, K, b]`` (``block`` 0: an unpacked ``[K, N]``)."""
    x, weight = ins[0], ins[1]
    if attrs["block"]:
        blocks, k, block = weight.shape
        weight = weight.transpose(1, 0, 2).reshape(k, blocks * block)
    return get_op("MatMul").reference([x, weight], {})


def _matmul_compute(ins: list[Any], attrs: dict[str, Any]) -> list[te.Tensor]:
    x, weight = ins[0], ins[1]
    acc = _accumulator(x.dtype)
    if not attrs["block"]:  # packed at run time, one panel per thread right before its use
        k, n = weight.shape
        block = cpu.dense_pack_block(x.dtype, out_features=int(n))
        w = weight
        weight = te.compute((int(n) // block, int(k), block), lambda z, r, c: w[r, z * block + c],
                            name="weight_pack", tag="weight_pack")
    out = ops.dense_packed(x, weight, out_dtype=acc)
    if out.dtype != x.dtype:
        wide = out
        out = te.compute(wide.shape, lambda *i: wide[i].astype(x.dtype), name="matmul_cast")
    return [out]


register_op(PACKED_MATMUL, pattern=Pattern.OUT_ELEMWISE_FUSABLE, attrs={"block": 0},
            compute=_matmul_compute)(_matmul_reference)


def _pack_matmul(g: Graph, node: Node) -> Node | None:
    """MatMul ``[..., M, K] x W[K, N]`` (a Linear layer): the batch dims fold into the rows of one dense
    kernel (TVM's dense strategy). A constant float32 ``W`` is packed into column panels here, once;
    any other ``W`` is packed by the kernel at run time."""
    if len(node.inputs) != 2:
        return None
    x_type, w_type = g.type_of(node.inputs[0]), g.type_of(node.inputs[1])
    if len(x_type.shape) < 2 or len(w_type.shape) != 2 or x_type.dtype != w_type.dtype:
        return None
    weight = g.constants.get(node.inputs[1])
    if weight is None or x_type.dtype != "float32":
        return Node(PACKED_MATMUL, list(node.inputs), list(node.outputs), {"block": 0}, node.name)
    block = cpu.dense_pack_block("float32", out_features=weight.shape[1])
    name = unique_name(f"{node.inputs[1]}_packed{block}", g.types.keys() | g.constants.keys())
    g.constants[name] = pack_dense_weight(np.ascontiguousarray(weight.T), block)
    g.types[name] = TensorType(g.constants[name].shape, "float32")
    return Node(PACKED_MATMUL, [node.inputs[0], name], list(node.outputs), {"block": block}, node.name)


# op -> rule giving its CPU-layout replacement (None: leave the node as it is)
REWRITES: dict[str, Callable[[Graph, Node], Node | None]] = {"Conv": _pack_conv, "MatMul": _pack_matmul}


@graph_pass("AlterOpLayout", required=("InferType",), opt_level=3)
def alter_layout(graph: Graph) -> Graph:
    g = graph.copy()
    g.nodes = [(REWRITES[n.op](g, n) if n.op in REWRITES else None) or n for n in g.nodes]
    return g
