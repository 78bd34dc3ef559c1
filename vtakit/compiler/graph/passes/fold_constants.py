"""Constant folding: nodes whose outputs are known at compile time become constants.

A node folds when every input is a constant, or when its operator's value depends only on its
inputs' types (``Shape``). Folding in topological order makes chains fold whole: the
``Shape -> Gather/Slice -> Concat -> Reshape`` target shapes that exporters emit become one
constant vector, and the ``Reshape`` then reads a constant shape.
"""

from __future__ import annotations

from vtakit.compiler.graph.ir import Graph, Node, TensorType
from vtakit.compiler.graph.op import fold_node
from vtakit.compiler.graph.passes.registry import graph_pass

__all__ = ["fold_constants"]


@graph_pass("FoldConstant", required=("InferType",))
def fold_constants(graph: Graph) -> Graph:
    g = graph.copy()
    kept: list[Node] = []
    for node in g.nodes:
        values = fold_node(node, [g.types.get(i) if i else None for i in node.inputs],
                           [g.constants.get(i) if i else None for i in node.inputs])
        if values is None:
            kept.append(node)
            continue
        for name, value in zip(node.outputs, values):
            g.constants[name] = value
            g.types[name] = TensorType(value.shape, value.dtype.name)
    g.nodes = kept
    # a graph output that became a constant stays an output; an input never folds (it has no producer)
    return g
