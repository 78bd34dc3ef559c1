"""``VTAGraphPack``: rewrite the accelerator layers onto packed tensors (TVM's graph_pack).

Each layer :mod:`.partition` chose becomes its packed operator (:mod:`.ops`): ``vta.conv2d``
on NCHW{BATCH}n{BLOCK_IN}c data and OIHW{BLOCK_OUT}o{BLOCK_IN}i weights, ``vta.dense`` on
``(M/b, K/bi, b, bi)`` x ``(N/bo, K/bi, bo, bi)``, ``vta.add`` on two packed tensors; a conv with a
fused residual reads it as one more packed input (NCHW{BATCH}n{BLOCK_OUT}c, last). Weights,
addends and multipliers are packed here, once, into new constants (channel counts that are not
whole blocks zero-padded). Tensors are packed and unpacked only at the borders of accelerator
regions: a CPU layout step (``vta.pack_nchw`` / ``vta.pack_matrix``) where a value produced on
the CPU (or a graph input) feeds an accelerator layer, and one (``vta.unpack_nchw`` /
``vta.unpack_matrix``) where an accelerator layer's output is read by the CPU or is a graph
output. The unpack writes the value's original name, so the boundary tensors of a ``vta`` build
and of an ``llvm`` build carry the same names. Consecutive accelerator layers pass packed tensors
directly (a ``vta.repack_nchw`` CPU step between them when BLOCK_IN != BLOCK_OUT).
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.graph.ir import Graph, Node, TensorType, unique_name
from vtakit.compiler.graph.passes.registry import graph_pass
from vtakit.compiler.graph.ops.qnn import RESIDUAL_INPUT
from vtakit.compiler.graph.vta.context import VTABuildContext, current_context
from vtakit.compiler.graph.vta.layers import LayerSpec, expand_groups
from vtakit.compiler.graph.vta.ops import layout_op
from vtakit.runtime.packing import pack_bias, pack_matrix, pack_oihw, shift_add_amounts

__all__ = ["graph_pack", "vta_graph_pack"]


class _Packer:
    """The rewrite of one graph: new nodes, packed values and packed constants."""

    def __init__(self, g: Graph, ctx: VTABuildContext) -> None:
        self.g, self.ctx = g, ctx
        cfg = ctx.config
        self.b, self.bi, self.bo = cfg.batch, cfg.block_in, cfg.block_out
        self.nodes: list[Node] = []
        self.packed: dict[str, tuple[str, str, int]] = {}   # value -> (packed value, "nchw"/"matrix", block)
        self.layout_steps: dict[tuple[str, str, int], str] = {}
        self.const_cache: dict[tuple[str, str], str] = {}

    def fresh(self, hint: str) -> str:
        return unique_name(hint, self.g.types.keys() | self.g.constants.keys())

    def layout(self, kernel: str, src: str, dst: str, shape: tuple[int, ...], dtype: str, note: str,
               **params: int) -> None:
        self.g.types[dst] = TensorType(shape, dtype)
        self.nodes.append(Node(layout_op(kernel), [src], [dst], {"params": params, "out_shape": shape},
                               f"{kernel}:{src}"))
        self.ctx.notes[dst] = note

    def packed_input(self, value: str, kind: str, block: int) -> str:
        """``value`` in the layout an accelerator layer reads, packing (or repacking) it when needed."""
        key = (value, kind, block)
        if key in self.layout_steps:
            return self.layout_steps[key]
        if value in self.packed:
            pv, pkind, pblock = self.packed[value]
            if (pkind, pblock) == (kind, block):
                return pv
            if pkind == kind == "nchw":
                shape = self.g.type_of(value).shape
                dst = self.fresh(f"{value}/vta_repacked")
                self.layout(f"repack_{kind}", pv, dst, _nchw_packed(shape, self.b, block), "int8",
                            f"repack between accelerator layers: BLOCK_OUT={pblock} != BLOCK_IN={block}",
                            batch=self.b, channels=shape[1], block=block)
                self.layout_steps[key] = dst
                return dst
        shape = self.g.type_of(value).shape
        dst = self.fresh(f"{value}/vta_packed")
        if kind == "nchw":
            self.layout("pack_nchw", value, dst, _nchw_packed(shape, self.b, block), "int8",
                        "pack at a CPU -> accelerator boundary", batch=self.b, block=block)
        else:
            self.layout("pack_matrix", value, dst, _matrix_packed(shape, self.b, block), "int8",
                        "pack at a CPU -> accelerator boundary", rows=self.b, cols=block)
        self.layout_steps[key] = dst
        return dst

    def constant(self, name: str, what: str, array: np.ndarray) -> str:
        key = (name, what)
        if key not in self.const_cache:
            dst = self.fresh(f"{name}/vta_{what}")
            self.g.constants[dst] = array
            self.g.types[dst] = TensorType(array.shape, array.dtype.name)
            self.const_cache[key] = dst
        return self.const_cache[key]

    def per_channel(self, node: Node, k: int, channels: int, what: str) -> str:
        value = np.asarray(self.g.constants[node.inputs[k]])
        full = np.broadcast_to(value.reshape(-1) if value.size > 1 else value.reshape(()), (channels,))
        return self.constant(node.inputs[k], what, pack_bias(full.astype(np.int32), self.b, self.bo))

    def shift_add(self, node: Node, channels: int, terms: int) -> str:
        """A per-channel multiplier as the SHR amounts of the shift-and-add epilogue of ``terms``
        terms (the layer's, from its spec), packed ``(O/bo, terms, b, bo)``."""
        value = np.asarray(self.g.constants[node.inputs[3]])
        full = np.broadcast_to(value.reshape(-1) if value.size > 1 else value.reshape(()), (channels,))
        amounts = shift_add_amounts(full, terms)
        packed = np.stack([pack_bias(np.ascontiguousarray(amounts[:, k]), self.b, self.bo)
                           for k in range(amounts.shape[1])], axis=1)
        return self.constant(node.inputs[3], f"shift_add{terms}", np.ascontiguousarray(packed))

    def accel(self, node: Node, spec: LayerSpec, consumers: dict[str, list[Node]]) -> None:
        g, out = self.g, node.outputs[0]
        if spec.kind == "add":
            ins = [self.packed_input(v, "nchw", self.bo) for v in node.inputs[:2]]
            kind, block = "nchw", self.bo
            out_shape = g.type_of(ins[0]).shape
        else:
            kind = "nchw" if spec.kind == "conv2d" else "matrix"
            w = np.asarray(g.constants[node.inputs[1]])
            ins = [self.packed_input(node.inputs[0], kind, self.bi)]
            if kind == "nchw":
                group = int(node.attrs["group"])
                ins.append(self.constant(node.inputs[1], f"weight_g{group}" if group > 1 else "weight",
                                         pack_oihw(expand_groups(w, group), self.bo, self.bi)))
            else:
                ins.append(self.constant(node.inputs[1], "weight", pack_matrix(w, self.bo, self.bi)))
            if spec.with_addend:
                ins.append(self.per_channel(node, 2, w.shape[0], "addend"))
            if spec.multiplier == "tensor":
                ins.append(self.per_channel(node, 3, w.shape[0], "multiplier"))
            elif isinstance(spec.multiplier, str):          # "shift_add:K": K terms
                from vtakit.compiler.topi_vta.epilogue import form_terms  # noqa: PLC0415

                ins.append(self.shift_add(node, w.shape[0], form_terms(spec.multiplier)))
            if spec.residual is not None:       # a fused residual add: packed like the output
                ins.append(self.packed_input(node.inputs[RESIDUAL_INPUT], "nchw", self.bo))
            shape = g.type_of(out).shape
            out_shape = _nchw_packed(shape, self.b, self.bo) if kind == "nchw" else _matrix_packed(shape, self.b,
                                                                                                   self.bo)
            block = self.bo
        packed_out = self.fresh(f"{out}/vta")
        g.types[packed_out] = TensorType(out_shape, "int8")
        cfg = self.ctx.config
        self.nodes.append(Node(f"vta.{spec.kind}", ins, [packed_out],
                               {"spec": spec, "blocks": (cfg.batch, cfg.block_in, cfg.block_out),
                                "out_shape": out_shape, "source": out}, node.name or out))
        self.packed[out] = (packed_out, kind, block)
        accel_readers = [c for c in consumers.get(out, []) if self.reads_packed(c, out)]
        if out in g.outputs or len(accel_readers) < len(consumers.get(out, [])):
            unpack = "unpack_nchw" if kind == "nchw" else "unpack_matrix"
            self.nodes.append(Node(layout_op(unpack), [packed_out], [out],
                                   {"params": {}, "out_shape": g.type_of(out).shape}, f"{unpack}:{out}"))
            self.ctx.notes[out] = "unpack at an accelerator -> CPU boundary"

    def reads_packed(self, consumer: Node, value: str) -> bool:
        """Whether ``consumer`` is an accelerator layer reading ``value`` as a (packed) data input."""
        spec = self.ctx.decisions.get(consumer.outputs[0])
        if spec is None or consumer.op not in ("qnn.conv2d", "qnn.dense", "qnn.add"):
            return False
        k = range(2) if spec.kind == "add" else (0, RESIDUAL_INPUT) if spec.residual is not None else (0,)
        data = [v for i, v in enumerate(consumer.inputs) if i in k]
        return value in data and value not in [v for i, v in enumerate(consumer.inputs) if i not in k]


def _nchw_packed(shape: tuple[int, ...], batch: int, block: int) -> tuple[int, ...]:
    n, c, h, w = shape
    return (-(-n // batch), -(-c // block), h, w, batch, block)


def _matrix_packed(shape: tuple[int, ...], rows: int, cols: int) -> tuple[int, ...]:
    m, k = shape
    return (-(-m // rows), -(-k // cols), rows, cols)


def graph_pack(graph: Graph, ctx: VTABuildContext) -> Graph:
    """``graph`` with ``ctx.decisions``' layers on packed tensors (see the module)."""
    g = graph.copy()
    packer = _Packer(g, ctx)
    consumers = g.consumers()
    for node in g.nodes:
        spec = ctx.decisions.get(node.outputs[0]) if node.outputs else None
        if spec is not None and node.op in ("qnn.conv2d", "qnn.dense", "qnn.add"):
            packer.accel(node, spec, consumers)
        else:
            packer.nodes.append(node)
    g.nodes = packer.nodes
    return g


@graph_pass("VTAGraphPack", required=("VTAPartition",))
def vta_graph_pack(graph: Graph) -> Graph:
    return graph_pack(graph, current_context())
