"""``build(graph, target)``: compile a graph into a :class:`NetModule`; ``extract_tasks`` lists its kernels.

The build runs the target's graph passes (:mod:`.targets`), turns every remaining node into a
step (a kernel from the persistent cache, or, for view-only ops, an alias of its input's bytes),
plans the arena (:mod:`.passes.plan_memory`) and hands the runtime's graph executor the plan.
Nothing is compiled after ``build`` returns.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from vtakit.compiler.graph.fused import FUSED
from vtakit.compiler.graph.ir import Graph, Node, TensorType
from vtakit.compiler.graph.kernel_cache import KernelCache, Workload
from vtakit.compiler.graph.module import NetModule
from vtakit.compiler.graph.op import infer_types
from vtakit.compiler.graph.passes import run_passes
from vtakit.compiler.graph.passes.fuse_ops import VIEW_OPS
from vtakit.compiler.graph.passes.plan_memory import plan_memory
from vtakit.compiler.graph.targets import CompiledKernel, GraphTarget, get_graph_target
from vtakit.errors import GraphError
from vtakit.progress import QUICK_WORK_DELAY_SECONDS, progress
from vtakit.runtime.device import default_alignment
from vtakit.runtime.graph_executor import Plan, Step, ValueInfo

__all__ = ["build", "optimize", "extract_tasks", "Task", "BuildStats", "node_macs", "MAC_OPS"]


@dataclass
class BuildStats:
    """What a build did and how long it took."""

    pass_seconds: float = 0.0
    kernel_seconds: float = 0.0
    kernels: int = 0
    unique_kernels: int = 0
    compiled: int = 0
    loaded_from_disk: int = 0
    already_loaded: int = 0
    arena_bytes: int = 0
    lower_bound_bytes: int = 0
    seconds: float = 0.0
    fused_ops: dict[str, int] = field(default_factory=dict)
    dram_bytes: int = 0
    notes: dict[str, str] = field(default_factory=dict)   # step name -> why it runs where it does


@dataclass(frozen=True)
class Task:
    """A unique kernel of a build (AutoTVM's task): its template, workload and how many steps use it."""

    template: str
    workload: tuple[Any, ...]
    count: int

    def __iter__(self):
        return iter((self.template, self.workload, self.count))


def optimize(graph: Graph, target: str = "llvm", *, config: Any = None, opt_level: int = 3,
             disabled_passes: Sequence[str] = (), dump_dir: str | os.PathLike | None = None) -> Graph:
    """``graph`` after ``target``'s graph passes (what ``build`` compiles); ``config`` is the
    accelerator configuration of targets that have one."""
    tgt = get_graph_target(target)
    with _target_context(tgt, graph, config, None):
        return _optimize(graph, tgt, opt_level, disabled_passes, dump_dir)


def _optimize(graph: Graph, tgt: GraphTarget, opt_level: int, disabled_passes: Sequence[str],
              dump_dir: str | os.PathLike | None = None) -> Graph:
    return run_passes(graph.verify(), tgt.passes, disabled=disabled_passes, opt_level=opt_level, dump_dir=dump_dir)


def _target_context(tgt: GraphTarget, graph: Any, config: Any, tuning_log: Any) -> Any:
    """The target's build context (accelerator targets: configuration, tuning log, layer decisions)."""
    if not isinstance(graph, Graph):
        raise GraphError(f"expected a vtakit.graph.Graph, got {type(graph).__name__}")
    if tgt.context is None:
        return contextlib.nullcontext()
    return tgt.context(graph, config, tuning_log)


def _is_view(g: Graph, node: Node, external: set[str]) -> bool:
    """Whether ``node`` only reinterprets its input's bytes (and nothing reads its other outputs)."""
    return (node.op in VIEW_OPS and bool(node.inputs) and node.inputs[0] not in g.constants
            and external == {node.outputs[0]}
            and g.type_of(node.inputs[0]).dtype == g.type_of(node.outputs[0]).dtype
            and g.type_of(node.inputs[0]).size == g.type_of(node.outputs[0]).size)


def _external(g: Graph, node: Node, consumers: dict[str, list[Node]]) -> set[str]:
    return {o for o in node.outputs if o in g.outputs or consumers.get(o)}


def _ops(node: Node) -> tuple[str, ...]:
    return node.attrs["body"].ops if node.op == FUSED else (node.op,)


#: operators whose multiply-accumulates a step counts (:func:`node_macs`)
MAC_OPS = ("Conv", "PackedConv", "Gemm", "MatMul", "PackedMatMul", "qnn.conv2d", "qnn.dense", "vta.conv2d", "vta.dense")
_GROUPED_WEIGHT = re.compile(r"/vta_weight_g(\d+)(?:_\d+)?$")


def node_macs(g: Graph, node: Node) -> int:
    """The useful multiply-accumulates of ``node``'s convolutions and matrix products (a fused node's
    inner ones included): those of the unpacked op, batch included; a grouped conv counts its real
    MACs (not the block-diagonal weight's the accelerator runs). 0 for nodes without any."""
    if node.op != FUSED:
        return _macs_of(node, g.type_of, lambda name: g.constants.get(name))
    body = node.attrs["body"]
    if not any(n.op in MAC_OPS for n in body.nodes):
        return 0
    outer = dict(zip(body.params, node.inputs))
    types: dict[str, TensorType] = {}

    def const(name: str) -> np.ndarray | None:
        if name in body.consts:
            return body.consts[name]
        return g.constants.get(outer.get(name, name))

    def type_of(name: str) -> TensorType:
        if name in types:
            return types[name]
        if name in outer:
            return g.type_of(outer[name])
        if name in body.consts:
            value = np.asarray(body.consts[name])
            return TensorType(value.shape, value.dtype.name)
        return g.type_of(name)

    total = 0
    for inner in body.nodes:
        if inner.op in MAC_OPS:
            total += _macs_of(inner, type_of, const)
        if any(o not in g.types for o in inner.outputs):
            ins = [type_of(i) if i else None for i in inner.inputs]
            consts = [const(i) if i else None for i in inner.inputs]
            types.update(zip(inner.outputs, infer_types(inner, ins, consts)))
        else:
            types.update((o, g.type_of(o)) for o in inner.outputs)
    return total


def _macs_of(node: Node, type_of: Any, const: Any) -> int:
    op = node.op
    if op not in MAC_OPS:
        return 0
    if op in ("vta.conv2d", "vta.dense"):
        spec = node.attrs["spec"]
        group = 1
        if op == "vta.conv2d" and len(node.inputs) > 1:
            found = _GROUPED_WEIGHT.search(node.inputs[1])
            group = int(found.group(1)) if found else 1
        return int(spec.macs) // group
    out = type_of(node.outputs[0]).shape
    w = type_of(node.inputs[1]).shape
    size = int(np.prod(out, dtype=np.int64))
    if op in ("Conv", "qnn.conv2d"):          # weight (O, I/group, KH, KW)
        return size * int(np.prod(w[1:], dtype=np.int64))
    if op == "PackedConv":                    # weight (O/b, I, KH, KW, b)
        return size * int(np.prod(w[1:4], dtype=np.int64))
    if op == "qnn.dense":                     # weight (N, K)
        return size * int(w[-1])
    a = type_of(node.inputs[0]).shape
    if op == "Gemm":
        return size * int(a[0] if node.attrs.get("transA", 0) else a[-1])
    return size * int(a[-1])                  # MatMul


def extract_tasks(graph: Graph, target: str = "llvm", config: Any = None, *, opt_level: int = 3,
                  disabled_passes: Sequence[str] = ()) -> list[Task]:
    """The unique kernels a build of ``graph`` compiles: (template, workload, count) per kernel.

    For an accelerator target (``"vta"``, with ``config``) these are its accelerator layers, as
    the tuner's tasks: ``vta.conv2d`` with a ``Conv2dWorkload.key``, ``vta.dense`` with
    ``(m, n, k)``."""
    tgt = get_graph_target(target)
    counts: dict[tuple[str, str], int] = {}
    with _target_context(tgt, graph, config, None):
        g = _optimize(graph, tgt, opt_level, disabled_passes)
        consumers = g.consumers()
        for node in g.nodes:
            external = _external(g, node, consumers)
            if not external or _is_view(g, node, external):
                continue
            workload, _, _ = tgt.workload(g, node, external)
            if workload is None:
                continue
            key = (workload.template, workload.description)
            counts[key] = counts.get(key, 0) + 1
    return [Task(t, Workload(t, d).args, n) for (t, d), n in counts.items()]


def build(graph: Graph, target: str = "llvm", *, config: Any = None, opt_level: int = 3,
          disabled_passes: Sequence[str] = (), tuning_log: Any = None,
          cache_dir: str | os.PathLike | None = None) -> NetModule:
    """Compile ``graph`` for ``target`` into a module whose ``run`` executes the whole network.

    ``config`` is the accelerator configuration of targets that have one (the CPU has none;
    ``"vta"``: a :class:`~vtakit.hw.config.VTAConfig`, ``VTAConfig()`` when None);
    ``tuning_log`` (accelerator targets) picks each accelerator layer's schedule knobs from the
    log's best records, the default tiler's for workloads it does not hold;
    ``opt_level`` and ``disabled_passes`` select the graph passes; kernels are cached in
    ``cache_dir`` (else ``$VTAKIT_CACHE_DIR``, else ``~/.cache/vtakit``)."""
    start = time.perf_counter()
    tgt = get_graph_target(target)
    if tuning_log is not None and tgt.context is None:
        raise GraphError(f"tuning_log={tuning_log!r}: the {tgt.name} target has no tunable schedule templates yet, so "
                         "a tuning log cannot select anything; build without it")
    if isinstance(tuning_log, (str, os.PathLike)) and not os.path.isfile(tuning_log):
        raise GraphError(f"tuning_log={os.fspath(tuning_log)!r} is not a file")
    stats = BuildStats()
    with _target_context(tgt, graph, config, tuning_log) as ctx:
        g = _optimize(graph, tgt, opt_level, disabled_passes)
        stats.pass_seconds = time.perf_counter() - start
        compiled, views, constants = _compile_steps(g, tgt, KernelCache(cache_dir), stats)
        module = _assemble(g, tgt, compiled, views, constants, stats, getattr(ctx, "config", None))
    stats.seconds = time.perf_counter() - start
    return module


def _compile_steps(g: Graph, tgt: GraphTarget, cache: KernelCache, stats: BuildStats
                   ) -> tuple[list[tuple[Node, CompiledKernel]], dict[str, str], dict[str, np.ndarray]]:
    start = time.perf_counter()
    consumers = g.consumers()
    views: dict[str, str] = {}
    constants: dict[str, np.ndarray] = {}
    kernels: dict[int, CompiledKernel] = {}
    todo = []
    for k, node in enumerate(g.nodes):
        external = _external(g, node, consumers)
        if not external:
            continue
        if _is_view(g, node, external):
            views[node.outputs[0]] = node.inputs[0]
        else:
            todo.append(k)
    helpers: list[int] = []
    finished = False
    try:
        with progress(f"compiling {g.name} for {tgt.name}", total=len(todo), unit="kernel",
                      delay=QUICK_WORK_DELAY_SECONDS) as bar:
            # kernels another process is building are skipped on the first pass and waited for on the second
            for wait in (False, True):
                for k in todo:
                    if k in kernels:
                        continue
                    node = g.nodes[k]
                    got = tgt.compile(g, node, _external(g, node, consumers), cache, _kernel_name(node, k), wait)
                    if got is not None:
                        kernels[k] = got
                        bar.advance()
                    if cache.misses == 1 and not helpers:  # a cold build: others compile alongside
                        helpers = _start_helpers(g, tgt, todo, consumers, cache, build_jobs())
        finished = True
    finally:
        _reap(helpers, stop=not finished)
    compiled = [(g.nodes[k], kernels[k]) for k in todo]
    stats.kernel_seconds = time.perf_counter() - start
    stats.kernels = len(compiled)
    stats.unique_kernels = len({c.key for _, c in compiled})
    stats.compiled, stats.loaded_from_disk, stats.already_loaded = cache.misses, cache.disk_hits, cache.hits
    for node, _ in compiled:
        label = "+".join(_ops(node))
        stats.fused_ops[label] = stats.fused_ops.get(label, 0) + 1
    return compiled, views, constants


def _kernel_name(node: Node, k: int) -> str:
    return f"{_ops(node)[-1].lower()}_{k}"


def build_jobs() -> int:
    """Processes compiling a cold build's kernels: ``VTAKIT_BUILD_JOBS``, else the CPUs we may use (at most 4)."""
    env = os.environ.get("VTAKIT_BUILD_JOBS")
    if env is not None:
        if not env.isdigit() or int(env) < 1:
            raise GraphError(f"VTAKIT_BUILD_JOBS must be a positive integer, got {env!r}")
        return int(env)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(4, cpus))


