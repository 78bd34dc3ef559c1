"""The requantisation epilogue that packed conv2d and dense share (VTA's ``vta.top`` ops), declared
as element-wise stages in the accumulator and scheduled onto the vector ALU next to the GEMM
stage that produces ``acc``. It computes exactly :func:`vtakit.runtime.packing.requantize`::

    t = acc + addend                       # addend_add: ADD tensor (loaded into the accumulator); no addend: skipped
    if multiplier is None:
        t = t >> shift                     # shr: SHR imm (negative: a left shift; 0: skipped)
    else:
        t = t >> pre_shift                 # shr: SHR imm
        t = t * multiplier                 # mul: see the multiplier forms below
        t = (t + 2**(shift-1)) >> shift    # round_*: rounding to nearest, see below
    out = int8(min(max(t, lo), hi))        # clip: MAX imm, MIN imm, store

with int32 wrap-around. Rounding to nearest in the first form is the caller's: it folds
``rounding_addend(shift)`` into the addend (a quantiser passes ``bias + rounding_addend(shift)``).

Multiplier forms (``multiplier`` of :func:`declare_requant`, from an op's argument via
:func:`op_multiplier`):

- an int immediate in [-2**15, 2**15): with ALU_MUL one MUL immediate (a negative one too: the
  ALU chain undoes the simplifier's ``0 - x*c``; 0 is a left shift by 32); without ALU_MUL the
  shift-and-add form below with immediate amounts, one term per set bit of a non-negative value
  (at most 15); a negative value (17+ set bits in two's complement) needs ALU_MUL;
- ``"tensor"``: a per-channel int32 operand of multipliers, one MUL tensor (needs ALU_MUL);
- ``"shift_add:K"`` (:func:`shift_add_form`; the bare ``"shift_add"`` is ``K =``
  :data:`~vtakit.runtime.packing.SHIFT_ADD_TERMS`): per-channel multipliers without ALU_MUL, an
  int32 operand ``(CO/bo, K, b, bo)`` of SHR amounts
  (:func:`~vtakit.runtime.packing.shift_add_amounts`): ``h = t >> a0; h = (h + t) >> a1; ...`` --
  a Horner sum of left-shifted copies of ``t`` with per-lane amounts (a left shift by 32 gives 0
  and drops the copies of a channel with fewer set bits). ``K`` (1 to
  :data:`~vtakit.runtime.packing.SHIFT_ADD_MAX_TERMS`) is the most set bits among the channels
  (:func:`~vtakit.runtime.packing.shift_add_terms`), so every non-negative multiplier runs; the
  cost is ``2 * K`` ALU instructions including the copy of ``t`` that the sum re-reads (the stage
  needs its own accumulator tile) -- rounding multipliers to fewer set bits (the quantisers'
  ``multiplier_bits``) makes it cheaper.

Fused requantisation (configurations with ALU_REQUANT; ``fuse`` of :func:`declare_requant`): the
shift, the rounding and the clip that end the epilogue are one stage, ``requant``, which ALU
injection turns into one REQUANT micro-op loop (:mod:`vtakit.compiler.vta.alu`)::

    out = int8(clip((acc + addend) >> shift))                # no multiplier: REQUANT tensor (imm without addend)
    out = int8(clip((t + 2**(shift-1)) >> shift))            # after a multiplier: REQUANT imm with rounding

for shifts in [0, 31] (a left shift keeps the stages above). The clip beyond REQUANT's
``[0 or -128, 127]`` adds a MAX or MIN. Same bits as the stages above: REQUANT wraps its sum to
32 bits as the separate ADDs do.

Rounding: the ALU's immediates are 16-bit signed, so for ``shift <= 15`` it is ``ADD 2**(shift-1)``
(round_add) then ``SHR shift``; for larger shifts, with ``j = shift - 15``, it is exactly::

    y = t >> j; y = y + 2**14; y = y << j; t = y >> shift     # round_pre, round_add, round_wrap, round_shr

(``(t + 2**(s-1)) >> s == ((t >> j) + 2**(s-j-1)) >> (s-j)`` for integers; shifting back left by ``j``
before the final shift reproduces the int32 wrap-around of ``t + 2**(shift-1)`` bit for bit), so every
shift in the ALU's range works with a multiplier.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from vtakit.compiler import te
from vtakit.compiler.te import Schedule, Tensor
from vtakit.compiler.te.tensor import PlaceholderOp
from vtakit.compiler.vta.env import VTAEnv
from vtakit.errors import CompileError
from vtakit.runtime.packing import (MULTIPLIER_RANGE, SHIFT_ADD_MAX_TERMS, SHIFT_ADD_TERMS, SHIFT_RANGE,
                                    multiplier_set_bits, rounding_addend, shift_add_terms)

__all__ = ["declare_requant", "schedule_requant", "cache_requant_operands", "requant_stages", "check_requant",
           "op_multiplier", "multiplier_form", "epilogue_resources", "multiplier_terms", "shift_add_form",
           "form_terms", "fuses", "MULTIPLIER_FORMS", "ROUND_IMM_SHIFT", "MANY_TERMS", "REQUANT_SHIFTS"]

#: the largest shift whose rounding constant 2**(shift-1) is one ADD immediate
ROUND_IMM_SHIFT = 15
#: the string forms of an op's ``multiplier`` argument (``"shift_add"`` also as ``"shift_add:K"``)
MULTIPLIER_FORMS = ("tensor", "shift_add")
#: a shift-and-add with more terms than this gets a note on its step (ALU_MUL or fewer set bits is faster)
MANY_TERMS = SHIFT_ADD_TERMS
_ALU_STAGES = ("addend_add", "shr", "mul", "round_pre", "round_add", "round_wrap", "round_shr", "clip", "requant")
#: REQUANT's shift range (5 bits, right shifts only)
REQUANT_SHIFTS = (0, 31)


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def shift_add_form(terms: int) -> str:
    """The op argument of a per-channel shift-and-add of ``terms`` terms: ``"shift_add:<terms>"``."""
    if not isinstance(terms, (int, np.integer)) or isinstance(terms, bool) or not 1 <= terms <= SHIFT_ADD_MAX_TERMS:
        raise CompileError(f"shift-and-add terms must be an int in [1, {SHIFT_ADD_MAX_TERMS}], got {terms!r}")
    return f"shift_add:{int(terms)}"


def form_terms(form: object) -> int | None:
    """The terms of a per-channel shift-and-add op argument (``"shift_add"``: SHIFT_ADD_TERMS;
    ``"shift_add:K"``: K), None for any other form; :class:`CompileError` for a malformed one."""
    if not isinstance(form, str) or not form.startswith("shift_add"):
        return None
    if form == "shift_add":
        return SHIFT_ADD_TERMS
    head, _, k = form.partition(":")
    if head != "shift_add" or not k.isdigit() or not 1 <= int(k) <= SHIFT_ADD_MAX_TERMS:
        raise CompileError(f"multiplier {form!r}: a shift-and-add form is \"shift_add\" or \"shift_add:K\" "
                           f"with K in [1, {SHIFT_ADD_MAX_TERMS}]")
    return int(k)


def multiplier_terms(form: object, alu_mul: bool) -> int:
    """The shift-and-add terms per output of the op argument ``form`` on a configuration with or
    without ALU_MUL (0: no shift-and-add -- no multiplier, MUL, or a power of two)."""
    k = form_terms(form)
    if k is not None:
        return k
    if _is_int(form) and not alu_mul:
        bits = multiplier_set_bits(int(form))
        return int(bits) if bits > 1 else 0
    return 0


def multiplier_form(multiplier: object, alu_mul: bool) -> tuple[None | str | int, str | None]:
    """How the epilogue realises ``multiplier`` (None, an int, or an array of per-channel values) on
    a configuration with or without ALU_MUL: ``(form, None)`` with ``form`` the op argument (None,
    an int immediate, ``"tensor"`` or ``"shift_add:K"``, K the channels' most set bits), or
    ``(None, reason)`` when it cannot: values outside the MUL's 16 bits, or a negative multiplier
    without ALU_MUL (17+ set bits in two's complement)."""
    if multiplier is None:
        return None, None
    m = np.asarray(multiplier).reshape(-1)
    if m.size == 0 or not np.issubdtype(m.dtype, np.integer):
        return None, f"the multiplier must be integers, got {np.asarray(multiplier).dtype}"
    if m.min() < MULTIPLIER_RANGE[0] or m.max() > MULTIPLIER_RANGE[1]:
        return None, f"multiplier values outside {MULTIPLIER_RANGE} (the ALU's MUL reads 16 signed bits)"
    uniform = bool(np.all(m == m[0]))
    if alu_mul:
        return (int(m[0]) if uniform else "tensor"), None
    if m.min() < 0:
        bits = int(np.max(multiplier_set_bits(m)))
        return None, (f"multiplier needs ALU_MUL (a negative multiplier, {int(m.min())}: {bits} set bits in two's "
                      f"complement, more than shift-and-add's {SHIFT_ADD_MAX_TERMS} terms)")
    return (int(m[0]) if uniform else shift_add_form(shift_add_terms(m))), None


def epilogue_resources(multiplier: None | str | int, alu_mul: bool, shift: int,
                       requant: bool = False) -> tuple[int, int, int]:
    """What the epilogue with op argument ``multiplier`` needs beyond a shift-only one, for the tiler
    (:func:`~vtakit.compiler.topi_vta.tiling.choose_conv2d_tiles`' ``epilogue``): ``(accumulator
    tiles, per-channel operand rows, ALU instructions)``. A shift-and-add sum of K terms re-reads
    ``t`` and so computes into a tile of its own: 2 * K instructions and, per channel, K rows of SHR
    amounts. ``requant`` (ALU_REQUANT): the rounding is part of the final REQUANT."""
    if multiplier is None:
        return 0, 0, 0
    rounding = 0 if requant and fuses(shift) else 4 if shift > ROUND_IMM_SHIFT else 2
    if multiplier == "tensor":
        return 0, 1, 1 + rounding
    terms = form_terms(multiplier)
    if terms is not None:
        return 1, terms, 2 * terms + rounding
    bits = multiplier_set_bits(int(multiplier))
    if alu_mul or bits <= 1:
        return 0, 0, 1 + rounding
    return 1, 0, 2 * bits + rounding


def fuses(shift: int) -> bool:
    """Whether a final shift by ``shift`` fits REQUANT (right shifts of 0 to 31)."""
    return REQUANT_SHIFTS[0] <= shift <= REQUANT_SHIFTS[1]


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
    if _is_int(multiplier):
        if not MULTIPLIER_RANGE[0] <= multiplier <= MULTIPLIER_RANGE[1]:
            raise CompileError(f"{where}: multiplier {multiplier} is outside [{MULTIPLIER_RANGE[0]}, "
                               f"{MULTIPLIER_RANGE[1]}] (the ALU's MUL reads 16 signed bits)")
        if not env.config.alu_mul and multiplier < 0:
            raise CompileError(f"{where}: multiplier {multiplier} needs ALU_MUL (a negative multiplier: "
                               f"{multiplier_set_bits(int(multiplier))} set bits in two's complement; "
                               f"{env.config.model} has ALU_MUL=false and realises a multiplier by shift-and-add, "
                               f"at most {SHIFT_ADD_MAX_TERMS} terms)")
        return
    if _is_shift_add(multiplier):
        return
    if not env.config.alu_mul:
        raise CompileError(f"{where}: a multiplier tensor needs a configuration with ALU_MUL enabled "
                           f"({env.config.model} has ALU_MUL=false; use multiplier=\"shift_add\")")


def _is_shift_add(multiplier: object) -> bool:
    return isinstance(multiplier, Tensor) and len(multiplier.shape) == 4 and multiplier.name == "multiplier"


def _tensor_terms(multiplier: Tensor) -> int:
    """The terms of a shift-and-add operand ``(CO/bo, K, b, bo)``."""
    return int(multiplier.shape[1])


def op_multiplier(multiplier: object, shape: tuple, dtype: str) -> Tensor | int | None:
    """An op's ``multiplier`` argument as :func:`declare_requant` takes it: None (no multiply),
    ``"tensor"`` (a per-channel int32 placeholder named ``multiplier``, of ``shape``),
    ``"shift_add:K"`` (the placeholder of SHR amounts, ``(shape[0], K, *shape[1:])``; the bare
    ``"shift_add"``: K = SHIFT_ADD_TERMS) or an int (an immediate, the same for every channel)."""
    if multiplier is None or _is_int(multiplier):
        return None if multiplier is None else int(multiplier)
    if multiplier == "tensor":
        return te.placeholder(shape, dtype, name="multiplier")
    terms = form_terms(multiplier)
    if terms is not None:
        return te.placeholder((shape[0], terms, *shape[1:]), dtype, name="multiplier")
    raise CompileError(f"multiplier must be None, \"tensor\", \"shift_add\" or an int, got {multiplier!r}")


def _shift_stage(prev: Tensor, amount: int, name: str) -> Tensor:
    if amount >= 0:
        return te.compute(prev.shape, lambda *i: prev(*i) >> amount, name=name)
    return te.compute(prev.shape, lambda *i: prev(*i) << -amount, name=name)


def _horner_imm(prev: Tensor, multiplier: int) -> Callable[..., object]:
    """``t * multiplier`` (int32, wrapped) as a Horner sum of left-shifted copies of ``t``."""
    bits = [b for b in range(31, -1, -1) if (multiplier & 0xFFFFFFFF) >> b & 1]

    def value(*i):
        h = None
        for j, b in enumerate(bits):
            h = prev(*i) if h is None else h + prev(*i)
            amount = b - bits[j + 1] if j + 1 < len(bits) else b
            if amount:
                h = h << amount
        return h

    return value


def declare_requant(env: VTAEnv, acc: Tensor, shift: int, clip: tuple[int, int], addend: Tensor | None,
                    addend_index: Callable[..., tuple], multiplier: Tensor | int | None = None,
                    multiplier_index: Callable[..., tuple] | None = None,
                    pre_shift: int = 0, fuse: bool | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """The int8 output of ``acc`` and the named epilogue stages (in ALU order; see the module).

    ``addend_index(*out_index)`` says which ``addend`` element an output element adds (no ADD stage
    when ``addend`` is None); ``multiplier`` is None, an int32 tensor read at
    ``multiplier_index(*out_index)`` (``addend_index`` when not given; a ``"shift_add"`` tensor of
    :func:`op_multiplier` is read at that index with the term inserted after the first axis) or an
    int immediate (see the module for the forms each configuration runs). ``fuse``: end in one
    ``requant`` stage (default: when the configuration has ALU_REQUANT; False keeps the ``clip``
    stage apart, for a residual add inserted before it)."""
    check_requant(env, shift, clip, multiplier, pre_shift)
    fuse = (env.config.alu_requant if fuse is None else fuse) and fuses(shift)
    lo, hi = clip
    stages: dict[str, Tensor] = {}
    if fuse and multiplier is None:   # clip((acc + addend) >> shift): one REQUANT
        def value(*i):
            t = acc(*i) if addend is None else acc(*i) + addend(*addend_index(*i))
            return te.min(te.max(t >> shift if shift else t, lo), hi)

        res = stages["requant"] = te.compute(acc.shape, value, name="requant")
        return te.compute(acc.shape, lambda *i: res(*i).astype(env.inp_dtype), name="out"), stages
    res = acc
    if addend is not None:
        res = stages["addend_add"] = te.compute(acc.shape, lambda *i: acc(*i) + addend(*addend_index(*i)),
                                                name="addend_add")
    first = shift if multiplier is None else pre_shift
    if first:
        res = stages["shr"] = _shift_stage(res, first, "shr")
    if multiplier is not None:
        prev = res
        index = multiplier_index or addend_index
        if _is_shift_add(multiplier):
            terms = _tensor_terms(multiplier)

            def horner(*i):
                o = index(*i)
                h = None
                for k in range(terms):
                    h = prev(*i) if h is None else h + prev(*i)
                    h = h >> multiplier(o[0], k, *o[1:])
                return h

            res = stages["mul"] = te.compute(acc.shape, horner, name="mul")
        elif isinstance(multiplier, Tensor):
            res = stages["mul"] = te.compute(acc.shape, lambda *i: prev(*i) * multiplier(*index(*i)), name="mul")
        elif multiplier == 0:           # x * 0 would fold to a constant; a left shift by 32 gives 0
            res = stages["mul"] = te.compute(acc.shape, lambda *i: prev(*i) << 32, name="mul")
        elif multiplier != 1:
            if env.config.alu_mul:
                res = stages["mul"] = te.compute(acc.shape, lambda *i: prev(*i) * multiplier, name="mul")
            else:
                res = stages["mul"] = te.compute(acc.shape, _horner_imm(prev, multiplier), name="mul")
        if fuse:                        # clip((t + 2**(shift-1)) >> shift): one REQUANT with rounding
            prev, rnd = res, rounding_addend(shift)
            res = stages["requant"] = te.compute(
                acc.shape, lambda *i: te.min(te.max((prev(*i) + rnd) >> shift if shift else prev(*i), lo), hi),
                name="requant")
            return te.compute(acc.shape, lambda *i: res(*i).astype(env.inp_dtype), name="out"), stages
        if shift > ROUND_IMM_SHIFT:
            j = shift - ROUND_IMM_SHIFT
            res = stages["round_pre"] = _shift_stage(res, j, "round_pre")
            prev = res
            res = stages["round_add"] = te.compute(acc.shape, lambda *i: prev(*i) + (1 << (ROUND_IMM_SHIFT - 1)),
                                                   name="round_add")
            res = stages["round_wrap"] = _shift_stage(res, -j, "round_wrap")
        elif rounding_addend(shift):
            prev = res
            res = stages["round_add"] = te.compute(acc.shape, lambda *i: prev(*i) + rounding_addend(shift),
                                                   name="round_add")
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
    a time. With BIAS_PRELOAD the loads come first in the tile, before ``acc``'s reset, which
    FuseGemmEpilogue (:mod:`vtakit.compiler.vta.gemm_epilogue`) turns into a bias reset."""
    s[acc].compute_at(s[out], attach_at)
    for t in requant_stages(stages):
        s[t].set_scope(env.acc_scope)
        s[t].pragma(s[t].op.axis[0], env.alu)
        s[t].compute_at(s[out], attach_at)
    for cache in operand_caches:
        s[cache].compute_at(s[out], attach_at)
        s[cache].pragma(s[cache].op.axis[0], env.dma_copy)
        if env.config.bias_preload:   # loaded before the tile's GEMMs, so a bias reset can read it
            stages = s.stages
            stages.remove(s[cache])
            stages.insert(stages.index(s[acc]), s[cache])
