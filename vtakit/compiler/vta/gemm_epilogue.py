"""FuseGemmEpilogue: the conv/dense epilogue moves into the GEMMs (BIAS_PRELOAD, GEMM_OUT_REQUANT).

An accumulator tile's life in a lowered conv2d or dense is, in the compute queue::

    [LOAD ACC addend]  GEMM reset(B)  GEMM(B)...  ALU(B) op1 ... opN  STORE(B)

where the ALU ops are the requantisation epilogue (:mod:`vtakit.compiler.topi_vta.epilogue`). While
they run the GEMM core idles. With the configuration's keys this pass rewrites the tile:

* BIAS_PRELOAD: when op1 adds a tensor already in ACC (``ADD`` tensor, or ``REQUANT`` tensor whose
  addend is the bias) and that tensor's load comes before the reset (:func:`schedule_requant` puts
  it there), the reset becomes a *bias reset* with op1's micro-op loop (``acc[dst] = acc[bias]``)
  and op1 loses its addend: an ADD disappears, a REQUANT becomes REQUANT immediate;
* GEMM_OUT_REQUANT: when what remains is exactly one REQUANT immediate, the GEMMs of the tile get
  the epilogue bit (OUT receives the requantised sum, the last write of each entry wins) and the
  REQUANT becomes a register set (:data:`REQUANT_SET`) before the reset: no ALU pass is left.

The rewrite is applied only where it is sound, checked on the IR: every compute command that names
``B`` is in one statement sequence in the order above (the GEMMs possibly inside loops), ``B`` is
read by nothing but the STORE after the epilogue, the bias tensor is loaded once, before the
reset, and read only by op1, and op1 and the reset each visit every entry of ``B`` (so the bias
reset initialises what the zero reset did). Anything else is left as it is. Runs in phase 1 after
LiftAttrScope and before CoProcSync, so the dependence tokens are placed for the new commands.

The markers: on a GEMM micro-op (``vta.uop_push`` mode 0) the ``use_imm`` argument is the
instruction's epilogue bit (a bias reset's ``src`` points into ACC); ``vta.requant_set(imm)`` is an
ALU REQUANT without micro-ops (:meth:`vtakit.runtime.builder.ProgramBuilder.set_requant`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from vtakit.compiler import ir
from vtakit.compiler.vta.env import LOAD_2D, PUSH_ALU, PUSH_GEMM, STORE_2D, UOP_PUSH, VTA_AXIS, VTAEnv
from vtakit.hw.isa import AluOp, MemId

__all__ = ["fuse_gemm_epilogue", "REQUANT_SET", "GEMM_EPILOGUE_ARG"]

#: ``vta.requant_set(imm)``: set the requant register (an ALU REQUANT with no micro-ops)
REQUANT_SET = "vta.requant_set"
#: the ``vta.uop_push`` argument that carries a GEMM micro-op's epilogue bit (its ``use_imm``)
GEMM_EPILOGUE_ARG = 6
_ACC_LOADS = (int(MemId.ACC), int(MemId.ACC_8BIT))


def _ptr_var(arg: Any) -> ir.Var | None:
    """The buffer variable a ``tvm_access_ptr`` argument points into (None for anything else)."""
    if isinstance(arg, ir.Call) and arg.op == "tvm_access_ptr":
        return arg.args[1]
    return None


def _int(e: Any) -> int | None:
    return e.value if isinstance(e, ir.IntImm) else e if isinstance(e, int) else None


@dataclass
class _Event:
    """One compute/store command that names an accumulator buffer, in program order."""

    kind: str                       # "gemm", "reset", "alu", "load", "store"
    node: Any                       # the uop-scope AttrStmt, or the load/store Evaluate
    loops: tuple[int, ...]          # ids of the enclosing For nodes
    dst: ir.Var | None = None
    src: ir.Var | None = None
    sig: tuple = ()                 # (mode, reset, alu_op, use_imm, imm) of a uop scope's pushes
    visits: int | None = None       # micro-op pushes the scope performs (None: not constant)
    buffers: set = field(default_factory=set)


def _scope_event(node: ir.AttrStmt, loops: tuple[int, ...]) -> _Event | None:
    """The event of a ``coproc_uop_scope`` whose pushes share one signature and one dst/src buffer."""
    pushes: list[tuple[ir.Call, int | None]] = []

    def walk(s: Any, count: int | None) -> None:
        if isinstance(s, ir.For):
            extent = _int(s.extent)
            walk(s.body, None if count is None or extent is None else count * extent)
        elif isinstance(s, ir.SeqStmt):
            for c in s.stmts:
                walk(c, count)
        elif isinstance(s, ir.Evaluate) and isinstance(s.value, ir.Call) and s.value.op == UOP_PUSH:
            pushes.append((s.value, count))
        elif isinstance(s, (ir.AttrStmt, ir.LetStmt, ir.Allocate)):
            walk(s.body, count)
        else:
            pushes.append((None, None))   # anything else (a condition): not a plain micro-op loop

    walk(node.body, 1)
    if not pushes or any(call is None for call, _ in pushes):
        return None
    sigs = {tuple(_int(a) for a in (c.args[0], c.args[1], c.args[5], c.args[6], c.args[7])) for c, _ in pushes}
    dsts = {_ptr_var(c.args[2]) for c, _ in pushes}
    srcs = {_ptr_var(c.args[3]) for c, _ in pushes}
    if len(sigs) != 1 or len(dsts) != 1 or len(srcs) != 1 or None in next(iter(sigs)):
        return None
    sig = next(iter(sigs))
    mode, reset = sig[0], sig[1]
    kind = ("reset" if reset else "gemm") if mode == 0 else "alu"
    counts = [n for _, n in pushes]
    visits = None if None in counts else sum(counts)
    dst = next(iter(dsts))
    src = next(iter(srcs)) if mode == 1 and not sig[3] else None   # a tensor ALU operand (immediates name dst)
    return _Event(kind, node, loops, dst, src, sig, visits, {v for v in (dst, src) if v is not None})


def _events(body: ir.Stmt) -> tuple[list[_Event], dict[ir.Var, ir.Buffer]]:
    """Every uop scope, ACC load and store in program order, and the ACC buffers allocated."""
    events: list[_Event] = []
    allocs: dict[ir.Var, ir.Buffer] = {}

    def visit(s: Any, loops: tuple[int, ...]) -> None:
        if isinstance(s, ir.AttrStmt) and s.node is VTA_AXIS and s.key == "coproc_uop_scope":
            event = _scope_event(s, loops)
            if event is None:   # an unusual scope: it names every buffer it touches, blocking rewrites there
                names: set = set()
                ir.walk(s, lambda n: names.add(n.args[1]) if isinstance(n, ir.Call) and n.op == "tvm_access_ptr"
                        else None)
                event = _Event("other", s, loops, buffers=names)
            events.append(event)
            return
        if isinstance(s, ir.Evaluate) and isinstance(s.value, ir.Call) and s.value.op in (LOAD_2D, STORE_2D):
            call = s.value
            if call.op == LOAD_2D:
                target = _ptr_var(call.args[1])
                events.append(_Event("load" if _int(call.args[0]) in _ACC_LOADS else "other", s, loops, dst=target,
                                     buffers={target}))
            else:
                source = _ptr_var(call.args[0])
                events.append(_Event("store", s, loops, src=source, buffers={source}))
            return
        if isinstance(s, ir.For):   # (a virtual-thread loop too: buffers inside it are per thread here)
            visit(s.body, loops + (id(s),))
        elif isinstance(s, ir.SeqStmt):
            for c in s.stmts:
                visit(c, loops)
        elif isinstance(s, ir.Allocate):
            allocs[s.buffer.data] = s.buffer
            visit(s.body, loops)
        elif isinstance(s, (ir.AttrStmt, ir.LetStmt)):
            visit(s.body, loops)
        elif isinstance(s, ir.IfThenElse):
            visit(s.then_case, loops + (id(s),))
            if s.else_case is not None:
                visit(s.else_case, loops + (id(s), 1))

    visit(body, ())
    return events, allocs


def _entries(buf: ir.Buffer, lanes: int) -> int | None:
    size = 1
    for n in buf.shape:
        if _int(n) is None:
            return None
        size *= _int(n)
    return size // lanes if size % lanes == 0 else None


def _push_rewriter(change: Callable[[ir.Call], ir.Call]) -> ir.IRMutator:
    class _Rewrite(ir.IRMutator):
        def visit_Call(self, node: ir.Call) -> ir.PrimExpr:
            return change(node) if node.op == UOP_PUSH else node

    return _Rewrite()


def _with_args(call: ir.Call, **changes: Any) -> ir.Call:
    args = list(call.args)
    for pos, value in changes.items():
        args[int(pos[1:])] = ir.convert(value) if not isinstance(value, ir.PrimExpr) else value
    return ir.Call(call.dtype, call.op, tuple(args))


def _rescope(scope: ir.AttrStmt, kind: str, change: Callable[[ir.Call], ir.Call]) -> ir.AttrStmt:
    return ir.AttrStmt(scope.node, scope.key, kind, _push_rewriter(change).visit(scope.body))


def _plan(events: list[_Event], allocs: dict[ir.Var, ir.Buffer], env: VTAEnv,
          out_requant: bool = True) -> tuple[dict[int, Any], set[int]]:
    """Replacements (by node id: a statement, or None to drop it) that fuse each eligible tile, and
    the requant register values the fused tiles set."""
    cfg = env.config
    controls: set[int] = set()
    lanes = env.lanes(env.acc_scope)
    by_buffer: dict[ir.Var, list[int]] = {}
    for k, e in enumerate(events):
        for v in e.buffers:
            by_buffer.setdefault(v, []).append(k)
    plan: dict[int, Any] = {}
    for k, reset in enumerate(events):
        if reset.kind != "reset" or reset.dst not in allocs:
            continue
        b = reset.dst
        mine = [events[i] for i in by_buffer[b]]
        if mine[0] is not reset:
            continue
        n = 1
        while n < len(mine) and mine[n].kind == "gemm" and mine[n].dst is b \
                and mine[n].loops[:len(reset.loops)] == reset.loops:
            n += 1
        gemms = mine[1:n]
        alus = []
        while n < len(mine) and mine[n].kind == "alu" and mine[n].dst is b and mine[n].src is not b \
                and mine[n].loops == reset.loops:
            alus.append(mine[n])
            n += 1
        stores = mine[n:]
        if not gemms or not alus or not stores or any(e.kind != "store" or e.loops[:len(reset.loops)] != reset.loops
                                                      for e in stores):
            continue
        entries = _entries(allocs[b], lanes)
        replace: dict[int, Any] = {}
        first = alus[0]
        _, _, op, use_imm, imm = first.sig
        rest = list(alus)
        # BIAS_PRELOAD: op1 adds a tensor loaded into ACC before the reset and read by op1 alone
        if cfg.bias_preload and not use_imm and op in (AluOp.ADD, AluOp.REQUANT) and first.src in allocs \
                and entries is not None and reset.visits == entries and first.visits == entries:
            bias = [events[i] for i in by_buffer[first.src]]
            if len(bias) == 2 and bias[0].kind == "load" and bias[1] is first and bias[0].loops == reset.loops \
                    and events.index(bias[0]) < k:
                epi = GEMM_EPILOGUE_ARG
                bias_reset = _rescope(first.node, PUSH_GEMM, lambda c: _with_args(
                    c, a0=0, a1=1, a4=0, a5=0, **{f"a{epi}": 1}, a7=0))
                replace[id(reset.node)] = bias_reset
                if op == AluOp.ADD:
                    replace[id(first.node)] = None
                    rest = rest[1:]
                else:   # REQUANT tensor -> REQUANT immediate (same control bits, no addend)
                    replace[id(first.node)] = _rescope(first.node, PUSH_ALU, lambda c: _with_args(c, a3=c.args[2], a6=1))
                    rest[0] = _Event("alu", first.node, first.loops, b, None, (1, 0, op, 1, imm), first.visits)
        # GEMM_OUT_REQUANT: one REQUANT immediate left -> the GEMMs write OUT requantised
        if out_requant and cfg.gemm_out_requant and len(rest) == 1 and rest[0].sig[2] == AluOp.REQUANT \
                and rest[0].sig[3] == 1:
            control = rest[0].sig[4]
            controls.add(control)
            head = replace.get(id(reset.node), reset.node)
            setter = ir.Evaluate(ir.Call("int32", REQUANT_SET, (ir.convert(control),)))
            replace[id(reset.node)] = ir.seq(setter, head)
            replace[id(rest[0].node)] = None
            for g in gemms:
                replace[id(g.node)] = _rescope(g.node, PUSH_GEMM,
                                               lambda c: _with_args(c, **{f"a{GEMM_EPILOGUE_ARG}": 1}))
        plan.update(replace)
    return plan, controls


class _Apply(ir.IRMutator):
    """Puts the planned replacements in; drops what became empty."""

    def __init__(self, plan: dict[int, Any]) -> None:
        self.plan = plan

    def visit(self, node: Any) -> Any:
        if id(node) in self.plan:
            return self.plan[id(node)]
        return super().visit(node)

    def visit_SeqStmt(self, node: ir.SeqStmt) -> ir.Stmt | None:
        stmts = [self.visit(s) for s in node.stmts]
        kept = [s for s in stmts if s is not None]
        if len(kept) == len(node.stmts) and all(a is b for a, b in zip(kept, node.stmts)):
            return node
        return ir.seq(*kept) if kept else None

    def visit_AttrStmt(self, node: ir.AttrStmt) -> ir.Stmt | None:
        body = self.visit(node.body)
        if body is None:
            return None
        return node if body is node.body else ir.AttrStmt(node.node, node.key, node.value, body)

    def visit_For(self, node: ir.For) -> ir.Stmt | None:
        body = self.visit(node.body)
        if body is None:
            return None
        return node if body is node.body else ir.For(node.loop_var, node.min, node.extent, node.kind, body,
                                                     node.thread_tag, dict(node.annotations))

    def visit_Allocate(self, node: ir.Allocate) -> ir.Stmt | None:
        body = self.visit(node.body)
        if body is None:
            return None
        return node if body is node.body else ir.Allocate(node.buffer, body)


def fuse_gemm_epilogue(env: VTAEnv) -> Callable[[ir.PrimFunc], ir.PrimFunc]:
    """The pass for ``env`` (phase 1, after LiftAttrScope; a no-op without BIAS_PRELOAD and GEMM_OUT_REQUANT)."""
    def run(func: ir.PrimFunc) -> ir.PrimFunc:
        if not (env.config.bias_preload or env.config.gemm_out_requant):
            return func
        events, allocs = _events(func.body)
        plan, controls = _plan(events, allocs, env)
        # the requant register is one: fused tiles (their sets may interleave, virtual threads) and any
        # REQUANT left on the ALU must all use one control field, else no tile writes OUT requantised
        left = {e.sig[4] for e in events
                if e.kind == "alu" and e.sig[2] == AluOp.REQUANT and plan.get(id(e.node), e.node) is not None}
        if len(controls) > 1 or (controls and left - controls):
            plan, _ = _plan(events, allocs, env, out_requant=False)
        if not plan:
            return func
        body = _Apply(plan).visit(func.body)
        return ir.PrimFunc(func.name, func.params, body if body is not None else ir.seq(), dict(func.attrs))

    return run
