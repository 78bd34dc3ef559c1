"""The graph's reference evaluator: run every node's numpy reference in order.

This is the golden model for graph passes (a pass is correct when the graph evaluates to the same
outputs before and after it) and the engine of constant folding. It is not fast and not meant to
be: compiled execution is :func:`vtakit.graph.build`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from vtakit.compiler.graph.ir import Graph
from vtakit.compiler.graph.op import run_reference
from vtakit.errors import GraphError

__all__ = ["evaluate", "bind_inputs"]


def bind_inputs(graph: Graph, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """``inputs`` (a dict by name or arrays in input order) as a dict, checked against the graph's input types."""
    if isinstance(inputs, Mapping):
        unknown = sorted(set(inputs) - set(graph.inputs))
        missing = [n for n in graph.inputs if n not in inputs]
        if unknown or missing:
            raise GraphError(f"inputs {unknown} are not graph inputs, and {missing} are missing; the graph's inputs "
                             f"are {graph.inputs}")
        bound = {n: np.asarray(inputs[n]) for n in graph.inputs}
    else:
        arrays = list(inputs)
        if len(arrays) != len(graph.inputs):
            raise GraphError(f"expected {len(graph.inputs)} inputs {graph.inputs}, got {len(arrays)} arrays")
        bound = {n: np.asarray(a) for n, a in zip(graph.inputs, arrays)}
    for name, value in bound.items():
        ty = graph.type_of(name)
        if tuple(value.shape) != ty.shape or value.dtype.name != ty.dtype:
            raise GraphError(f"input {name!r} must be {ty}, got {value.dtype.name}{list(value.shape)}")
    return bound


def evaluate(graph: Graph, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray],
             keep_all: bool = False) -> dict[str, np.ndarray]:
    """The graph's outputs (every value with ``keep_all``) computed by the numpy references."""
    env: dict[str, np.ndarray] = dict(graph.constants)
    env.update(bind_inputs(graph, inputs))
    for node in graph.nodes:
        args = [env[i] if i else None for i in node.inputs]
        for out, value in zip(node.outputs, run_reference(node, args)):
            env[out] = value
    if keep_all:
        return env
    return {name: env[name] for name in graph.outputs}
