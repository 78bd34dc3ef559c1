"""Packed conv2d for the accelerator with a fused requantisation epilogue (VTA's ``vta_conv2d``).

``conv2d_packed`` declares the computation in tensor expressions, in terms of the
configuration's blocks: an optional zero-padding stage (asymmetric pads), the packed convolution
(int8 x int8 -> int32, ``kh x kw`` kernel, per-axis strides), then the requantisation epilogue
of :mod:`.epilogue` in the accumulator and a cast to int8: ``clip((acc + addend) >> shift)``, or
with ``multiplier`` (ALU_MUL configurations) ``clip((((acc + addend) >> pre_shift) * multiplier
+ round) >> shift)`` -- exactly :func:`vtakit.runtime.packing.requantize`.

A fused residual add (``residual=(lshift, rshift)``; :func:`vtakit.compiler.graph.ops.qnn.residual_requantize`)
reads one more int8 tensor of the output's packed layout, DMA-loaded per output tile into the
accumulator (an ACC_8BIT load) and added before the clip: ``clip((((acc + addend) >> shift) +
(residual << lshift)) >> rshift)`` -- SHR, [SHL], ADD tensor, [SHR], MAX, MIN; with ALU_REQUANT the
ADD tensor through MIN are one REQUANT tensor (and without a residual the epilogue ends in one).

API: ``conv2d_packed(env, wl, shift, clip, with_addend=True, multiplier=None, pre_shift=0,
residual=None)`` returns ``[data, kernel, addend, multiplier, residual, out]`` without the operands it does not have:
``addend`` when ``with_addend`` (int32 ``(CO/bo, BATCH, bo)``, ``pack_bias``'s layout; fold the
bias and ``rounding_addend(shift)`` into it), ``multiplier`` when ``multiplier="tensor"`` (the same
layout, per-channel values in [-2**15, 2**15)); an int ``multiplier`` is an ALU immediate.
``schedule_conv2d_packed`` is VTA's default schedule with its knobs (:class:`Conv2dKnobs`):
output tiles of ``tile_h x tile_w`` pixels and ``tile_co`` channel blocks, ``tile_ci`` input
channel blocks per load, ``oc_nthread`` / ``h_nthread`` virtual threads (``cthread``) over
output-channel and row tiles, ``tile_order`` (the two outer tile loops), ``load_at`` (input and
weight loads per input-channel chunk, ``"k_o"``, or per kernel row, ``"dy"``) and ``epilogue_at``
(the ALU epilogue, fused residual and store per output tile, ``"tile"``, or per channel block,
``"co"``). :func:`default_conv2d_knobs` picks a tiling that fits the SRAMs.
"""

from __future__ import annotations

from typing import Any

from vtakit.compiler import te
from vtakit.compiler.te import Schedule, Tensor
from vtakit.compiler.topi_vta.common import bind_cthreads, schedule_gemm_core
from vtakit.compiler.topi_vta.epilogue import (cache_requant_operands, declare_requant, epilogue_resources, op_multiplier,
                                               requant_stages, schedule_requant)
from vtakit.compiler.topi_vta.knobs import Conv2dKnobs, conv2d_blocks
from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles
from vtakit.compiler.topi_vta.workloads import Conv2dWorkload
from vtakit.compiler.vta.env import VTAEnv
from vtakit.errors import CompileError

#: strided 1x1 convs load only the rows and columns they read (one DMA row per output row)
STRIDED_1X1_LOADS = True

__all__ = ["Conv2dKnobs", "conv2d_packed", "schedule_conv2d_packed", "default_conv2d_knobs", "conv2d"]


