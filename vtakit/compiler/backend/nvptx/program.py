"""The device program of a GPU build: the kernels that the host/device split cuts out of a function.

It is the one contract between the GPU passes, the NVPTX code generator and the emulator. A
:class:`DeviceKernel` is the subtree under one outermost ``blockIdx``/``threadIdx`` loop nest of a
lowered function, with the thread loops removed: each thread index is the variable named in
``thread_vars`` (one per tag), and the launch geometry is ``grid`` x ``block``. A stage that re-binds
a thread index with a smaller extent (a cooperative fetch) is guarded by ``if var < extent``.
``shared`` allocations are hoisted to the top of the kernel body (one copy per block); ``local``
ones stay where they are (one copy per thread). Barriers are ``Evaluate(Call("void",
"tvm_storage_sync", ("shared",)))``. Kernels run in order; a buffer in ``workspaces`` is global
memory the host allocates between launches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vtakit.compiler import ir

__all__ = ["BARRIER", "THREAD_TAGS", "DeviceKernel", "DeviceProgram", "barrier", "is_barrier"]

BARRIER = "tvm_storage_sync"
THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")


def barrier() -> ir.Stmt:
    """``__syncthreads()``: every thread of the block waits here for the others."""
    return ir.Evaluate(ir.Call.make("void", BARRIER, ["shared"]))


def is_barrier(stmt: ir.Stmt) -> bool:
    return (isinstance(stmt, ir.Evaluate) and isinstance(stmt.value, ir.Call)
            and stmt.value.op == BARRIER)


@dataclass
class DeviceKernel:
    """One ``__global__`` function and its launch geometry.

    ``params`` are the global buffers the kernel reads or writes, in call order (each one a
    parameter of the host function or a workspace); ``thread_vars`` maps each tag of
    :data:`THREAD_TAGS` the kernel uses to its index variable (tags it does not use have extent 1);
    ``shared_bytes`` is the static shared memory of one block.
    """

    name: str
    params: tuple[ir.Buffer, ...]
    body: ir.Stmt
    thread_vars: dict[str, ir.Var]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0

    @property
    def threads_per_block(self) -> int:
        x, y, z = self.block
        return x * y * z

    def as_primfunc(self) -> ir.PrimFunc:
        """The kernel as a PrimFunc (for printing and for passes that take functions)."""
        return ir.PrimFunc(self.name, self.params, self.body,
                           {"grid": self.grid, "block": self.block, "thread_vars": dict(self.thread_vars)})

    def __str__(self) -> str:
        return (f"// kernel {self.name}: grid {self.grid}, block {self.block}, {self.shared_bytes} bytes shared\n"
                f"{self.as_primfunc()}")


@dataclass
class DeviceProgram:
    """A lowered function split for a GPU: kernels launched in order on the host's buffers."""

    name: str
    params: tuple[ir.Buffer, ...]
    kernels: list[DeviceKernel]
    workspaces: list[ir.Buffer] = field(default_factory=list)

    def __str__(self) -> str:
        """The kernels in launch order, each with its geometry, as loop IR."""
        spaces = ", ".join(f"{b.name}[{', '.join(map(str, b.shape))}] {b.dtype}" for b in self.workspaces)
        head = f"// device program {self.name}: {len(self.kernels)} kernel(s)" + (f", workspaces {spaces}" if spaces else "")
        return "\n".join([head, *map(str, self.kernels)])
