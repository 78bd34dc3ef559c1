"""Schedules: one :class:`Stage` per operation and the primitives that rewrite its loop nest.

A stage records its iteration-variable relations (split / fuse), the current leaf order, per-axis
annotations (loop kind, thread binding, pragmas, tensorize), where it is attached, its storage
scope and its store predicate. A reduction axis bound to ``threadIdx.*`` makes the stage a
cross-thread reduction (:mod:`vtakit.compiler.lower.allreduce`). The schedule's dataflow
rewrites (``cache_read``/``cache_write``/``rfactor``) edit the stages' bodies and never the
user's operations, so several schedules can be made from one set of tensors.
Lowering (:mod:`vtakit.compiler.lower`) turns all of it into loop IR.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from vtakit.compiler import ir
from vtakit.compiler.te.expr import IterVar, Range
from vtakit.compiler.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor, compute, input_tensors
from vtakit.errors import ScheduleError

__all__ = ["Split", "Fuse", "IterVarAttr", "Stage", "Schedule", "create_schedule"]


@dataclass(eq=False)
class Split:
    """``parent`` = ``outer * inner_extent + inner``; exactly one of ``factor`` / ``nparts`` is set."""
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None


@dataclass(eq=False)
class Fuse:
    """``fused`` = ``outer * inner_extent + inner``."""
    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass
class IterVarAttr:
    """The annotations of one leaf axis: loop kind, thread binding, pragmas, tensor intrinsic."""
    kind: ir.ForKind = ir.ForKind.SERIAL
    bind_thread: IterVar | None = None
    pragmas: list[tuple[str, Any]] = field(default_factory=list)
    tensor_intrin: Any = None


def _positive_int(value: Any, what: str, stage: "Stage", axis: IterVar) -> int:
    v = value.value if isinstance(value, ir.IntImm) else value
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ScheduleError(f"stage {stage.name}: split of axis {axis.name} needs a positive integer "
                            f"{what}, got {value!r}")
    return v


class Stage:
    """The schedule of one operation (``s[tensor]``)."""

    __hash__ = object.__hash__

    def __init__(self, op: Operation, schedule: "Schedule") -> None:
        self.op = op
        self._tensor = op.output(0)
        self.schedule = schedule
        self.name = op.name
        self.is_placeholder = isinstance(op, PlaceholderOp)
        if isinstance(op, ComputeOp):
            self.axis: list[IterVar] = list(op.axis)
            self.reduce_axis: list[IterVar] = list(op.reduce_axis)
            self.body: ir.PrimExpr | None = op.body
        else:
            self.axis, self.reduce_axis, self.body = [], [], None
        self.all_iter_vars: list[IterVar] = self.axis + self.reduce_axis
        self.leaf_iter_vars: list[IterVar] = list(self.all_iter_vars)
        self.relations: list[Split | Fuse] = []
        self.iter_var_attrs: dict[IterVar, IterVarAttr] = {}
        self.attach_type = "root"  # root | scope | inline
        self.attach_ivar: IterVar | None = None
        self.attach_stage: Stage | None = None
        self.scope: str | None = None
        self.storage_aligns: dict[int, tuple[int, int]] = {}  # dimension -> (factor, offset)
        self.is_double_buffered = False
        self.store_predicate: ir.PrimExpr | None = None

    def __repr__(self) -> str:
        return f"Stage({self.name})"

    @property
    def tensor(self) -> Tensor:
        """The tensor this stage computes (the user's tensor, also after dataflow rewrites)."""
        return self._tensor

    def _rewrite_op(self) -> None:
        """After a dataflow rewrite changed this stage's body, ``s[T].op`` is a new operation with
        the new body (as in TVM: after ``rfactor`` its ``reduce_axis`` are the new ones), producing
        the same tensor; the schedule finds the stage from either operation."""
        op = ComputeOp(self.op.name, self.op.tag, self.op.attrs, self.axis, self.body)
        op._output = self._tensor
        self.op = op
        self.schedule._stage_of[op] = self

    @property
    def inputs(self) -> list[Tensor]:
        return input_tensors(self.body) if self.body is not None else []

    # ------------------------------------------------------------------ checks
    def _require_compute(self, what: str) -> None:
        if self.is_placeholder:
            raise ScheduleError(f"cannot {what} the placeholder stage {self.name}; only compute stages have loops")

    def _require_leaf(self, iv: Any, what: str) -> IterVar:
        self._require_compute(what)
        if not isinstance(iv, IterVar):
            raise ScheduleError(f"stage {self.name}: {what} expects an axis (IterVar), got {iv!r}")
        if iv in self.leaf_iter_vars:
            return iv
        if iv in self.all_iter_vars:
            raise ScheduleError(f"stage {self.name}: axis {iv.name} was already split or fused; "
                                f"use its outer/inner (or fused) axis; current axes: {self._leaf_names()}")
        raise ScheduleError(f"stage {self.name}: axis {iv.name} does not belong to this stage "
                            f"(its axes are {self._leaf_names()})")

    def _leaf_names(self) -> list[str]:
        return [iv.name for iv in self.leaf_iter_vars]

    def _attr(self, iv: IterVar) -> IterVarAttr:
        return self.iter_var_attrs.setdefault(iv, IterVarAttr())

    # ------------------------------------------------------------------ loop structure
    def split(self, parent: IterVar, factor: Any = None, nparts: Any = None) -> tuple[IterVar, IterVar]:
        """Split ``parent`` into (outer, inner) by ``factor`` (inner extent) or ``nparts`` (outer
        extent). Factors need not divide the extent: lowering guards the tail."""
        parent = self._require_leaf(parent, "split")
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"stage {self.name}: split of axis {parent.name} needs exactly one of factor, nparts")
        f = _positive_int(factor, "factor", self, parent) if factor is not None else None
        n = _positive_int(nparts, "nparts", self, parent) if nparts is not None else None
        outer = IterVar(None, ir.Var(f"{parent.name}.outer"), parent.iter_type)
        inner = IterVar(None, ir.Var(f"{parent.name}.inner"), parent.iter_type)
        self.relations.append(Split(parent, outer, inner, f, n))
        pos = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        self.all_iter_vars += [outer, inner]
        return outer, inner

    def tile(self, x: IterVar, y: IterVar, x_factor: Any, y_factor: Any) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        """Split ``x`` and ``y`` and reorder to (xo, yo, xi, yi)."""
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *args: IterVar) -> IterVar:
        """Fuse consecutive axes (outermost first) into one."""
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        if not args:
            raise ScheduleError(f"stage {self.name}: fuse needs at least one axis")
        ivs = [self._require_leaf(iv, "fuse") for iv in args]
        if len(ivs) == 1:
            return ivs[0]
        positions = [self.leaf_iter_vars.index(iv) for iv in ivs]
        if positions != list(range(positions[0], positions[0] + len(ivs))):
            raise ScheduleError(f"stage {self.name}: fuse needs adjacent axes from outer to inner, got "
                                f"{[iv.name for iv in ivs]} in the loop order {self._leaf_names()}")
        kinds = {iv.iter_type for iv in ivs}
        if len(kinds) > 1:
            raise ScheduleError(f"stage {self.name}: cannot fuse data-parallel and reduction axes "
                                f"{[iv.name for iv in ivs]}")
        fused = ivs[0]
        for inner in ivs[1:]:
            new = IterVar(None, ir.Var(f"{fused.name}.{inner.name}.fused"), inner.iter_type)
            self.relations.append(Fuse(fused, inner, new))
            self.all_iter_vars.append(new)
            pos = self.leaf_iter_vars.index(fused)
            self.leaf_iter_vars[pos:pos + 2] = [new]
            fused = new
        return fused

    def reorder(self, *args: IterVar) -> None:
        """Put the given axes, at the positions they occupy together, in the given order."""
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        ivs = [self._require_leaf(iv, "reorder") for iv in args]
        if len(set(map(id, ivs))) != len(ivs):
            raise ScheduleError(f"stage {self.name}: reorder got an axis twice: {[iv.name for iv in ivs]}")
        positions = sorted(self.leaf_iter_vars.index(iv) for iv in ivs)
        for pos, iv in zip(positions, ivs):
            self.leaf_iter_vars[pos] = iv

    # ------------------------------------------------------------------ placement
    def compute_at(self, parent: "Stage", scope: IterVar) -> None:
        """Compute this stage inside ``parent``'s loop ``scope``, only the region that needs."""
        self._require_compute("compute_at")
        if not isinstance(parent, Stage):
            raise ScheduleError(f"stage {self.name}: compute_at expects a stage (s[tensor]), got {parent!r}")
        if parent is self:
            raise ScheduleError(f"stage {self.name}: cannot compute_at itself")
        if not (isinstance(scope, IterVar) and scope in parent.leaf_iter_vars):
            name = scope.name if isinstance(scope, IterVar) else repr(scope)
            raise ScheduleError(f"stage {self.name}: compute_at axis {name} is not a loop axis of stage "
                                f"{parent.name} (its axes are {parent._leaf_names()})")
        if not self.schedule._reads_transitively(parent, self):
            raise ScheduleError(f"stage {self.name}: cannot compute_at stage {parent.name}, which does not "
                                f"consume {self.name}")
        self._check_not_output("compute_at")
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, scope

    def compute_inline(self) -> None:
        """Substitute this stage's body into its consumers."""
        self._require_compute("compute_inline")
        if self.reduce_axis:
            raise ScheduleError(f"stage {self.name}: cannot compute_inline a reduction")
        if self.store_predicate is not None:
            raise ScheduleError(f"stage {self.name}: cannot compute_inline a stage with a store predicate "
                                f"({self.store_predicate}); an inlined stage stores nothing")
        self._check_not_output("compute_inline")
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None

    def compute_root(self) -> None:
        self._require_compute("compute_root")
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None

    def _check_not_output(self, what: str) -> None:
        if self._tensor.op in self.schedule.outputs:
            raise ScheduleError(f"stage {self.name}: cannot {what} an output of the schedule")

    def set_scope(self, scope: str) -> None:
        """Store this stage's result in memory ``scope`` (e.g. "shared", "local.acc_buffer")."""
        self._require_compute("set_scope")
        if not isinstance(scope, str) or not scope:
            raise ScheduleError(f"stage {self.name}: scope must be a non-empty string, got {scope!r}")
        self.scope = scope

    def storage_align(self, axis: IterVar, factor: int, offset: int) -> None:
        """Pad the stride of ``axis``'s dimension in this stage's buffer so that
        ``stride % factor == offset`` (e.g. to avoid shared-memory bank conflicts)."""
        self._require_compute("storage_align")
        if axis not in self.axis:
            raise ScheduleError(f"stage {self.name}: storage_align needs one of the stage's original axes "
                                f"{[iv.name for iv in self.axis]}, got {getattr(axis, 'name', axis)!r}")
        if not isinstance(factor, int) or factor <= 0 or not isinstance(offset, int) or not 0 <= offset < factor:
            raise ScheduleError(f"stage {self.name}: storage_align needs factor > 0 and 0 <= offset < factor, "
                                f"got factor={factor!r}, offset={offset!r}")
        self.storage_aligns[self.axis.index(axis)] = (factor, offset)

    def double_buffer(self) -> None:
        """Give this stage's buffer two slots so that, attached in a loop, the next iteration's data
        is produced while the current one is consumed (InjectDoubleBuffer)."""
        self._require_compute("double_buffer")
        self.is_double_buffered = True

    # ------------------------------------------------------------------ annotations
    def bind(self, iv: IterVar, thread_ivar: IterVar) -> None:
        """Bind an axis to a thread axis (blockIdx/threadIdx, vthread, cthread)."""
        iv = self._require_leaf(iv, "bind")
        if not isinstance(thread_ivar, IterVar) or thread_ivar.iter_type != "thread":
            raise ScheduleError(f"stage {self.name}: bind of axis {iv.name} needs te.thread_axis(...), "
                                f"got {thread_ivar!r}")
        if iv.iter_type == "comm_reduce":
            self._check_reduce_binding(iv, thread_ivar)
        attr = self._attr(iv)
        if attr.kind is not ir.ForKind.SERIAL:
            raise ScheduleError(f"stage {self.name}: axis {iv.name} is already {attr.kind.value}")
        tag = thread_ivar.thread_tag
        for other, a in self.iter_var_attrs.items():
            if other is iv or a.bind_thread is None:
                continue
            # one hardware thread index per stage loop; several virtual threads may nest
            if a.bind_thread is thread_ivar or (a.bind_thread.thread_tag == tag and tag not in ("vthread", "cthread")):
                raise ScheduleError(f"stage {self.name}: thread axis {tag} is already bound to axis {other.name}")
        attr.kind, attr.bind_thread = ir.ForKind.THREAD_BINDING, thread_ivar

    def _check_reduce_binding(self, iv: IterVar, thread_ivar: IterVar) -> None:
        """A reduction axis bound to a thread becomes a cross-thread reduction (an all-reduce over
        the threads of a block, as in TVM): only ``threadIdx.*`` qualifies, one per stage."""
        tag = thread_ivar.thread_tag
        if not tag.startswith("threadIdx."):
            raise ScheduleError(f"stage {self.name}: cannot bind the reduction axis {iv.name} to {tag}; a reduction "
                                "axis can only be bound to threadIdx.x/y/z (a cross-thread reduction in one block)")
        for other, a in self.iter_var_attrs.items():
            if other is not iv and other.iter_type == "comm_reduce" and a.bind_thread is not None:
                raise ScheduleError(f"stage {self.name}: cannot bind the reduction axis {iv.name} to {tag}: reduction "
                                    f"axis {other.name} is already bound to {a.bind_thread.thread_tag}, and a "
                                    "cross-thread reduction runs over one thread index; fuse the reduction axes "
                                    "and bind the fused axis instead")

    def set_store_predicate(self, predicate: Any) -> None:
        """Store this stage's results only where ``predicate`` holds (e.g. ``tx.var.equal(0)``: after a
        cross-thread reduction every thread holds the result; one of them writes it). As in TVM, on an
        ordinary reduction it guards the update and not the initialisation (an output it excludes
        keeps the identity). It may name the stage's axes, their split/fuse axes and thread indices."""
        self._require_compute("set_store_predicate")
        pred = ir.convert(predicate)
        if pred.dtype != "bool":
            raise ScheduleError(f"stage {self.name}: set_store_predicate needs a boolean condition, got {pred} "
                                f"of dtype {pred.dtype}")
        if self.attach_type == "inline":
            raise ScheduleError(f"stage {self.name}: cannot set_store_predicate on an inlined stage (it stores "
                                "nothing); compute_root or compute_at it first")
        self.store_predicate = pred

    def _set_kind(self, iv: IterVar, kind: ir.ForKind, what: str) -> None:
        iv = self._require_leaf(iv, what)
        attr = self._attr(iv)
        if attr.kind not in (ir.ForKind.SERIAL, kind):
            raise ScheduleError(f"stage {self.name}: axis {iv.name} is already {attr.kind.value}, cannot {what} it")
        verb = {ir.ForKind.PARALLEL: "parallelize", ir.ForKind.VECTORIZED: "vectorize"}.get(kind)
        if verb is not None and iv.iter_type == "comm_reduce":
            raise ScheduleError(f"stage {self.name}: cannot {verb} the reduction axis {iv.name} (its iterations "
                                "accumulate into the same element); rfactor it or unroll it instead")
        attr.kind = kind

    def vectorize(self, iv: IterVar) -> None:
        self._set_kind(iv, ir.ForKind.VECTORIZED, "vectorize")

    def unroll(self, iv: IterVar) -> None:
        self._set_kind(iv, ir.ForKind.UNROLLED, "unroll")

    def parallel(self, iv: IterVar) -> None:
        self._set_kind(iv, ir.ForKind.PARALLEL, "parallel")

    def pragma(self, iv: IterVar, key: str | None = None, value: Any = None, *, pragma_type: str | None = None,
               pragma_value: Any = None) -> None:
        """Annotate the loop of ``iv`` with ``AttrStmt pragma_<key>`` (for passes and backends).
        TVM's keyword names ``pragma_type`` / ``pragma_value`` are accepted too."""
        key = pragma_type if key is None else key
        value = pragma_value if value is None else value
        iv = self._require_leaf(iv, "pragma")
        if not isinstance(key, str) or not key:
            raise ScheduleError(f"stage {self.name}: pragma key must be a non-empty string, got {key!r}")
        self._attr(iv).pragmas.append((key, value))

    def tensorize(self, iv: IterVar, intrin: Any) -> None:
        """Replace the loop nest from ``iv`` inwards by the tensor intrinsic ``intrin``."""
        from vtakit.compiler.te.tensor_intrin import TensorIntrin  # noqa: PLC0415

        iv = self._require_leaf(iv, "tensorize")
        if not isinstance(intrin, TensorIntrin):
            raise ScheduleError(f"stage {self.name}: tensorize needs a te.decl_tensor_intrin, got {intrin!r}")
        for other, a in self.iter_var_attrs.items():
            if a.tensor_intrin is not None and other is not iv:
                raise ScheduleError(f"stage {self.name}: axis {other.name} is already tensorized")
        self._attr(iv).tensor_intrin = intrin


