"""Code generators that turn lowered loop IR into something that runs.

``llvm`` is the host CPU (llvmlite, JIT-compiled, parallel loops on a native thread pool);
``cuda`` (:mod:`.nvptx`, imported when the target is first used) is NVIDIA GPUs through LLVM NVPTX.
"""

from vtakit.compiler.backend.llvm import ArgumentError, CPUModule, build_llvm, register_extern

__all__ = ["build_llvm", "CPUModule", "ArgumentError", "register_extern"]
