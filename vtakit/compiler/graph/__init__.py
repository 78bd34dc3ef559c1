"""The graph compiler: ONNX import, the graph IR and its passes, and network builds (``vtakit.graph``).

``from_onnx`` reads a model into a :class:`Graph`; passes in :mod:`.passes` rewrite it; ``build``
compiles it for a target into a module the runtime's graph executor runs.
"""

from vtakit.compiler.graph import ops  # noqa: F401  (registers the graph operators)
from vtakit.compiler.graph import passes, zoo  # noqa: F401  (passes registers the graph passes)
from vtakit.compiler.graph.build import build, extract_tasks, optimize
from vtakit.compiler.graph.evaluate import evaluate
from vtakit.compiler.graph.frontend import from_onnx
from vtakit.compiler.graph.ir import Graph, Node, TensorType
from vtakit.compiler.graph.module import InputInfo, NetModule, Profile, load
from vtakit.compiler.graph.op import Pattern, get_op, register_op, registered_ops
from vtakit.compiler.graph.quantize import quantize
from vtakit.compiler.graph import onnx_backend  # noqa: E402  (needs build and from_onnx above)
from vtakit.compiler.graph import vta  # noqa: E402,F401  (registers the accelerator target "vta")

__all__ = ["from_onnx", "Graph", "Node", "TensorType", "evaluate", "Pattern", "get_op", "register_op",
           "registered_ops", "build", "extract_tasks", "optimize", "NetModule", "Profile", "InputInfo", "load", "onnx_backend", "passes", "zoo", "quantize"]
from vtakit.compiler.graph import cuda_target  # noqa: E402,F401  (registers the GPU target "cuda")