class Schedule:
    """All stages of a computation, producers before consumers."""

    def __init__(self, ops: Sequence[Operation]) -> None:
        self.outputs: list[Operation] = list(ops)
        self.stages: list[Stage] = []
        self._stage_of: dict[Operation, Stage] = {}
        visiting: set[int] = set()

        def visit(op: Operation) -> None:
            if op in self._stage_of:
                return
            if id(op) in visiting:
                raise ScheduleError(f"cycle in the dataflow at {op.name}")
            visiting.add(id(op))
            for t in op.input_tensors:
                visit(t.op)
            stage = Stage(op, self)
            self.stages.append(stage)
            self._stage_of[op] = stage

        for op in self.outputs:
            visit(op)

    def __getitem__(self, key: Tensor | Operation) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        stage = self._stage_of.get(op)
        if stage is None:
            name = getattr(op, "name", repr(op))
            raise ScheduleError(f"{name} is not part of this schedule (stages: {[s.name for s in self.stages]})")
        return stage

    def stage_of_tensor(self, t: Tensor) -> Stage:
        return self[t]

    def consumers(self, stage: Stage) -> list[Stage]:
        return [s for s in self.stages if any(t.op is stage.tensor.op for t in s.inputs)]

    def _reads_transitively(self, consumer: Stage, producer: Stage) -> bool:
        todo, seen = [consumer], set()
        while todo:
            s = todo.pop()
            for t in s.inputs:
                if t.op is producer.tensor.op:
                    return True
                if id(t.op) not in seen:
                    seen.add(id(t.op))
                    todo.append(self[t])
        return False

    # ------------------------------------------------------------------ dataflow rewrites
    def _insert(self, stage: Stage, before: Stage | None = None, after: Stage | None = None) -> None:
        pos = self.stages.index(before) if before is not None else self.stages.index(after) + 1
        self.stages.insert(pos, stage)
        self._stage_of[stage.op] = stage

    def cache_read(self, tensor: Tensor, scope: str, readers: Tensor | Operation | Iterable) -> Tensor:
        """A copy of ``tensor`` in ``scope`` that the given ``readers`` read instead."""
        src = self[tensor]
        if isinstance(readers, (Tensor, Operation)):
            readers = [readers]
        reader_stages = [self[r] for r in readers]
        if not reader_stages:
            raise ScheduleError(f"cache_read of {tensor.name}: no readers given")
        for r in reader_stages:
            if not any(t.op is tensor.op for t in r.inputs):
                raise ScheduleError(f"cache_read of {tensor.name}: stage {r.name} does not read {tensor.name}")
        cache = compute(tensor.shape, lambda *i: tensor[i], name=f"{tensor.name}.{scope}")
        stage = Stage(cache.op, self)
        stage.scope = scope
        self._insert(stage, after=src)
        for r in reader_stages:
            r.body = _replace_tensor(r.body, tensor, cache)
            r._rewrite_op()
        return cache

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Tensor:
        """Factor the reduction of ``tensor`` over the reduction axis ``axis`` (a leaf of its stage,
        usually one half of a split) into a new stage that keeps ``axis`` as a data-parallel
        dimension (at position ``factor_axis``) and reduces over the other reduction loops; the
        original stage then reduces that dimension. The partial results can be computed in parallel."""
        stage = self[tensor]
        stage._require_leaf(axis, "rfactor")
        body = stage.body
        if not isinstance(body, ir.Reduce) or axis.iter_type != "comm_reduce":
            raise ScheduleError(f"stage {stage.name}: rfactor needs a reduction axis of a reduction, got {axis.name}")
        if not 0 <= factor_axis <= len(stage.axis):
            raise ScheduleError(f"stage {stage.name}: rfactor factor_axis must be in [0, {len(stage.axis)}], "
                                f"got {factor_axis}")
        # extents and values of the reduction iteration variables (all reduce domains are constant)
        extent: dict[IterVar, int] = {}
        for iv in stage.reduce_axis:
            if not isinstance(iv.dom.extent, ir.IntImm):
                raise ScheduleError(f"stage {stage.name}: rfactor needs constant reduction extents, "
                                    f"{iv.name} has {iv.dom.extent}")
            extent[iv] = iv.dom.extent.value
        for rel in stage.relations:
            if isinstance(rel, Split) and rel.parent in extent:
                e = extent[rel.parent]
                extent[rel.outer] = rel.nparts or -(-e // rel.factor)
                extent[rel.inner] = rel.factor or -(-e // rel.nparts)
            elif isinstance(rel, Fuse) and rel.outer in extent:
                extent[rel.fused] = extent[rel.outer] * extent[rel.inner]
        leaves = [iv for iv in stage.leaf_iter_vars if iv.iter_type == "comm_reduce"]
        kept = IterVar(Range(0, extent[axis]), ir.Var(f"{axis.name}.v"), "data_par")
        new_red = {iv: IterVar(Range(0, extent[iv]), ir.Var(iv.name), "comm_reduce") for iv in leaves if iv is not axis}
        value: dict[IterVar, ir.PrimExpr] = {iv: new_red[iv].var for iv in new_red}
        value[axis] = kept.var
        guards: list[ir.PrimExpr] = []
        for rel in reversed(stage.relations):
            if isinstance(rel, Split) and rel.parent in extent:
                value[rel.parent] = value[rel.outer] * extent[rel.inner] + value[rel.inner]
                if extent[rel.outer] * extent[rel.inner] != extent[rel.parent]:
                    guards.append(value[rel.parent] < extent[rel.parent])
            elif isinstance(rel, Fuse) and rel.outer in extent:
                value[rel.outer] = ir.FloorDiv.make(value[rel.fused], extent[rel.inner])
                value[rel.inner] = ir.FloorMod.make(value[rel.fused], extent[rel.inner])
        root_map = {iv.var: iv.dom.min + value[iv] for iv in stage.reduce_axis}
        cond = ir.substitute(body.condition, root_map)
        for g in guards:
            cond = g if isinstance(cond, ir.IntImm) and cond.value else ir.And(cond, g)
        dp_vars = [iv.var for iv in stage.axis]

        def fcompute(*idx: ir.Var) -> ir.PrimExpr:
            idx = list(idx)
            vmap: dict[ir.Var, Any] = {kept.var: idx.pop(factor_axis), **dict(zip(dp_vars, idx))}
            src = ir.substitute(ir.substitute(body.source, root_map), vmap)
            c = ir.substitute(cond, vmap)
            if new_red:
                return ir.Reduce(body.combiner, src, tuple(new_red.values()), c, None)
            if isinstance(c, ir.IntImm) and c.value:  # nothing left to reduce: a plain map
                return src
            return ir.Call(src.dtype, "if_then_else", (c, src, body.combiner.identity_element))

        names = [iv.name for iv in stage.axis]
        names.insert(factor_axis, kept.name)
        shape = list(tensor.shape)
        shape.insert(factor_axis, extent[axis])
        rf = compute(shape, _with_names(fcompute, names), name=f"{tensor.name}.rf")
        rstage = Stage(rf.op, self)
        self._insert(rstage, before=stage)
        v = IterVar(Range(0, extent[axis]), ir.Var(f"{axis.name}.v"), "comm_reduce")
        idx = [iv.var for iv in stage.axis]
        idx.insert(factor_axis, v.var)
        stage.body = ir.Reduce(body.combiner, rf[tuple(idx)], (v,), ir.IntImm("bool", 1), body.init)
        stage.reduce_axis = [v]
        dp = set(stage.axis)
        stage.relations = [r for r in stage.relations if (r.parent if isinstance(r, Split) else r.outer) not in extent]
        for r in stage.relations:
            dp.update((r.outer, r.inner) if isinstance(r, Split) else (r.fused,))
        stage.all_iter_vars = [iv for iv in stage.all_iter_vars if iv in dp] + [v]
        stage.leaf_iter_vars = [iv for iv in stage.leaf_iter_vars if iv in dp] + [v]
        stage.iter_var_attrs = {iv: a for iv, a in stage.iter_var_attrs.items() if iv in dp}
        stage._rewrite_op()
        return rf

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute ``tensor`` into a new stage in ``scope``; the original stage copies it out."""
        stage = self[tensor]
        stage._require_compute("cache_write")
        if stage.relations or stage.iter_var_attrs or stage.attach_type != "root":
            raise ScheduleError(f"stage {stage.name}: cache_write must come before other primitives on it")
        old_vars = [iv.var for iv in stage.axis]
        body = stage.body
        reduce_map: dict[IterVar, IterVar] = {}
        if isinstance(body, ir.Reduce):
            for iv in body.axis:
                reduce_map[iv] = IterVar(iv.dom, ir.Var(iv.name), "comm_reduce")

        def fcompute(*idx: ir.Var) -> ir.PrimExpr:
            vmap: dict[ir.Var, Any] = dict(zip(old_vars, idx))
            vmap.update({old.var: new.var for old, new in reduce_map.items()})
            b = ir.substitute(body, vmap)
            if isinstance(b, ir.Reduce):
                b = ir.Reduce(b.combiner, b.source, tuple(reduce_map[iv] for iv in body.axis), b.condition, b.init)
            return b

        cache = compute(tensor.shape, _with_names(fcompute, [iv.name for iv in stage.axis]),
                        name=f"{tensor.name}.{scope}")
        cstage = Stage(cache.op, self)
        cstage.scope = scope
        self._insert(cstage, before=stage)
        stage.body = cache[tuple(iv.var for iv in stage.axis)]
        stage.reduce_axis = []
        stage.all_iter_vars = list(stage.axis)
        stage.leaf_iter_vars = list(stage.axis)
        stage._rewrite_op()
        return cache


def _with_names(fn: Any, names: list[str]) -> Any:
    """``fn`` with positional parameters called ``names`` (compute() names its axes after them)."""
    def wrapper(*args: Any) -> Any:
        return fn(*args)

    wrapper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n.replace(".", "_"), inspect.Parameter.POSITIONAL_ONLY) for n in names])
    return wrapper


class _TensorReplacer(ir.IRMutator):
    def __init__(self, old: Tensor, new: Tensor) -> None:
        self.old, self.new = old, new

    def visit_ProducerLoad(self, node: ir.ProducerLoad) -> ir.PrimExpr:
        node = self.generic_visit(node)
        if node.producer is self.old:
            return ir.ProducerLoad(self.new, node.indices)
        return node


def _replace_tensor(expr: ir.PrimExpr, old: Tensor, new: Tensor) -> ir.PrimExpr:
    return _TensorReplacer(old, new).visit(expr)


def create_schedule(ops: Any) -> Schedule:
    """A schedule computing the given output operations (or tensors) with default loop nests."""
    items = ops if isinstance(ops, (list, tuple)) else [ops]
    out = []
    for o in items:
        if isinstance(o, Tensor):
            o = o.op
        if not isinstance(o, Operation):
            raise ScheduleError(f"create_schedule expects operations or tensors, got {o!r}")
        out.append(o)
    return Schedule(out)
