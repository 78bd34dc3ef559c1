"""The graph compiler's ``cuda`` target: every fused group becomes a GPU kernel program.

The target runs the CPU's graph passes except the CPU's layout change (``AlterOpLayout`` packs
weights for vector registers; the GPU schedules read the plain NCHW/OIHW layouts), then, per
fused group, builds the group's tensor expressions (:func:`~vtakit.compiler.graph.lowering.group_tensors`)
under the GPU schedule for its anchor operator (:func:`vtakit.compiler.ops.cuda.schedule`, which
inlines element-wise stages as the CPU schedules do) with :func:`vtakit.build` for ``cuda``.

Built kernels are kept per process by workload (two layers of one shape share a kernel), not on
disk: a GPU module holds the lowered kernels it emulates, which the CPU's object-code cache does
not store. The module (:class:`~.cuda_module.CudaNetModule`) runs on a GPU when one is present,
emulates otherwise, and exposes each kernel's PTX.
"""

from __future__ import annotations

import threading
from typing import Any

from vtakit.compiler.build import build as build_schedule
from vtakit.compiler.graph.cuda_module import CudaNetModule
from vtakit.compiler.graph.ir import Graph, Node
from vtakit.compiler.graph.kernel_cache import KernelCache, Workload, workload_of
from vtakit.compiler.graph.lowering import group_tensors
from vtakit.compiler.graph.targets import CompiledKernel, GraphTarget, register_graph_target
from vtakit.compiler.ops import cuda
from vtakit.runtime.gpu_code import GPUKernelCode, GPUKernelLaunch

__all__ = ["CUDA_PASSES", "CUDA_TARGET", "ARCH", "kernel_code", "compile_group"]

CUDA_PASSES = ("InferType", "FoldConstant", "FoldBatchNorm", "DeadCodeElimination", "InferType", "FuseOps")
#: the architecture network kernels are generated for (PTX runs on it and every later GPU)
ARCH = "sm_80"

_BUILT: dict[str, Any] = {}
_LOCK = threading.Lock()


def kernel_code(module: Any) -> GPUKernelCode:
    """What a saved module keeps of the kernel program ``module`` (a CUDAModule): PTX and launches."""
    return GPUKernelCode(module.get_source("ptx"), module.target.arch, tuple(
        GPUKernelLaunch(k.name, tuple(k.grid), tuple(k.block), int(k.shared_bytes)) for k in module.kernels))


def _workload(graph: Graph, node: Node, external: set[str]) -> tuple[Workload, tuple[str, ...], tuple[str, ...]]:
    ins, _, outs, _ = group_tensors(graph, [node], external)
    return workload_of(graph, node, ins, outs, "cuda"), tuple(ins), tuple(outs)


def compile_group(placeholders: list, tensors: list, name: str, arch: str = ARCH) -> Any:
    """A fused group's tensors built for ``cuda -arch=...`` under the default GPU schedule."""
    s = cuda.schedule(list(tensors))
    return build_schedule(s, [*placeholders, *tensors], target=f"cuda -arch={arch}", name=name)


def _compile(graph: Graph, node: Node, external: set[str], cache: KernelCache, name: str,
             wait: bool = True) -> CompiledKernel:
    ins, placeholders, outs, tensors = group_tensors(graph, [node], external)
    workload = workload_of(graph, node, ins, outs, "cuda")
    key = workload.key(f"cuda -arch={ARCH}")
    with _LOCK:
        module = _BUILT.get(key)
    if module is None:
        module = compile_group(placeholders, tensors, name)
        with _LOCK:
            module = _BUILT.setdefault(key, module)
    return CompiledKernel(tuple(ins), tuple(outs), workload, key, module, kernel_code(module))


CUDA_TARGET = GraphTarget("cuda", CUDA_PASSES, _workload, _compile, module=CudaNetModule)
register_graph_target(CUDA_TARGET)
