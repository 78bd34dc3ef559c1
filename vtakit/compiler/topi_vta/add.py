"""Residual add on the accelerator: two packed int8 activations in, one out, all three in the
packed layout of a conv2d output, ``(N/b, C/bo, H, W, b, bo)`` (NCHW{BATCH}n{BLOCK_OUT}c; batch and
channels zero-padded to whole blocks, :func:`~vtakit.runtime.packing.pack_nchw`).

It computes exactly :func:`vtakit.runtime.packing.add_reference` (int32 wrap-around)::

    t = (a << lshift_a) + (b << lshift_b) + addend
    out = int8(clip(t >> shift, lo, hi))         # shift < 0: a left shift

On the accelerator, per output tile: ``a`` and ``b`` are DMA-loaded into the accumulator (int8
DRAM -> ACC_8BIT loads, sign-extended, on the compute queue), then ALU instructions in place: SHR
``-lshift_a`` on ``a``, SHR ``-lshift_b`` on ``b``, ADD ``b`` into ``a``, ADD ``addend`` (immediates
of 16 signed bits: an addend beyond them takes up to :data:`MAX_ADDEND_IMMS` ADDs), SHR ``shift``,
MAX ``lo``, MIN ``hi``, and the store of the low bytes. ALU operations that are identities
(a zero lshift, addend or shift) are left out. Round to nearest by folding
``rounding_addend(shift)`` into ``addend``. With ALU_REQUANT, when the addend is 0 or that rounding
constant and the shift lies in [0, 31], ADD ``b`` through MIN ``hi`` are one REQUANT tensor.

``add_packed(env, shape, ...)`` declares it for the unpacked NCHW ``shape``; ``schedule_add_packed``
tiles it with :class:`AddKnobs` (output tiles of ``tile_c`` channel blocks x ``tile_h`` rows x
``tile_w`` columns, ``nthread`` virtual threads over row or channel tiles), :func:`choose_add_tiles`
picks the largest tiles that fit the accumulator and micro-op SRAMs; ``add(env, shape, ...)``
returns ``(s, [a, b, out])``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

from vtakit.compiler import te
from vtakit.compiler.te import Schedule, Tensor
from vtakit.compiler.topi_vta.common import bind_cthreads
from vtakit.compiler.topi_vta.epilogue import check_requant, fuses
from vtakit.compiler.topi_vta.tiling import divisors
from vtakit.compiler.vta.env import VTAEnv
from vtakit.errors import CompileError
from vtakit.hw.config import ITER_BITS
from vtakit.runtime.packing import SHIFT_RANGE, blocks, rounding_addend

__all__ = ["AddKnobs", "add_packed", "schedule_add_packed", "choose_add_tiles", "add", "add_blocks", "add_alu_stages",
           "MAX_ADDEND_IMMS"]

_IMM = (-(1 << 15), (1 << 15) - 1)
MAX_ADDEND_IMMS = 4          # ADD immediates for the addend: |addend| <= 4 * 32767 (about 2**17)


@dataclass(frozen=True)
class AddKnobs:
    """Output tile of the add: channel blocks, rows, columns; virtual threads over ``thread_axis``
    (``"h"``: row tiles, ``"c"``: channel-block tiles)."""

    tile_c: int
    tile_h: int
    tile_w: int
    nthread: int = 1
    thread_axis: str = "h"

    def check(self, env: VTAEnv, shape: Sequence[int]) -> None:
        _, cb, h, w = add_blocks(env, shape)
        if self.thread_axis not in ("h", "c"):
            raise CompileError(f"add knob thread_axis={self.thread_axis!r} must be 'h' or 'c'")
        for name, value, total in (("tile_c", self.tile_c, cb), ("tile_h", self.tile_h, h),
                                   ("tile_w", self.tile_w, w), ("nthread", self.nthread, None)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise CompileError(f"add knob {name}={value!r} must be a positive integer")
            if total is not None and value > total:
                raise CompileError(f"add knob {name}={value} exceeds the axis ({total})")
        if self.nthread > 1:
            total, tile = (h, self.tile_h) if self.thread_axis == "h" else (cb, self.tile_c)
            if total % (tile * self.nthread):
                raise CompileError(f"add knobs: {self.nthread} virtual threads over {self.thread_axis} need "
                                   f"tiles of {tile} to divide {total} into {self.nthread}")


def add_blocks(env: VTAEnv, shape: Sequence[int]) -> tuple[int, int, int, int]:
    """``(N/b, C/bo, H, W)`` of an NCHW ``shape`` (batch and channels rounded up to whole blocks)."""
    shape = tuple(shape)
    if len(shape) != 4 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise CompileError(f"add: shape must be 4 positive ints (N, C, H, W), got {shape!r}")
    n, c, h, w = shape
    return blocks(n, env.batch), blocks(c, env.block_out), h, w


def _split_imm(value: int) -> list[int]:
    """``value`` as ALU immediates (16-bit signed) that sum to it."""
    parts = []
    while value:
        part = max(_IMM[0], min(_IMM[1], value))
        parts.append(part)
        value -= part
    return parts


def _check(env: VTAEnv, lshift_a: int, lshift_b: int, addend: int, shift: int, clip: tuple[int, int]) -> None:
    for name, v in (("lshift_a", lshift_a), ("lshift_b", lshift_b)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= SHIFT_RANGE[1]:
            raise CompileError(f"add: {name} must be an int in [0, {SHIFT_RANGE[1]}], got {v!r}")
    if isinstance(addend, bool) or not isinstance(addend, int) or not -(1 << 31) <= addend < 1 << 31:
        raise CompileError(f"add: addend must be an int32, got {addend!r}")
    if len(_split_imm(addend)) > MAX_ADDEND_IMMS:
        raise CompileError(f"add: addend {addend} needs more than {MAX_ADDEND_IMMS} 16-bit ALU immediates "
                           f"(|addend| <= {MAX_ADDEND_IMMS * _IMM[1]})")
    check_requant(env, shift, clip, where="add")


def add_packed(env: VTAEnv, shape: Sequence[int], lshift_a: int = 0, lshift_b: int = 0, addend: int = 0,
               shift: int = 0, clip: tuple[int, int] = (-128, 127)) -> tuple[list[Tensor], dict[str, Tensor]]:
    """The tensors ``[a, b, out]`` (int8, packed ``(N/b, C/bo, H, W, b, bo)`` for the NCHW ``shape``)
    and the named stages: ``a_acc``/``b_acc`` (the loads into the accumulator) and the ALU stages
    in order (:func:`add_alu_stages`)."""
    _check(env, lshift_a, lshift_b, addend, shift, clip)
    nb, cb, h, w = add_blocks(env, shape)
    pshape = (nb, cb, h, w, env.batch, env.block_out)
    a = te.placeholder(pshape, env.inp_dtype, name="a")
    b = te.placeholder(pshape, env.inp_dtype, name="b")
    stages: dict[str, Tensor] = {}
    a_acc = stages["a_acc"] = te.compute(pshape, lambda *i: a(*i).astype(env.acc_dtype), name="a_acc")
    b_acc = stages["b_acc"] = te.compute(pshape, lambda *i: b(*i).astype(env.acc_dtype), name="b_acc")
    ta, tb = a_acc, b_acc
    if lshift_a:
        ta = stages["a_shl"] = te.compute(pshape, lambda *i: a_acc(*i) << lshift_a, name="a_shl")
    if lshift_b:
        tb = stages["b_shl"] = te.compute(pshape, lambda *i: b_acc(*i) << lshift_b, name="b_shl")
    ta_, tb_ = ta, tb
    if env.config.alu_requant and fuses(shift) and addend in (0, rounding_addend(shift)):
        def fused(*i):   # the sum, the rounding addend, the shift and the clip: one REQUANT tensor
            t = ta_(*i) + tb_(*i) + addend if addend else ta_(*i) + tb_(*i)
            return te.min(te.max(t >> shift if shift else t, clip[0]), clip[1])

        res = stages["clip"] = te.compute(pshape, fused, name="clip")
        return [a, b, te.compute(pshape, lambda *i: res(*i).astype(env.inp_dtype), name="out")], stages
    res = stages["sum"] = te.compute(pshape, lambda *i: ta_(*i) + tb_(*i), name="sum")
    for k, part in enumerate(_split_imm(addend)):
        res = stages[f"addend{k}"] = te.compute(pshape, lambda *i, p=res, c=part: p(*i) + c, name=f"addend{k}")
    if shift:
        prev = res
        res = stages["shr"] = te.compute(
            pshape, (lambda *i: prev(*i) >> shift) if shift > 0 else (lambda *i: prev(*i) << -shift), name="shr")
    prev = res
    res = stages["clip"] = te.compute(pshape, lambda *i: te.min(te.max(prev(*i), clip[0]), clip[1]), name="clip")
    out = te.compute(pshape, lambda *i: res(*i).astype(env.inp_dtype), name="out")
    return [a, b, out], stages


def add_alu_stages(stages: dict[str, Tensor]) -> list[Tensor]:
    """The ALU stages among an add's named ``stages``, in order."""
    return [t for name, t in stages.items() if name not in ("a_acc", "b_acc")]


