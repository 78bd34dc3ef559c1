"""Graph passes, one per module, registered by name (:mod:`.registry`) and run by :mod:`.manager`.

Importing this package registers every pass: ``InferType``, ``FoldConstant``, ``FoldBatchNorm``,
``FoldQDQ``, ``DeadCodeElimination``, ``AlterOpLayout``, ``FuseOps``. Memory planning (:mod:`.plan_memory`) runs on the build's
kernel steps rather than on the graph, so it is a function, not a registered pass.
"""

from vtakit.compiler.graph.passes import (alter_layout, eliminate_dead_nodes, fold_batch_norm,  # noqa: F401
                                          fold_constants, fold_qdq, fuse_ops, infer_types)
from vtakit.compiler.graph.passes.manager import run_passes
from vtakit.compiler.graph.passes.plan_memory import MemoryPlan, plan_memory
from vtakit.compiler.graph.passes.registry import GraphPass, PassInfo, get_pass, graph_pass, registered_passes

__all__ = ["run_passes", "MemoryPlan", "plan_memory", "GraphPass", "PassInfo", "get_pass", "graph_pass",
           "registered_passes"]
