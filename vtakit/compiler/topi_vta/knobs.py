"""The accelerator ops' schedule knobs and shape checks, in a leaf module.

:mod:`.conv2d`, :mod:`.dense` and the default tiler :mod:`.tiling` all need them, and the tuner's
templates (``vtakit.autotune``) turn them into config spaces; keeping them here lets every one
of those import them without an import circle.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.compiler.topi_vta.workloads import Conv2dWorkload
from vtakit.compiler.vta.env import VTAEnv
from vtakit.errors import CompileError

__all__ = ["Conv2dKnobs", "DenseKnobs", "check_conv2d_shape", "check_dense_shape"]


@dataclass(frozen=True)
class Conv2dKnobs:
    """Schedule knobs: output tile (pixels, channel blocks), input channel blocks per load, threads."""

    tile_h: int
    tile_w: int
    tile_co: int
    tile_ci: int
    oc_nthread: int = 1
    h_nthread: int = 1

    def check(self, wl: Conv2dWorkload, env: VTAEnv) -> None:
        co_blocks, ci_blocks = wl.co // env.block_out, wl.ci // env.block_in
        for name, value, total, per_thread in (("tile_h", self.tile_h, wl.oh, self.h_nthread),
                                               ("tile_w", self.tile_w, wl.ow, 1),
                                               ("tile_co", self.tile_co, co_blocks, self.oc_nthread),
                                               ("tile_ci", self.tile_ci, ci_blocks, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise CompileError(f"conv2d knob {name}={value!r} must be a positive integer")
            # a tile that does not divide leaves a smaller tail tile (lowered by LoopPartition); the
            # tiles of an axis split over virtual threads must divide evenly among them
            if per_thread > 1 and total % (value * per_thread):
                raise CompileError(f"conv2d knob {name}={value!r} must divide {total} into {per_thread} "
                                   "virtual threads")


def check_conv2d_shape(env: VTAEnv, wl: Conv2dWorkload) -> None:
    """Batch and channels must be whole accelerator blocks (a :class:`CompileError` otherwise)."""
    for what, n, block in (("batch", wl.batch, env.batch), ("input channels", wl.ci, env.block_in),
                           ("output channels", wl.co, env.block_out)):
        if n % block:
            raise CompileError(f"conv2d: {what} = {n} is not a multiple of the accelerator's block of {block}")


@dataclass(frozen=True)
class DenseKnobs:
    """Schedule knobs: output tile (row and column blocks), reduction blocks per load, threads."""

    tile_b: int
    tile_co: int
    tile_ci: int
    oc_nthread: int = 1

    def check(self, mb: int, nb: int, kb: int) -> None:
        for name, value, total, per in (("tile_b", self.tile_b, mb, 1), ("tile_co", self.tile_co, nb, self.oc_nthread),
                                        ("tile_ci", self.tile_ci, kb, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise CompileError(f"dense knob {name}={value!r} must be a positive integer")
            # a tile that does not divide leaves a smaller tail tile (lowered by LoopPartition); the
            # tiles of an axis split over virtual threads must divide evenly among them
            if per > 1 and total % (value * per):
                raise CompileError(f"dense knob {name}={value!r} must divide {total} into {per} "
                                   "virtual threads")


def check_dense_shape(env: VTAEnv, m: int, n: int, k: int) -> None:
    """m, k and n must be positive whole accelerator blocks (a :class:`CompileError` otherwise)."""
    for what, v, block in (("m", m, env.batch), ("k", k, env.block_in), ("n", n, env.block_out)):
        if not isinstance(v, int) or v < 1 or v % block:
            raise CompileError(f"dense: {what} = {v!r} must be a positive multiple of the accelerator's block of {block}")
