"""``from_onnx``: read an ONNX model (file or ``ModelProto``) into a typed, static-shaped :class:`Graph`.

The importer checks the whole model before converting anything, so that a model with several
unsupported operators gets one :class:`UnsupportedOperatorError` listing all of them. It then
converts node by node, typing each graph node as it is emitted and folding those whose value is
known at compile time (constant inputs, or ``Shape`` of a static shape). That is what lets
converters see constant shapes, axes and pads however the exporter computed them.

Graph inputs that also have an initializer (models of IR version < 4) are constants, not run-time
inputs. Symbolic or unknown input dims must be fixed by ``input_shapes``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import external_data_helper, helper, numpy_helper

from vtakit.compiler.graph.frontend import registry
from vtakit.compiler.graph.frontend.registry import MAX_OPSET, MIN_OPSET, OnnxNode
from vtakit.compiler.graph.ir import Graph, Node, TensorType
from vtakit.compiler.graph.op import fold_node, infer_types, normalize_attrs
from vtakit.errors import GraphError, UnsupportedOperatorError

__all__ = ["from_onnx", "load_model", "model_opset"]


def load_model(model: str | os.PathLike | onnx.ModelProto, base_dir: str | os.PathLike | None = None) -> onnx.ModelProto:
    """The ``ModelProto`` of ``model`` (a path or a proto) with its external data loaded."""
    if isinstance(model, onnx.ModelProto):
        if base_dir is not None or _has_external_data(model):
            try:
                external_data_helper.load_external_data_for_model(model, os.fspath(base_dir or "."))
            except (OSError, ValueError) as exc:
                raise GraphError(f"cannot load the model's external data from {os.fspath(base_dir or '.')!r}: "
                                 f"{exc}") from exc
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise GraphError(f"from_onnx expects a path or an onnx.ModelProto, got {type(model).__name__}")
    path = Path(model)
    if not path.is_file():
        raise GraphError(f"ONNX model file {os.fspath(path)!r} does not exist")
    try:
        proto = onnx.load(os.fspath(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError / RuntimeWarning-derived errors
        raise GraphError(f"{os.fspath(path)!r} is not a readable ONNX model (truncated or another format): "
                         f"{exc}") from exc
    if not proto.graph.node and not proto.graph.output:
        raise GraphError(f"{os.fspath(path)!r} is not an ONNX model: it has no graph")
    if _has_external_data(proto):
        try:
            external_data_helper.load_external_data_for_model(proto, os.fspath(base_dir or path.parent))
        except (OSError, ValueError) as exc:
            raise GraphError(f"cannot load the external data of {os.fspath(path)!r}: {exc}") from exc
    return proto


def _has_external_data(model: onnx.ModelProto) -> bool:
    return any(external_data_helper.uses_external_data(t)
               for t in external_data_helper._get_all_tensors(model))  # noqa: SLF001 (onnx's own walker)


def model_opset(model: onnx.ModelProto) -> int:
    """The default-domain opset the model imports (checked against the supported range)."""
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    opset = versions[0] if versions else 1
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise GraphError(f"the model imports ONNX opset {opset}; vtakit supports opsets {MIN_OPSET} to {MAX_OPSET}")
    return opset


def _decode_attr(attr: onnx.AttributeProto) -> Any:
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        raise GraphError(f"attribute {attr.name!r} holds a subgraph; control flow is not supported")
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [v.decode("utf-8") if isinstance(v, bytes) else v for v in value]
    return value


def _np_dtype(elem_type: int, what: str) -> str:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        raise GraphError(f"{what} has ONNX element type {elem_type}, which vtakit does not support") from None


class _Builder:
    """The :class:`registry.ConvertContext` the converters write into."""

    def __init__(self, opset: int, graph: Graph) -> None:
        self.opset = opset
        self.graph = graph
        self._names: set[str] = set(graph.inputs) | set(graph.constants)

    def fresh(self, hint: str) -> str:
        base = re.sub(r"\s+", "_", hint) or "v"
        name, i = base, 0
        while name in self._names:
            i += 1
            name = f"{base}_{i}"
        self._names.add(name)
        return name

    def add_constant(self, value: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self._set_constant(name, np.asarray(value))
        return name

    def _set_constant(self, name: str, value: np.ndarray) -> None:
        self._names.add(name)
        self.graph.constants[name] = value
        self.graph.types[name] = TensorType(value.shape, value.dtype.name)

    def constant(self, name: str) -> np.ndarray | None:
        return self.graph.constants.get(name) if name else None

    def type_of(self, name: str) -> TensorType:
        return self.graph.type_of(name)

    def emit(self, op: str, inputs: list[str], outputs: list[str], attrs: dict[str, Any] | None = None,
             name: str = "") -> None:
        node = Node(op, list(inputs), list(outputs), normalize_attrs(op, attrs or {}, name), name)
        for i in node.inputs:
            if i and i not in self.graph.types:
                raise GraphError(f"{op} node {name!r} reads {i!r}, which no earlier node produces")
        types = [self.graph.types.get(i) if i else None for i in node.inputs]
        consts = [self.graph.constants.get(i) if i else None for i in node.inputs]
        self._names.update(node.outputs)
        folded = fold_node(node, types, consts)
        if folded is not None:
            for out, value in zip(node.outputs, folded):
                self._set_constant(out, np.asarray(value))
            return
        for out, ty in zip(node.outputs, infer_types(node, types, consts)):
            self.graph.types[out] = ty
        self.graph.nodes.append(node)


def _check_supported(model: onnx.ModelProto, opset: int) -> None:
    missing = []
    for node in model.graph.node:
        if registry.find_converter(node.op_type, node.domain, opset) is None:
            missing.append((node.domain or "ai.onnx", node.op_type, node.name))
    if missing:
        listed = "; ".join(f"{d}::{op} (node {n!r})" for d, op, n in missing)
        supported = ", ".join(op for (_, op) in registry.supported_onnx_ops())
        raise UnsupportedOperatorError(
            f"the model uses {len(missing)} unsupported operator node(s) at opset {opset}: {listed}. "
            f"Supported operators: {supported}")


def _input_type(value: onnx.ValueInfoProto, input_shapes: Mapping[str, Sequence[int]]) -> TensorType:
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        raise GraphError(f"graph input {value.name!r} is not a tensor")
    dtype = _np_dtype(tensor.elem_type, f"graph input {value.name!r}")
    if value.name in input_shapes:
        shape = tuple(input_shapes[value.name])
        if tensor.HasField("shape"):
            declared = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
            if len(declared) != len(shape) or any(d is not None and d != s for d, s in zip(declared, shape)):
                raise GraphError(f"input_shapes[{value.name!r}] = {shape} does not match the model's declared shape "
                                 f"{tuple(d if d is not None else '?' for d in declared)}")
        if not all(isinstance(s, (int, np.integer)) and s >= 0 for s in shape):
            raise GraphError(f"input_shapes[{value.name!r}] must be non-negative ints, got {shape!r}")
        return TensorType(shape, dtype)
    if not tensor.HasField("shape"):
        raise GraphError(f"graph input {value.name!r} has no shape; give it with input_shapes={{{value.name!r}: (...)}}")
    shape = []
    for axis, dim in enumerate(tensor.shape.dim):
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            shape.append(dim.dim_value)
        else:
            label = dim.dim_param or "?"
            raise GraphError(f"graph input {value.name!r} has a symbolic dim {label!r} at axis {axis}; fix it with "
                             f"input_shapes={{{value.name!r}: (...)}}")
    return TensorType(tuple(shape), dtype)


def from_onnx(model: str | os.PathLike | onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None,
              base_dir: str | os.PathLike | None = None) -> Graph:
    """Import an ONNX model as a typed :class:`Graph` with static shapes."""
    from vtakit.compiler.graph import frontend  # noqa: F401  (registers every converter)

    proto = load_model(model, base_dir)
    opset = model_opset(proto)
    _check_supported(proto, opset)
    input_shapes = dict(input_shapes or {})
    g = proto.graph
    initializers = {t.name: t for t in g.initializer}
    runtime_inputs = [v for v in g.input if v.name not in initializers]
    unknown = sorted(set(input_shapes) - {v.name for v in runtime_inputs})
    if unknown:
        raise GraphError(f"input_shapes names {unknown}, which are not run-time inputs of the model; its inputs are "
                         f"{[v.name for v in runtime_inputs]}")
    graph = Graph([], [v.name for v in runtime_inputs], [v.name for v in g.output], name=g.name or "main")
    for v in runtime_inputs:
        graph.types[v.name] = _input_type(v, input_shapes)
    builder = _Builder(opset, graph)
    for name, tensor in initializers.items():
        try:
            builder._set_constant(name, numpy_helper.to_array(tensor))
        except Exception as exc:
            raise GraphError(f"cannot read initializer {name!r}: {exc}") from exc
    for proto_node in g.node:
        node = OnnxNode(proto_node.op_type, list(proto_node.input), list(proto_node.output),
                        {a.name: _decode_attr(a) for a in proto_node.attribute}, proto_node.name, proto_node.domain)
        convert = registry.find_converter(node.op_type, node.domain, opset)
        assert convert is not None  # checked by _check_supported
        try:
            convert(builder, node)
        except GraphError as exc:
            if node.label in str(exc) or (node.name and repr(node.name) in str(exc)):
                raise
            raise type(exc)(f"{node.label}: {exc}") from exc
    for out in graph.outputs:
        if out not in graph.types:
            raise GraphError(f"graph output {out!r} is never produced")
    return graph.verify()
