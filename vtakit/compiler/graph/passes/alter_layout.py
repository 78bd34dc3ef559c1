"""Layout choice for the CPU: convolutions with constant weights run on blocked, pre-packed weights.

The CPU's fast convolution (:func:`vtakit.compiler.ops.nn.conv2d_nchw_packed`, TVM's
``conv2d_NCHWc``) computes in the blocked layout ``[N, C/b, H, W, b]``, keeping a tile of pixels x
``b`` output channels in vector registers, and wants its weight packed as ``[O/b, I, KH, KW, b]``.
This pass rewrites each ``Conv`` where that pays (2-D, one group, no dilation, float32, a constant
weight, a channel block of at least one vector: :func:`vtakit.compiler.ops.cpu.conv2d_channel_block`)
into a ``PackedConv`` node whose weight is packed here, once, at compile time. The kernel reads
and writes NCHW, so no layout transform runs between layers: the packing transform is hoisted out
of the network entirely, into the constants.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from vtakit.compiler import ops, te
from vtakit.compiler.graph.ir import Graph, Node, TensorType, unique_name
from vtakit.compiler.graph.op import Pattern, get_op, normalize_attrs, register_op
from vtakit.compiler.graph.ops.nn import conv_window
from vtakit.compiler.graph.passes.registry import graph_pass
from vtakit.compiler.ops import cpu
from vtakit.compiler.ops.layout import pack_conv2d_kernel

__all__ = ["alter_layout", "PACKED_CONV", "REWRITES"]

PACKED_CONV = "PackedConv"


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


# op -> rule giving its CPU-layout replacement (None: leave the node as it is)
REWRITES: dict[str, Callable[[Graph, Node], Node | None]] = {"Conv": _pack_conv}


@graph_pass("AlterOpLayout", required=("InferType",), opt_level=3)
def alter_layout(graph: Graph) -> Graph:
    g = graph.copy()
    g.nodes = [(REWRITES[n.op](g, n) if n.op in REWRITES else None) or n for n in g.nodes]
    return g
