"""Helpers shared by the operator library's compute and schedule modules."""

from __future__ import annotations

from vtakit.compiler import ir
from vtakit.compiler.te.tensor import Tensor

__all__ = ["static_shape"]


def static_shape(t: Tensor) -> tuple[int, ...]:
    """The shape of ``t`` as Python ints (operator shapes are static)."""
    return tuple(int(s.value) if isinstance(s, ir.IntImm) else int(s) for s in t.shape)