def _start_helpers(g: Graph, tgt: GraphTarget, todo: list[int], consumers: dict[str, list[Node]],
                   cache: KernelCache, jobs: int) -> list[int]:
    """Fork ``jobs - 1`` processes that compile the kernels of ``todo`` into the on-disk cache, each
    starting at its own place in the list; the build loads what they store (the cache's per-key locks
    keep two processes from compiling one kernel)."""
    if tgt.prebuild is None or jobs < 2 or len(todo) < 4 or not hasattr(os, "fork"):
        return []
    pids = []
    for helper in range(1, jobs):
        start = helper * len(todo) // jobs
        pid = os.fork()
        if pid == 0:  # the helper: compile, store, exit without running any of the parent's cleanup
            status = 0
            try:
                for k in todo[start:] + todo[:start]:
                    node = g.nodes[k]
                    tgt.prebuild(g, node, _external(g, node, consumers), cache, _kernel_name(node, k))
            except BaseException:  # noqa: BLE001 -- the parent builds whatever a helper did not
                status = 1
            finally:
                os._exit(status)
        pids.append(pid)
    return pids


def _reap(pids: list[int], stop: bool) -> None:
    """Wait for the helpers (after the build has every kernel they have nothing left to compile), or
    stop them first when the build failed or was interrupted."""
    for pid in pids:
        if stop:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _assemble(g: Graph, tgt: GraphTarget, compiled: list[tuple[Node, CompiledKernel]], views: dict[str, str],
              constants: dict[str, np.ndarray], stats: BuildStats, config: Any = None) -> NetModule:
    kernel_index: dict[str, int] = {}
    functions: list[Any] = []
    codes: list[Any] = []
    steps: list[Step] = []
    for node, ck in compiled:
        if ck.key not in kernel_index:
            kernel_index[ck.key] = len(functions)
            functions.append(ck.function)
            codes.append(ck.code)
        where = tgt.step_target(node) if tgt.step_target is not None else tgt.name
        note = tgt.note(node) if tgt.note is not None else ""
        if note:
            stats.notes[node.name or node.op] = note
        steps.append(Step(node.name or node.op, kernel_index[ck.key], (*ck.inputs, *ck.outputs), len(ck.outputs),
                          _ops(node), where, note, node_macs(g, node)))
    used = set(g.inputs) | set(g.outputs) | {a for s in steps for a in s.args}
    for name, base in views.items():
        used.add(name)
        used.add(base)

    def base_constant(name: str) -> str | None:
        while name in views:
            name = views[name]
        return name if name in g.constants else None

    const_names = {n for n in used if n in g.constants or base_constant(n) is not None}
    # every value an accelerator step reads or writes lives in accelerator DRAM (the CPU layout
    # steps at region borders see it there too); the rest in the host arena
    dram = {a for s in steps if s.target != "llvm" for a in s.args} if tgt.accelerator else set()
    bad = sorted(n for n in dram if n in views or n in views.values() or n in g.inputs or n in g.outputs)
    if bad:
        raise GraphError(f"values {bad} are read or written by accelerator steps but are also graph inputs, outputs "
                         "or views; the accelerator passes must pack and unpack them")
    sizes = {n: g.type_of(n).nbytes for n in used if n not in const_names and n not in dram}
    memory = plan_memory([(s.args[:len(s.args) - s.outputs], s.output_names) for s in steps], sizes,
                         g.inputs, [o for o in g.outputs if o not in const_names],
                         {v: b for v, b in views.items() if v not in const_names})
    dram_offsets, dram_bytes = _plan_dram(steps, {n: g.type_of(n).nbytes for n in dram}, const_names, config)
    values: dict[str, ValueInfo] = {}
    for name in sorted(used, key=lambda n: (n not in g.inputs, n)):
        ty = g.type_of(name)
        if name in const_names:
            base = base_constant(name)
            constants[name] = np.require(g.constants[base], requirements="C").reshape(ty.shape)
        if name in dram:
            values[name] = ValueInfo(name, ty.shape, ty.dtype, dram_offsets[name], "dram")
        elif name in const_names:
            values[name] = ValueInfo(name, ty.shape, ty.dtype, None)
        else:
            values[name] = ValueInfo(name, ty.shape, ty.dtype, memory.offsets[name])
    stats.arena_bytes, stats.lower_bound_bytes, stats.dram_bytes = memory.arena_bytes, memory.lower_bound, dram_bytes
    plan = Plan(values, tuple(g.inputs), tuple(g.outputs), tuple(steps), memory.arena_bytes, dram_bytes,
                config.to_dict() if tgt.accelerator and config is not None else None)
    module = tgt.module or NetModule
    return module(plan, functions, constants, target=tgt.name, kernel_objects=codes, stats=stats)


def _plan_dram(steps: list[Step], sizes: dict[str, int], const_names: set[str], config: Any
               ) -> tuple[dict[str, int], int]:
    """Byte offsets of the DRAM values in the module's DRAM region, and its size.

    Run-time values share bytes by lifetime (:func:`plan_memory`); constants (packed weights,
    addends) follow, each in its own bytes, as the executor copies them there once. Every offset is
    aligned to the configuration's largest DMA element (at least 64 bytes): ``plan_memory`` aligns
    to 64, so it plans in units of ``alignment / 64`` bytes."""
    if not sizes:
        return {}, 0
    align = max(64, default_alignment(config)) if config is not None else 64
    unit = align // 64
    values = {n: -(-size // unit) for n, size in sizes.items() if n not in const_names}
    memory = plan_memory([(s.args[:len(s.args) - s.outputs], s.output_names) for s in steps], values, (), ())
    offsets = {n: memory.offsets[n] * unit for n in values}
    end = memory.arena_bytes * unit
    for name in sorted(n for n in sizes if n in const_names):
        offsets[name] = end
        end += -(-max(sizes[name], 1) // align) * align
    return offsets, end
