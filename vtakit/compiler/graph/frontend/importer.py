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
from vtakit.compiler.graph.frontend.registry import MAX_OPSET, MIN_OPSET, OnnxNode, onnx_dtype
from vtakit.compiler.graph.ir import Graph, Node, TensorType, unique_name
from vtakit.compiler.graph.op import fold_node, get_op, infer_types, normalize_attrs
from vtakit.errors import CompileError, GraphError, UnsupportedOperatorError

__all__ = ["from_onnx", "load_model", "model_opset", "CONTRIB_DOMAIN"]

#: onnxruntime's contrib operator domain (QLinearAdd, QGemm, ... of its QOperator format)
CONTRIB_DOMAIN = "com.microsoft"


def load_model(model: str | os.PathLike | onnx.ModelProto, base_dir: str | os.PathLike | None = None) -> onnx.ModelProto:
    """The ``ModelProto`` of ``model`` (a path or a proto) with its external data loaded."""
    if isinstance(model, onnx.ModelProto):
        if base_dir is not None or _has_external_data(model):
            _load_external_data(model, os.fspath(base_dir or "."), "the model")
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
        _load_external_data(proto, os.fspath(base_dir or path.parent), repr(os.fspath(path)))
    return proto


def _load_external_data(model: onnx.ModelProto, base_dir: str, what: str) -> None:
    try:
        external_data_helper.load_external_data_for_model(model, base_dir)
    except (OSError, ValueError, onnx.checker.ValidationError) as exc:
        raise GraphError(f"cannot load the external data of {what} from {base_dir!r}: {exc}") from exc


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


class _NeedInputs(Exception):
    """Raised while converting: these run-time inputs (all in ``input_values``) are needed at compile time."""

    def __init__(self, inputs: frozenset[str]) -> None:
        super().__init__(sorted(inputs))
        self.inputs = inputs


class _Builder:
    """The :class:`registry.ConvertContext` the converters write into.

    It records which run-time inputs each computed value depends on, so that when a value is needed at
    compile time and its inputs are all in ``input_values``, :func:`from_onnx` can convert again with
    those inputs made constants."""

    def __init__(self, opset: int, graph: Graph, input_values: Mapping[str, np.ndarray] | None = None) -> None:
        self.opset = opset
        self.graph = graph
        self._names: set[str] = set(graph.inputs) | set(graph.constants)
        self._input_values = dict(input_values or {})
        self._deps: dict[str, frozenset[str]] = {name: frozenset([name]) for name in graph.inputs}

    def fresh(self, hint: str) -> str:
        name = unique_name(re.sub(r"\s+", "_", hint) or "v", self._names)
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

    def require_constant(self, name: str, what: str) -> np.ndarray:
        value = self.constant(name)
        if value is None:
            self._need(name)
            raise GraphError(f"{what} ({name!r}) must be a constant known at compile time")
        return value

    def _need(self, name: str) -> None:
        deps = self._deps.get(name, frozenset())
        if deps and deps <= self._input_values.keys():
            raise _NeedInputs(deps)

    def type_of(self, name: str) -> TensorType:
        return self.graph.type_of(name)

    def emit(self, op: str, inputs: list[str], outputs: list[str], attrs: dict[str, Any] | None = None,
             name: str = "") -> None:
        node = Node(op, list(inputs), list(outputs), normalize_attrs(op, attrs or {}, name), name)
        for i in node.inputs:
            if i and i not in self.graph.types:
                raise GraphError(f"{op} node {name!r} reads {i!r}, which no earlier node produces")
        for k in get_op(op).const_inputs:
            if k < len(node.inputs) and node.inputs[k] and node.inputs[k] not in self.graph.constants:
                self._need(node.inputs[k])
        types = [self.graph.types.get(i) if i else None for i in node.inputs]
        consts = [self.graph.constants.get(i) if i else None for i in node.inputs]
        self._names.update(node.outputs)
        folded = fold_node(node, types, consts)
        if folded is not None:
            for out, value in zip(node.outputs, folded):
                self._set_constant(out, np.asarray(value))
            return
        try:
            inferred = infer_types(node, types, consts)
        except CompileError as exc:   # a compute refusing its input shapes or attributes
            raise GraphError(f"{op} node {name!r}: {exc}") from exc
        for out, ty in zip(node.outputs, inferred):
            self.graph.types[out] = ty
        deps = frozenset().union(*(self._deps.get(i, frozenset()) for i in node.inputs if i))
        self._deps.update((out, deps) for out in node.outputs)
        self.graph.nodes.append(node)


