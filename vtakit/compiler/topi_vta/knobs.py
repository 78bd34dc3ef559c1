"""The accelerator ops' schedule knobs and block counts, in a leaf module.

:mod:`.conv2d`, :mod:`.dense` and the default tiler :mod:`.tiling` all need them, and the tuner's
templates (``vtakit.autotune``) turn them into config spaces; keeping them here lets every one
of those import them without an import circle.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.compiler.topi_vta.workloads import Conv2dWorkload
from vtakit.compiler.vta.env import VTAEnv
from vtakit.errors import CompileError
from vtakit.runtime.packing import blocks

__all__ = ["Conv2dKnobs", "DenseKnobs", "conv2d_blocks", "dense_blocks", "CONV2D_TILE_ORDERS"]

#: Orders of conv2d's outer tile loops (the column tiles stay innermost: the epilogue sits there).
CONV2D_TILE_ORDERS = ("h_co", "co_h")


@dataclass(frozen=True)
class Conv2dKnobs:
    """Schedule knobs: output tile (pixels, channel blocks), input channel blocks per load, threads."""

    tile_h: int
    tile_w: int
    tile_co: int
    tile_ci: int
    oc_nthread: int = 1
    h_nthread: int = 1
    tile_order: str = "h_co"   # outer tile loops: rows then channel blocks ("h_co") or the reverse ("co_h")

    def check(self, wl: Conv2dWorkload, env: VTAEnv) -> None:
        if self.tile_order not in CONV2D_TILE_ORDERS:
            raise CompileError(f"conv2d knob tile_order={self.tile_order!r} must be one of {CONV2D_TILE_ORDERS}")
        _, ci_blocks, co_blocks = conv2d_blocks(env, wl)
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


def conv2d_blocks(env: VTAEnv, wl: Conv2dWorkload) -> tuple[int, int, int]:
    """The blocks of ``wl``'s batch, input and output channels; counts that are not whole blocks
    are zero-padded to them (:mod:`vtakit.runtime.packing`)."""
    return blocks(wl.batch, env.batch), blocks(wl.ci, env.block_in), blocks(wl.co, env.block_out)


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


def dense_blocks(env: VTAEnv, m: int, n: int, k: int) -> tuple[int, int, int]:
    """The blocks of an ``m x n x k`` dense's rows, output columns and reduction (sizes that are not
    whole blocks are zero-padded to them); a size that is not a positive integer is a :class:`CompileError`."""
    for what, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise CompileError(f"dense: {what} = {v!r} must be a positive integer")
    return blocks(m, env.batch), blocks(n, env.block_out), blocks(k, env.block_in)
