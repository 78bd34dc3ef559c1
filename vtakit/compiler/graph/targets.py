"""Graph build targets, by name: the passes a target runs and how it turns a node into a kernel.

``build(graph, target=...)`` looks its target up here, so the accelerator (``vta``) and GPU
(``cuda``) targets plug in by registering a :class:`GraphTarget`, as :func:`vtakit.build`'s
targets register in :mod:`vtakit.compiler.build`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ContextManager

from vtakit.compiler.backend.llvm_object import KernelObject, ObjectKernel, compile_object, target_id
from vtakit.compiler.graph.ir import Graph, Node
from vtakit.compiler.graph.kernel_cache import KernelCache, Workload, workload_of
from vtakit.compiler.graph.lowering import group_tensors, lower_tensors
from vtakit.compiler.backend.llvm_runtime import LLVM_LOCK
from vtakit.errors import CompileError, GraphError

__all__ = ["CompiledKernel", "GraphTarget", "register_graph_target", "get_graph_target", "graph_targets",
           "LLVM_PASSES"]


@dataclass(frozen=True)
class CompiledKernel:
    """A node's kernel: the values it reads and writes (call order) and the loaded code."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    workload: Workload
    key: str
    function: ObjectKernel
    code: object  # what a saved module stores to load the kernel again (KernelObject for the CPU)


@dataclass(frozen=True)
class GraphTarget:
    """A build target: the graph passes it runs, the kernel compiler, and the workload extractor.

    Targets with an accelerator also give ``context(graph, config, tuning_log)``, a context manager
    the build runs its passes and compiles inside (it checks the graph and the configuration),
    ``step_target(node)`` (where a step runs: ``"llvm"`` for the CPU, or the accelerator's name)
    and ``note(node)`` (a step's remark for profiles, such as why a layer runs on the CPU); their
    ``workload`` may answer None for nodes that are no tuning task."""

    name: str
    passes: tuple[str, ...]
    workload: Callable[[Graph, Node, set[str]], tuple[Workload, tuple[str, ...], tuple[str, ...]]]
    # (graph, node, external values, cache, kernel name, wait) -> the kernel, or None when another
    # process is building it and wait is False
    compile: Callable[[Graph, Node, set[str], KernelCache, str, bool], CompiledKernel | None]
    # (graph, node, external values, cache, kernel name) -> compiles and stores the kernel when it is not
    # stored yet, loading nothing (the helper processes of a parallel build); None: no parallel builds
    prebuild: Callable[[Graph, Node, set[str], KernelCache, str], bool] | None = None
    context: Callable[[Graph, Any, Any], ContextManager[Any]] | None = None
    step_target: Callable[[Node], str] | None = None
    note: Callable[[Node], str] | None = None
    accelerator: bool = False  # steps of other targets than the CPU read and write accelerator DRAM
    # the NetModule class the build returns (None: NetModule); GPU modules add emulation
    module: Callable[..., Any] | None = None


_TARGETS: dict[str, GraphTarget] = {}


def register_graph_target(target: GraphTarget, override: bool = False) -> None:
    if target.name in _TARGETS and not override:
        raise GraphError(f"graph target {target.name!r} is already registered")
    _TARGETS[target.name] = target


def get_graph_target(name: str) -> GraphTarget:
    kind = name.split()[0] if isinstance(name, str) and name.strip() else name
    try:
        target = _TARGETS[kind]
    except (KeyError, TypeError):
        raise GraphError(f"unknown graph target {name!r}; registered: {', '.join(sorted(_TARGETS))}") from None
    if name.strip() != kind:
        # network kernels are cached and saved for the CPU they were built on; options would be ignored
        raise GraphError(f"graph target {name!r}: options are not supported yet; network builds compile for this "
                         f"host's CPU (use {kind!r})")
    return target


def graph_targets() -> list[str]:
    return sorted(_TARGETS)


LLVM_PASSES = ("InferType", "FoldConstant", "FoldBatchNorm", "DeadCodeElimination", "AlterOpLayout", "InferType",
               "FuseOps")


def _llvm_workload(graph: Graph, node: Node, external: set[str]) -> tuple[Workload, tuple[str, ...], tuple[str, ...]]:
    ins, _, outs, _ = group_tensors(graph, [node], external)
    return workload_of(graph, node, ins, outs, "llvm"), tuple(ins), tuple(outs)


def _llvm_kernel(graph: Graph, node: Node, external: set[str], name: str
                 ) -> tuple[list[str], list[str], Workload, str, Callable[[], KernelObject]]:
    """A node's kernel interface, workload, cache key and the function that compiles it."""
    ins, placeholders, outs, tensors = group_tensors(graph, [node], external)
    workload = workload_of(graph, node, ins, outs, "llvm")
    key = workload.key(target_id())
    return ins, outs, workload, key, lambda: compile_object(lower_tensors(placeholders, tensors, name),
                                                           f"vtakit_kernel_{key[:24]}")


def _llvm_compile(graph: Graph, node: Node, external: set[str], cache: KernelCache, name: str,
                  wait: bool = True) -> CompiledKernel | None:
    ins, outs, workload, key, compile_ = _llvm_kernel(graph, node, external, name)
    got = cache.get(key, compile_, workload, wait)
    if got is None:
        return None
    return CompiledKernel(tuple(ins), tuple(outs), workload, key, got[1], got[0])


def _llvm_prebuild(graph: Graph, node: Node, external: set[str], cache: KernelCache, name: str) -> bool:
    """Store the node's kernel in the cache (for parallel builds); True when it was not stored yet."""
    # A helper is a forked copy of a build: if another thread of the parent held LLVM's lock at the
    # fork, it stays held for good in the helper, which must give up rather than wait (and keep a
    # key's lock file locked).
    if not LLVM_LOCK.acquire(timeout=5):
        raise CompileError("LLVM's lock was held when this build helper was forked; leaving the work to the build")
    LLVM_LOCK.release()
    _, _, workload, key, compile_ = _llvm_kernel(graph, node, external, name)
    if cache.stored(key):
        return False
    cache.prebuild(key, compile_, workload)
    return True


register_graph_target(GraphTarget("llvm", LLVM_PASSES, _llvm_workload, _llvm_compile, _llvm_prebuild))
