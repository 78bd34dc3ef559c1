"""Dead-node elimination: drop nodes none of whose outputs reach a graph output, and unused constants.

Folding and rewrites leave producers nobody reads (the ``Shape`` chain behind a folded ``Reshape``,
a ``BatchNormalization`` folded into its convolution's weights); this pass walks back from the
graph outputs and keeps only what they need.
"""

from __future__ import annotations

from vtakit.compiler.graph.ir import Graph
from vtakit.compiler.graph.passes.registry import graph_pass

__all__ = ["eliminate_dead_nodes"]


@graph_pass("DeadCodeElimination")
def eliminate_dead_nodes(graph: Graph) -> Graph:
    g = graph.copy()
    live = set(g.outputs)
    kept = []
    for node in reversed(g.nodes):
        if any(o in live for o in node.outputs):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    g.nodes = kept[::-1]
    g.constants = {k: v for k, v in g.constants.items() if k in live}
    keep_types = live | set(g.inputs) | {o for n in g.nodes for o in n.outputs}
    g.types = {k: v for k, v in g.types.items() if k in keep_types}
    return g
