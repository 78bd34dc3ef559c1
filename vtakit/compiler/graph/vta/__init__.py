"""The accelerator graph target ``vta``: quantised networks with their conv2d, dense and residual
add layers on the VTA accelerator and the rest on the CPU (TVM's ``graph_pack`` + ``build`` flow).

Importing this package registers the packed operators (:mod:`.ops`), the passes
``VTAPartition`` (:mod:`.partition`) and ``VTAGraphPack`` (:mod:`.graph_pack`) and the graph
target (:mod:`.target`); :mod:`.layers` analyses and compiles accelerator layers, and
:mod:`.context` carries a build's configuration, tuning log and decisions.
"""

from vtakit.compiler.graph.vta import ops  # noqa: F401  (registers the packed operators)
from vtakit.compiler.graph.vta.context import VTABuildContext, current_context, vta_build_context
from vtakit.compiler.graph.vta.graph_pack import graph_pack
from vtakit.compiler.graph.vta.layers import LayerKernel, LayerSpec, analyze, compile_layer
from vtakit.compiler.graph.vta.partition import partition
from vtakit.compiler.graph.vta.target import VTA_PASSES, VTA_TARGET

__all__ = ["VTABuildContext", "current_context", "vta_build_context", "graph_pack", "LayerKernel", "LayerSpec",
           "analyze", "compile_layer", "partition", "VTA_PASSES", "VTA_TARGET", "ops"]
