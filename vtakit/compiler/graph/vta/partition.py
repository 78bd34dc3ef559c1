"""``VTAPartition``: decide, layer by layer, what runs on the accelerator (TVM's graph_pack region,
per layer).

``qnn.conv2d``, ``qnn.dense`` and ``qnn.add`` go to the accelerator when they can: each is
analysed (:func:`.layers.analyze`) and compiled (:func:`.layers.compile_layer`) right here, so a
layer that no tiling fits, that is dilated or grouped, or that the accelerator ops reject for any
other reason stays on the CPU with the reason recorded (``VTABuildContext.notes``, then the step's
``note``). A fixed-point multiplier runs as MUL on ALU_MUL configurations and by shift-and-add
without (:func:`vtakit.compiler.topi_vta.epilogue.multiplier_form`), one term per set bit of the
layer's largest-bit-count multiplier, so every non-negative multiplier runs; a layer of more than 4
terms notes its cost (``shift-and-add: K terms per output; ALU_MUL or multiplier_bits=4 is
faster``). Only a negative multiplier without ALU_MUL keeps its layer on the CPU
(``multiplier needs ALU_MUL (a negative multiplier ...)``).
Every other operator runs on the CPU. The graph itself is returned unchanged; :mod:`.graph_pack` rewrites it.
"""

from __future__ import annotations

from vtakit.compiler.graph.ir import Graph
from vtakit.compiler.graph.passes.registry import graph_pass
from vtakit.compiler.graph.vta.context import VTABuildContext, current_context
from vtakit.compiler.graph.vta.layers import ACCEL_OPS, LayerSpec, analyze, compile_layer
from vtakit.errors import VtakitError

__all__ = ["partition", "vta_partition"]


def partition(g: Graph, ctx: VTABuildContext) -> dict[str, LayerSpec]:
    """The accelerator layers of ``g`` by their output name; the others' reasons go to ``ctx.notes``."""
    chosen: dict[str, LayerSpec] = {}
    for node in g.nodes:
        if node.op not in ACCEL_OPS:
            continue
        key = node.outputs[0]
        spec = analyze(g, node, ctx)
        if isinstance(spec, LayerSpec):
            try:
                compile_layer(spec, ctx)
            except VtakitError as exc:
                spec = str(exc)
        if isinstance(spec, LayerSpec):
            chosen[key] = spec
        else:
            ctx.notes[key] = f"on the CPU: {spec}"
    return chosen


@graph_pass("VTAPartition", required=("InferType",))
def vta_partition(graph: Graph) -> Graph:
    ctx = current_context()
    ctx.decisions = partition(graph, ctx)
    return graph.copy()
