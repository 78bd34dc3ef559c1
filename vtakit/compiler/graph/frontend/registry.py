"""The ONNX converter registry: one function per ONNX operator and opset range.

Converters are registered by ONNX op type, domain and the opset version from which their
semantics hold (``since``), as onnx's reference evaluator keeps ``Cast_19``-style classes: for a
model importing opset *v*, the converter with the newest ``since`` at or below *v* is used. A
converter receives a :class:`ConvertContext` and the decoded :class:`OnnxNode` and emits graph
nodes through ``ctx.emit``; it may add constants, read the values of constant inputs and the types
of all inputs (the importer types and folds the graph node by node as it is built, so a
``Reshape`` whose shape comes from a ``Shape -> Gather -> Concat`` chain sees a constant).

Most ONNX operators map one to one onto the graph operator of the same name, whose attributes
the importer completes with their defaults: :func:`register_passthrough` registers those.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np
import onnx

from vtakit.compiler.graph.ir import TensorType
from vtakit.errors import GraphError, UnsupportedOperatorError

__all__ = ["OnnxNode", "ConvertContext", "Converter", "converter", "register_passthrough", "find_converter",
           "converters", "supported_onnx_ops", "onnx_dtype", "MIN_OPSET", "MAX_OPSET", "SUPPORTED_DTYPES"]

MIN_OPSET = 7
MAX_OPSET = 27

# the tensor element types vtakit compiles (ONNX's bfloat16, float8, 4- and 2-bit and string types are not)
SUPPORTED_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                    "float32", "float64")


def onnx_dtype(elem_type: int, what: str) -> str:
    """The numpy dtype name of the ONNX element type ``elem_type``; an :class:`UnsupportedOperatorError`
    naming ``what`` and the type when vtakit does not compile it."""
    name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() else \
        str(elem_type)
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        dtype = ""
    if dtype not in SUPPORTED_DTYPES:
        supported = ", ".join(SUPPORTED_DTYPES)
        raise UnsupportedOperatorError(f"{what} has ONNX element type {name}, which vtakit does not support; "
                                       f"supported: {supported}")
    return dtype


@dataclass
class OnnxNode:
    """An ONNX node with its attributes decoded to Python values (ints, floats, str, lists, numpy arrays)."""

    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    domain: str = ""

    @property
    def label(self) -> str:
        return f"{self.op_type} node {self.name!r}" if self.name else f"{self.op_type} node"

    def input(self, i: int) -> str:
        """The name of input ``i``, or ``""`` when it is omitted."""
        return self.inputs[i] if i < len(self.inputs) else ""


class ConvertContext(Protocol):
    """What a converter may do while the importer builds the graph."""

    opset: int

    def emit(self, op: str, inputs: list[str], outputs: list[str], attrs: dict[str, Any] | None = None,
             name: str = "") -> None:
        """Append a graph node (attributes completed with the op's defaults), type it and fold it if constant."""

    def fresh(self, hint: str) -> str:
        """A new value name, unique in the graph, derived from ``hint``."""

    def add_constant(self, value: np.ndarray, hint: str) -> str:
        """Add ``value`` as a constant and return its (fresh) name."""

    def constant(self, name: str) -> np.ndarray | None:
        """The value of ``name`` if it is a constant (initializer, Constant node or folded), else None."""

    def require_constant(self, name: str, what: str) -> np.ndarray:
        """The value of ``name``, which the converter needs at compile time (a :class:`GraphError` naming
        ``what`` when it is not a constant)."""

    def type_of(self, name: str) -> TensorType:
        """The type of an existing value."""


Converter = Callable[[ConvertContext, OnnxNode], None]

# (domain, op_type) -> [(since, converter)] sorted by since
_CONVERTERS: dict[tuple[str, str], list[tuple[int, Converter]]] = {}


def converter(op_type: str, since: int = 1, domain: str = "") -> Callable[[Converter], Converter]:
    """Decorator: ``fn`` converts ``op_type`` for models importing opset ``since`` or newer."""
    def wrap(fn: Converter) -> Converter:
        versions = _CONVERTERS.setdefault((_domain(domain), op_type), [])
        if any(v == since for v, _ in versions):
            raise GraphError(f"an ONNX converter for {op_type} since opset {since} is already registered")
        versions.append((since, fn))
        versions.sort(key=lambda item: item[0])
        return fn
    return wrap


def register_passthrough(op_type: str, since: int = 1, graph_op: str | None = None) -> None:
    """Convert ``op_type`` to the graph operator ``graph_op`` (default: the same name), attributes as given."""
    target = graph_op or op_type

    def convert(ctx: ConvertContext, node: OnnxNode) -> None:
        ctx.emit(target, node.inputs, node.outputs, node.attrs, node.name)

    convert.__name__ = f"convert_{op_type}"
    convert.__doc__ = (f"As the graph operator ``{target}``, attributes as given." if target != op_type
                       else "One to one, attributes as given.")
    converter(op_type, since)(convert)


def _domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def find_converter(op_type: str, domain: str, opset: int) -> Converter | None:
    """The converter for ``op_type`` at ``opset`` (None when the op, or that opset of it, is unsupported)."""
    versions = _CONVERTERS.get((_domain(domain), op_type), [])
    chosen = None
    for since, fn in versions:
        if since <= opset:
            chosen = fn
    return chosen


def converters() -> dict[tuple[str, str], list[tuple[int, Converter]]]:
    """(domain, op_type) -> [(since, converter)], oldest first (what ``docs/onnx_support.md`` is generated from)."""
    return {key: list(versions) for key, versions in sorted(_CONVERTERS.items())}


def supported_onnx_ops() -> dict[tuple[str, str], list[int]]:
    """(domain, op_type) -> the opsets at which a converter's semantics start."""
    return {key: [v for v, _ in versions] for key, versions in sorted(_CONVERTERS.items())}
