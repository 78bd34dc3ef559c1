"""``build(graph, target)``: compile a graph into a :class:`NetModule`.

The build runs the target's graph passes, lowers each kernel group to compiled code, places every
value in one arena and hands the runtime's graph executor a plan of kernel calls.
"""

from __future__ import annotations

from typing import Any, Sequence

from vtakit.compiler.graph.ir import Graph, Node
from vtakit.compiler.graph.lowering import lower_group
from vtakit.compiler.graph.module import NetModule
from vtakit.compiler.graph.op import fold_node
from vtakit.errors import GraphError
from vtakit.runtime.graph_executor import Plan, Step, ValueInfo

__all__ = ["build"]

_ALIGN = 64


def _fold_constants(graph: Graph) -> Graph:
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
    g.nodes = kept
    return g


def build(graph: Graph, target: str = "llvm", *, config: Any = None, opt_level: int = 3,
          disabled_passes: Sequence[str] = (), tuning_log: Any = None, cache_dir: Any = None) -> NetModule:
    """Compile ``graph`` for ``target`` into a module whose ``run`` executes the whole network."""
    if not isinstance(graph, Graph):
        raise GraphError(f"build expects a vtakit.graph.Graph, got {type(graph).__name__}")
    g = _fold_constants(graph.verify())
    values: dict[str, ValueInfo] = {}
    offset = 0

    def place(name: str) -> None:
        nonlocal offset
        if name in values:
            return
        ty = g.type_of(name)
        if name in g.constants:
            values[name] = ValueInfo(name, ty.shape, ty.dtype, None)
            return
        values[name] = ValueInfo(name, ty.shape, ty.dtype, offset)
        offset += -(-ty.nbytes // _ALIGN) * _ALIGN

    for name in g.inputs:
        place(name)
    kernels = []
    steps = []
    for k, node in enumerate(g.nodes):
        kernel = lower_group(g, [node], target, name=f"{node.op.lower()}_{k}")
        for name in (*kernel.inputs, *kernel.outputs):
            place(name)
        steps.append(Step(node.name or f"{node.op}_{k}", len(kernels), (*kernel.inputs, *kernel.outputs),
                          len(kernel.outputs), (node.op,), target))
        kernels.append(kernel.module)
    for name in g.outputs:
        place(name)
    plan = Plan(values, tuple(g.inputs), tuple(g.outputs), tuple(steps), offset)
    return NetModule(plan, kernels, {n: g.constants[n] for n, v in values.items() if v.offset is None},
                     target=target)
