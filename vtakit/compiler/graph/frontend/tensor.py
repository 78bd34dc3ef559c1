"""ONNX converters for constants and tensor manipulation (Constant, Shape, Reshape, Slice, ...)."""

from __future__ import annotations

import numpy as np

from vtakit.compiler.graph.frontend.registry import ConvertContext, OnnxNode, converter, register_passthrough
from vtakit.errors import GraphError

__all__: list[str] = []

_CONSTANT_FORMS = {"value": None, "value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                   "value_ints": np.int64}


@converter("Constant", since=1)
def _constant(ctx: ConvertContext, node: OnnxNode) -> None:
    forms = [k for k in node.attrs if k in _CONSTANT_FORMS or k.startswith("value") or k == "sparse_value"]
    if len(forms) != 1 or forms[0] not in _CONSTANT_FORMS:
        raise GraphError(f"{node.label}: expected exactly one of {sorted(_CONSTANT_FORMS)}, got {sorted(node.attrs)}")
    key = forms[0]
    value = np.asarray(node.attrs[key], dtype=_CONSTANT_FORMS[key])
    ctx.emit("Constant", [], node.outputs, {"value": value}, node.name)


register_passthrough("Shape", since=1)
