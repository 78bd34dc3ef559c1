"""The network graph IR: typed values, nodes with an operator and attributes, constants as numpy arrays.

A :class:`Graph` is what the ONNX frontend produces and what every graph pass consumes and returns.
It is deliberately plain: nodes are kept in topological order in a list, values are named (names
may contain ``/`` and ``:``, as exported models use them), and every value that a node reads is a
graph input, a constant or the output of an earlier node. An empty input name stands for an
omitted optional input, as in ONNX.

Operators are named after ONNX (``Conv``, ``Relu``, ...) with their attributes normalised by the
frontend: every attribute the operator defines is present, with its default filled in (see
:mod:`.op`). Passes may add vtakit operators of their own; they register like any other.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Container, Iterable, Iterator

import numpy as np

from vtakit.errors import GraphError

__all__ = ["TensorType", "Node", "Graph", "unique_name"]


def unique_name(hint: str, taken: Container[str]) -> str:
    """``hint``, or ``hint_1``, ``hint_2``, ...: the first that is not ``taken``."""
    name, i = hint, 0
    while name in taken:
        i += 1
        name = f"{hint}_{i}"
    return name


@dataclass(frozen=True)
class TensorType:
    """The static type of a value: a shape of non-negative ints and a numpy dtype name."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in self.shape):
            raise GraphError(f"a tensor shape must be non-negative integers, got {self.shape!r}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype).name)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{'x'.join(map(str, self.shape))}]"


@dataclass
class Node:
    """One operator application: ``outputs = op(*inputs, **attrs)``."""

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    def __str__(self) -> str:
        attrs = ", ".join(f"{k}={_short(v)}" for k, v in sorted(self.attrs.items()))
        args = ", ".join(i if i else "<none>" for i in self.inputs)
        return f"{', '.join(self.outputs)} = {self.op}({args}{'; ' + attrs if attrs else ''})"


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array{list(value.shape)}" if value.size > 8 else repr(value.tolist())
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"[{len(value)} items]"
    return repr(value)


@dataclass
class Graph:
    """A network: its run-time inputs and outputs (by name), nodes in topological order, the type of
    every value, and the constants (weights, folded values) as numpy arrays."""

    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    types: dict[str, TensorType] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    name: str = "main"
    #: facts about the graph that are not values: what the importer learnt (``qdq_scale_error``: layer
    #: name -> relative error bound of a power-of-two scale, see ``docs/quantization_import.md``), ...
    metadata: dict[str, Any] = field(default_factory=dict)

    # -- queries ---------------------------------------------------------------------------------
    def type_of(self, value: str) -> TensorType:
        try:
            return self.types[value]
        except KeyError:
            raise GraphError(f"value {value!r} has no type; run shape inference first") from None

    def producers(self) -> dict[str, Node]:
        """Value name -> the node that writes it."""
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        """Value name -> the nodes that read it (in node order)."""
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in dict.fromkeys(i for i in node.inputs if i):
                users.setdefault(name, []).append(node)
        return users

    def is_constant(self, value: str) -> bool:
        return value in self.constants

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def copy(self) -> "Graph":
        """A copy whose node list, nodes and dicts (metadata included, one level deep) can be changed freely;
        constant arrays are shared."""
        return Graph([copy.copy(n) for n in self.nodes], list(self.inputs), list(self.outputs), dict(self.types),
                     dict(self.constants), self.name, dict(self.metadata))

    def with_nodes(self, nodes: Iterable[Node]) -> "Graph":
        g = self.copy()
        g.nodes = list(nodes)
        return g

    # -- checks and printing ---------------------------------------------------------------------
    def verify(self) -> "Graph":
        """Check the structural invariants; raise :class:`GraphError` naming the first violation."""
        defined: set[str] = set()
        for name in self.inputs:
            if name in self.constants:
                raise GraphError(f"graph input {name!r} is also a constant")
            if name in defined:
                raise GraphError(f"graph input {name!r} is listed twice")
            defined.add(name)
        defined.update(self.constants)
        for node in self.nodes:
            for name in node.inputs:
                if name and name not in defined:
                    raise GraphError(f"node {node.name or node.op!r} ({node.op}) reads {name!r}, which is not a graph "
                                     "input, a constant or the output of an earlier node")
            for name in node.outputs:
                if not name:
                    raise GraphError(f"node {node.name or node.op!r} ({node.op}) has an unnamed output")
                if name in defined:
                    raise GraphError(f"value {name!r} is written twice (again by node {node.name or node.op!r})")
                defined.add(name)
        for name in self.outputs:
            if name not in defined:
                raise GraphError(f"graph output {name!r} is never produced")
        for name, value in self.constants.items():
            if not isinstance(value, np.ndarray):
                raise GraphError(f"constant {name!r} must be a numpy array, got {type(value).__name__}")
        for name, ty in self.types.items():
            if name in self.constants and (tuple(self.constants[name].shape) != ty.shape
                                           or self.constants[name].dtype.name != ty.dtype):
                raise GraphError(f"constant {name!r} is {self.constants[name].dtype}{list(self.constants[name].shape)} "
                                 f"but typed {ty}")
        return self

    def __str__(self) -> str:
        def typed(name: str) -> str:
            ty = self.types.get(name)
            return f"{name}: {ty}" if ty is not None else name

        lines = [f"graph {self.name}({', '.join(typed(i) for i in self.inputs)}) "
                 f"[{len(self.nodes)} nodes, {len(self.constants)} constants]"]
        for node in self.nodes:
            outs = ", ".join(typed(o) for o in node.outputs)
            text = str(node)
            lines.append(f"  {outs} = {text.split(' = ', 1)[1]}")
        lines.append(f"  return {', '.join(self.outputs)}")
        return "\n".join(lines)
