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

__all__ = ["Conv2dKnobs", "DenseKnobs", "conv2d_blocks", "dense_blocks", "CONV2D_TILE_ORDERS", "CONV2D_LOAD_AT",
           "CONV2D_EPILOGUE_AT", "CONV2D_THREADS"]

#: Orders of conv2d's outer tile loops (the column tiles stay innermost: the epilogue sits there).
CONV2D_TILE_ORDERS = ("h_co", "co_h")
#: Where conv2d's input and weight DMA loads sit in the reduction: once per input-channel chunk
#: (``"k_o"``: the chunk's whole kernel window) or once per kernel row inside it (``"dy"``: an input
#: tile of ``(tile_h - 1) * stride + 1`` rows instead of ``+ kh``, ``kh`` times the load instructions).
CONV2D_LOAD_AT = ("k_o", "dy")
#: Where the requantisation epilogue (ALU passes, fused residual, store) runs: once per output tile
#: (``"tile"``) or once per output-channel block of the tile (``"co"``: shorter ALU passes, one store
#: per block, so stores of one block overlap the ALU of the next).
CONV2D_EPILOGUE_AT = ("tile", "co")
#: Virtual threads per axis the tuner offers; their product must not exceed TOKEN_QUEUE_DEPTH.
CONV2D_THREADS = (1, 2, 3, 4)


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
    load_at: str = "k_o"       # input/weight loads per input-channel chunk ("k_o") or per kernel row ("dy")
    epilogue_at: str = "tile"  # requantisation epilogue per output tile ("tile") or per channel block ("co")

    def check(self, wl: Conv2dWorkload, env: VTAEnv) -> None:
        for name, value, choices in (("tile_order", self.tile_order, CONV2D_TILE_ORDERS),
                                     ("load_at", self.load_at, CONV2D_LOAD_AT),
                                     ("epilogue_at", self.epilogue_at, CONV2D_EPILOGUE_AT)):
            if value not in choices:
                raise CompileError(f"conv2d knob {name}={value!r} must be one of {choices}")
        if self.load_at == "dy" and any(wl.pad) and (wl.stride_h > 1 or wl.kw == 1 or self.tile_h == 1
                                                     or wl.oh % self.tile_h == 1):
            # the DMA's padding needs a row loop of stride 1 (and a column loop) inside each load
            raise CompileError(f"conv2d knob load_at='dy' with padding needs stride_h=1, a kernel wider than one "
                               f"column and row tiles (the tail's too) of more than one row; got stride_h="
                               f"{wl.stride_h}, kw={wl.kw}, tile_h={self.tile_h} of {wl.oh} rows")
        _, ci_blocks, co_blocks = conv2d_blocks(env, wl)
        for name, value, total, per_thread in (("oc_nthread", self.oc_nthread, 1, 1),
                                               ("h_nthread", self.h_nthread, 1, 1),
                                               ("tile_h", self.tile_h, wl.oh, self.h_nthread),
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

    def static_error(self, wl: Conv2dWorkload, env: VTAEnv) -> str | None:
        """Why these knobs cannot build ``wl`` (what :meth:`check` rejects, or tiles that overflow an
        SRAM, :meth:`sram_overflow`) or build the same program as the default choice would (``dy``
        loads of a one-row kernel, a per-block epilogue of one block), or ``None``: the tuner's
        filter (configs it never measures)."""
        try:
            self.check(wl, env)
        except CompileError as exc:
            return str(exc)
        depth = env.config.token_queue_depth
        if self.oc_nthread * self.h_nthread > depth:    # the build's deadlock check would reject it
            return f"{self.oc_nthread} x {self.h_nthread} virtual threads exceed TOKEN_QUEUE_DEPTH={depth}"
        # choices that build the same program as the default one: not worth a trial
        if self.load_at == "dy" and wl.kh == 1:
            return "load_at='dy' with a one-row kernel is load_at='k_o'"
        if self.epilogue_at == "co" and self.tile_co == 1:
            return "epilogue_at='co' with tile_co=1 is epilogue_at='tile'"
        return self.sram_overflow(wl, env)

    def sram_overflow(self, wl: Conv2dWorkload, env: VTAEnv, acc_tiles: int = 1, acc_rows: int = 1) -> str | None:
        """The SRAM the tiles of all threads overflow (input, weight, accumulator), or ``None``;
        ``acc_tiles``: accumulator tiles per thread (2 with a fused residual), ``acc_rows``:
        per-channel operand rows (the addend's; more with a multiplier tensor)."""
        c = env.config
        threads = self.oc_nthread * self.h_nthread
        th, tw, tco, tci = self.tile_h, self.tile_w, self.tile_co, self.tile_ci
        kh, kw = wl.kh, wl.kw
        strided_1x1 = kh == kw == 1 and (wl.stride_h > 1 or wl.stride_w > 1) and not any(wl.pad)
        if strided_1x1:
            rows, cols = th, tw
        else:
            rows = (th - 1) * wl.stride_h + (1 if self.load_at == "dy" else kh)
            cols = (tw - 1) * wl.stride_w + kw
        inp = tci * rows * cols
        wgt = tco * tci * kw * (1 if self.load_at == "dy" else kh)
        # a per-block epilogue's ALU results live beside the whole tile's accumulator: one block more
        acc = th * tw * tco * acc_tiles + tco * acc_rows + (th * tw if self.epilogue_at == "co" else 0)
        for what, need, depth in (("input", inp, c.inp_depth), ("weight", wgt, c.wgt_depth),
                                  ("accumulator", acc, c.acc_depth)):
            if need * threads > depth:
                return (f"{what} tiles of {need} entries x {threads} threads overflow the {what} SRAM "
                        f"({depth} entries)")
        return None


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

    def static_error(self, mb: int, nb: int, kb: int, env: VTAEnv,
                     epilogue: tuple[int, int, int] = (0, 0, 0)) -> str | None:
        """Why these knobs cannot build a dense of ``mb x nb x kb`` blocks (what :meth:`check`
        rejects, more threads than the token queues, tiles that overflow an SRAM,
        :meth:`sram_overflow`), or ``None``: the tuner's filter (configs it never measures)."""
        try:
            self.check(mb, nb, kb)
        except CompileError as exc:
            return str(exc)
        depth = env.config.token_queue_depth
        if self.oc_nthread > depth:
            return f"{self.oc_nthread} virtual threads exceed TOKEN_QUEUE_DEPTH={depth}"
        return self.sram_overflow(env, epilogue)

    def sram_overflow(self, env: VTAEnv, epilogue: tuple[int, int, int] = (0, 0, 0)) -> str | None:
        """The SRAM the tiles of all threads overflow (input, weight, accumulator), or ``None``;
        ``epilogue``: ``(accumulator tiles, per-channel operand rows, ALU ops)`` beyond a shift-only
        requantisation (:func:`~vtakit.compiler.topi_vta.epilogue.epilogue_resources`)."""
        c = env.config
        e_tiles, e_rows, _ = epilogue
        inp, wgt = self.tile_b * self.tile_ci, self.tile_co * self.tile_ci
        acc = self.tile_b * self.tile_co * (1 + e_tiles) + self.tile_co * (1 + e_rows)  # tile(s) + addend rows
        for what, need, depth in (("input", inp, c.inp_depth), ("weight", wgt, c.wgt_depth),
                                  ("accumulator", acc, c.acc_depth)):
            if need * self.oc_nthread > depth:
                return (f"{what} tiles of {need} entries x {self.oc_nthread} threads overflow the {what} SRAM "
                        f"({depth} entries)")
        return None


def dense_blocks(env: VTAEnv, m: int, n: int, k: int) -> tuple[int, int, int]:
    """The blocks of an ``m x n x k`` dense's rows, output columns and reduction (sizes that are not
    whole blocks are zero-padded to them); a size that is not a positive integer is a :class:`CompileError`."""
    for what, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise CompileError(f"dense: {what} = {v!r} must be a positive integer")
    return blocks(m, env.batch), blocks(n, env.block_out), blocks(k, env.block_in)
