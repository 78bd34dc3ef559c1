"""Lower a group of graph nodes to one CPU kernel: TE computes chained, scheduled, compiled.

A group is a list of nodes (in topological order) that runs as one kernel. Values the group reads
from outside (run-time tensors and weights) become placeholders, in first-use order; values it
writes that are read outside it (or are graph outputs) become the kernel's outputs. Inputs an
operator needs at compile time (``const_inputs``) are passed to its compute as numpy arrays.
The schedule is the operator library's default for the group's outputs
(:func:`vtakit.compiler.ops.cpu.schedule`), which inlines element-wise stages into the anchor op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from vtakit.compiler import ir, te
from vtakit.compiler.build import build as build_schedule
from vtakit.compiler.graph.ir import Graph, Node
from vtakit.compiler.graph.op import get_op
from vtakit.compiler.lower import lower
from vtakit.compiler.ops import cpu
from vtakit.compiler.te.tensor import PlaceholderOp
from vtakit.errors import GraphError

__all__ = ["GroupKernel", "group_tensors", "lower_group", "lower_tensors"]


@dataclass
class GroupKernel:
    """A compiled group: call ``module(*inputs, *outputs)`` with arrays of the listed values."""

    name: str
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    module: Any


def group_tensors(graph: Graph, nodes: Sequence[Node], external: set[str] | None = None
                  ) -> tuple[list[str], list[te.Tensor], list[str], list[te.Tensor]]:
    """The group's TE: (input names, placeholders, output names, output tensors).

    ``external`` names the values read outside the group (default: every consumer not in the group,
    and the graph outputs)."""
    produced = {o for n in nodes for o in n.outputs}
    if external is None:
        inside = {id(n) for n in nodes}
        external = set(graph.outputs)
        for n in graph.nodes:
            if id(n) not in inside:
                external.update(i for i in n.inputs if i in produced)
    env: dict[str, te.Tensor] = {}
    in_names: list[str] = []
    placeholders: list[te.Tensor] = []

    def tensor(name: str) -> te.Tensor:
        if name not in env:
            ty = graph.type_of(name)
            env[name] = te.placeholder(ty.shape, ty.dtype, name=f"in{len(placeholders)}")
            in_names.append(name)
            placeholders.append(env[name])
        return env[name]

    for node in nodes:
        opdef = get_op(node.op)
        if opdef.compute is None:
            raise GraphError(f"{node.op} node {node.name!r} has no compute; it must be folded before lowering")
        args: list[Any] = []
        for i, name in enumerate(node.inputs):
            if not name:
                args.append(None)
            elif i in opdef.const_inputs:
                value = graph.constants.get(name)
                if value is None:
                    raise GraphError(f"{node.op} node {node.name!r}: input {i} ({name!r}) must be a compile-time "
                                     "constant")
                args.append(value)
            else:
                args.append(tensor(name))
        outs = opdef.compute(args, node.attrs)
        for name, t in zip(node.outputs, outs):
            env[name] = t
    out_names = [o for n in nodes for o in n.outputs if o in external]
    out_tensors = []
    for name in out_names:
        t = env[name]
        if isinstance(t.op, PlaceholderOp) or any(t is o for o in out_tensors):
            # an output that is an input (or another output) unchanged: a kernel writes fresh storage
            t = te.compute(t.shape, lambda *i, t=t: t(*i), name=f"copy_{len(out_tensors)}")
        out_tensors.append(t)
    return in_names, placeholders, out_names, out_tensors


def lower_group(graph: Graph, nodes: Sequence[Node], target: str = "llvm", name: str = "group",
                external: set[str] | None = None) -> GroupKernel:
    """Compile ``nodes`` of ``graph`` into one kernel for the CPU ``target``."""
    in_names, placeholders, out_names, out_tensors = group_tensors(graph, nodes, external)
    if not out_tensors:
        raise GraphError(f"group {name!r} produces nothing that is used")
    s = cpu.schedule(out_tensors, target=target)  # blocking follows the target the code is built for
    module = build_schedule(s, [*placeholders, *out_tensors], target=target, name=name)
    return GroupKernel(name, list(nodes), in_names, out_names, module)


def lower_tensors(placeholders: Sequence[te.Tensor], out_tensors: Sequence[te.Tensor], name: str) -> ir.PrimFunc:
    """The loop IR of a group's tensors (from :func:`group_tensors`) under the CPU schedule."""
    return lower(cpu.schedule(list(out_tensors)), [*placeholders, *out_tensors], name=name)


def run_group(kernel: GroupKernel, graph: Graph, env: dict[str, np.ndarray]) -> None:
    """Run ``kernel`` on the values in ``env`` (constants included), storing its outputs in ``env``."""
    args = [env[n] if n in env else graph.constants[n] for n in kernel.inputs]
    outs = [np.empty(graph.type_of(n).shape, graph.type_of(n).dtype) for n in kernel.outputs]
    kernel.module(*args, *outs)
    env.update(zip(kernel.outputs, outs))
