"""``vtakit.lower``: a schedule becomes a :class:`~vtakit.compiler.ir.PrimFunc` through phased passes.

Phase 0: user passes. Phase 1: StorageFlatten, Simplify, user passes. Phase 2: LoopPartition
(opt-in), VectorizeLoop, InjectVirtualThread, InjectDoubleBuffer, VerifyMemoryScopes, UnrollLoop,
user passes. Phase 3: Simplify (incl. no-op removal), user passes. Targets add passes through :class:`~vtakit.compiler.transform.PassContext`.
"""

from __future__ import annotations

from typing import Any, Sequence

from vtakit.compiler import ir
from vtakit.compiler.targets import implied_target, lowering_context
from vtakit.compiler.lower.double_buffer import inject_double_buffer
from vtakit.compiler.lower.flatten import flatten_storage
from vtakit.compiler.lower.loop_partition import partition_loops
from vtakit.compiler.lower.schedule_ops import schedule_to_primfunc
from vtakit.compiler.lower.simplify import simplify_func
from vtakit.compiler.lower.unroll import unroll_loops
from vtakit.compiler.lower.verify_memory import verify_memory_scopes
from vtakit.compiler.lower.vectorize import vectorize_loops
from vtakit.compiler.lower.vthread import inject_virtual_thread
from vtakit.compiler.te.schedule import Schedule
from vtakit.compiler.transform import Pass, PassContext
from vtakit.errors import CompileError
from vtakit.progress import QUICK_WORK_DELAY_SECONDS, progress

__all__ = ["lower", "phase_passes"]


def phase_passes(ctx: PassContext) -> list[list[tuple[str, Pass]]]:
    """The built-in passes of each phase (name, pass), user passes appended. A pass is left out
    when ``ctx`` disables it by name, or when it is opt-in and not asked for (LoopPartition)."""
    auto = int(ctx.config.get("tir.UnrollLoop.auto_max_step", 0))
    vectorize = _serialize_vectorized if ctx.config.get("tir.disable_vectorize") else vectorize_loops
    opted_out = set() if ctx.config.get("tir.LoopPartition.partition_const_loop") else {"LoopPartition"}
    builtin: list[list[tuple[str, Pass]]] = [
        [],
        [("StorageFlatten", flatten_storage), ("Simplify", simplify_func)],
        [("LoopPartition", partition_loops), ("VectorizeLoop", vectorize), ("InjectVirtualThread", inject_virtual_thread),
         ("InjectDoubleBuffer", inject_double_buffer),
         ("VerifyMemoryScopes", verify_memory_scopes),
         ("UnrollLoop", lambda f: unroll_loops(f, auto))],
        [("RemoveNoOp", simplify_func)],
    ]
    out = []
    for phase, passes in enumerate(builtin):
        kept = [(n, p) for n, p in passes if ctx.enabled(n) and n not in opted_out]
        kept += [(getattr(p, "__name__", "user_pass"), p) for p in ctx.user_passes(phase)]
        out.append(kept)
    return out


def _serialize_vectorized(func: ir.PrimFunc) -> ir.PrimFunc:
    class _Serial(ir.IRMutator):
        def visit_For(self, node: ir.For) -> ir.Stmt:
            node = self.generic_visit(node)
            if node.kind is ir.ForKind.VECTORIZED:
                return ir.For(node.loop_var, node.min, node.extent, ir.ForKind.SERIAL, node.body,
                              node.thread_tag, dict(node.annotations))
            return node

    return ir.PrimFunc(func.name, func.params, _Serial().visit(func.body), dict(func.attrs))


def lower(s: Schedule, args: Sequence[Any], name: str = "main", simple_mode: bool = False,
          target: str | None = None, config: Any = None) -> ir.PrimFunc:
    """Lower schedule ``s`` with parameters ``args`` (tensors, outputs included) to loop IR.

    ``simple_mode`` is accepted for TVM compatibility; vtakit never wraps the function in a
    packed-call API, so the result is the same either way. Print the result to read it.

    A target that adds lowering passes (``target="vta"``, with its ``config``) lowers inside its
    PassContext, so the IR shows that target's intrinsics; a schedule that stores stages in a
    target's memory scopes (``local.acc_buffer``, ...) implies that target. Inside an explicit
    context (``with vta.build_config(cfg): vtakit.lower(...)``, as in TVM) nothing is added.
    """
    if not isinstance(s, Schedule):
        raise CompileError(f"lower expects a schedule (te.create_schedule), got {type(s).__name__}")
    if not isinstance(args, (list, tuple)):
        raise CompileError(f"lower: args must be a list of tensors, got {args!r}")
    ctx = PassContext.current()
    if target is None:
        target = implied_target([stage.scope for stage in s.stages if stage.scope])
    context = lowering_context(target, config) if target is not None else None
    if context is not None and not set(context.memory_scopes) <= set(ctx.memory_scopes):
        with context:
            return lower(s, args, name=name)
    with progress(f"lowering {name}", delay=QUICK_WORK_DELAY_SECONDS) as bar:
        bar.step("schedule to loops")
        func = schedule_to_primfunc(s, args, name)
        for passes in phase_passes(ctx):
            for pass_name, p in passes:
                bar.step(pass_name)
                func = p(func)
                if not isinstance(func, ir.PrimFunc):
                    raise CompileError(f"pass {pass_name} returned {type(func).__name__}, expected a PrimFunc")
    return func
