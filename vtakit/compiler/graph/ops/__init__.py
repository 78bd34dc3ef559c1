"""The graph operators, registered in :mod:`vtakit.compiler.graph.op` when this package is imported.

One module per family: :mod:`.elementwise` (unary, binary with broadcasting, activations,
comparisons), :mod:`.tensor` (shape manipulation, indexing, casts, constants), :mod:`.nn`
(convolution, matrix products, pooling, normalisation, softmax, reductions), :mod:`.resize`.
"""

from vtakit.compiler.graph.ops import elementwise, nn, qnn, resize, tensor  # noqa: F401

__all__: list[str] = []
