"""Tensorize lowering (TVM's ``MakeTensorize``, reference/tvm_compiler.md §2.2-2.3).

1. The region: leaf loops from the tensorize axis inwards are relaxed, outer ones are points;
   every root axis must cover a constant extent (no tail predicates inside the region).
2. Matching: the stage's axes align with the intrinsic's from the innermost (extra outer axes
   must have extent 1); the stage body, re-expressed in the intrinsic's axes with each input read
   relative to its region, must equal the intrinsic's body structurally after simplification.
3. Binding: each intrinsic buffer becomes a view of the real buffer (same data, the real strides,
   element offset of the region) and its offset variable, stride variables and data are
   substituted in the intrinsic's statements; ``offset_factor`` and scopes are checked.
4. Emission: the body alone when the whole reduction is inside the region; otherwise
   ``reduce_reset`` in an init nest and ``reduce_update`` in the update nest, or, without a reset,
   ``if (outer reduction at its first iteration) body else update``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vtakit.compiler import ir
from vtakit.compiler.arith import Analyzer
from vtakit.compiler.lower.bound import StageInfo, eval_interval
from vtakit.compiler.lower.flatten import buffer_strides
from vtakit.compiler.te.tensor import Tensor, input_tensors
from vtakit.errors import CompileError, ScheduleError

if TYPE_CHECKING:
    from vtakit.compiler.lower.schedule_ops import NestBuilder

__all__ = ["make_tensorize"]


class _LoadRebaser(ir.IRMutator):
    """Input reads become reads of the intrinsic's placeholders, relative to the region start."""

    def __init__(self, tensor_map: dict[Tensor, tuple[Tensor, list[ir.PrimExpr]]], an: Analyzer) -> None:
        self.tensor_map, self.an = tensor_map, an

    def visit_ProducerLoad(self, node: ir.ProducerLoad) -> ir.PrimExpr:
        target, mins = self.tensor_map[node.producer]
        idx = [self.an.simplify(i - m) for i, m in zip(node.indices, mins)]
        drop = len(idx) - target.ndim
        return ir.ProducerLoad(target, tuple(idx[drop:]))


