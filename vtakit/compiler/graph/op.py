"""The graph operator registry: one :class:`OpDef` per operator, keyed by name.

Everything the graph compiler knows about an operator is registered here, once, as TVM's
``relay/op`` registers pattern and compute per op: its attribute schema (every attribute with its
default), its fusion pattern, its numpy reference (the golden model, also used for constant
folding), and its tensor-expression compute (what the CPU lowering builds). Type inference comes
for free from the compute: the compute is applied to placeholders and the output tensors' shapes
and dtypes are read off; an operator without a compute (one that is always folded, such as
``Shape``) is typed by running its reference on its constant inputs.

Inputs an operator needs at compile time (a ``Reshape``'s target shape, a ``Slice``'s starts) are
named in ``const_inputs``; the compute receives them as numpy arrays, the others as TE tensors.
Omitted optional inputs arrive as ``None``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from vtakit.compiler import te
from vtakit.compiler.graph.ir import Node, TensorType
from vtakit.compiler.ops.common import static_shape
from vtakit.errors import GraphError

__all__ = ["Pattern", "REQUIRED", "OpDef", "register_op", "get_op", "registered_ops", "normalize_attrs",
           "infer_types", "run_reference", "fold_node"]


class Pattern(enum.IntEnum):
    """How an operator fuses (TVM's ``OpPatternKind``; a larger value fuses less)."""

    ELEMWISE = 0          # out[i] = f(in[i])
    BROADCAST = 1         # element-wise with numpy broadcasting
    INJECTIVE = 2         # each output element reads one input element (reshape, transpose, slice, ...)
    COMM_REDUCE = 3       # reductions
    OUT_ELEMWISE_FUSABLE = 4  # conv, dense: element-wise consumers fuse into their output
    OPAQUE = 8            # runs alone


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

Reference = Callable[[list[Any], dict[str, Any]], Sequence[np.ndarray]]
Compute = Callable[[list[Any], dict[str, Any]], Sequence[te.Tensor]]
Infer = Callable[[list[TensorType | None], list[np.ndarray | None], dict[str, Any]], list[TensorType]]


@dataclass(frozen=True)
class OpDef:
    """Everything registered for one graph operator."""

    name: str
    pattern: Pattern
    reference: Reference
    compute: Compute | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    const_inputs: frozenset[int] = frozenset()
    infer: Infer | None = None
    doc: str = ""
    # for operators whose value depends only on their inputs' types (Shape, Size): types -> outputs
    fold_types: Callable[[list[TensorType], dict[str, Any]], Sequence[np.ndarray]] | None = None


_OPS: dict[str, OpDef] = {}


def register_op(name: str, *, pattern: Pattern, attrs: Mapping[str, Any] | None = None,
                const_inputs: Sequence[int] = (), compute: Compute | None = None, infer: Infer | None = None,
                fold_types: Callable[[list[TensorType], dict[str, Any]], Sequence[np.ndarray]] | None = None,
                override: bool = False) -> Callable[[Reference], Reference]:
    """Decorator registering ``reference(inputs, attrs) -> tuple of arrays`` as operator ``name``."""
    def wrap(reference: Reference) -> Reference:
        if name in _OPS and not override:
            raise GraphError(f"graph operator {name!r} is already registered")
        _OPS[name] = OpDef(name, pattern, reference, compute, dict(attrs or {}), frozenset(const_inputs), infer,
                           (reference.__doc__ or "").strip(), fold_types)
        return reference
    return wrap


def get_op(name: str) -> OpDef:
    try:
        return _OPS[name]
    except KeyError:
        raise GraphError(f"unknown graph operator {name!r}; registered: {', '.join(sorted(_OPS))}") from None


def registered_ops() -> dict[str, OpDef]:
    return dict(_OPS)


def normalize_attrs(op: str, attrs: Mapping[str, Any], node_name: str = "") -> dict[str, Any]:
    """``attrs`` completed with the schema's defaults; unknown or missing required attributes are errors."""
    schema = get_op(op).attrs
    where = f"{op} node {node_name!r}" if node_name else f"{op} node"
    unknown = sorted(set(attrs) - set(schema))
    if unknown:
        raise GraphError(f"{where}: unknown attribute(s) {unknown}; {op} takes {sorted(schema)}")
    out = {}
    for key, default in schema.items():
        if key in attrs:
            out[key] = attrs[key]
        elif default is REQUIRED:
            raise GraphError(f"{where}: missing required attribute {key!r}")
        else:
            out[key] = default
    return out


def run_reference(node: Node, inputs: Sequence[np.ndarray | None]) -> tuple[np.ndarray, ...]:
    """Evaluate ``node`` on numpy ``inputs`` with its operator's reference; checks what it returns."""
    result = get_op(node.op).reference(list(inputs), node.attrs)
    if not isinstance(result, (tuple, list)) or not result or not all(isinstance(r, np.ndarray) for r in result):
        raise GraphError(f"the reference of {node.op} returned {type(result).__name__}, expected a non-empty tuple "
                         "of numpy arrays")
    if len(result) < len(node.outputs):
        raise GraphError(f"{node.op} node {node.name!r} has {len(node.outputs)} outputs, its reference gave "
                         f"{len(result)}")
    return tuple(result[:len(node.outputs)])


def infer_types(node: Node, types: Sequence[TensorType | None],
                consts: Sequence[np.ndarray | None]) -> list[TensorType]:
    """The output types of ``node`` given its inputs' types and the values of its constant inputs."""
    opdef = get_op(node.op)
    folded = fold_node(node, types, consts)
    if folded is not None:
        out = [TensorType(r.shape, r.dtype.name) for r in folded]
    elif opdef.infer is not None:
        out = opdef.infer(list(types), list(consts), node.attrs)
    elif opdef.compute is None:
        missing = [n for c, n in zip(consts, node.inputs) if n and c is None]
        raise GraphError(f"{node.op} node {node.name!r} can only be computed at compile time, but inputs {missing} "
                         "are not constants")
    else:
        args: list[Any] = []
        for i, (name, ty, value) in enumerate(zip(node.inputs, types, consts)):
            if not name:
                args.append(None)
            elif i in opdef.const_inputs:
                if value is None:
                    raise GraphError(f"{node.op} node {node.name!r}: input {i} ({name!r}) must be a constant known "
                                     "at compile time")
                args.append(value)
            else:
                assert ty is not None
                args.append(te.placeholder(ty.shape, ty.dtype, name=f"in{i}"))
        tensors = opdef.compute(args, node.attrs)
        out = [TensorType(static_shape(t), t.dtype) for t in tensors]
    if len(out) < len(node.outputs):
        raise GraphError(f"{node.op} node {node.name!r} has {len(node.outputs)} outputs, type inference gave "
                         f"{len(out)}")
    return list(out[:len(node.outputs)])


def fold_node(node: Node, types: Sequence[TensorType | None],
              consts: Sequence[np.ndarray | None]) -> tuple[np.ndarray, ...] | None:
    """The values of ``node``'s outputs when they are known at compile time: every input is a constant, or
    the operator's value depends on its inputs' types only (``Shape``). None otherwise."""
    opdef = get_op(node.op)
    if opdef.fold_types is not None and all(t is not None for t, n in zip(types, node.inputs) if n):
        values = tuple(opdef.fold_types(list(types), node.attrs))
        return values[:len(node.outputs)]
    if all(c is not None for c, n in zip(consts, node.inputs) if n):
        return run_reference(node, consts)
    return None
