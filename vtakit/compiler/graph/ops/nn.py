"""Neural-network graph operators: convolutions, matrix products, pooling, normalisation, softmax,
reductions and resizing, with numpy references and TE computes from :mod:`vtakit.compiler.ops`.
"""

from __future__ import annotations

__all__: list[str] = []