def make_tensorize(builder: "NestBuilder", info: StageInfo, tloc: int) -> ir.Stmt:
    """The loop nest of a stage whose leaf ``tloc`` is tensorized: outer loops, then the
    intrinsic's body (or reset / update nests, reference/tvm_compiler.md §2.3) with its buffers
    bound to the tensor regions."""
    st = info.stage
    leaves = st.leaf_iter_vars
    tiv = leaves[tloc]
    intrin = st.iter_var_attrs[tiv].tensor_intrin
    where = f"stage {st.name}: tensorize at axis {tiv.name} with {intrin.name}"
    outer, inner = leaves[:tloc], leaves[tloc:]
    inner_vars = {info.loop_var[iv] for iv in inner}
    for iv in inner:
        attr = st.iter_var_attrs.get(iv)
        if attr is not None and attr.bind_thread is not None:
            raise ScheduleError(f"{where}: axis {iv.name} inside the tensorized region is bound to a thread")
    for p in info.predicates:
        if ir.uses_var(p, inner_vars):
            raise ScheduleError(f"{where}: the tensorized region must divide its axes evenly, but {p} guards a tail")

    # 1. region of every root axis
    one = ir.IntImm("int32", 1)
    dom = {info.loop_var[iv]: (ir.IntImm("int32", 0), info.extent[iv] - one) for iv in inner}
    an = Analyzer({v: b for v, b in _builder_bounds(builder).items()})
    region: dict[Any, tuple[ir.PrimExpr, int]] = {}
    for iv in st.axis + st.reduce_axis:
        r = eval_interval(info.offset[iv], dom, an)
        ext = an.simplify(r[1] - r[0] + 1) if r is not None else None
        if ext is None or ir.int_value(ext) is None:
            raise ScheduleError(f"{where}: axis {iv.name} does not cover a constant extent in the tensorized region")
        region[iv] = (an.simplify(r[0]), ext.value)

    # 2. match the axes
    iop = intrin.op
    stage_red = isinstance(info.body, ir.Reduce)
    intr_red = isinstance(iop.body, ir.Reduce)
    if stage_red != intr_red:
        raise ScheduleError(f"{where}: the compute {'is' if stage_red else 'is not'} a reduction but the intrinsic "
                            f"{'is' if intr_red else 'is not'}")
    vmap: dict[ir.Var, ir.PrimExpr] = {}
    ibounds: dict[ir.Var, tuple[int, int]] = {}
    for kind, s_axes, i_axes in (("axis", st.axis, iop.axis), ("reduce axis", st.reduce_axis, iop.reduce_axis)):
        if len(i_axes) > len(s_axes):
            raise ScheduleError(f"{where}: the intrinsic has {len(i_axes)} {kind} dimensions, the stage only "
                                f"{len(s_axes)}")
        extra = len(s_axes) - len(i_axes)
        for k, s_iv in enumerate(s_axes):
            mn, ext = region[s_iv]
            if k < extra:
                if ext != 1:
                    raise ScheduleError(f"{where}: {kind} {s_iv.name} has extent {ext} in the region but the "
                                        f"intrinsic has no matching {kind}")
                vmap[s_iv.var] = an.simplify(info.root_min[s_iv] + mn)
                continue
            i_iv = i_axes[k - extra]
            i_ext = ir.int_value(i_iv.dom.extent)
            if i_ext != ext:
                raise ScheduleError(f"{where}: {kind} {s_iv.name} covers {ext} but the intrinsic's {i_iv.name} has "
                                    f"extent {i_iv.dom.extent}")
            vmap[s_iv.var] = an.simplify(info.root_min[s_iv] + mn) + i_iv.var
            ibounds[i_iv.var] = (0, ext - 1)
    ian = Analyzer(dict(an.bounds))
    ian.bounds.update(ibounds)

    # input regions and the rewritten body
    s_inputs = input_tensors(info.body)
    if len(s_inputs) != len(intrin.inputs):
        raise ScheduleError(f"{where}: the compute reads {len(s_inputs)} tensors "
                            f"({', '.join(t.name for t in s_inputs)}) but the intrinsic {len(intrin.inputs)}")
    body = ir.substitute(info.body, vmap)
    idom = {v: (ir.IntImm("int32", lo), ir.IntImm("int32", hi)) for v, (lo, hi) in ibounds.items()}
    tensor_map: dict[Tensor, tuple[Tensor, list[ir.PrimExpr]]] = {}
    input_regions: list[tuple[Tensor, list[ir.PrimExpr], list[int]]] = []
    for t, it in zip(s_inputs, intrin.inputs):
        loads = []
        ir.walk(body, lambda n: loads.append(n) if isinstance(n, ir.ProducerLoad) and n.producer is t else None)
        lo: list[ir.PrimExpr] = []
        ext: list[int] = []
        for d in range(t.ndim):
            ivs = [eval_interval(ld.indices[d], idom, ian) for ld in loads]
            if any(r is None for r in ivs):
                raise ScheduleError(f"{where}: cannot determine the region of {t.name} read by the compute")
            mins = [ian.simplify(r[0]) for r in ivs]
            maxs = [ian.simplify(r[1]) for r in ivs]
            m = mins[0]
            for other in mins[1:]:
                m = ian.simplify(ir.Min(m, other))
            x = maxs[0]
            for other in maxs[1:]:
                x = ian.simplify(ir.Max(x, other))
            e = ian.simplify(x - m + 1)
            if ir.int_value(e) is None:
                raise ScheduleError(f"{where}: the region of {t.name} has non-constant extent {e}")
            lo.append(m)
            ext.append(e.value)
        _check_fit(where, t.name, ext, it.shape)
        tensor_map[t] = (it, lo)
        input_regions.append((t, lo, ext))
    rebased = _LoadRebaser(tensor_map, ian).visit(body)
    _verify_body(where, rebased, iop.body, intrin, ian)

    # 3. bind buffers
    vsub: dict[ir.Var, Any] = {}
    bsub: dict[ir.Buffer, ir.Buffer] = {}
    for (t, lo, _), ib in zip(input_regions, intrin.buffers[:-1]):
        real, real_mins = builder.buffers[t]
        rel = [an.simplify(a - b) for a, b in zip(lo, real_mins)]
        _bind(where, ib, real, rel, vsub, bsub, an)
    real_out, _ = builder.buffers[st.tensor]
    out_rel = [an.simplify(region[iv][0]) for iv in st.axis]
    _check_fit(where, st.name, [region[iv][1] for iv in st.axis], intrin.buffers[-1].shape)
    _bind(where, intrin.buffers[-1], real_out, out_rel, vsub, bsub, an)

    def bound(s: ir.Stmt | None) -> ir.Stmt | None:
        return None if s is None else ir.substitute(s, vsub, bsub)

    body_s, reset_s, update_s = bound(intrin.body), bound(intrin.reduce_reset), bound(intrin.reduce_update)

    # 4. emit
    outer_preds = [p for p in info.predicates if not ir.uses_var(p, inner_vars)]
    reduce_outer = [iv for iv in outer if iv.iter_type == "comm_reduce"]
    guard = _guard_fn(outer_preds)
    if not reduce_outer:
        if body_s is None:
            raise ScheduleError(f"{where}: the intrinsic has no body, which the whole reduction inside the region needs")
        return builder.nest(st, outer, guard(body_s))
    if update_s is None:
        raise ScheduleError(f"{where}: reduction axes {[iv.name for iv in reduce_outer]} lie outside the tensorized "
                            "region, so the intrinsic needs reduce_update (and reduce_reset or body)")
    common = next(k for k, iv in enumerate(outer) if iv.iter_type == "comm_reduce")
    red_vars = {info.loop_var[iv] for iv in reduce_outer}
    if reset_s is not None:
        init_preds = [p for p in outer_preds if not ir.uses_var(p, red_vars)]
        init = builder.nest(st, [iv for iv in outer[common:] if iv.iter_type != "comm_reduce"],
                            _guard_fn(init_preds)(reset_s), attach=False)
        update = builder.nest(st, outer[common:], guard(update_s))
        return builder.nest(st, outer[:common], ir.seq(init, update))
    if body_s is None:
        raise ScheduleError(f"{where}: the intrinsic needs a body or a reduce_reset to start the reduction")
    first = None
    for v in red_vars:
        c = ir.GT(v, ir.IntImm(v.dtype, 0))
        first = c if first is None else ir.Or(first, c)
    return builder.nest(st, outer, guard(ir.IfThenElse(first, update_s, body_s)))


