"""The ONNX frontend: :func:`from_onnx` and one converter module per operator family.

Importing this package registers every converter (and, through :mod:`..ops`, every graph op).
"""

from vtakit.compiler.graph import ops  # noqa: F401  (graph operators first: converters emit them)
from vtakit.compiler.graph.frontend import einsum, elementwise, nn, quantized, tensor  # noqa: F401
from vtakit.compiler.graph.frontend.importer import from_onnx, load_model, model_opset

__all__ = ["from_onnx", "load_model", "model_opset"]
