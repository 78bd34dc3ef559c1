"""The requantisation epilogue that packed conv2d and dense share (VTA's ``vta.top`` ops), declared
as element-wise stages in the accumulator and scheduled onto the vector ALU next to the GEMM
stage that produces ``acc``. It computes exactly :func:`vtakit.runtime.packing.requantize`::

    t = acc + addend                       # ADD tensor (addend loaded into the accumulator); no addend: skipped
    if multiplier is None:
        t = t >> shift                     # SHR imm (negative: a left shift; 0: skipped)
    else:                                  # needs ALU_MUL
        t = t >> pre_shift                 # SHR imm
        t = t * multiplier                 # MUL tensor (per channel) or immediate, 16 signed bits
        t = t + rounding_addend(shift)     # ADD imm (1 << (shift - 1); skipped when 0)
        t = t >> shift                     # SHR imm
    out = int8(min(max(t, lo), hi))        # MAX imm, MIN imm, store

with int32 wrap-around. Rounding to nearest in the first form is the caller's: it folds
``rounding_addend(shift)`` into the addend (a quantiser passes ``bias + rounding_addend(shift)``).
The ALU's immediates are 16-bit signed, so the rounding constant with a multiplier is split into
at most three ADDs (``shift <= 17``; put the rest of the scale into ``pre_shift``).
"""

from __future__ import annotations

from typing import Callable

from vtakit.compiler import te
from vtakit.compiler.te import Schedule, Tensor
from vtakit.compiler.te.tensor import PlaceholderOp
from vtakit.compiler.vta.env import VTAEnv
from vtakit.errors import CompileError
from vtakit.runtime.packing import MULTIPLIER_RANGE, SHIFT_RANGE, rounding_addend

__all__ = ["declare_requant", "schedule_requant", "cache_requant_operands", "requant_stages", "check_requant",
           "op_multiplier", "MAX_ROUNDING_ADDS"]

_IMM_MAX = (1 << 15) - 1
MAX_ROUNDING_ADDS = 3            # ADD immediates for the rounding constant: shift <= 17 with a multiplier
_ALU_STAGES = ("addend_add", "shr", "mul", *(f"round_add{k}" for k in range(MAX_ROUNDING_ADDS)), "round_shr", "clip")

