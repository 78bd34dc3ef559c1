"""The templates vtakit ships: the accelerator's packed conv2d and dense (:mod:`.vta`), the
CPU's GEMM and conv2d (:mod:`.llvm`) and the GPU's (:mod:`.cuda`). Importing this package registers them."""

from vtakit.compiler.autotune.templates import cuda, llvm, vta

__all__ = ["cuda", "llvm", "vta"]
