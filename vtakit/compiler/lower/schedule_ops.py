"""Schedule -> loop IR: inline, infer bounds, then emit each stage's loop nest at its attach point.

The result still uses N-d buffer accesses (one index per dimension, relative to the region a
stage's buffer holds); :mod:`.flatten` makes them 1-D afterwards.
"""

from __future__ import annotations

from typing import Any, Sequence

from vtakit.compiler import ir
from vtakit.compiler.lower.allreduce import make_cross_thread_reduction, thread_bound_reduce_axes
from vtakit.compiler.lower.bound import StageInfo, infer_bounds
from vtakit.compiler.lower.thread_extent import verify_thread_extents
from vtakit.compiler.te.expr import IterVar
from vtakit.compiler.te.schedule import Schedule, Stage
from vtakit.compiler.te.tensor import Tensor, input_tensors
from vtakit.errors import CompileError, ScheduleError

__all__ = ["schedule_to_primfunc", "LoadLowerer", "NestBuilder"]


class _Inliner(ir.IRMutator):
    def __init__(self, inlined: dict[Tensor, tuple[list[ir.Var], ir.PrimExpr]]) -> None:
        self.inlined = inlined

    def visit_ProducerLoad(self, node: ir.ProducerLoad) -> ir.PrimExpr:
        node = self.generic_visit(node)
        hit = self.inlined.get(node.producer)
        if hit is None:
            return node
        params, body = hit
        return ir.substitute(body, dict(zip(params, node.indices)))


class LoadLowerer(ir.IRMutator):
    """Tensor reads become buffer loads, relative to the region each buffer holds."""

    def __init__(self, buffers: dict[Tensor, tuple[ir.Buffer, list[ir.PrimExpr]]]) -> None:
        self.buffers = buffers

    def visit_ProducerLoad(self, node: ir.ProducerLoad) -> ir.PrimExpr:
        node = self.generic_visit(node)
        hit = self.buffers.get(node.producer)
        if hit is None:
            raise CompileError(f"tensor {node.producer.name} is read but neither an argument nor computed "
                               "by the schedule; pass it in args")
        buf, mins = hit
        return ir.BufferLoad(buf, tuple(_rel(i, m) for i, m in zip(node.indices, mins)))


def _aligned_strides(shape: list[Any], aligns: dict[int, tuple[int, int]]) -> tuple:
    """Row-major strides with ``storage_align`` padding (TVM's StorageFlatten rule); () if none."""
    if not aligns:
        return ()
    if not all(isinstance(n, int) for n in shape):
        raise CompileError(f"storage_align needs a buffer of constant shape, got {shape}")
    strides, stride = [], 1
    for dim in reversed(range(len(shape))):
        if dim in aligns:
            factor, offset = aligns[dim]
            stride += (factor + offset - stride % factor) % factor
        strides.append(stride)
        stride *= shape[dim]
    return tuple(reversed(strides))


def _rel(index: ir.PrimExpr, mn: ir.PrimExpr) -> ir.PrimExpr:
    return index if isinstance(mn, ir.IntImm) and mn.value == 0 else index - mn


def _true(e: ir.PrimExpr) -> bool:
    return isinstance(e, ir.IntImm) and bool(e.value)


def _all(conds: Sequence[ir.PrimExpr]) -> ir.PrimExpr | None:
    out = None
    for c in conds:
        out = c if out is None else ir.And(out, c)
    return out


def _guard(conds: Sequence[ir.PrimExpr], body: ir.Stmt) -> ir.Stmt:
    cond = _all(conds)
    return body if cond is None else ir.IfThenElse(cond, body)


