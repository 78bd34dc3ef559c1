"""ALU injection: ``alu``-pragma element-wise stages in the accumulator run on the vector ALU.

Two steps (VTA's AnnotateALUCoProcScope + InjectALUIntrin):

1. *Accumulate in place.* Each element-wise stage ``D = f(S, ...)`` of a schedule has its own
   accumulator buffer, but the ALU updates ``acc[dst]`` in place. The StorageReuse pass
   (:mod:`vtakit.compiler.lower.storage_reuse`, run before this one with the veto
   :func:`in_place_accepts`) renames ``D`` to ``S`` where that is sound. Otherwise (``S`` is read
   again, e.g. the epilogue runs per part of the GEMM tile) ``D`` is first set to ``S`` by a
   GEMM reset micro-op loop and an ALU ADD of ``S``.
2. *Decompose and inject.* The stored value is decomposed into a chain of ALU operations on
   the destination: ``max``/``min``/``+``/``-`` constant, ``>>``/``<<`` constant (SHR with a
   negative amount for left shifts), ``*`` when the configuration has ALU_MUL, each with an
   immediate or another accumulator tensor (which may broadcast along whole entries). So
   ``min(max(x >> 8, 0), 127)`` is three instructions. A right shift by an accumulator tensor is
   SHR tensor (per-lane amounts, the low 6 bits signed: negative shifts left). The simplifier's
   ``c0 - x * c`` (how it writes ``x * -c``) is MUL by ``-c`` then ADD ``c0``. With ALU_REQUANT a
   requantisation ``min(max((x [+ t] [+ 2**(s-1)]) >> s, lo), hi)`` (``t`` an accumulator tensor,
   ``0 <= s <= 31``, ``-128 <= lo <= hi <= 127``) is one REQUANT (tensor with ``t``, else immediate;
   rounding bit for the ``2**(s-1)``; ReLU bit for ``lo >= 0``), followed by MAX ``lo`` / MIN ``hi``
   only when the clip is narrower than ``[0 or -128, 127]`` (and only where that is no more
   instructions than the plain chain). Each operation becomes a micro-op loop
   (``vta.uop_push`` mode 1) in its own ``coproc_uop_scope`` on the compute queue; the loops that
   walk one accumulator entry disappear, the others are folded later by FoldUopLoop.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.compiler import ir
from vtakit.compiler.arith import simplify
from vtakit.compiler.vta.env import ACC_SCOPE, ALU, PUSH_ALU, PUSH_GEMM, QID_COMPUTE, VTA_AXIS, VTAEnv
from vtakit.compiler.vta.intrin import uop_push
from vtakit.compiler.vta.nest import access_ptr, affine, perfect_nest, split_entry
from vtakit.errors import CompileError
from vtakit.hw.isa import AluOp, requant_imm

__all__ = ["inject_alu_intrin", "in_place_accepts", "alu_chain", "AluStep"]

IMM_RANGE = (-(1 << 15), (1 << 15) - 1)
SHIFT_RANGE = (-32, 31)


@dataclass
class AluStep:
    """One ALU instruction of a decomposed element-wise expression: ``dst = op(dst, operand)``."""

    op: AluOp
    operand: ir.BufferLoad | int       # a tensor operand or an immediate
    control: int = 0                   # the immediate field of a tensor step (REQUANT's control bits)


def _simplified_int(e: ir.PrimExpr) -> int | None:
    e = simplify(e)
    return e.value if isinstance(e, ir.IntImm) else None


def _same_index(a: ir.BufferLoad, dst: ir.BufferStore) -> bool:
    d = simplify(a.indices[0] - dst.indices[0])
    return isinstance(d, ir.IntImm) and d.value == 0


def alu_chain(value: ir.PrimExpr, store: ir.BufferStore, where: str, alu_mul: bool,
              requant: bool = False) -> tuple[ir.BufferLoad, list[AluStep]]:
    """``value`` as a base accumulator load followed by ALU steps (``requant``: the configuration has
    ALU_REQUANT, so requantisations become REQUANT steps)."""
    e = value
    while isinstance(e, ir.Cast) and e.dtype == e.value.dtype:
        e = e.value
    if isinstance(e, ir.Cast):
        raise CompileError(f"{where}: the ALU computes int32; the cast {e} must happen in the store to DRAM")
    if isinstance(e, ir.BufferLoad):
        return e, []
    if requant:
        fused = _requant_chain(e, store, where, alu_mul)
        if fused is not None:
            return fused
    if isinstance(e, ir.Call) and e.op in ("shift_right", "shift_left"):
        amount = _simplified_int(e.args[1])
        if amount is None and e.op == "shift_right" and isinstance(_strip(e.args[1]), ir.BufferLoad):
            operand = _check_operand(_strip(e.args[1]), where)   # per-lane amounts: SHR tensor (low 6 bits)
            base, steps = alu_chain(e.args[0], store, where, alu_mul, requant)
            return base, steps + [AluStep(AluOp.SHR, operand)]
        if amount is None:
            raise CompileError(f"{where}: shift amounts must be constants or (right shifts) accumulator "
                               f"tensors, got {e.args[1]}")
        amount = amount if e.op == "shift_right" else -amount
        if not SHIFT_RANGE[0] <= amount <= SHIFT_RANGE[1]:
            raise CompileError(f"{where}: shift by {amount} (right) is outside the ALU's range "
                               f"[{SHIFT_RANGE[0]}, {SHIFT_RANGE[1]}]")
        base, steps = alu_chain(e.args[0], store, where, alu_mul, requant)
        return base, steps + [AluStep(AluOp.SHR, amount)]
    kinds = {ir.Add: AluOp.ADD, ir.Max: AluOp.MAX, ir.Min: AluOp.MIN, ir.Mul: AluOp.MUL, ir.Sub: AluOp.ADD}
    op = kinds.get(type(e))
    if op is None:
        raise CompileError(f"{where}: {e} is not an ALU operation (max, min, +, - constant, * , >>, <<)")
    if op == AluOp.MUL and not alu_mul:
        raise CompileError(f"{where}: multiplication needs a configuration with ALU_MUL enabled")
    a, b = e.a, e.b
    if isinstance(e, ir.Sub) and _simplified_int(a) is not None and _simplified_int(b) is None:
        # the simplifier writes x * -c as 0 - x * c (x * -1 as 0 - x): MUL by -c, then ADD the constant
        c0, neg, factor = _simplified_int(a), _strip(b), -1
        if isinstance(neg, ir.Mul) and (_simplified_int(neg.b) is not None or _simplified_int(neg.a) is not None):
            factor, neg = (-_simplified_int(neg.b), neg.a) if _simplified_int(neg.b) is not None else (-_simplified_int(neg.a), neg.b)
        if not alu_mul:
            raise CompileError(f"{where}: {e} negates, which needs a configuration with ALU_MUL enabled")
        for imm in (factor, c0):
            if not IMM_RANGE[0] <= imm <= IMM_RANGE[1]:
                raise CompileError(f"{where}: immediate {imm} does not fit the ALU's 16-bit signed field")
        base, steps = alu_chain(neg, store, where, alu_mul, requant)
        return base, steps + [AluStep(AluOp.MUL, factor)] + ([AluStep(AluOp.ADD, c0)] if c0 else [])
    cb = _simplified_int(b)
    ca = _simplified_int(a) if not isinstance(e, ir.Sub) else None
    if isinstance(e, ir.Sub):
        if cb is None:
            raise CompileError(f"{where}: the ALU subtracts constants only, not {b}")
        cb = -cb
    if cb is not None or ca is not None:
        imm, rest = (cb, a) if cb is not None else (ca, b)
        if not IMM_RANGE[0] <= imm <= IMM_RANGE[1]:
            raise CompileError(f"{where}: immediate {imm} does not fit the ALU's 16-bit signed field")
        base, steps = alu_chain(rest, store, where, alu_mul, requant)
        return base, steps + [AluStep(op, imm)]
    loads = [x for x in (a, b) if isinstance(_strip(x), ir.BufferLoad)]
    if not loads and isinstance(e, (ir.Max, ir.Min)):
        common = _common_addend(a, b)     # min(x + c, y + c) -> min(x, y) + c (the simplifier distributes)
        if common is not None:
            return alu_chain(ir.Add(type(e)(common[0], common[1]), common[2]), store, where, alu_mul, requant)
    if not loads:
        raise CompileError(f"{where}: {e} combines two computed values; the ALU needs one operand to be a tensor")
    if len(loads) == 2:
        operand_first = _same_index(_strip(b), store) and not _same_index(_strip(a), store)
        rest, operand = (b, a) if operand_first else (a, b)
    else:
        operand = loads[0]
        rest = b if operand is a else a
    operand = _check_operand(_strip(operand), where)
    base, steps = alu_chain(rest, store, where, alu_mul, requant)
    return base, steps + [AluStep(op, operand)]


def _clip_of(e: ir.PrimExpr) -> tuple[ir.PrimExpr, int, int] | None:
    """``(x, lo, hi)`` when ``e`` is ``min(max(x, lo), hi)`` or ``max(min(x, hi), lo)`` with constant
    int8 bounds ``lo <= hi``, else None."""
    outer = _strip(e)
    if not isinstance(outer, (ir.Min, ir.Max)):
        return None
    inner_kind = ir.Max if isinstance(outer, ir.Min) else ir.Min
    c_out, inner = _simplified_int(outer.b), _strip(outer.a)
    if c_out is None:
        c_out, inner = _simplified_int(outer.a), _strip(outer.b)
    if c_out is None or not isinstance(inner, inner_kind):
        return None
    c_in, x = _simplified_int(inner.b), inner.a
    if c_in is None:
        c_in, x = _simplified_int(inner.a), inner.b
    if c_in is None:
        return None
    lo, hi = (c_in, c_out) if isinstance(outer, ir.Min) else (c_out, c_in)
    return (x, lo, hi) if -128 <= lo <= hi <= 127 else None


def _requant_chain(e: ir.PrimExpr, store: ir.BufferStore, where: str,
                   alu_mul: bool) -> tuple[ir.BufferLoad, list[AluStep]] | None:
    """``e`` as a chain ending in one REQUANT (see the module), or None when ``e`` is no such clip or
    the fused chain would not be shorter than the plain one."""
    clip = _clip_of(e)
    if clip is None:
        return None
    x, lo, hi = clip
    shift, t = 0, _strip(x)
    if isinstance(t, ir.Call) and t.op == "shift_right":
        shift = _simplified_int(t.args[1])
        if shift is None or not 0 <= shift <= 31:
            return None
        t = _strip(t.args[0])
    rounding = False
    if shift and isinstance(t, ir.Add) and _simplified_int(t.b) == 1 << (shift - 1):
        rounding, t = True, _strip(t.a)
    operand = None
    if isinstance(t, ir.Add) and _simplified_int(t.a) is None and _simplified_int(t.b) is None:
        loads = [y for y in (t.a, t.b) if isinstance(_strip(y), ir.BufferLoad)
                 and _strip(y).buffer.scope == ACC_SCOPE]
        if loads:
            pick = loads[-1] if len(loads) == 2 and _same_index(_strip(loads[0]), store) else loads[0]
            operand = _strip(pick)
            t = t.b if pick is t.a else t.a
    relu = lo >= 0
    extra = [AluStep(AluOp.MAX, lo)] if lo not in (-128, 0) else []
    extra += [AluStep(AluOp.MIN, hi)] if hi != 127 else []
    plain = 2 + (shift != 0) + rounding + (operand is not None)      # the chain it replaces
    if 1 + len(extra) > plain:
        return None
    control = requant_imm(shift, relu, rounding)
    base, steps = alu_chain(t, store, where, alu_mul, True)
    step = AluStep(AluOp.REQUANT, operand, control) if operand is not None else AluStep(AluOp.REQUANT, control)
    return base, steps + [step] + extra


def _check_operand(operand: ir.BufferLoad, where: str) -> ir.BufferLoad:
    if operand.buffer.scope != ACC_SCOPE:
        raise CompileError(f"{where}: the ALU operand {operand.buffer.name} is in scope {operand.buffer.scope}; "
                           f"load it into {ACC_SCOPE} with a dma_copy")
    return operand


def _common_addend(a: ir.PrimExpr, b: ir.PrimExpr) -> tuple[ir.PrimExpr, ir.PrimExpr, ir.PrimExpr] | None:
    if isinstance(a, ir.Add) and isinstance(b, ir.Add):
        ca, cb = _simplified_int(a.b), _simplified_int(b.b)
        if ca is not None and ca == cb:
            return a.a, b.a, a.b
    return None


def _strip(e: ir.PrimExpr) -> ir.PrimExpr:
    while isinstance(e, ir.Cast) and e.dtype == e.value.dtype:
        e = e.value
    return e


# ---------------------------------------------------------------------------- 1. in place
def in_place_accepts(alu_mul: bool, requant: bool = False):
    """The ALU's veto for :mod:`~vtakit.compiler.lower.storage_reuse`: an element-wise stage may
    write into its producer's accumulator storage only when the producer is the base of the
    stage's instruction chain and no later step of the chain reads it (in ``min(a + b, a)`` the
    ADD would overwrite the ``a`` that MIN reads)."""

    def accept(store: ir.BufferStore, producer: ir.Buffer) -> bool:
        try:
            base, steps = alu_chain(store.value, store, f"alu stage {store.buffer.name}", alu_mul, requant)
        except CompileError:
            return False                    # not an ALU stage; the injector reports it
        return base.buffer.data is producer.data and not any(
            isinstance(st.operand, ir.BufferLoad) and st.operand.buffer.data is producer.data for st in steps)

    return accept


# ---------------------------------------------------------------------------- 2. inject
class _ALUInjector(ir.IRMutator):
    def __init__(self, env: VTAEnv) -> None:
        self.env = env

    def visit_AttrStmt(self, node: ir.AttrStmt) -> ir.Stmt:
        if node.key != f"pragma_{ALU}":
            return self.generic_visit(node)
        loops, store = perfect_nest(node.body, "alu")
        dst = store.buffer
        where = f"alu stage {dst.name}"
        if dst.scope != ACC_SCOPE:
            raise CompileError(f"{where}: the ALU works in {ACC_SCOPE}, but {dst.name} is in scope {dst.scope}; "
                               "set_scope the stage to the accumulator")
        base, steps = alu_chain(store.value, store, where, self.env.config.alu_mul, self.env.config.alu_requant)
        copy = base.buffer.data is not dst.data or not _same_index(base, store)
        if copy:                      # not in place: dst = 0 (a GEMM reset), dst += base, then the chain
            if base.buffer.scope != ACC_SCOPE:
                raise CompileError(f"{where}: {base.buffer.name} is in scope {base.buffer.scope}; the ALU reads "
                                   f"{ACC_SCOPE} only (load it with a dma_copy)")
            steps = [AluStep(AluOp.ADD, base)] + steps
        lanes = self.env.lanes(ACC_SCOPE)
        dst_c, _ = affine(store.indices[0], loops, where)
        operands = [s.operand for s in steps if isinstance(s.operand, ir.BufferLoad)]
        op_c = [affine(o.indices[0], loops, where)[0] for o in operands]
        outer, entry = split_entry(loops, [dst_c] + op_c, lanes, where, "the element-wise loop nest")
        zero = {loops[k].var: ir.IntImm("int32", 0) for k in entry}
        dst_ptr = access_ptr(dst, ir.substitute(store.indices[0], zero), lanes, 3)
        stmts = []
        if copy:
            stmts.append(self._wrap(loops, outer, ir.Evaluate(uop_push(0, 1, dst_ptr)), PUSH_GEMM))
        for step in steps:
            if isinstance(step.operand, ir.BufferLoad):
                src_ptr = access_ptr(step.operand.buffer, ir.substitute(step.operand.indices[0], zero), lanes, 1)
                push = uop_push(1, 0, dst_ptr, src_ptr, 0, int(step.op), 0, step.control)
            else:
                push = uop_push(1, 0, dst_ptr, dst_ptr, 0, int(step.op), 1, step.operand)
            stmts.append(self._wrap(loops, outer, ir.Evaluate(push), PUSH_ALU))
        if not steps:                 # a bare copy: SHR by 0 still writes OUT, which the store reads
            push = uop_push(1, 0, dst_ptr, dst_ptr, 0, int(AluOp.SHR), 1, 0)
            stmts.append(self._wrap(loops, outer, ir.Evaluate(push), PUSH_ALU))
        return ir.seq(*stmts)

    @staticmethod
    def _wrap(loops: list, outer: list[int], s: ir.Stmt, kind: str) -> ir.Stmt:
        for k in reversed(outer):
            s = ir.For(loops[k].var, ir.IntImm("int32", 0), ir.IntImm("int32", loops[k].extent),
                       ir.ForKind.SERIAL, s)
        s = ir.AttrStmt(VTA_AXIS, "coproc_uop_scope", kind, s)
        return ir.AttrStmt(VTA_AXIS, "coproc_scope", ir.IntImm("int32", QID_COMPUTE), s)


def inject_alu_intrin(env: VTAEnv):
    """The pass for ``env`` (phase 1, after DMA injection)."""

    def InjectALUIntrin(func: ir.PrimFunc) -> ir.PrimFunc:
        return ir.PrimFunc(func.name, func.params, _ALUInjector(env).visit(func.body), dict(func.attrs))

    return InjectALUIntrin

