"""The ``vta`` graph target: quantised networks with their accelerator layers on the VTA simulators.

``build(qgraph, target="vta", config=cfg)`` runs the CPU target's passes plus ``VTAPartition``
and ``VTAGraphPack`` inside a :class:`~.context.VTABuildContext`; then every node becomes a step:

- ``vta.conv2d`` / ``vta.dense`` / ``vta.add``: target ``"vta"``, the layer's
  :class:`~vtakit.runtime.template.ProgramTemplate` as the kernel (one per unique layer);
- the layout steps ``vta.pack_*`` / ``vta.unpack_*`` / ``vta.repack_nchw``: target ``"llvm"``
  (the CPU), compiled from their TE computes like any CPU kernel (or, with
  :data:`COMPILED_LAYOUT_STEPS` off, the runtime's named
  :class:`~vtakit.runtime.layout_kernels.LayoutKernel`);
- everything else (CPU fallbacks included): the ``llvm`` target's compiled kernels.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any, Iterator

from vtakit.compiler.graph.ir import Graph, Node
from vtakit.compiler.graph.kernel_cache import KernelCache, Workload
from vtakit.compiler.graph.targets import (LLVM_PASSES, CompiledKernel, GraphTarget, _llvm_compile, _llvm_prebuild,
                                           _llvm_workload, register_graph_target)
from vtakit.compiler.graph.vta.context import VTABuildContext, current_context, vta_build_context
from vtakit.compiler.graph.vta.layers import compile_layer
from vtakit.compiler.graph.vta.ops import ACCEL_NODE_OPS, LAYOUT_OPS
from vtakit.errors import GraphError
from vtakit.runtime.layout_kernels import LayoutKernel

__all__ = ["VTA_PASSES", "VTA_TARGET", "COMPILED_LAYOUT_STEPS", "check_quantized", "step_target", "step_note"]

VTA_PASSES = (*LLVM_PASSES[:5], "VTAPartition", "VTAGraphPack", *LLVM_PASSES[5:])
#: the layout steps are compiled from their TE computes like any CPU kernel (cached, saved with the
#: module); False runs them as the runtime's named numpy kernels (vtakit.runtime.layout_kernels)
COMPILED_LAYOUT_STEPS = True


def check_quantized(graph: Graph) -> None:
    """A :class:`GraphError` unless ``graph`` has quantised (``qnn.*``) operators."""
    if not any(node.op.startswith("qnn.") for node in graph.nodes):
        raise GraphError("target vta runs quantised networks, and this graph has no quantised (qnn.*) operators: "
                         "quantise it first with vtakit.graph.quantize(graph, calibration), or import a QDQ "
                         "(QuantizeLinear/DequantizeLinear) model")


@contextlib.contextmanager
def _context(graph: Graph, config: Any, tuning_log: Any) -> Iterator[VTABuildContext]:
    check_quantized(graph)
    with vta_build_context(config, tuning_log) as ctx:
        yield ctx


def step_target(node: Node) -> str:
    """``"vta"`` for the accelerator layers, ``"llvm"`` (the CPU) for every other step."""
    return "vta" if node.op in ACCEL_NODE_OPS else "llvm"


def step_note(node: Node) -> str:
    """Why a step runs where it does, when that needs saying (CPU fallbacks, layout steps), or
    that an accelerator layer's knobs come from the tuning log."""
    ctx = current_context()
    if node.op in ACCEL_NODE_OPS:
        kernel = ctx.kernels.get(node.attrs["spec"])
        notes = [ctx.layer_notes.get(node.attrs.get("source", ""), ""),
                 "tuned: knobs from the tuning log" if getattr(kernel, "tuned", False) else ""]
        return "; ".join(n for n in notes if n)
    return ctx.notes.get(node.outputs[0], "") if node.outputs else ""


def _layer_description(node: Node) -> tuple[str, list[Any]]:
    spec = node.attrs["spec"]
    return spec.template, list(spec.args)


def _workload(graph: Graph, node: Node, external: set[str]) -> tuple[Workload | None, tuple[str, ...],
                                                                    tuple[str, ...]]:
    """Tuning tasks are the accelerator's conv2d and dense layers (other steps have none: None)."""
    if node.op in ACCEL_NODE_OPS:
        template, args = _layer_description(node)
        workload = Workload(template, json.dumps(args)) if template in ("vta.conv2d", "vta.dense") else None
        return workload, tuple(node.inputs), tuple(node.outputs)
    if node.op in LAYOUT_OPS or node.op == "vta.repack_nchw":
        return None, tuple(node.inputs), tuple(node.outputs)
    workload, ins, outs = _llvm_workload(graph, node, external)
    return None, ins, outs


def _kernel_key(kernel: Any) -> str:
    spec = dataclasses.asdict(kernel.spec)
    knobs = None if kernel.knobs is None else dataclasses.asdict(kernel.knobs)
    return "vta:" + json.dumps([spec, knobs], sort_keys=True, default=str)


def _compile(graph: Graph, node: Node, external: set[str], cache: KernelCache, name: str,
             wait: bool = True) -> CompiledKernel | None:
    if node.op in ACCEL_NODE_OPS:
        kernel = compile_layer(node.attrs["spec"], current_context())
        template, args = _layer_description(node)
        return CompiledKernel(tuple(node.inputs), tuple(node.outputs), Workload(template, json.dumps(args)),
                              _kernel_key(kernel), kernel.template, kernel.template)
    if node.op in LAYOUT_OPS and not COMPILED_LAYOUT_STEPS:
        kernel = LayoutKernel(LAYOUT_OPS[node.op], node.attrs["params"])
        return CompiledKernel(tuple(node.inputs), tuple(node.outputs), Workload(node.op, json.dumps(kernel.key)),
                              kernel.key, kernel, kernel)
    return _llvm_compile(graph, node, external, cache, name, wait)


def _prebuild(graph: Graph, node: Node, external: set[str], cache: KernelCache, name: str) -> bool:
    if node.op in ACCEL_NODE_OPS or (node.op in LAYOUT_OPS and not COMPILED_LAYOUT_STEPS):
        return False
    return _llvm_prebuild(graph, node, external, cache, name)


VTA_TARGET = GraphTarget("vta", VTA_PASSES, _workload, _compile, _prebuild, context=_context,
                         step_target=step_target, note=step_note, accelerator=True)
register_graph_target(VTA_TARGET)
