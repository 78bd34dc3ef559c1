"""ONNX converters for neural-network operators (Conv, Gemm, pooling, normalisation, ...)."""

from __future__ import annotations

__all__: list[str] = []