def _builder_bounds(builder: "NestBuilder") -> dict[ir.Var, tuple[int, int]]:
    an = Analyzer()
    out = {}
    for info in builder.infos.values():
        for iv, v in info.loop_var.items():
            ub = an.const_int_bound(info.extent[iv])[1]
            out[v] = (0, max(int(ub) - 1, 0) if ub != float("inf") else 2 ** 31 - 1)
    return out


def _guard_fn(preds: list[ir.PrimExpr]):
    def guard(s: ir.Stmt) -> ir.Stmt:
        cond = None
        for p in preds:
            cond = p if cond is None else ir.And(cond, p)
        return s if cond is None else ir.IfThenElse(cond, s)

    return guard


def _check_fit(where: str, name: str, ext: list[int], shape: tuple) -> None:
    ishape = [ir.int_value(ir.convert(s)) for s in shape]
    extra = len(ext) - len(ishape)
    if extra < 0 or any(e != 1 for e in ext[:extra]) or list(ext[extra:]) != ishape:
        raise ScheduleError(f"{where}: the region {ext} of {name} does not fit the intrinsic's buffer shape {ishape}")


def _verify_body(where: str, stage_body: ir.PrimExpr, intr_body: ir.PrimExpr, intrin: Any, an: Analyzer) -> None:
    if isinstance(stage_body, ir.Reduce):
        lhs, rhs = ir.Var("lhs", stage_body.dtype), ir.Var("rhs", stage_body.dtype)
        same_comb = ir.structural_equal(an.simplify(stage_body.combiner.combine(lhs, rhs)),
                                        an.simplify(intr_body.combiner.combine(lhs, rhs)))
        a, b = an.simplify(stage_body.source), an.simplify(intr_body.source)
        conds = ir.structural_equal(an.simplify(stage_body.condition), an.simplify(intr_body.condition))
        ok = same_comb and conds and ir.structural_equal(a, b)
    else:
        a, b = an.simplify(stage_body), an.simplify(intr_body)
        ok = ir.structural_equal(a, b)
    if not ok:
        raise ScheduleError(f"{where}: failed to match the compute with the intrinsic: the stage computes {a} "
                            f"({stage_body.dtype}) where {intrin.name} computes {b} ({intr_body.dtype})")


