"""The GPU backend: LLVM NVPTX code from the same schedules as the CPU, plus a GPU emulator."""

from vtakit.compiler.backend.nvptx.program import DeviceKernel, DeviceProgram

__all__ = ["DeviceKernel", "DeviceProgram"]
