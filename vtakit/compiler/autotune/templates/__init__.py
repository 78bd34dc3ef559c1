"""The templates vtakit ships: the accelerator's packed conv2d and dense (:mod:`.vta`) and the
CPU's GEMM and conv2d (:mod:`.llvm`). Importing this package registers them."""

from vtakit.compiler.autotune.templates import llvm, vta

__all__ = ["llvm", "vta"]
