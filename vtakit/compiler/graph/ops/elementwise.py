"""Element-wise graph operators: unary math, activations, broadcasting binary ops and comparisons.

Each operator registers its numpy reference and its TE compute (built from
:mod:`vtakit.compiler.ops` where an op exists there). Broadcasting follows numpy, as ONNX does.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler import ops
from vtakit.compiler.graph.op import Pattern, register_op

__all__: list[str] = []


@register_op("Relu", pattern=Pattern.ELEMWISE, compute=lambda ins, attrs: [ops.relu(ins[0])])
def _relu(ins, attrs):
    """max(x, 0)."""
    return (np.maximum(ins[0], np.zeros((), ins[0].dtype)),)


@register_op("Add", pattern=Pattern.BROADCAST, compute=lambda ins, attrs: [ops.add(ins[0], ins[1])])
def _add(ins, attrs):
    """a + b with numpy broadcasting."""
    return (np.add(ins[0], ins[1]),)
