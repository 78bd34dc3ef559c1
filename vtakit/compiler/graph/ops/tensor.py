"""Shape-manipulating, indexing and constant-producing graph operators (the injective family).

Inputs that fix a shape (``Reshape``'s target, ``Slice``'s starts and ends, ...) are compile-time
constants in vtakit's static-shaped graphs: they are listed in ``const_inputs`` and reach the
compute as numpy arrays.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.graph.ir import TensorType
from vtakit.compiler.graph.op import Pattern, register_op

__all__: list[str] = []


def _shape_fold(types: list[TensorType], attrs: dict) -> tuple[np.ndarray, ...]:
    shape = types[0].shape
    rank = len(shape)
    start = attrs["start"] + rank if attrs["start"] < 0 else attrs["start"]
    end = rank if attrs["end"] is None else attrs["end"] + rank if attrs["end"] < 0 else attrs["end"]
    return (np.array(shape[max(0, min(start, rank)):max(0, min(end, rank))], dtype=np.int64),)


@register_op("Shape", pattern=Pattern.OPAQUE, attrs={"start": 0, "end": None}, fold_types=_shape_fold)
def _shape(ins, attrs):
    """The input's shape as an int64 vector (dims ``start:end``, opset 15)."""
    return _shape_fold([TensorType(ins[0].shape, ins[0].dtype.name)], attrs)


@register_op("Constant", pattern=Pattern.OPAQUE, attrs={"value": None})
def _constant(ins, attrs):
    """The constant ``value``."""
    return (np.asarray(attrs["value"]),)