def schedule_add_packed(env: VTAEnv, tensors: list[Tensor], stages: dict[str, Tensor], knobs: AddKnobs) -> Schedule:
    """Output tiles (``knobs``) computed in place in the accumulator: both loads, the ALU chain and
    the store per tile; ``cthread`` over row or channel tiles."""
    out = tensors[-1]
    s = te.create_schedule(out.op)
    x_n, x_c, x_h, x_w, x_bi, x_ci = s[out].op.axis
    x_c0, x_c1 = s[out].split(x_c, factor=knobs.tile_c)
    x_h0, x_h1 = s[out].split(x_h, factor=knobs.tile_h)
    x_w0, x_w1 = s[out].split(x_w, factor=knobs.tile_w)
    s[out].reorder(x_n, x_c0, x_h0, x_w0, x_c1, x_h1, x_w1, x_bi, x_ci)
    if knobs.nthread > 1:
        bind_cthreads(s, out, x_h0 if knobs.thread_axis == "h" else x_c0, knobs.nthread, x_n)
    for name in ("a_acc", "b_acc"):
        t = stages[name]
        s[t].set_scope(env.acc_scope)
        s[t].compute_at(s[out], x_w0)
        s[t].pragma(s[t].op.axis[0], env.dma_copy)
    for t in add_alu_stages(stages):
        s[t].set_scope(env.acc_scope)
        s[t].compute_at(s[out], x_w0)
        s[t].pragma(s[t].op.axis[0], env.alu)
    s[out].pragma(x_c1, env.dma_copy)
    return s


