"""Cross-thread reductions: a reduction whose reduce axis is bound to ``threadIdx.*``.

TVM's MakeCrossThreadReduction. Each thread of a block reduces its share of the reduction (the
reduce loops not bound to a thread, into a private ``normal_reduce_temp``), then the threads that
differ only in the bound thread index combine their partial results with an
:class:`~vtakit.compiler.ir.AllReduce` (``tvm_thread_allreduce``) into a private ``reduce_temp``
that every one of them holds afterwards; the result is stored under the tail predicates that do
not involve reduction variables and the stage's store predicate (``set_store_predicate``,
typically ``threadIdx.x == 0``: one thread writes). A thread contributes only where all the tail
predicates hold (so an out-of-range row or reduction index reads nothing). The loop nest keeps the stage's leaf order
with the unbound reduce loops moved innermost (they run inside each thread), so stages attached
at the bound reduce axis (an ``rfactor`` stage) are computed per thread before the all-reduce;
a stage attached at a leaf that follows an unbound reduce loop in the leaf order was bounded for
one iteration of that loop, so it is computed inside it. The store predicate may not depend on
the unbound reduce loops (the result is stored after them). A bound extent of 1 has nothing to
combine: no all-reduce is emitted (Simplify would fold the thread index into it).

The all-reduce itself is never guarded: every thread of the group must reach it. Tail
predicates on the reduction (a split reduce axis that does not divide its extent) and the
reduction's ``where`` condition decide, per thread, whether it contributes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from vtakit.compiler import ir
from vtakit.compiler.te.expr import IterVar
from vtakit.compiler.te.schedule import Stage
from vtakit.errors import ScheduleError

if TYPE_CHECKING:
    from vtakit.compiler.lower.bound import StageInfo
    from vtakit.compiler.lower.schedule_ops import NestBuilder

__all__ = ["thread_bound_reduce_axes", "make_cross_thread_reduction"]


def thread_bound_reduce_axes(st: Stage) -> list[IterVar]:
    """The leaf reduce axes of ``st`` bound to a thread (at most one: ``Stage.bind`` checks)."""
    out = []
    for iv in st.leaf_iter_vars:
        attr = st.iter_var_attrs.get(iv)
        if iv.iter_type == "comm_reduce" and attr is not None and attr.bind_thread is not None:
            out.append(iv)
    return out


def _all(conds: Sequence[ir.PrimExpr]) -> ir.PrimExpr:
    out: ir.PrimExpr = ir.IntImm("bool", 1)
    for c in conds:
        out = c if isinstance(out, ir.IntImm) else ir.And(out, c)
    return out


def _guard(conds: Sequence[ir.PrimExpr], body: ir.Stmt) -> ir.Stmt:
    return body if not conds else ir.IfThenElse(_all(conds), body)


def _combine_threads(builder: "NestBuilder", st: Stage, info: "StageInfo", bound: IterVar, value: ir.PrimExpr,
                     cond: ir.PrimExpr, temp: ir.Buffer) -> ir.Stmt:
    """``temp[0]`` = the combination over the threads of ``bound`` of ``value`` where ``cond`` holds."""
    comb = info.body.combiner
    thread = st.iter_var_attrs[bound].bind_thread
    zero = (ir.IntImm("int32", 0),)
    ext = info.extent[bound]
    if isinstance(ext, ir.IntImm) and ext.value == 1:
        # one thread: nothing to combine (and Simplify would fold its index into the all-reduce)
        store = ir.BufferStore(temp, value, zero)
        if isinstance(cond, ir.IntImm) and cond.value:
            return store
        return ir.seq(ir.BufferStore(temp, builder.lowerer.visit(comb.identity_element), zero),
                      ir.IfThenElse(cond, store))
    return ir.AllReduce(comb, value, cond, temp, zero, thread.var, thread.thread_tag)


def make_cross_thread_reduction(builder: "NestBuilder", st: Stage, info: "StageInfo", body: ir.Reduce,
                                out_idx: tuple[ir.PrimExpr, ...],
                                store_preds: Sequence[ir.PrimExpr]) -> ir.Stmt:
    """The loop nest of stage ``st`` (``body`` is its reduction, root variables substituted)
    as a cross-thread reduction; ``builder`` is schedule_ops' stage builder."""
    lower = builder.lowerer.visit
    buf = builder.buffers[st.tensor][0]
    (bound,) = thread_bound_reduce_axes(st)
    thread = st.iter_var_attrs[bound].bind_thread
    leaves = st.leaf_iter_vars
    normal = [iv for iv in leaves if iv.iter_type == "comm_reduce" and iv is not bound]
    outer = [iv for iv in leaves if iv not in normal]
    reduce_vars = {info.loop_var[iv] for iv in leaves if iv.iter_type == "comm_reduce"}
    # every predicate decides whether a thread contributes (an out-of-range row reads nothing);
    # those without a reduction variable also guard the store
    contrib = list(info.predicates)
    if not (isinstance(body.condition, ir.IntImm) and body.condition.value):
        contrib.insert(0, lower(body.condition))
    store_guard = [p for p in info.predicates if not ir.uses_var(p, reduce_vars)] + list(store_preds)
    comb = body.combiner
    dtype = body.dtype
    temp = ir.Buffer(builder.unique_name("reduce_temp"), (1,), dtype, "local")
    zero = (ir.IntImm("int32", 0),)
    result: ir.PrimExpr = ir.BufferLoad(temp, zero)
    if body.init is not None:
        result = comb.combine(lower(body.init), result)
    normal_vars = {info.loop_var[iv] for iv in normal}
    for p in store_preds:
        if ir.uses_var(p, normal_vars):
            raise ScheduleError(
                f"stage {st.name}: the store predicate {st.store_predicate} depends on the reduction loop(s) "
                f"{', '.join(iv.name for iv in normal if ir.uses_var(p, {info.loop_var[iv]}))}, which each "
                f"thread runs before the all-reduce over {thread.thread_tag}; the result is stored once per "
                "output element, so the predicate may use the data axes and the thread indices only")
    store = _guard(store_guard, ir.BufferStore(buf, lower(result), out_idx))
    # a stage attached at a leaf that follows a per-thread reduce loop in the leaf order was bounded
    # for one iteration of that loop: it is computed inside the last such loop, before the update
    host = {iv: max((n for n in normal if leaves.index(n) < leaves.index(iv)), key=leaves.index, default=None)
            for iv in outer}
    late = [iv for iv in outer if host[iv] is not None]
    if normal:
        # each thread first reduces its own share serially, then the threads combine their shares
        part = ir.Buffer(builder.unique_name("normal_reduce_temp"), (1,), dtype, "local")
        acc = ir.BufferLoad(part, zero)
        init = ir.BufferStore(part, lower(comb.identity_element), zero)
        loops: ir.Stmt = _guard(contrib, ir.BufferStore(part, lower(comb.combine(acc, body.source)), zero))
        for nv in reversed(normal):
            for iv in reversed([iv for iv in late if host[iv] is nv]):
                loops = builder.with_attached(st, iv, loops)
            loops = builder.loop(st, info, nv, builder.with_attached(st, nv, loops))
        allreduce = _combine_threads(builder, st, info, bound, acc, ir.IntImm("bool", 1), temp)
        inner: ir.Stmt = ir.Allocate(part, ir.seq(init, loops, ir.Allocate(temp, ir.seq(allreduce, store))))
    else:
        allreduce = _combine_threads(builder, st, info, bound, lower(body.source), _all(contrib), temp)
        inner = ir.Allocate(temp, ir.seq(allreduce, store))
    for iv in reversed(outer):
        if iv not in late:
            inner = builder.with_attached(st, iv, inner)
        inner = builder.loop(st, info, iv, inner)
    return inner
