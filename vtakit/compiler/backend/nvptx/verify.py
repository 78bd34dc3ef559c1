"""VerifyGPUCode: a kernel must fit the target's launch limits and reach its barriers uniformly.

Checked per kernel after the GPU passes: each thread and block extent against its limit, the
threads per block, the static shared memory per block, and that no barrier sits where the
threads of a block may diverge (a condition or loop bound that depends on a thread index), where
some threads would wait forever. AutoTVM runs the same checks to discard configurations early.
"""

from __future__ import annotations

from vtakit.compiler import ir
from vtakit.compiler.backend.nvptx.program import THREAD_TAGS, DeviceKernel, is_barrier
from vtakit.compiler.backend.nvptx.split import allocation_bytes
from vtakit.compiler.backend.nvptx.target import CUDATarget
from vtakit.compiler.backend.nvptx.thread_sync import is_divergent
from vtakit.errors import CompileError

__all__ = ["verify_kernel"]


def verify_kernel(kernel: DeviceKernel, target: CUDATarget) -> None:
    """Raise :class:`CompileError` naming the first limit ``kernel`` exceeds on ``target``."""
    for tag, extent in zip(THREAD_TAGS, kernel.grid + kernel.block):
        limit = target.thread_limits[tag]
        if extent > limit:
            raise CompileError(f"kernel {kernel.name}: {tag} extent {extent} exceeds {limit}")
    if kernel.threads_per_block > target.max_threads_per_block:
        x, y, z = kernel.block
        raise CompileError(f"kernel {kernel.name}: {x} x {y} x {z} = {kernel.threads_per_block} threads per block "
                           f"exceeds {target.max_threads_per_block}")
    if kernel.shared_bytes > target.max_shared_bytes:
        shared: list[str] = []
        ir.walk(kernel.body, lambda n: isinstance(n, ir.Allocate) and n.buffer.scope == "shared"
                and shared.append(f"{n.buffer.name} {allocation_bytes(n.buffer)}"))
        raise CompileError(f"kernel {kernel.name}: shared memory {kernel.shared_bytes} bytes exceeds the "
                           f"{target.max_shared_bytes}-byte limit ({', '.join(shared)} bytes); use smaller tiles")
    threads = {v for tag, v in kernel.thread_vars.items() if tag.startswith("threadIdx.")}
    _check_uniform_barriers(kernel, kernel.body, threads, None)


def _check_uniform_barriers(kernel: DeviceKernel, s: ir.Stmt, divergent: set[ir.Var], where: str | None) -> None:
    if is_barrier(s) and where is not None:
        raise CompileError(f"kernel {kernel.name}: a barrier sits under {where}, which differs between the threads "
                           "of a block, so some threads would never reach it; give every stage that uses shared "
                           "memory the kernel's full thread extents")
    if isinstance(s, ir.IfThenElse) and where is None and is_divergent(s.cond, divergent):
        where = f"the condition {s.cond}"
    elif isinstance(s, ir.For) and where is None and (is_divergent(s.min, divergent)
                                                     or is_divergent(s.extent, divergent)):
        where = f"the loop {s.loop_var.name} with bounds depending on a thread index"
    elif isinstance(s, ir.LetStmt) and is_divergent(s.value, divergent):
        divergent = divergent | {s.var}
    for child in ir.children(s):
        if isinstance(child, ir.Stmt):
            _check_uniform_barriers(kernel, child, divergent, where)
