"""ONNX converters for element-wise operators (math, activations, comparisons)."""

from __future__ import annotations

from vtakit.compiler.graph.frontend.registry import register_passthrough

__all__: list[str] = []

register_passthrough("Relu", since=6)
register_passthrough("Add", since=7)