def _bind(where: str, ib: ir.Buffer, real: ir.Buffer, rel: list[ir.PrimExpr], vsub: dict, bsub: dict,
          an: Analyzer) -> None:
    """Make ``ib`` a view of ``real`` starting at the (relative) region start ``rel``."""
    if ib.scope not in ("global", "") and ib.scope != real.scope:
        raise ScheduleError(f"{where}: the intrinsic expects {ib.name} in scope {ib.scope!r}, but {real.name} is "
                            f"in scope {real.scope!r} (use cache_read/cache_write or set_scope)")
    if ib.dtype != real.dtype:
        raise ScheduleError(f"{where}: the intrinsic's {ib.name} is {ib.dtype}, {real.name} is {real.dtype}")
    strides = buffer_strides(real)
    offset: ir.PrimExpr = real.elem_offset
    for r, s in zip(rel, strides):
        offset = offset + r * s
    offset = an.simplify(offset)
    view_strides = tuple(strides[len(strides) - ib.ndim:])
    if isinstance(ib.elem_offset, ir.Var):
        vsub[ib.elem_offset] = offset
        factor = ib.offset_factor
        if factor > 1 and not an.can_prove(ir.EQ(ir.FloorMod(offset, ir.IntImm("int32", factor)),
                                                 ir.IntImm("int32", 0))):
            raise CompileError(f"{where}: buffer {ib.name} is bound at element offset {offset} of {real.name}, "
                               f"which is not provably a multiple of its offset_factor {factor}")
    elif not an.can_prove(ir.EQ(offset, ib.elem_offset)):
        raise CompileError(f"{where}: buffer {ib.name} has the fixed element offset {ib.elem_offset} but is bound at "
                           f"{offset} of {real.name}; declare it with offset_factor > 0")
    if ib.strides:
        for k, (want, have) in enumerate(zip(ib.strides, view_strides)):
            if isinstance(want, ir.Var):
                if want in vsub and not an.can_prove(ir.EQ(vsub[want], have)):
                    raise CompileError(f"{where}: stride variable {want.name} of {ib.name} would be {have} here but "
                                       f"is {vsub[want]} for another buffer; give each buffer its own variables")
                vsub[want] = have
            elif not an.can_prove(ir.EQ(want, have)):
                raise CompileError(f"{where}: buffer {ib.name} declares stride {want} for dimension {k}, "
                                   f"but {real.name} has stride {have} there")
    else:
        compact = buffer_strides(ir.Buffer("_", ib.shape))
        for k, (want, have) in enumerate(zip(compact, view_strides)):
            if k == 0 and ib.ndim > 0 and ir.int_value(ib.shape[0]) == 1:
                continue
            if not an.can_prove(ir.EQ(want, have)):
                raise CompileError(f"{where}: buffer {ib.name} is compact but the region of {real.name} has "
                                   f"stride {have} in dimension {k}; declare strides=[te.var(...), ...] in decl_buffer")
    vsub[ib.data] = real.data
    bsub[ib] = ir.Buffer(ib.name, ib.shape, ib.dtype, real.scope, data=real.data,
                         strides=view_strides, elem_offset=offset, offset_factor=ib.offset_factor)
