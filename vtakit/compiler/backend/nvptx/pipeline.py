"""The GPU lowering after ``vtakit.lower``: host/device split, then the per-kernel passes.

One place names and runs the passes, in order: SplitHostDevice cuts the function into kernels,
then every kernel goes through :data:`KERNEL_PASSES` (LowerThreadAllreduce, ThreadSync) and is
verified against the target's limits (VerifyGPUCode). The result is the
:class:`~vtakit.compiler.backend.nvptx.program.DeviceProgram` that both the NVPTX code generator
and the emulator run.
"""

from __future__ import annotations

from typing import Callable

from vtakit.compiler import ir
from vtakit.compiler.backend.nvptx.allreduce import lower_thread_allreduce
from vtakit.compiler.backend.nvptx.program import DeviceKernel, DeviceProgram
from vtakit.compiler.backend.nvptx.split import split_host_device
from vtakit.compiler.backend.nvptx.target import CUDATarget
from vtakit.compiler.backend.nvptx.thread_sync import thread_sync
from vtakit.compiler.backend.nvptx.verify import verify_kernel
from vtakit.errors import CompileError

__all__ = ["KERNEL_PASSES", "device_program"]

KERNEL_PASSES: tuple[tuple[str, Callable[[DeviceKernel], DeviceKernel]], ...] = (
    ("LowerThreadAllreduce", lower_thread_allreduce),
    ("ThreadSync", thread_sync),
)


def device_program(func: ir.PrimFunc, target: CUDATarget | None = None) -> DeviceProgram:
    """The kernels of the lowered function ``func``, ready for code generation or emulation."""
    if not isinstance(func, ir.PrimFunc):
        raise CompileError(f"device_program expects a lowered ir.PrimFunc, got {type(func).__name__}")
    target = target or CUDATarget()
    program = split_host_device(func)
    kernels = []
    for kernel in program.kernels:
        for _, kernel_pass in KERNEL_PASSES:
            kernel = kernel_pass(kernel)
        verify_kernel(kernel, target)
        kernels.append(kernel)
    return DeviceProgram(program.name, program.params, kernels, program.workspaces)
