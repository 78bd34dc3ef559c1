"""Shape and dtype inference: type every value from the graph inputs and constants forward.

The importer types nodes as it emits them; passes that create nodes (fusion, BN folding, layout)
may leave types stale or missing. This pass recomputes all of them from the operator registry
(:func:`vtakit.compiler.graph.op.infer_types`), so later passes and the build can rely on them.
"""

from __future__ import annotations

from vtakit.compiler.graph.ir import Graph, TensorType
from vtakit.compiler.graph.op import infer_types as infer_node_types
from vtakit.compiler.graph.passes.registry import graph_pass
from vtakit.errors import GraphError

__all__ = ["infer_types"]


@graph_pass("InferType")
def infer_types(graph: Graph) -> Graph:
    g = graph.copy()
    types: dict[str, TensorType] = {}
    for name in g.inputs:
        if name not in graph.types:
            raise GraphError(f"graph input {name!r} has no type")
        types[name] = graph.types[name]
    for name, value in g.constants.items():
        types[name] = TensorType(value.shape, value.dtype.name)
    for node in g.nodes:
        ins = [types.get(i) if i else None for i in node.inputs]
        consts = [g.constants.get(i) if i else None for i in node.inputs]
        for name, ty in zip(node.outputs, infer_node_types(node, ins, consts)):
            types[name] = ty
    g.types = types
    return g
