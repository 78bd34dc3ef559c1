"""Cross-check the GPU thread extents of a lowered schedule, kernel by kernel.

A GPU kernel is launched with one extent per thread index (``blockDim.x`` ...), so every binding of
``threadIdx.x`` in one kernel must have the same extent; TVM's VerifyGPUCode reports the same
("extent of threadIdx.x does not match the bound"). A kernel is the subtree under an outermost
``blockIdx.*``/``threadIdx.*`` loop, as TVM's SplitHostDevice cuts it, so separate root stages may
use different extents. One exception is kept: a stage attached inside a thread loop that binds the
same thread index again (a cooperative fetch into shared memory) may use its own extent; the
thread variable then ranges over the wider of the two (see :mod:`.bound`).

Extents are also checked against the CUDA limits TVM's ``cuda`` target uses: threadIdx.x/y up to
1024, threadIdx.z up to 64, 1024 threads per block, blockIdx.x up to 2^31 - 1 and blockIdx.y/z up
to 65535. Symbolic extents are only known at launch and are not checked here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vtakit.compiler import ir
from vtakit.compiler.te.expr import IterVar
from vtakit.compiler.te.schedule import Stage
from vtakit.errors import ScheduleError

__all__ = ["THREAD_LIMITS", "MAX_THREADS_PER_BLOCK", "verify_thread_extents"]

THREAD_LIMITS = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64,
                 "blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}
MAX_THREADS_PER_BLOCK = 1024


@dataclass(frozen=True)
class _Binding:
    stage: Stage
    axis: IterVar
    extent: int

    def __str__(self) -> str:
        return f"axis {self.axis.name} of stage {self.stage.name}"


@dataclass
class _Kernel:
    first: dict[str, _Binding] = field(default_factory=dict)    # per thread index, its first binding
    widest: dict[str, _Binding] = field(default_factory=dict)   # per thread index, its widest binding


def _is_gpu_thread(tag: str) -> bool:
    return tag.startswith(("threadIdx.", "blockIdx."))


def verify_thread_extents(body: ir.Stmt, bindings: dict[int, tuple[Stage, IterVar]]) -> None:
    """Raise :class:`ScheduleError` for conflicting or too large thread extents in ``body``;
    ``bindings`` maps ``id`` of each thread-bound ``For`` of ``body`` to the stage axis bound."""

    def visit(node: ir.Stmt, kernel: _Kernel | None, enclosing: frozenset[str]) -> None:
        if isinstance(node, ir.For) and node.kind is ir.ForKind.THREAD_BINDING and _is_gpu_thread(node.thread_tag):
            root = kernel is None
            kernel = _Kernel() if root else kernel
            tag = node.thread_tag
            if isinstance(node.extent, ir.IntImm) and id(node) in bindings:
                binding = _Binding(*bindings[id(node)], node.extent.value)
                _check_limit(tag, binding)
                first = kernel.first.setdefault(tag, binding)
                if first.extent != binding.extent and tag not in enclosing:
                    raise ScheduleError(
                        f"stage {binding.stage.name}: axis {binding.axis.name} is bound to {tag} with extent "
                        f"{binding.extent}, but {first} is bound to {tag} with extent {first.extent} in the same "
                        f"kernel; a kernel has one extent per thread index, so split both axes to the same extent")
                widest = kernel.widest.setdefault(tag, binding)
                if binding.extent > widest.extent:   # a cooperative fetch may widen the launch extent
                    kernel.widest[tag] = binding
            visit(node.body, kernel, enclosing | {tag})
            if root:
                _check_block_size(kernel.widest)
            return
        for child in ir.children(node):
            if isinstance(child, ir.Stmt):
                visit(child, kernel, enclosing)

    visit(body, None, frozenset())


def _check_limit(tag: str, binding: _Binding) -> None:
    limit = THREAD_LIMITS.get(tag)
    if limit is None:
        raise ScheduleError(f"stage {binding.stage.name}: axis {binding.axis.name} is bound to unknown thread index "
                            f"{tag!r}; expected one of {', '.join(THREAD_LIMITS)}")
    if binding.extent > limit:
        hint = ("split it and bind the inner part (a reduction stays within a block; the outer part loops in "
                "each thread)" if binding.axis.iter_type == "comm_reduce"
                else "split it and bind the outer part to a block index")
        raise ScheduleError(f"stage {binding.stage.name}: axis {binding.axis.name} is bound to {tag} with extent "
                            f"{binding.extent}, above the limit of {limit}; {hint}")


def _check_block_size(kernel: dict[str, _Binding]) -> None:
    threads = [b for tag, b in kernel.items() if tag.startswith("threadIdx.")]
    total = math.prod(b.extent for b in threads)
    if total > MAX_THREADS_PER_BLOCK:
        parts = " x ".join(f"{tag} {b.extent} ({b})" for tag, b in kernel.items() if tag.startswith("threadIdx."))
        raise ScheduleError(f"a kernel launches {parts} = {total} threads per block, above the limit of "
                            f"{MAX_THREADS_PER_BLOCK}; use smaller thread extents")