def _check_supported(model: onnx.ModelProto, opset: int) -> None:
    missing = []
    for node in model.graph.node:
        if registry.find_converter(node.op_type, node.domain, opset) is None:
            missing.append((node.domain or "ai.onnx", node.op_type, node.name))
    contrib = [(op, n) for d, op, n in missing if d == CONTRIB_DOMAIN]
    if contrib:
        listed = "; ".join(f"{CONTRIB_DOMAIN}::{op} (node {n!r})" for op, n in contrib)
        others = [f"{d}::{op}" for d, op, n in missing if d != CONTRIB_DOMAIN]
        raise UnsupportedOperatorError(
            f"the model uses {len(contrib)} contrib-domain ({CONTRIB_DOMAIN}) operator node(s): {listed}. "
            "Contrib-domain operators are onnxruntime extensions, not ONNX operators, and vtakit does not import "
            "them (onnxruntime's QOperator format writes them, e.g. QLinearAdd, QGemm, QLinearGlobalAveragePool). "
            "Quantise the model in the QDQ format instead: onnxruntime.quantization.quantize_static(..., "
            "quant_format=QuantFormat.QDQ), which vtakit imports (docs/quantization_import.md)"
            + (f". Other unsupported operators: {', '.join(others)}" if others else ""))
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
    dtype = onnx_dtype(tensor.elem_type, f"graph input {value.name!r}")
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
              base_dir: str | os.PathLike | None = None, *,
              input_values: Mapping[str, np.ndarray] | None = None, qdq_scales: str = "exact",
              qdq_multiplier_bits: int | None = None) -> Graph:
    """Import an ONNX model as a typed :class:`Graph` with static shapes.

    ``input_values`` specialises the graph: run-time inputs from which a value the compiler needs at
    compile time is computed (a ``Reshape``'s shape, a ``Slice``'s starts, fed as graph inputs as onnx's
    node tests do) take their value from there and become constants, leaving ``graph.inputs``. Other
    inputs stay run-time inputs whatever ``input_values`` holds.

    Pre-quantised models (QDQ, QLinearConv, ...) import as integer layers (``qnn.conv2d``, ``qnn.dense``,
    ``qnn.add``; docs/quantization_import.md). ``qdq_scales`` says how their requantisation scales are
    realised: ``"exact"`` (a 15-bit fixed-point multiplier per output channel) or ``"power2"`` (rounded to
    powers of two; each layer's relative scale error is in ``graph.metadata["qdq_scale_error"]`` and the
    largest in a warning). ``qdq_multiplier_bits`` (None, or an int in [1, 15]): "exact" multipliers are
    rounded to at most that many set bits -- an accelerator without ALU_MUL multiplies by shift-and-add,
    one term per set bit, so fewer bits run faster -- with each layer's relative scale error in ``graph.metadata["qdq_scale_error"]``."""
    from vtakit.compiler.graph import frontend  # noqa: F401  (registers every converter)
    from vtakit.compiler.graph.passes.fold_qdq import BITS_KEY, MODE_KEY, QDQ_SCALES, check_multiplier_bits, fold_qdq

    if qdq_scales not in QDQ_SCALES:
        raise GraphError(f"qdq_scales must be one of {list(QDQ_SCALES)}, got {qdq_scales!r}")
    check_multiplier_bits(qdq_multiplier_bits)
    options = {MODE_KEY: qdq_scales, **({BITS_KEY: qdq_multiplier_bits} if qdq_multiplier_bits is not None else {})}

    proto = load_model(model, base_dir)
    opset = model_opset(proto)
    _check_supported(proto, opset)
    input_values = dict(input_values or {})
    g = proto.graph
    initializers = {t.name: t for t in g.initializer}
    runtime_inputs = [v for v in g.input if v.name not in initializers]
    for what, names in (("input_shapes", input_shapes or {}), ("input_values", input_values)):
        unknown = sorted(set(names) - {v.name for v in runtime_inputs})
        if unknown:
            raise GraphError(f"{what} names {unknown}, which are not run-time inputs of the model; its inputs are "
                             f"{[v.name for v in runtime_inputs]}")
    types = {v.name: _input_type(v, dict(input_shapes or {})) for v in runtime_inputs}
    for name, value in input_values.items():
        value = np.asarray(value)
        if tuple(value.shape) != types[name].shape or value.dtype.name != types[name].dtype:
            raise GraphError(f"input_values[{name!r}] is {value.dtype.name}{list(value.shape)}, but the input is "
                             f"{types[name]}")
    frozen: set[str] = set()
    while True:
        try:
            graph = _convert(proto, opset, types, {n: np.asarray(input_values[n]) for n in frozen}, input_values,
                             options)
        except _NeedInputs as need:
            if need.inputs <= frozen:
                raise GraphError(f"inputs {sorted(need.inputs)} are needed at compile time") from None
            frozen |= need.inputs
            continue
        if any(n.op.startswith("qnn.") for n in graph.nodes) or len(graph.metadata) > len(options):
            graph = fold_qdq(graph).verify()     # a quantised model: metadata keeps qdq_scales
        else:
            graph.metadata.clear()
        return graph


def _convert(proto: onnx.ModelProto, opset: int, types: Mapping[str, TensorType], frozen: Mapping[str, np.ndarray],
             input_values: Mapping[str, np.ndarray], metadata: Mapping[str, Any] | None = None) -> Graph:
    """One conversion of ``proto``, with the inputs in ``frozen`` as constants."""
    g = proto.graph
    inputs = [name for name in types if name not in frozen]
    graph = Graph([], inputs, [v.name for v in g.output], name=g.name or "main", metadata=dict(metadata or {}))
    graph.types.update((name, types[name]) for name in inputs)
    builder = _Builder(opset, graph, input_values)
    for name, value in frozen.items():
        builder._set_constant(name, value)
    for tensor in g.initializer:
        onnx_dtype(tensor.data_type, f"initializer {tensor.name!r}")
        try:
            builder._set_constant(tensor.name, numpy_helper.to_array(tensor))
        except Exception as exc:
            raise GraphError(f"cannot read initializer {tensor.name!r}: {exc}") from exc
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
