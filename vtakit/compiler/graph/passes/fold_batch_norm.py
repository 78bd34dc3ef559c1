"""Fold an inference ``BatchNormalization`` into the ``Conv`` or ``Gemm`` that feeds it.

``BN(conv(x, W) + b) = conv(x, W * s) + (b - mean) * s + beta`` with ``s = scale / sqrt(var + eps)``
per output channel, and likewise per output column of a ``Gemm``. The rewrite applies when the
producer's output is read by the BN alone and the weights are constants; the folded producer then
writes the BN's output value directly. Which producers fold is a table (:data:`FOLDERS`), one rule
per operator.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from vtakit.compiler.graph.ir import Graph, Node, TensorType
from vtakit.compiler.graph.passes.registry import graph_pass

__all__ = ["fold_batch_norm", "FOLDERS"]


def _bn_affine(g: Graph, bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(s, t) with ``BN(y) = s * y + t`` per channel, or None when BN's parameters are not constants."""
    params = [g.constants.get(name) for name in bn.inputs[1:5]]
    if len(params) != 4 or any(p is None for p in params):
        return None
    scale, beta, mean, var = (p.astype(np.float64) for p in params)
    s = scale / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    return s, beta - mean * s


def _fold_conv(g: Graph, conv: Node, s: np.ndarray, t: np.ndarray) -> Node | None:
    w = g.constants.get(conv.inputs[1])
    bias_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
    b = g.constants.get(bias_name) if bias_name else np.zeros(w.shape[0] if w is not None else 0, np.float64)
    if w is None or b is None or w.shape[0] != s.shape[0]:
        return None
    new_w = (w.astype(np.float64) * s.reshape(-1, *([1] * (w.ndim - 1)))).astype(w.dtype)
    new_b = (b.astype(np.float64) * s + t).astype(w.dtype)
    return Node(conv.op, [conv.inputs[0], _add_constant(g, conv.inputs[1], new_w),
                          _add_constant(g, bias_name or conv.inputs[1] + "_bias", new_b)], [], dict(conv.attrs),
                conv.name)


def _fold_gemm(g: Graph, gemm: Node, s: np.ndarray, t: np.ndarray) -> Node | None:
    b = g.constants.get(gemm.inputs[1])
    c_name = gemm.inputs[2] if len(gemm.inputs) > 2 else ""
    c = g.constants.get(c_name) if c_name else np.zeros((), np.float64)
    if b is None or c is None or b.ndim != 2:
        return None
    trans_b = int(gemm.attrs.get("transB", 0))
    if b.shape[0 if trans_b else 1] != s.shape[0]:
        return None
    scaled = b.astype(np.float64) * (s[:, None] if trans_b else s[None, :])
    new_c = float(gemm.attrs.get("beta", 1.0)) * c.astype(np.float64) * s + t
    attrs = dict(gemm.attrs, beta=1.0)
    return Node(gemm.op, [gemm.inputs[0], _add_constant(g, gemm.inputs[1], scaled.astype(b.dtype)),
                          _add_constant(g, c_name or gemm.inputs[1] + "_bias", new_c.astype(b.dtype))], [], attrs,
                gemm.name)


def _add_constant(g: Graph, hint: str, value: np.ndarray) -> str:
    """A fresh constant named after ``hint`` (the original may be shared with other nodes)."""
    name, k = f"{hint}_bnfold", 0
    while name in g.constants or name in g.types:
        k += 1
        name = f"{hint}_bnfold{k}"
    g.constants[name] = np.require(value, requirements="C")
    return name


# producer op -> rule building the producer with the BN folded in (None when it does not apply)
FOLDERS: dict[str, Callable[[Graph, Node, np.ndarray, np.ndarray], Node | None]] = {
    "Conv": _fold_conv,
    "Gemm": _fold_gemm,
}


@graph_pass("FoldBatchNorm", required=("FoldConstant",))
def fold_batch_norm(graph: Graph) -> Graph:
    g = graph.copy()
    producers = g.producers()
    consumers = g.consumers()
    replaced: dict[int, Node] = {}  # id(producer) -> folded producer
    dropped: set[int] = set()
    for bn in g.nodes:
        if bn.op != "BatchNormalization" or len([o for o in bn.outputs if o]) != 1:
            continue
        producer = producers.get(bn.inputs[0])
        if producer is None or producer.op not in FOLDERS or id(producer) in replaced \
                or len(consumers.get(bn.inputs[0], [])) != 1 or bn.inputs[0] in g.outputs:
            continue
        affine = _bn_affine(g, bn)
        folded = FOLDERS[producer.op](g, producer, *affine) if affine is not None else None
        if folded is None:
            continue
        folded.outputs = [bn.outputs[0]]
        replaced[id(producer)] = folded
        dropped.add(id(bn))
    g.nodes = [replaced.get(id(n), n) for n in g.nodes if id(n) not in dropped]
    for folded in replaced.values():
        for name in folded.inputs[1:]:
            g.types[name] = TensorType(g.constants[name].shape, g.constants[name].dtype.name)
    return g