def conv2d_packed(env: VTAEnv, wl: Conv2dWorkload, shift: int = 8, clip: tuple[int, int] = (0, 127),
                  with_addend: bool = True, multiplier: None | str | int = None,
                  pre_shift: int = 0,
                  residual: tuple[int, int] | None = None) -> tuple[list[Tensor], dict[str, Tensor]]:
    """The tensors ``[data, kernel, (addend,) (multiplier,) out]`` and the named intermediate stages.

    ``addend`` (when ``with_addend``) and a ``multiplier="tensor"`` are int32 ``(CO/bo, b, bo)``
    (:func:`~vtakit.runtime.packing.pack_bias`); an int ``multiplier`` is an immediate. The epilogue
    is :func:`~vtakit.runtime.packing.requantize` (see :mod:`.epilogue`). Batch and channels that
    are not whole blocks are zero-padded to them (:func:`conv2d_blocks`)."""
    b, bi, bo = env.batch, env.block_in, env.block_out
    nb, cib, cob = conv2d_blocks(env, wl)
    dshape = (nb, cib, wl.h, wl.w, b, bi)
    kshape = (cob, cib, wl.kh, wl.kw, bo, bi)
    oshape = (nb, cob, wl.oh, wl.ow, b, bo)
    data = te.placeholder(dshape, env.inp_dtype, name="data")
    kernel = te.placeholder(kshape, env.wgt_dtype, name="kernel")
    pt, pl, pb, pr = wl.pad
    if any(wl.pad):
        data_pad = te.compute(
            (dshape[0], dshape[1], wl.h + pt + pb, wl.w + pl + pr, b, bi),
            lambda n, c, y, x, nb, ci: te.if_then_else(
                te.all(y >= pt, y < wl.h + pt, x >= pl, x < wl.w + pl), data[n, c, y - pt, x - pl, nb, ci],
                te.const(0, env.inp_dtype)), name="data_pad")
    elif wl.kh == wl.kw == 1 and (wl.stride_h > 1 or wl.stride_w > 1) and STRIDED_1X1_LOADS:
        # a strided 1x1 conv reads every stride-th row and column: load only those (strided DMA rows)
        data_pad = te.compute((dshape[0], dshape[1], wl.oh, wl.ow, b, bi),
                              lambda n, c, y, x, nb, ci: data[n, c, y * wl.stride_h, x * wl.stride_w, nb, ci],
                              name="data_pad")
    else:
        data_pad = data
    strided = data_pad is not data and not any(wl.pad)
    ic = te.reduce_axis((0, dshape[1]), name="ic")
    dy = te.reduce_axis((0, wl.kh), name="dy")
    dx = te.reduce_axis((0, wl.kw), name="dx")
    ic_t = te.reduce_axis((0, bi), name="ic_t")
    sh, sw = (1, 1) if strided else wl.stride
    conv = te.compute(oshape, lambda n, o, y, x, nb, ot: te.sum(
        data_pad[n, ic, y * sh + dy, x * sw + dx, nb, ic_t].astype(env.acc_dtype)
        * kernel[o, ic, dy, dx, ot, ic_t].astype(env.acc_dtype), axis=[ic, dy, dx, ic_t]), name="conv")
    addend = te.placeholder((cob, b, bo), env.acc_dtype, name="addend") if with_addend else None
    mult = op_multiplier(multiplier, (cob, b, bo), env.acc_dtype)
    out, epilogue = declare_requant(env, conv, shift, clip, addend, lambda n, o, y, x, nb, ot: (o, nb, ot),
                                    mult, pre_shift=pre_shift, fuse=None if residual is None else False)
    stages = {"conv": conv, **epilogue}
    if data_pad is not data:
        stages["data_pad"] = data_pad
    operands = [t for t in (addend, mult) if isinstance(t, Tensor)]
    if residual is not None:
        res, out = _fuse_residual(env, oshape, stages, residual, clip)
        operands.append(res)
    return [data, kernel, *operands, out], stages


#: the names of the fused residual's stages, in order (the load, then ALU stages)
RESIDUAL_STAGES = ("residual_acc", "residual_shl", "residual_add", "residual_shr")