def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_requant(env: VTAEnv, shift: int, clip: tuple[int, int], multiplier: object = None,
                  pre_shift: int = 0, where: str = "requantisation") -> None:
    """:class:`CompileError` unless the epilogue's parameters fit the ALU and int8."""
    for name, v in (("shift", shift), ("pre_shift", pre_shift)):
        if not _is_int(v) or not SHIFT_RANGE[0] <= v <= SHIFT_RANGE[1]:
            raise CompileError(f"{where}: {name} must be an int in [{SHIFT_RANGE[0]}, {SHIFT_RANGE[1]}] (the ALU's "
                               f"SHR; negative shifts left), got {v!r}")
    try:
        lo, hi = clip
    except (TypeError, ValueError):
        raise CompileError(f"{where}: clip must be a pair (lo, hi), got {clip!r}") from None
    if not (_is_int(lo) and _is_int(hi) and -128 <= lo <= hi <= 127):
        raise CompileError(f"{where}: clip {clip!r} must be ints with -128 <= lo <= hi <= 127 (the int8 output)")
    if multiplier is None:
        return                          # pre_shift only applies with a multiplier (as requantize)
    if not env.config.alu_mul:
        raise CompileError(f"{where}: a multiplier needs a configuration with ALU_MUL enabled "
                           f"({env.config.model} has ALU_MUL=false)")
    if _is_int(multiplier) and not MULTIPLIER_RANGE[0] <= multiplier <= MULTIPLIER_RANGE[1]:
        raise CompileError(f"{where}: multiplier {multiplier} is outside [{MULTIPLIER_RANGE[0]}, "
                           f"{MULTIPLIER_RANGE[1]}] (the ALU's MUL reads 16 signed bits)")
    if _is_int(multiplier) and multiplier < 1:
        # the simplifier rewrites x * -c as 0 - x * c, which the ALU cannot run (and x * 0 as 0)
        raise CompileError(f"{where}: an immediate multiplier must be positive (1 to {MULTIPLIER_RANGE[1]}), got "
                           f"{multiplier}; pass multiplier=\"tensor\" for negative or zero values")
    if -(-rounding_addend(shift) // _IMM_MAX) > MAX_ROUNDING_ADDS:
        raise CompileError(f"{where}: shift {shift} with a multiplier needs the rounding constant "
                           f"{rounding_addend(shift)}, more than {MAX_ROUNDING_ADDS} 16-bit ALU immediates; use "
                           f"shift <= 17 and put the rest into pre_shift")


def op_multiplier(multiplier: object, shape: tuple, dtype: str) -> Tensor | int | None:
    """An op's ``multiplier`` argument as :func:`declare_requant` takes it: None (no multiply),
    ``"tensor"`` (a per-channel int32 placeholder named ``multiplier``, of ``shape``) or an int
    (an immediate, the same for every channel)."""
    if multiplier is None or _is_int(multiplier):
        return multiplier
    if multiplier == "tensor":
        return te.placeholder(shape, dtype, name="multiplier")
    raise CompileError(f"multiplier must be None, \"tensor\" or an int, got {multiplier!r}")


def _shift_stage(prev: Tensor, amount: int, name: str) -> Tensor:
    if amount >= 0:
        return te.compute(prev.shape, lambda *i: prev(*i) >> amount, name=name)
    return te.compute(prev.shape, lambda *i: prev(*i) << -amount, name=name)


def declare_requant(env: VTAEnv, acc: Tensor, shift: int, clip: tuple[int, int], addend: Tensor | None,
                    addend_index: Callable[..., tuple], multiplier: Tensor | int | None = None,
                    multiplier_index: Callable[..., tuple] | None = None,
                    pre_shift: int = 0) -> tuple[Tensor, dict[str, Tensor]]:
    """The int8 output of ``acc`` and the named epilogue stages (in ALU order; see the module).

    ``addend_index(*out_index)`` says which ``addend`` element an output element adds (no ADD stage
    when ``addend`` is None); ``multiplier`` is None, an int32 tensor read at
    ``multiplier_index(*out_index)`` (``addend_index`` when not given) or an int immediate, and is
    only allowed when the configuration has ALU_MUL."""
    check_requant(env, shift, clip, multiplier, pre_shift)
    stages: dict[str, Tensor] = {}
    res = acc
    if addend is not None:
        res = stages["addend_add"] = te.compute(acc.shape, lambda *i: acc(*i) + addend(*addend_index(*i)),
                                                name="addend_add")
    first = shift if multiplier is None else pre_shift
    if first:
        res = stages["shr"] = _shift_stage(res, first, "shr")
    if multiplier is not None:
        prev = res
        if isinstance(multiplier, Tensor):
            index = multiplier_index or addend_index
            res = te.compute(acc.shape, lambda *i: prev(*i) * multiplier(*index(*i)), name="mul")
            stages["mul"] = res
        elif multiplier != 1:
            res = stages["mul"] = te.compute(acc.shape, lambda *i: prev(*i) * multiplier, name="mul")
        remaining = rounding_addend(shift)
        k = 0
        while remaining:
            part, prev = min(remaining, _IMM_MAX), res
            res = stages[f"round_add{k}"] = te.compute(acc.shape, lambda *i, p=prev, c=part: p(*i) + c,
                                                       name=f"round_add{k}")
            remaining, k = remaining - part, k + 1
        if shift:
            res = stages["round_shr"] = _shift_stage(res, shift, "round_shr")
    prev = res
    res = stages["clip"] = te.compute(acc.shape, lambda *i: te.min(te.max(prev(*i), clip[0]), clip[1]), name="clip")
    out = te.compute(acc.shape, lambda *i: res(*i).astype(env.inp_dtype), name="out")
    return out, stages


def requant_stages(stages: dict[str, Tensor]) -> list[Tensor]:
    """The ALU stages of an epilogue among ``stages`` (an op's named stages), in order."""
    return [stages[name] for name in _ALU_STAGES if name in stages]


def cache_requant_operands(env: VTAEnv, s: Schedule, stages: dict[str, Tensor]) -> list[Tensor]:
    """Read the epilogue's tensor operands (addend, multiplier) into the accumulator for the stages
    that use them; returns the cached copies (for :func:`schedule_requant`)."""
    caches = []
    for t in requant_stages(stages):
        for src in t.op.input_tensors:
            if isinstance(src.op, PlaceholderOp):
                caches.append(s.cache_read(src, env.acc_scope, [t]))
    return caches


def schedule_requant(env: VTAEnv, s: Schedule, out: Tensor, stages: dict[str, Tensor], acc: Tensor,
                     operand_caches: list[Tensor], attach_at: object) -> None:
    """Compute ``acc``, the ALU stages and the operand loads (``operand_caches``, from
    :func:`cache_requant_operands`) at ``attach_at``, a loop of ``out``'s stage: one output tile at
    a time."""
    s[acc].compute_at(s[out], attach_at)
    for t in requant_stages(stages):
        s[t].set_scope(env.acc_scope)
        s[t].pragma(s[t].op.axis[0], env.alu)
        s[t].compute_at(s[out], attach_at)
    for cache in operand_caches:
        s[cache].compute_at(s[out], attach_at)
        s[cache].pragma(s[cache].op.axis[0], env.dma_copy)
