"""LowerThreadAllreduce: a cross-thread reduction becomes a tree reduction in shared memory.

An :class:`~vtakit.compiler.ir.AllReduce` over ``threadIdx.t`` combines the values of the threads
of a block that differ only in that index (a *group*; the other thread indices number the groups).
Each group gets ``n`` slots (``n`` the block's extent of ``threadIdx.t``) of a shared buffer, one
per thread, and halves the live slots per step, as TVM's LowerThreadAllreduce does without warp
shuffles::

    red[g*n + t] = cond ? value : identity            ; barrier
    if t < n - p: red[g*n + t] = red[g*n + t] (+) red[g*n + t + p]   ; barrier   (n not a power of 2)
    for off in p/2, p/4, ..., 1:
        if t < off: red[g*n + t] = red[g*n + t] (+) red[g*n + t + off]   ; barrier
    result = red[g*n]

(``p`` the largest power of two not above ``n``). Every thread of the block executes every
barrier, so the all-reduce may not sit under a condition that depends on a thread index.
Blocks share no memory, so a reduction over ``blockIdx.*`` cannot be lowered: it is an error
that says how to reschedule. Integer reductions give exactly the serial result; float ones
differ from it only by the order of the combinations.
"""

from __future__ import annotations

from vtakit.compiler import ir
from vtakit.compiler.backend.nvptx.program import THREAD_TAGS, DeviceKernel, barrier
from vtakit.compiler.backend.nvptx.split import shared_memory_bytes
from vtakit.errors import CompileError

__all__ = ["lower_thread_allreduce"]


def lower_thread_allreduce(kernel: DeviceKernel) -> DeviceKernel:
    """``kernel`` with every all-reduce lowered (shared buffers added at the top of the body)."""
    if not ir.contains(kernel.body, ir.AllReduce):
        return kernel
    lowering = _Lower(kernel)
    body = lowering.visit(kernel.body)
    shared = [s.buffer for s in _top_allocations(body) if s.buffer.scope == "shared"]
    for buf in reversed(lowering.buffers):
        body = ir.Allocate(buf, body)
    return DeviceKernel(kernel.name, kernel.params, body, kernel.thread_vars, kernel.grid, kernel.block,
                        shared_memory_bytes(shared + lowering.buffers))


def _top_allocations(body: ir.Stmt) -> list[ir.Allocate]:
    out = []
    while isinstance(body, ir.Allocate):
        out.append(body)
        body = body.body
    return out


class _Lower(ir.IRMutator):
    def __init__(self, kernel: DeviceKernel) -> None:
        self.kernel = kernel
        self.thread_vars = {v: tag for tag, v in kernel.thread_vars.items() if tag.startswith("threadIdx.")}
        self.buffers: list[ir.Buffer] = []
        self.conditions: list[ir.PrimExpr] = []

    def visit_IfThenElse(self, node: ir.IfThenElse) -> ir.Stmt:
        divergent = ir.uses_var(node.cond, self.thread_vars)
        if divergent:
            self.conditions.append(node.cond)
        try:
            return self.generic_visit(node)
        finally:
            if divergent:
                self.conditions.pop()

    def visit_AllReduce(self, node: ir.AllReduce) -> ir.Stmt:
        k = self.kernel
        tag = node.thread_tag
        if not tag.startswith("threadIdx."):
            raise CompileError(f"kernel {k.name}: a reduction is bound to {tag}, which the cuda target cannot "
                               "lower (blocks share no memory to combine their values in); bind the reduce axis "
                               "to threadIdx.* and let blockIdx.* cover the output axes, or reduce the blocks' "
                               "partial results in a second stage")
        if node.thread is not k.thread_vars.get(tag):
            raise CompileError(f"kernel {k.name}: the all-reduce over {tag} combines over {node.thread}, "
                               f"not the kernel's {tag} index")
        if self.conditions:
            raise CompileError(f"kernel {k.name}: the all-reduce over {tag} sits under the condition "
                               f"{self.conditions[-1]}, which differs between the threads of a block, but all "
                               "threads must reach its barriers; bind the reduction's thread axes with the "
                               "kernel's full extents")
        n = _extent(k, tag)
        if n == 1:
            raise CompileError(f"kernel {k.name}: the all-reduce over {tag} has a single thread")
        group, groups = self._group(tag)
        red = ir.Buffer(f"red_buf{len(self.buffers)}", (groups * n,), node.value.dtype, "shared")
        self.buffers.append(red)
        t = node.thread
        slot = group * n + t if groups > 1 else t
        comb = node.combiner
        identity = comb.identity_element

        def fold(threads: int, offset: int) -> ir.Stmt:
            """Threads below ``threads`` combine the slot ``offset`` above theirs into their own."""
            combined = comb.combine(red[slot], red[slot + offset])
            return ir.IfThenElse(t < threads, ir.BufferStore(red, combined, (slot,)))

        if isinstance(node.condition, ir.IntImm) and node.condition.value:
            first: ir.Stmt = ir.BufferStore(red, node.value, (slot,))
        else:
            first = ir.IfThenElse(node.condition, ir.BufferStore(red, node.value, (slot,)),
                                  ir.BufferStore(red, identity, (slot,)))
        steps = [first, barrier()]
        p = 1 << (n.bit_length() - 1)
        if p != n:
            steps += [fold(n - p, p), barrier()]
        offset = p // 2
        while offset >= 1:
            steps += [fold(offset, offset), barrier()]
            offset //= 2
        head = group * n if groups > 1 else ir.const(0, "int32")
        steps.append(ir.BufferStore(node.buffer, red[head], node.indices))
        return ir.seq(*steps)

    def _group(self, tag: str) -> tuple[ir.PrimExpr, int]:
        """The index of this thread's group among the block's (the other thread indices) and their count."""
        index: ir.PrimExpr = ir.const(0, "int32")
        count = 1
        for other in reversed(THREAD_TAGS[3:]):  # z, y, x: x varies fastest
            if other == tag or other not in self.kernel.thread_vars:
                continue
            extent = _extent(self.kernel, other)
            index = index * extent + self.kernel.thread_vars[other] if count > 1 else self.kernel.thread_vars[other]
            count *= extent
        return index, count


def _extent(kernel: DeviceKernel, tag: str) -> int:
    return (kernel.grid + kernel.block)[THREAD_TAGS.index(tag)]