def _uops_per_op(tile_c: int, tile_h: int, tile_w: int) -> int:
    """Micro-ops of one ALU instruction over a tile: two outer non-unit loops fold into the
    instruction's iterations, the rest expand (``FoldUopLoop``)."""
    extents = [e for e in (tile_c, tile_h, tile_w) if e > 1]
    n = 1
    for e in extents[2:]:
        n *= e
    return n


def choose_add_tiles(env: VTAEnv, shape: Sequence[int], vthreads: int = 2, n_alu_ops: int = 8) -> AddKnobs:
    """The largest output tile (fewest instructions; whole rows preferred) whose two accumulator
    tiles per thread fit the accumulator SRAM and whose ALU micro-ops fit the micro-op SRAM, with
    the most virtual threads up to ``vthreads`` (and TOKEN_QUEUE_DEPTH) that divide the row or
    channel tiles."""
    if not isinstance(vthreads, int) or isinstance(vthreads, bool) or vthreads < 1:
        raise CompileError(f"vthreads must be >= 1 (an integer), got {vthreads!r}")
    c = env.config
    _, cb, h, w = add_blocks(env, shape)
    for threads in range(min(vthreads, c.token_queue_depth), 0, -1):
        best: tuple[tuple, AddKnobs] | None = None
        for tc, th, tw in itertools.product(divisors(cb), divisors(h), divisors(w)):
            entries = tc * th * tw
            uops = n_alu_ops * _uops_per_op(tc, th, tw) * threads
            if 2 * entries * threads > c.acc_depth or uops > c.uop_depth or max(tc, th, tw) >= 1 << ITER_BITS:
                continue
            for axis in ("h", "c"):
                total, tile = (h, th) if axis == "h" else (cb, tc)
                if threads > 1 and total % (tile * threads):
                    continue
                rank = (entries, tw, th)
                if best is None or rank > best[0]:
                    best = (rank, AddKnobs(tc, th, tw, threads, axis))
        if best is not None:
            return best[1]
    raise CompileError(f"no add tiling of {tuple(shape)} fits {c.model}")


def add(env: VTAEnv, shape: Sequence[int], lshift_a: int = 0, lshift_b: int = 0, addend: int = 0, shift: int = 0,
        clip: tuple[int, int] = (-128, 127), knobs: AddKnobs | None = None,
        vthreads: int = 2) -> tuple[Schedule, list[Tensor]]:
    """Declaration and default schedule of the residual add: ``(s, [a, b, out])``."""
    tensors, stages = add_packed(env, shape, lshift_a, lshift_b, addend, shift, clip)
    knobs = knobs or choose_add_tiles(env, shape, vthreads, len(add_alu_stages(stages)))
    knobs.check(env, shape)
    return schedule_add_packed(env, tensors, stages, knobs), tensors
