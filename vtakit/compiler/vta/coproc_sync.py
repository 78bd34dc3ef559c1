"""CoProcSync: dependence tokens between the load, compute and store queues (TVM's
``CoProcInstDepDetector``, reference/tvm_compiler.md §3.2).

Every command sits in a ``coproc_scope(q)`` region. Walking each statement sequence, consecutive
regions of different queues get ``vta.dep_push(from, to)`` at the end of the producer and
``vta.dep_pop(from, to)`` at the start of the consumer (inside their scopes, so virtual-thread
injection replicates them with the command). A loop is analysed recursively: its last region
pushes to its first region of the next iteration (a loop-carried token), and the loop then acts
as one region whose first pop and last push are still pending. Pending tokens are matched with
the neighbours (a push after the previous region provides the first iteration's token, a pop
after the loop drains the last one) and, at the top level, by a prologue push and an epilogue
pop. Load and store share no token queue, so a dependence between them is relayed by compute.
Virtual-thread loops are transparent to the analysis of their surroundings but are planned
as a top level of their own, so each thread gets its own prologue and epilogue when its
statements are replicated. The pass runs before virtual-thread injection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vtakit.compiler import ir
from vtakit.compiler.lower.vthread import VIRTUAL_THREAD_TAGS
from vtakit.compiler.vta.env import DEP_POP, DEP_PUSH, QID_COMPUTE, coproc_scope_of

__all__ = ["inject_coproc_sync"]

Pair = tuple[int, int]


@dataclass
class _State:
    node: Any
    enter_ctx: set[int] = field(default_factory=set)
    exit_ctx: set[int] = field(default_factory=set)
    enter_pop: list[Pair] = field(default_factory=list)
    exit_push: list[Pair] = field(default_factory=list)


@dataclass
class _Chain:
    first: _State | None = None
    last: _State | None = None


def _call(op: str, pair: Pair) -> ir.Stmt:
    return ir.Evaluate(ir.Call("int32", op, (ir.IntImm("int32", pair[0]), ir.IntImm("int32", pair[1]))))


def _is_virtual_thread(s: ir.Stmt) -> bool:
    return isinstance(s, ir.For) and s.kind is ir.ForKind.THREAD_BINDING and s.thread_tag.startswith(
        VIRTUAL_THREAD_TAGS)


class _Planner:
    def __init__(self) -> None:
        self.before: dict[int, list[ir.Stmt]] = {}
        self.after: dict[int, list[ir.Stmt]] = {}

    # ------------------------------------------------------------------ planning
    def plan_top(self, stmt: ir.Stmt) -> _Chain:
        chain = _Chain()
        self.scan(stmt, chain)
        if chain.first is not None:
            self.match_fix_enter_pop(chain.first)
            self.match_fix_exit_push(chain.last)
        return chain

    def add(self, chain: _Chain, state: _State) -> None:
        if chain.last is None:
            chain.first = chain.last = state
        else:
            self.inject_sync(chain.last, state, [], [])
            chain.last = state

    def scan(self, s: ir.Stmt, chain: _Chain) -> None:
        q = coproc_scope_of(s)
        if q is not None:
            self.add(chain, _State(s.body, {q}, {q}))
        elif _is_virtual_thread(s):
            inner = self.plan_top(s.body)
            if inner.first is not None:
                self.add(chain, _State(s, set(inner.first.enter_ctx), set(inner.last.exit_ctx)))
        elif isinstance(s, ir.For):
            sub = _Chain()
            self.scan(s.body, sub)
            if sub.first is not None:
                state = _State(s)
                self.inject_sync(sub.last, sub.first, state.exit_push, state.enter_pop)
                state.enter_ctx, state.exit_ctx = set(sub.first.enter_ctx), set(sub.last.exit_ctx)
                self.add(chain, state)
        elif isinstance(s, ir.IfThenElse):
            state = _State(s)
            for branch in (s.then_case, s.else_case):
                if branch is None:
                    continue
                sub = _Chain()
                self.scan(branch, sub)
                if sub.first is not None:
                    self.match_fix_enter_pop(sub.first)
                    self.match_fix_exit_push(sub.last)
                    state.enter_ctx |= sub.first.enter_ctx
                    state.exit_ctx |= sub.last.exit_ctx
            if state.enter_ctx:
                self.add(chain, state)
        elif isinstance(s, ir.SeqStmt):
            for c in s.stmts:
                self.scan(c, chain)
        elif isinstance(s, (ir.Allocate, ir.LetStmt, ir.AttrStmt)):
            self.scan(s.body, chain)

    def _hop(self, prev: _State, pair: Pair) -> Pair:
        """Load and store have no token queue: relay through compute (a compute no-op pops the
        producer's token and pushes on to the consumer). Returns the pair the consumer pops."""
        if QID_COMPUTE in pair:
            return pair
        relay = [_call(DEP_PUSH, (pair[0], QID_COMPUTE)), _call(DEP_POP, (pair[0], QID_COMPUTE))]
        self.after.setdefault(id(prev.node), []).extend(relay)
        return QID_COMPUTE, pair[1]

    def inject_sync(self, prev: _State, nxt: _State, prev_exit_push: list[Pair], next_enter_pop: list[Pair]) -> None:
        if not prev.exit_push and not nxt.enter_pop and len(prev.exit_ctx) == 1 and len(nxt.enter_ctx) == 1:
            src, dst = next(iter(prev.exit_ctx)), next(iter(nxt.enter_ctx))
            if src != dst:
                src, dst = self._hop(prev, (src, dst))
                self.after.setdefault(id(prev.node), []).append(_call(DEP_PUSH, (src, dst)))
                self.before.setdefault(id(nxt.node), []).append(_call(DEP_POP, (src, dst)))
                prev_exit_push.append((src, dst))
                next_enter_pop.append((src, dst))
            return
        vpush, vpop = list(prev.exit_push), list(nxt.enter_pop)
        pending = [(a, b) for a in sorted(prev.exit_ctx) for b in sorted(nxt.enter_ctx) if a != b]
        pending = list(dict.fromkeys(self._hop(prev, p) for p in pending))
        prev_after: list[ir.Stmt] = []
        next_before: list[ir.Stmt] = []
        for p in pending:
            if p not in prev.exit_push:
                vpush.append(p)
                prev_after.append(_call(DEP_PUSH, p))
            if p not in nxt.enter_pop:
                vpop.append(p)
                next_before.append(_call(DEP_POP, p))
        for p in vpush:
            if p not in vpop:
                prev_after.append(_call(DEP_POP, p))
            else:
                prev_exit_push.append(p)
        for p in vpop:
            if p not in vpush:
                next_before.append(_call(DEP_PUSH, p))
            else:
                next_enter_pop.append(p)
        if prev_after:
            self.after.setdefault(id(prev.node), []).extend(prev_after)
        if next_before:
            self.before.setdefault(id(nxt.node), []).extend(next_before)

    def match_fix_enter_pop(self, state: _State) -> None:
        for p in state.enter_pop:
            self.before.setdefault(id(state.node), []).append(_call(DEP_PUSH, p))

    def match_fix_exit_push(self, state: _State) -> None:
        for p in state.exit_push:
            self.after.setdefault(id(state.node), []).append(_call(DEP_POP, p))


class _Inserter(ir.IRMutator):
    def __init__(self, planner: _Planner) -> None:
        self.before, self.after = planner.before, planner.after

    def visit(self, node: Any) -> Any:
        key = id(node)
        out = super().visit(node)
        if isinstance(node, ir.Stmt) and (key in self.before or key in self.after):
            out = ir.seq(*self.before.get(key, []), out, *self.after.get(key, []))
        return out


def inject_coproc_sync(func: ir.PrimFunc) -> ir.PrimFunc:
    """The pass (phase 1, last; before virtual-thread injection)."""
    planner = _Planner()
    planner.plan_top(func.body)
    return ir.PrimFunc(func.name, func.params, _Inserter(planner).visit(func.body), dict(func.attrs))
