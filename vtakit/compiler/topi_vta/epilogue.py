"""The requantisation epilogue that packed conv2d and dense share (VTA's ``vta.top`` ops):
``out = int8(clip((acc >> shift) + bias, lo, hi))``, declared as element-wise stages in the
accumulator and scheduled onto the vector ALU next to the GEMM stage that produces ``acc``."""

from __future__ import annotations

from typing import Callable

from vtakit.compiler import te
from vtakit.compiler.te import Schedule, Tensor
from vtakit.compiler.vta.env import VTAEnv

__all__ = ["declare_requant", "schedule_requant"]

_ALU_STAGES = ("shr", "bias_add", "clip")


def declare_requant(env: VTAEnv, acc: Tensor, shift: int, clip: tuple[int, int], bias: Tensor | None,
                    bias_index: Callable[..., tuple]) -> tuple[Tensor, dict[str, Tensor]]:
    """The int8 output of ``acc`` and the named epilogue stages; ``bias_index(*out_index)`` says
    which ``bias`` element an output element adds (no bias stage when ``bias`` is None)."""
    stages: dict[str, Tensor] = {}
    res = stages["shr"] = te.compute(acc.shape, lambda *i: acc(*i) >> shift, name="shr")
    if bias is not None:
        prev = res
        res = stages["bias_add"] = te.compute(acc.shape, lambda *i: prev(*i) + bias(*bias_index(*i)),
                                              name="bias_add")
    prev = res
    res = stages["clip"] = te.compute(acc.shape, lambda *i: te.min(te.max(prev(*i), clip[0]), clip[1]), name="clip")
    out = te.compute(acc.shape, lambda *i: res(*i).astype(env.inp_dtype), name="out")
    return out, stages


def schedule_requant(env: VTAEnv, s: Schedule, out: Tensor, stages: dict[str, Tensor], acc: Tensor,
                     bias_cache: Tensor | None, attach_at: object) -> None:
    """Compute ``acc``, the ALU stages and the bias load (``bias_cache``, the bias read into the
    accumulator) at ``attach_at``, a loop of ``out``'s stage: one output tile at a time."""
    s[acc].compute_at(s[out], attach_at)
    for name in _ALU_STAGES:
        if name in stages:
            t = stages[name]
            s[t].set_scope(env.acc_scope)
            s[t].pragma(s[t].op.axis[0], env.alu)
            s[t].compute_at(s[out], attach_at)
    if bias_cache is not None:
        s[bias_cache].compute_at(s[out], attach_at)
        s[bias_cache].pragma(s[bias_cache].op.axis[0], env.dma_copy)
