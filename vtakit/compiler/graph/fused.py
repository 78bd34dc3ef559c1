"""The ``Fused`` operator: a group of nodes that runs as one kernel, as TVM's primitive functions.

Operator fusion (:mod:`.passes.fuse_ops`) replaces each group of nodes by one ``Fused`` node whose
``body`` attribute holds the group: the inner nodes (with their original value names), which of
the node's inputs each inner value name stands for (``params``), which inner values it returns
(``results``), and the compile-time constants the inner nodes read as attributes-like inputs
(``Reshape`` shapes, ``Slice`` bounds). Because ``Fused`` is registered like any operator, a fused
graph still evaluates (its reference runs the inner references) and still types (its compute
chains the inner computes), so fusion is tested for equivalence like every other pass, and
lowering a group is lowering one node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vtakit.compiler.graph.ir import Node
from vtakit.compiler.graph.op import REQUIRED, Pattern, get_op, register_op, run_reference

__all__ = ["FusedBody", "FUSED"]

FUSED = "Fused"


@dataclass
class FusedBody:
    """The group inside a ``Fused`` node."""

    nodes: list[Node]
    params: list[str]
    results: list[str]
    consts: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(n.op for n in self.nodes)

    @property
    def anchor(self) -> Node:
        """The inner node that least fuses (the conv or dense a group is built around)."""
        return max(self.nodes, key=lambda n: get_op(n.op).pattern)

    def __repr__(self) -> str:
        return f"<{'+'.join(self.ops)}>"


def _reference(ins: list[Any], attrs: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """Runs the group's inner nodes with their references."""
    body: FusedBody = attrs["body"]
    env: dict[str, Any] = dict(body.consts)
    env.update(zip(body.params, ins))
    for node in body.nodes:
        for name, value in zip(node.outputs, run_reference(node, [env[i] if i else None for i in node.inputs])):
            env[name] = value
    return tuple(env[r] for r in body.results)


def _compute(ins: list[Any], attrs: dict[str, Any]) -> list[Any]:
    body: FusedBody = attrs["body"]
    env: dict[str, Any] = dict(zip(body.params, ins))
    for node in body.nodes:
        opdef = get_op(node.op)
        args = [None if not name else body.consts[name] if (k in opdef.const_inputs or name not in env)
                else env[name] for k, name in enumerate(node.inputs)]
        for name, tensor in zip(node.outputs, opdef.compute(args, node.attrs)):
            env[name] = tensor
    return [env[r] for r in body.results]


register_op(FUSED, pattern=Pattern.OPAQUE, attrs={"body": REQUIRED}, compute=_compute)(_reference)
