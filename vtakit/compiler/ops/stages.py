"""Walking the stages behind an operator's output: what every target's schedules need to find.

A schedule gets the output tensor(s) of a fused group and has to find its anchor (the tagged
reduction: ``dense``, ``conv2d_nchw``, ...), the element-wise stages to inline between it and the
output, and the padding or packing stages it reads. The CPU (:mod:`.cpu`) and GPU (:mod:`.cuda`)
schedules walk the same graphs, so the walk lives here once.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from vtakit.compiler import ir
from vtakit.compiler.ops.common import static_shape
from vtakit.compiler.te.tensor import ComputeOp, Tensor
from vtakit.errors import ScheduleError

__all__ = ["outputs_of", "is_injective", "divisor", "producers", "compute_producers", "find_anchor",
           "inner_stages", "inline_injective_producers", "first_tagged", "input_tagged", "size_of"]


def outputs_of(outs: Tensor | Sequence[Tensor]) -> list[Tensor]:
    """``outs`` as a non-empty list of tensors (a schedule's first argument)."""
    outs = [outs] if isinstance(outs, Tensor) else list(outs)
    if not outs or not all(isinstance(t, Tensor) for t in outs):
        raise ScheduleError(f"a schedule needs the output tensor(s), got {outs!r}")
    return outs


def is_injective(t: Tensor) -> bool:
    """Whether ``t`` is computed element by element (a compute stage without a reduction)."""
    return isinstance(t.op, ComputeOp) and not isinstance(t.op.body, ir.Reduce)


def divisor(extent: int, limit: int) -> int:
    """The largest divisor of ``extent`` that is at most ``limit``."""
    return max(d for d in range(1, min(extent, limit) + 1) if extent % d == 0)


def producers(t: Tensor) -> Iterable[Tensor]:
    """The tensors ``t`` reads (none for a placeholder)."""
    return t.op.input_tensors if isinstance(t.op, ComputeOp) else []


def compute_producers(t: Tensor) -> list[Tensor]:
    """The compute stages ``t`` reads (placeholders left out)."""
    return [p for p in producers(t) if isinstance(p.op, ComputeOp)]


def first_tagged(outs: list[Tensor], tags: Any) -> Tensor | None:
    """The first stage whose tag is in ``tags``, walking back from the first output through
    element-wise stages only (None when there is none): the operator a fused group is scheduled by."""
    stack, seen = [outs[0]], set()
    while stack:
        t = stack.pop()
        if id(t.op) in seen or not isinstance(t.op, ComputeOp):
            continue
        seen.add(id(t.op))
        if t.op.tag in tags:
            return t
        if is_injective(t):
            stack.extend(producers(t))
    return None


def find_anchor(last: Tensor, tags: tuple[str, ...]) -> tuple[Tensor, list[Tensor]]:
    """The stage tagged ``tags`` that ``last`` is computed from, and the element-wise stages to inline:
    those between it and ``last``, and side inputs of the epilogue (a reshaped bias, ...)."""
    def reaches(t: Tensor) -> bool:
        return t.op.tag in tags or any(reaches(p) for p in compute_producers(t))

    inline: list[Tensor] = []
    t = last
    while t.op.tag not in tags:
        on_path = [p for p in compute_producers(t) if reaches(p)]
        if len(on_path) != 1 or not is_injective(t):
            raise ScheduleError(f"schedule for {tags[0]}: output {last.name!r} is not a chain of element-wise "
                                f"stages ending in a {'/'.join(tags)} stage")
        if t is not last:
            inline.append(t)
        for side in compute_producers(t):
            if side is not on_path[0]:
                inline.extend(_side_stages(side, last))
        t = on_path[0]
    return t, inline


def _side_stages(t: Tensor, last: Tensor) -> list[Tensor]:
    if not is_injective(t):
        raise ScheduleError(f"output {last.name!r} reads the reduction {t.name!r} besides its main operator; "
                            "schedule it separately")
    return [t] + [u for p in compute_producers(t) for u in _side_stages(p, last)]


def inner_stages(outs: list[Tensor]) -> list[Tensor]:
    """Every compute stage the outputs are computed from, once each, the outputs themselves excluded."""
    out_ops = {id(t.op) for t in outs}
    seen: set[int] = set()
    stages: list[Tensor] = []
    stack = list(outs)
    while stack:
        for p in compute_producers(stack.pop()):
            if id(p.op) in seen:
                continue
            seen.add(id(p.op))
            stack.append(p)
            if id(p.op) not in out_ops:
                stages.append(p)
    return stages


def inline_injective_producers(s: Any, outs: list[Tensor], schedule_name: str) -> None:
    """Inline every stage the outputs are computed from; a reduction among them is a ScheduleError
    (an injective schedule cannot place it)."""
    for p in inner_stages(outs):
        if not is_injective(p):
            raise ScheduleError(f"{schedule_name}: stage {p.name!r} is a reduction; use the operator's own schedule")
        s[p].compute_inline()


def input_tagged(t: Tensor, tag: str) -> Tensor | None:
    """The compute stage tagged ``tag`` that ``t`` reads directly, if any."""
    return next((p for p in producers(t) if isinstance(p.op, ComputeOp) and p.op.tag == tag), None)


def size_of(t: Tensor) -> int:
    """Elements of ``t``."""
    return math.prod(static_shape(t))