def _fuse_residual(env: VTAEnv, oshape: tuple, stages: dict[str, Tensor], residual: tuple[int, int],
                   clip_range: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """Insert the residual add before the epilogue's clip (``stages`` updated: new residual stages and
    a new ``clip``); returns the residual placeholder and the new output."""
    try:
        lshift, rshift = (int(v) for v in residual)
    except (TypeError, ValueError):
        raise CompileError(f"conv2d: residual must be (lshift, rshift), got {residual!r}") from None
    if not (0 <= lshift <= 31 and 0 <= rshift <= 31):
        raise CompileError(f"conv2d: residual shifts must lie in [0, 31], got {residual!r}")
    prev = stages["clip"].op.input_tensors[0]
    lo, hi = clip_range
    res = te.placeholder(oshape, env.inp_dtype, name="residual")
    r = stages["residual_acc"] = te.compute(oshape, lambda *i: res(*i).astype(env.acc_dtype), name="residual_acc")
    if lshift:
        r0 = r
        r = stages["residual_shl"] = te.compute(oshape, lambda *i: r0(*i) << lshift, name="residual_shl")
    r1 = r
    if env.config.alu_requant:   # the residual add, its shift and the clip in one stage: one REQUANT tensor
        def fused(*i):
            t = prev(*i) + r1(*i)
            return te.min(te.max(t >> rshift if rshift else t, lo), hi)

        clip = stages["clip"] = te.compute(oshape, fused, name="clip")
        return res, te.compute(oshape, lambda *i: clip(*i).astype(env.inp_dtype), name="out")
    t = stages["residual_add"] = te.compute(oshape, lambda *i: prev(*i) + r1(*i), name="residual_add")
    if rshift:
        t0 = t
        t = stages["residual_shr"] = te.compute(oshape, lambda *i: t0(*i) >> rshift, name="residual_shr")
    t1 = t
    clip = stages["clip"] = te.compute(oshape, lambda *i: te.min(te.max(t1(*i), lo), hi), name="clip")
    out = te.compute(oshape, lambda *i: clip(*i).astype(env.inp_dtype), name="out")
    return res, out


def schedule_conv2d_packed(env: VTAEnv, tensors: list[Tensor], stages: dict[str, Tensor],
                           knobs: Conv2dKnobs) -> Schedule:
    """VTA's conv2d schedule: output tiles, DMA loads per input-channel chunk, GEMM tensorized, ALU
    epilogue per tile and ``cthread`` over channel or row tiles, as ``knobs`` say."""
    out = tensors[-1]
    data, kernel = tensors[0], tensors[1]
    conv = stages["conv"]
    s = te.create_schedule(out.op)
    if "data_pad" in stages:
        cdata = stages["data_pad"]
        s[cdata].set_scope(env.inp_scope)
    else:
        cdata = s.cache_read(data, env.inp_scope, [conv])
    ckernel = s.cache_read(kernel, env.wgt_scope, [conv])
    s[conv].set_scope(env.acc_scope)
    caches = cache_requant_operands(env, s, stages)
    residual = [stages[n] for n in RESIDUAL_STAGES if n in stages]

    x_bo, x_co, x_i, x_j, x_bi, x_ci = s[out].op.axis
    x_co0, x_co1 = s[out].split(x_co, factor=knobs.tile_co)
    x_i0, x_i1 = s[out].split(x_i, factor=knobs.tile_h)
    x_j0, x_j1 = s[out].split(x_j, factor=knobs.tile_w)
    outer = (x_i0, x_co0) if knobs.tile_order == "h_co" else (x_co0, x_i0)
    s[out].reorder(x_bo, *outer, x_j0, x_co1, x_i1, x_j1, x_bi, x_ci)
    schedule_requant(env, s, out, stages, conv, caches, x_j0)
    # the epilogue (ALU passes, residual) per tile, or per channel block of the tile ("co")
    epi_at = x_co1 if knobs.epilogue_at == "co" else x_j0
    if knobs.epilogue_at == "co":
        for t in requant_stages(stages):
            s[t].compute_at(s[out], x_co1)
    for t in residual:
        s[t].set_scope(env.acc_scope)
        s[t].compute_at(s[out], epi_at)
        s[t].pragma(s[t].op.axis[0], env.dma_copy if t.op.name == "residual_acc" else env.alu)
    if knobs.oc_nthread > 1:
        bind_cthreads(s, out, x_co0, knobs.oc_nthread, x_bo)
    if knobs.h_nthread > 1:
        bind_cthreads(s, out, x_i0, knobs.h_nthread, x_bo)

    c_bo, c_co, c_i, c_j, c_bi, c_ci = s[conv].op.axis
    k_o, d_i, d_j, k_i = s[conv].op.reduce_axis
    s[conv].reorder(c_bo, k_o, c_j, d_j, d_i, c_co, c_i, c_bi, c_ci, k_i)
    k_o0, k_o1 = s[conv].split(k_o, factor=knobs.tile_ci)
    load_at = k_o0
    if knobs.load_at == "dy":   # one load per kernel row: the input tile holds the rows that row reads
        s[conv].reorder(c_bo, k_o0, d_i, k_o1, c_j, d_j, c_co, c_i, c_bi, c_ci, k_i)
        load_at = d_i
    schedule_gemm_core(env, s, conv, (cdata, ckernel), load_at, c_bi)
    # the store: one DMA per tile, or per channel block when the epilogue runs per block
    s[out].pragma(x_i1 if knobs.epilogue_at == "co" else x_co1, env.dma_copy)
    return s


def default_conv2d_knobs(env: VTAEnv, wl: Conv2dWorkload, vthreads: int = 2, residual: bool = False,
                         epilogue: tuple[int, int, int] = (0, 0, 0)) -> Conv2dKnobs:
    """A tiling that fits the SRAMs with ``vthreads`` virtual threads (see :mod:`.tiling`);
    ``residual``: room for a fused residual add; ``epilogue``: the multiplier's extra accumulator
    tiles, operand rows and ALU ops (:func:`.epilogue.epilogue_resources`)."""
    return choose_conv2d_tiles(env, wl, vthreads, residual, epilogue)


def conv2d(env: VTAEnv, wl: Conv2dWorkload, knobs: Conv2dKnobs | None = None, vthreads: int = 2,
           **kwargs: Any) -> tuple[Schedule, list[Tensor]]:
    """Declaration (``kwargs``: those of :func:`conv2d_packed`) and default schedule:
    ``(s, [data, kernel, (addend,) (multiplier,) out])``."""
    knobs = knobs or default_conv2d_knobs(env, wl, vthreads, kwargs.get("residual") is not None, epilogue_resources(
        kwargs.get("multiplier"), env.config.alu_mul, kwargs.get("shift", 8), env.config.alu_requant))
    knobs.check(wl, env)
    tensors, stages = conv2d_packed(env, wl, **kwargs)
    return schedule_conv2d_packed(env, tensors, stages, knobs), tensors