class NestBuilder:
    """Builds one function's statement from a schedule: the parameters' buffers, each stage's loop
    nest with its attached stages, and unique buffer names. The tensorize and cross-thread
    reduction rewrites (``tensorize.py``, ``allreduce.py``) extend the nest it is building."""

    def __init__(self, sch: Schedule, args: Sequence[Any]) -> None:
        self.sch = sch
        self.params: list[ir.Buffer] = []
        self.thread_bindings: dict[int, tuple[Stage, IterVar]] = {}  # id of each thread-bound For -> its axis
        self.arg_tensors: dict[Tensor, ir.Buffer] = {}
        self._names: set[str] = set()
        for a in args:
            if not isinstance(a, Tensor):
                raise CompileError(f"lower: arguments must be tensors, got {a!r}")
            if a in self.arg_tensors:
                raise CompileError(f"lower: tensor {a.name} appears twice in args")
            sch[a]  # raises if not in the schedule
            buf = ir.Buffer(self.unique_name(a.name), tuple(a.shape), a.dtype)
            self.arg_tensors[a] = buf
            self.params.append(buf)

    def unique_name(self, name: str) -> str:
        """``name``, suffixed if a buffer of the function already has it (TVM allows tensors of one
        name, e.g. the default "placeholder" and "compute"; buffers stay distinguishable)."""
        out, k = name, 0
        while out in self._names:
            k += 1
            out = f"{name}_{k}"
        self._names.add(out)
        return out

    def run(self) -> ir.Stmt:
        sch = self.sch
        outputs = {sch[op] for op in sch.outputs}
        # 1. inline
        inlined: dict[Tensor, tuple[list[ir.Var], ir.PrimExpr]] = {}
        self.bodies: dict[Stage, ir.PrimExpr] = {}
        for st in sch.stages:
            if st.is_placeholder:
                continue
            body = _Inliner(inlined).visit(st.body) if inlined else st.body
            if st.attach_type == "inline":
                if st.tensor in self.arg_tensors:
                    raise ScheduleError(f"stage {st.name} is inlined but also passed in args")
                inlined[st.tensor] = ([iv.var for iv in st.axis], body)
            else:
                self.bodies[st] = body
        needed = self._needed(outputs)
        self.bodies = {s: b for s, b in self.bodies.items() if s in needed}
        for st in sch.stages:
            if st.is_placeholder and st in needed and st.tensor not in self.arg_tensors:
                raise CompileError(f"placeholder {st.name} is read but not passed in args")
        for st in self.bodies:
            if st.attach_type == "scope":
                if st.tensor in self.arg_tensors:
                    raise ScheduleError(f"stage {st.name} is attached with compute_at but also passed in args; "
                                        "arguments are computed whole at the root")
                if st.attach_stage not in self.bodies:
                    raise ScheduleError(f"stage {st.name} is attached to stage {st.attach_stage.name}, "
                                        f"which is {st.attach_stage.attach_type}d or not computed")
        self._check_attach_scopes()
        # 2. bounds
        self.infos = infer_bounds(sch, self.bodies)
        # 3. buffers
        self.buffers: dict[Tensor, tuple[ir.Buffer, list[ir.PrimExpr]]] = {}
        self.allocs: dict[Stage, ir.Buffer] = {}
        for st in sch.stages:
            if st.is_placeholder and st.tensor in self.arg_tensors:
                self.buffers[st.tensor] = (self.arg_tensors[st.tensor], [ir.IntImm("int32", 0)] * st.tensor.ndim)
        for st, info in self.infos.items():
            if st.tensor in self.arg_tensors:
                buf = self.arg_tensors[st.tensor]
                if st.scope not in (None, "global"):
                    raise ScheduleError(f"stage {st.name} is an argument, its scope must be global, not {st.scope}")
            else:
                buf = ir.Buffer(self.unique_name(st.name), tuple(info.buffer_shape), st.tensor.dtype, info.scope,
                                strides=_aligned_strides(info.buffer_shape, st.storage_aligns))
                self.allocs[st] = buf
            self.buffers[st.tensor] = (buf, [mn for mn, _ in info.region])
        self.lowerer = LoadLowerer(self.buffers)
        self.attached: dict[tuple[int, int], list[Stage]] = {}
        for st in self.bodies:
            if st.attach_type == "scope":
                self.attached.setdefault((id(st.attach_stage), id(st.attach_ivar)), []).append(st)
        # 4. emit
        roots = [st for st in sch.stages if st in self.bodies and st.attach_type == "root"]
        body = ir.seq(*[self.stage_stmt(st) for st in roots])
        for st in reversed(roots):
            if st in self.allocs:
                body = ir.Allocate(self.allocs[st], body)
        return body

    def _check_attach_scopes(self) -> None:
        """Every reader of an attached stage must run inside the loop the stage is attached at."""
        readers: dict[Stage, list[Stage]] = {}
        for st, body in self.bodies.items():
            for t in input_tensors(body):
                readers.setdefault(self.sch[t], []).append(st)
        for st in self.bodies:
            if st.attach_type != "scope":
                continue
            parent, leaves = st.attach_stage, st.attach_stage.leaf_iter_vars
            pos = leaves.index(st.attach_ivar)
            for r in readers.get(st, []):
                node, inside = r, r is parent
                while not inside and node.attach_type == "scope":
                    if node.attach_stage is parent:
                        inside = leaves.index(node.attach_ivar) >= pos
                        break
                    node = node.attach_stage
                if not inside:
                    raise ScheduleError(f"stage {st.name} is computed inside loop {st.attach_ivar.name} of stage "
                                        f"{parent.name}, but stage {r.name} also reads it outside that loop")

    def _needed(self, outputs: set[Stage]) -> set[Stage]:
        needed: set[Stage] = set()
        todo = list(outputs) + [self.sch[t] for t in self.arg_tensors]
        while todo:
            st = todo.pop()
            if st in needed:
                continue
            needed.add(st)
            body = self.bodies.get(st)
            if body is not None:
                todo.extend(self.sch[t] for t in input_tensors(body))
        return needed

    # ------------------------------------------------------------------ one stage
    def stage_stmt(self, st: Stage) -> ir.Stmt:
        info = self.infos[st]
        leaves = st.leaf_iter_vars
        tloc = next((k for k, iv in enumerate(leaves)
                     if st.iter_var_attrs.get(iv) is not None and st.iter_var_attrs[iv].tensor_intrin is not None),
                    None)
        if tloc is not None:
            for iv in leaves[tloc:]:
                for other in self.attached.get((id(st), id(iv)), []):
                    raise ScheduleError(f"stage {other.name} is attached at axis {iv.name} of stage {st.name}, "
                                        "inside its tensorized region")
            tiv = leaves[tloc]
            if st.store_predicate is not None:
                raise ScheduleError(f"stage {st.name}: set_store_predicate is not supported on a tensorized stage "
                                    f"(axis {tiv.name} is tensorized); the predicate "
                                    f"{st.store_predicate} would not guard the intrinsic")
            bound = thread_bound_reduce_axes(st)
            if bound:
                raise ScheduleError(f"stage {st.name}: reduction axis {bound[0].name} is bound to "
                                    f"{st.iter_var_attrs[bound[0]].bind_thread.thread_tag} (a cross-thread reduction) "
                                    f"and axis {tiv.name} is tensorized; a cross-thread reduction cannot be tensorized")
            from vtakit.compiler.lower.tensorize import make_tensorize  # noqa: PLC0415

            return make_tensorize(self, info, tloc)
        vmap = {iv.var: info.root_value(iv) for iv in st.axis + st.reduce_axis}
        buf = self.buffers[st.tensor][0]
        out_idx = tuple(info.offset[iv] for iv in st.axis)
        body = ir.substitute(info.body, vmap)
        store_preds = self._store_predicates(st, info)
        if not isinstance(body, ir.Reduce):
            store = ir.BufferStore(buf, self.lowerer.visit(body), out_idx)
            return self.nest(st, leaves, _guard(info.predicates + store_preds, store))
        if thread_bound_reduce_axes(st):
            return make_cross_thread_reduction(self, st, info, body, out_idx, store_preds)
        reduce_vars = {info.loop_var[iv] for iv in leaves if iv.iter_type == "comm_reduce"}
        combined = body.combiner.combine(ir.BufferLoad(buf, out_idx), body.source)
        update: ir.Stmt = ir.BufferStore(buf, self.lowerer.visit(combined), out_idx)
        if not _true(body.condition):
            update = ir.IfThenElse(self.lowerer.visit(body.condition), update)
        init_value = body.init if body.init is not None else body.combiner.identity_element
        init: ir.Stmt = ir.BufferStore(buf, self.lowerer.visit(init_value), out_idx)
        common = next((k for k, iv in enumerate(leaves) if iv.iter_type == "comm_reduce"), len(leaves))
        # as in TVM, the store predicate guards the update only: the initialisation runs everywhere
        init_preds = [p for p in info.predicates if not ir.uses_var(p, reduce_vars)]
        init_nest = self.nest(st, [iv for iv in leaves[common:] if iv.iter_type != "comm_reduce"],
                              _guard(init_preds, init), attach=False)
        update_nest = self.nest(st, leaves[common:], _guard(info.predicates + store_preds, update))
        return self.nest(st, leaves[:common], ir.seq(init_nest, update_nest))

    def _store_predicates(self, st: Stage, info: StageInfo) -> list[ir.PrimExpr]:
        """The stage's store predicate in its loop variables (none or one)."""
        pred = st.store_predicate
        if pred is None:
            return []
        vmap = _store_predicate_vmap(info)
        for other in self.sch.stages:
            for iv in other.all_iter_vars if other is not st else ():
                if iv.var not in vmap and ir.uses_var(pred, {iv.var}):
                    raise ScheduleError(f"stage {st.name}: the store predicate {pred} names axis {iv.name} of stage "
                                        f"{other.name}; it may use this stage's axes, their split/fuse axes, thread "
                                        "indices and shape variables")
        return [self.lowerer.visit(ir.substitute(pred, vmap))]

    def nest(self, st: Stage, leaves: Sequence[IterVar], inner: ir.Stmt, attach: bool = True) -> ir.Stmt:
        info = self.infos[st]
        for iv in reversed(leaves):
            if attach:
                inner = self.with_attached(st, iv, inner)
            inner = self.loop(st, info, iv, inner)
        return inner

    def with_attached(self, st: Stage, iv: IterVar, inner: ir.Stmt) -> ir.Stmt:
        stages = self.attached.get((id(st), id(iv)))
        if not stages:
            return inner
        body = ir.seq(*[self._marked(p) for p in stages], inner)
        for p in reversed(stages):
            if p in self.allocs:
                body = ir.Allocate(self.allocs[p], body)
        return body

    def _marked(self, st: Stage) -> ir.Stmt:
        stmt = self.stage_stmt(st)
        if st.is_double_buffered and st in self.allocs:
            from vtakit.compiler.lower.double_buffer import DOUBLE_BUFFER_WRITE  # noqa: PLC0415

            stmt = ir.AttrStmt(self.allocs[st].data, DOUBLE_BUFFER_WRITE, ir.IntImm("int32", 1), stmt)
        return stmt

    def loop(self, st: Stage, info: StageInfo, iv: IterVar, body: ir.Stmt) -> ir.Stmt:
        attr = st.iter_var_attrs.get(iv)
        ext = info.extent[iv]
        zero = ir.IntImm("int32", 0)
        if attr is not None and attr.bind_thread is not None:
            th = attr.bind_thread
            if th.dom is not None and not (isinstance(th.dom.extent, ir.IntImm) and isinstance(ext, ir.IntImm)
                                           and th.dom.extent.value == ext.value):
                raise ScheduleError(f"stage {st.name}: axis {iv.name} has extent {ext} but is bound to thread axis "
                                    f"{th.thread_tag} of extent {th.dom.extent}")
            loop: ir.Stmt = ir.For(th.var, zero, ext, ir.ForKind.THREAD_BINDING, body, thread_tag=th.thread_tag)
            self.thread_bindings[id(loop)] = (st, iv)
        else:
            loop = ir.For(iv.var, zero, ext, attr.kind if attr is not None else ir.ForKind.SERIAL, body)
        if attr is not None:
            for key, value in reversed(attr.pragmas):
                loop = ir.AttrStmt(info.loop_var[iv], f"pragma_{key}",
                                   ir.convert(value) if isinstance(value, (int, float)) else value, loop)
        return loop


def _store_predicate_vmap(info: StageInfo) -> dict[ir.Var, ir.PrimExpr]:
    """The variables a store predicate may name (root axes, reduction axes included, and the
    split/fuse axes of the stage) in terms of the stage's loop variables; a leaf bound to a thread
    is that thread's index."""
    st = info.stage
    vmap: dict[ir.Var, ir.PrimExpr] = {iv.var: off for iv, off in info.offset.items()}
    vmap.update({iv.var: info.root_value(iv) for iv in st.axis + st.reduce_axis})
    return vmap


def schedule_to_primfunc(sch: Schedule, args: Sequence[Any], name: str) -> ir.PrimFunc:
    """Phase -1 of ``lower``: the schedule as a PrimFunc with N-d buffer accesses."""
    builder = NestBuilder(sch, args)
    body = builder.run()
    verify_thread_extents(body, builder.thread_bindings)
    return ir.PrimFunc(name, tuple(builder.params), body)
