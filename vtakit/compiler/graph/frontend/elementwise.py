"""ONNX converters for element-wise operators (math, activations, comparisons, ``Clip``).

Most map one to one onto the graph operator of the same name (:func:`register_passthrough`, with
the opset from which vtakit reads them: the binary operators' pre-7 ``broadcast``/``axis``
attributes are below the supported range). ``Clip`` before opset 11 takes its bounds as attributes;
the converter turns them into constant inputs, the graph operator's form.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.graph.frontend.registry import ConvertContext, OnnxNode, converter, register_passthrough
from vtakit.errors import GraphError

__all__ = ["PASSTHROUGH", "GELU_APPROXIMATIONS"]

# ONNX op -> the opset from which its semantics (as the graph operator of that name) hold
PASSTHROUGH: dict[str, int] = {
    "Add": 7, "Sub": 7, "Mul": 7, "Div": 7, "Pow": 7, "PRelu": 7, "Equal": 7, "Less": 7, "Greater": 7,
    "LessOrEqual": 12, "GreaterOrEqual": 12, "And": 7, "Or": 7, "Xor": 7, "Mod": 10,
    "Min": 6, "Max": 6, "Sum": 6, "Mean": 6,
    "Sqrt": 6, "Exp": 6, "Log": 6, "Neg": 6, "Abs": 6, "Reciprocal": 6, "Erf": 9, "Sigmoid": 6, "Tanh": 6,
    "Relu": 6, "LeakyRelu": 6, "Elu": 6, "Selu": 6, "HardSigmoid": 6, "HardSwish": 14, "Softplus": 1,
    "Where": 9, "Not": 1, "Clip": 11, "Softsign": 1, "ThresholdedRelu": 10, "Celu": 12, "Shrink": 9, "Sign": 9,
    "Floor": 6, "Ceil": 6, "Sin": 7, "Cos": 7, "IsNaN": 9, "IsInf": 10,
}

# Gelu's approximate attribute: the forms ONNX defines
GELU_APPROXIMATIONS = ("none", "tanh")

for _op, _since in PASSTHROUGH.items():
    register_passthrough(_op, since=_since)


@converter("Clip", since=6)
def _clip_attributes(ctx: ConvertContext, node: OnnxNode) -> None:
    """Clip-6: ``min``/``max`` attributes (absent: unbounded) become 0-d constant inputs."""
    dtype = ctx.type_of(node.input(0)).dtype
    bounds = [ctx.add_constant(np.array(node.attrs[k], dtype), f"{node.name or 'clip'}_{k}") if k in node.attrs
              else "" for k in ("min", "max")]
    ctx.emit("Clip", [node.input(0), *bounds], node.outputs, {}, node.name)


@converter("Gelu", since=20)
def _gelu(ctx: ConvertContext, node: OnnxNode) -> None:
    """One to one; ``approximate`` is ``none`` (the erf form) or ``tanh``."""
    approximate = node.attrs.get("approximate", "none")
    if approximate not in GELU_APPROXIMATIONS:
        raise GraphError(f"{node.label}: approximate={approximate!r} is not a Gelu form; expected one of "
                         f"{list(GELU_APPROXIMATIONS)}")
    ctx.emit("Gelu", node.inputs, node.outputs, node.attrs, node.name)
