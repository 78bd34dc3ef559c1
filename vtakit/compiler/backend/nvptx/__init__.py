"""The GPU backend (``target="cuda"``, alias ``nvptx``): LLVM NVPTX code from the same schedules
as the CPU, checked by ptxas, run through the CUDA driver where a GPU exists and by the emulator
(:mod:`vtakit.compiler.gpu_emulator`) everywhere."""

from vtakit.compiler.backend.nvptx.array import CUDAArray, cuda_array
from vtakit.compiler.backend.nvptx.module import CUDAModule, KernelInfo, build_cuda
from vtakit.compiler.backend.nvptx.pipeline import device_program
from vtakit.compiler.backend.nvptx.program import DeviceKernel, DeviceProgram
from vtakit.compiler.backend.nvptx.ptxas import KernelResources, PtxasReport, ptxas_check, ptxas_path
from vtakit.compiler.backend.nvptx.split import split_host_device
from vtakit.compiler.backend.nvptx.target import CUDATarget, parse_target

__all__ = ["CUDAArray", "cuda_array", "CUDAModule", "KernelInfo", "build_cuda", "device_program", "DeviceKernel", "DeviceProgram",
           "KernelResources", "PtxasReport", "ptxas_check", "ptxas_path", "split_host_device", "CUDATarget",
           "parse_target"]
