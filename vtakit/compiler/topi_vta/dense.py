"""Packed dense (GEMM) for the accelerator with the fused requantisation epilogue (VTA's
``vta_dense``): ``out = requantize(data . weight^T, addend, shift, clip, multiplier, pre_shift)``
as int8 (:func:`vtakit.runtime.packing.requantize`, the epilogue of :mod:`.epilogue`), on the packed
layouts of :mod:`vtakit.runtime.packing` (sizes that are not whole blocks zero-padded).
``dense_packed(env, m, n, k, shift, clip, with_addend=True, multiplier=None, pre_shift=0)`` returns
``[data, weight, addend, multiplier, out]`` without the operands it does not have (``addend`` when
``with_addend``, ``multiplier`` when ``multiplier="tensor"`` or ``"shift_add[:K]"``; an int is an
immediate). Knobs: ``tile_b`` row blocks and ``tile_co`` column blocks per output tile, ``tile_ci``
reduction blocks per load, ``oc_nthread`` virtual threads over column tiles.
"""

from __future__ import annotations

from typing import Any

from vtakit.compiler import te
from vtakit.compiler.te import Schedule, Tensor
from vtakit.compiler.topi_vta.common import bind_cthreads, schedule_gemm_core
from vtakit.compiler.topi_vta.epilogue import (cache_requant_operands, declare_requant, epilogue_resources,
                                              op_multiplier, schedule_requant)
from vtakit.compiler.topi_vta.knobs import DenseKnobs, dense_blocks
from vtakit.compiler.topi_vta.tiling import choose_dense_tiles
from vtakit.compiler.vta.env import VTAEnv

__all__ = ["DenseKnobs", "dense_packed", "schedule_dense_packed", "dense"]


def dense_packed(env: VTAEnv, m: int, n: int, k: int, shift: int = 8, clip: tuple[int, int] = (0, 127),
                 with_addend: bool = True, multiplier: None | str | int = None,
                 pre_shift: int = 0) -> tuple[list[Tensor], dict[str, Tensor]]:
    """The tensors ``[data, weight, (addend,) (multiplier,) out]`` on packed layouts and the named
    intermediate stages; ``addend`` and a ``multiplier="tensor"`` are int32 ``(N/bo, b, bo)``, an int
    ``multiplier`` is an immediate (as :func:`~vtakit.compiler.topi_vta.conv2d.conv2d_packed`)."""
    b, bi, bo = env.batch, env.block_in, env.block_out
    mb, nb, kb = dense_blocks(env, m, n, k)
    data = te.placeholder((mb, kb, b, bi), env.inp_dtype, name="data")
    weight = te.placeholder((nb, kb, bo, bi), env.wgt_dtype, name="weight")
    ko = te.reduce_axis((0, kb), name="ko")
    ki = te.reduce_axis((0, bi), name="ki")
    oshape = (mb, nb, b, bo)
    gemm = te.compute(oshape, lambda i, j, x, y: te.sum(
        data[i, ko, x, ki].astype(env.acc_dtype) * weight[j, ko, y, ki].astype(env.acc_dtype), axis=[ko, ki]),
        name="gemm")
    addend = te.placeholder((nb, b, bo), env.acc_dtype, name="addend") if with_addend else None
    mult = op_multiplier(multiplier, (nb, b, bo), env.acc_dtype)
    out, stages = declare_requant(env, gemm, shift, clip, addend, lambda i, j, x, y: (j, x, y), mult,
                                  pre_shift=pre_shift)
    operands = [t for t in (addend, mult) if isinstance(t, Tensor)]
    return [data, weight, *operands, out], {"gemm": gemm, **stages}


def schedule_dense_packed(env: VTAEnv, tensors: list[Tensor], stages: dict[str, Tensor],
                          knobs: DenseKnobs) -> Schedule:
    """VTA's dense schedule: output tiles, DMA loads per reduction chunk, GEMM tensorized, ALU
    epilogue per tile and ``cthread`` over column tiles, as ``knobs`` say."""
    out = tensors[-1]
    gemm = stages["gemm"]
    s = te.create_schedule(out.op)
    cdata = s.cache_read(tensors[0], env.inp_scope, [gemm])
    cweight = s.cache_read(tensors[1], env.wgt_scope, [gemm])
    s[gemm].set_scope(env.acc_scope)
    caches = cache_requant_operands(env, s, stages)

    x_b, x_c, x_bi, x_ci = s[out].op.axis
    x_b0, x_b1 = s[out].split(x_b, factor=knobs.tile_b)
    x_c0, x_c1 = s[out].split(x_c, factor=knobs.tile_co)
    s[out].reorder(x_b0, x_c0, x_b1, x_c1, x_bi, x_ci)
    if knobs.oc_nthread > 1:
        _, x_c0 = bind_cthreads(s, out, x_c0, knobs.oc_nthread, x_b0)
    schedule_requant(env, s, out, stages, gemm, caches, x_c0)

    g_b, g_c, g_bi, g_ci = s[gemm].op.axis
    k_o, k_i = s[gemm].op.reduce_axis
    k_o0, k_o1 = s[gemm].split(k_o, factor=knobs.tile_ci)
    s[gemm].reorder(k_o0, k_o1, g_b, g_c, g_bi, g_ci, k_i)
    schedule_gemm_core(env, s, gemm, (cdata, cweight), k_o0, g_bi)
    s[out].pragma(x_b1, env.dma_copy)
    return s


def dense(env: VTAEnv, m: int, n: int, k: int, knobs: DenseKnobs | None = None, vthreads: int = 2,
          **kwargs: Any) -> tuple[Schedule, list[Tensor]]:
    """Declaration (``kwargs``: those of :func:`dense_packed`) and default schedule:
    ``(s, [data, weight, (addend,) (multiplier,) out])``."""
    tensors, stages = dense_packed(env, m, n, k, **kwargs)
    knobs = knobs or choose_dense_tiles(env, m, n, k, vthreads, epilogue_resources(
        kwargs.get("multiplier"), env.config.alu_mul, kwargs.get("shift", 8), env.config.alu_requant))
    knobs.check(*dense_blocks(env, m, n, k))
    return schedule_dense_packed(env, tensors, stages, knobs), tensors
