"""Schedule steps that packed conv2d and dense share: virtual threads over an output tile axis,
and the GEMM core (operand loads at the outer reduction tile, DMA pragmas, tensorize)."""

from __future__ import annotations

from typing import Any, Sequence

from vtakit.compiler import te
from vtakit.compiler.te import Schedule, Tensor
from vtakit.compiler.vta.env import VTAEnv

__all__ = ["bind_cthreads", "schedule_gemm_core"]


def bind_cthreads(s: Schedule, out: Tensor, axis: Any, nthread: int, outermost: Any) -> tuple[Any, Any]:
    """Split ``axis`` of ``out`` into ``nthread`` parts bound to ``cthread``, placed before
    ``outermost``; returns (thread axis, the rest of ``axis``)."""
    thread, rest = s[out].split(axis, nparts=nthread)
    s[out].reorder(thread, outermost)
    s[out].bind(thread, te.thread_axis("cthread"))
    return thread, rest


def schedule_gemm_core(env: VTAEnv, s: Schedule, gemm: Tensor, loads: Sequence[Tensor], at: Any,
                       tensorize_axis: Any) -> None:
    """DMA-load ``loads`` into their SRAMs at ``gemm``'s loop ``at`` and tensorize ``gemm`` at
    ``tensorize_axis`` with the GEMM intrinsic."""
    for load in loads:
        s[load].compute_at(s[gemm], at)
        s[load].pragma(s[load].op.axis[0], env.dma_copy)
    s[gemm].tensorize(tensorize_axis, env.gemm)
