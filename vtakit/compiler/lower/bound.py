"""Bound inference: the loop domains of every stage and the region each attached stage computes.

Stages are visited from the outputs back. A root stage computes its whole tensor. A stage
attached with ``compute_at`` computes the union of what its consumers read per iteration of the
attach loop: loop variables enclosing the attach point stay symbolic (points), all others are
relaxed to their ranges, the consumers' index expressions are evaluated over those intervals, and
the result is clipped to the tensor's shape. Thread-bound variables are relaxed when the buffer's
storage rank is not above the thread's rank (TVM's ``NeedRelax``): a global buffer inside a
``vthread`` covers all threads, a ``local.*`` buffer is per thread.

A stage without an explicit scope gets one from the threads around its attach point (global
outside threads, shared under blockIdx only, local under threadIdx/vthread/cthread).

Leaf domains then follow the split/fuse relations downwards (splits round up; the tail is guarded
by a predicate), and each root axis gets its value as an expression of the leaf loop variables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from vtakit.compiler import ir
from vtakit.compiler.arith import Analyzer
from vtakit.compiler.te.expr import IterVar
from vtakit.compiler.te.schedule import Schedule, Split, Stage
from vtakit.compiler.te.tensor import input_tensors
from vtakit.errors import CompileError, ScheduleError

__all__ = ["StageInfo", "infer_bounds", "scope_rank", "thread_rank", "eval_interval"]

Interval = tuple[ir.PrimExpr, ir.PrimExpr]


def scope_rank(scope: str) -> int:
    """TVM's storage rank: global 0, shared 1, warp 2, local (and tagged local.*) 3."""
    head = scope.split(".")[0]
    return {"global": 0, "shared": 1, "warp": 2, "local": 3}.get(head, 3)


def thread_rank(tag: str) -> int:
    """TVM's thread rank: blockIdx 0; threadIdx, vthread and cthread 1."""
    return 0 if tag.startswith("blockIdx") else 1


@dataclass
class StageInfo:
    """What lowering needs to know about one (non-inline, compute) stage."""

    stage: Stage
    body: ir.PrimExpr
    root_min: dict[IterVar, ir.PrimExpr] = field(default_factory=dict)   # per root axis (incl. reduce)
    extent: dict[IterVar, ir.PrimExpr] = field(default_factory=dict)     # per iter var; all mins are 0
    offset: dict[IterVar, ir.PrimExpr] = field(default_factory=dict)     # per iter var, in leaf loop vars
    loop_var: dict[IterVar, ir.Var] = field(default_factory=dict)        # per leaf
    predicates: list[ir.PrimExpr] = field(default_factory=list)
    region: list[Interval] = field(default_factory=list)                 # (min, extent) per output dim
    buffer_shape: list[Any] = field(default_factory=list)               # ints, or loop-invariant exprs
    scope: str = "global"
    scope_vars: list[ir.Var] = field(default_factory=list)               # loops enclosing the attach point

    def root_value(self, iv: IterVar) -> ir.PrimExpr:
        return self.root_min[iv] + self.offset[iv]

    def is_reduce_leaf(self, iv: IterVar) -> bool:
        return iv.iter_type == "comm_reduce"


# ---------------------------------------------------------------------------- intervals
def eval_interval(e: ir.PrimExpr, dom: dict[ir.Var, Interval], an: Analyzer) -> Interval | None:
    """Symbolic ``(lo, hi)`` (inclusive) of ``e`` with the variables in ``dom`` relaxed; None if unknown."""
    def ev(x: ir.PrimExpr) -> Interval | None:
        if isinstance(x, ir.IntImm):
            return x, x
        if not isinstance(x, ir.Var) and not ir.uses_var(x, dom):
            # a point: without this, the rules below rebuild its bounds as two distinct (equal)
            # nodes, which the identity test of FloorMod/Mul takes for a range, so a per-thread
            # buffer indexed by ``floormod(fused // 56, 56)`` spanned the whole axis
            return x, x
        if isinstance(x, ir.Var):
            if x in dom:
                lo, hi = dom[x]
                a, b = ev(lo), ev(hi)
                if a is None or b is None:
                    return None
                return a[0], b[1]
            return x, x
        if not ir.is_int(x.dtype):
            return None
        if isinstance(x, ir.Add):
            a, b = ev(x.a), ev(x.b)
            return None if a is None or b is None else (a[0] + b[0], a[1] + b[1])
        if isinstance(x, ir.Sub):
            a, b = ev(x.a), ev(x.b)
            return None if a is None or b is None else (a[0] - b[1], a[1] - b[0])
        if isinstance(x, ir.Mul):
            a, b = ev(x.a), ev(x.b)
            if a is None or b is None:
                return None
            for p, q in ((a, b), (b, a)):
                if isinstance(q[0], ir.IntImm) and q[0] is q[1] or _same(q):
                    c = an.simplify(q[0])
                    if isinstance(c, ir.IntImm):
                        return (p[0] * c, p[1] * c) if c.value >= 0 else (p[1] * c, p[0] * c)
            if _same(a) and _same(b):
                return x, x
            return None
        if isinstance(x, (ir.FloorDiv, ir.Div)) and isinstance(x.b, ir.IntImm) and x.b.value > 0:
            a = ev(x.a)
            if a is None:
                return None
            if isinstance(x, ir.Div) and an.const_int_bound(a[0])[0] < 0:
                return None
            return ir.FloorDiv(a[0], x.b), ir.FloorDiv(a[1], x.b)
        if isinstance(x, (ir.FloorMod, ir.Mod)) and isinstance(x.b, ir.IntImm) and x.b.value > 0:
            a = ev(x.a)
            if a is None:
                return None
            if _same(a):
                return x, x
            if isinstance(x, ir.Mod) and an.const_int_bound(a[0])[0] < 0:
                return None
            return ir.IntImm(x.dtype, 0), ir.IntImm(x.dtype, x.b.value - 1)
        if isinstance(x, (ir.Min, ir.Max)):
            a, b = ev(x.a), ev(x.b)
            if a is None or b is None:
                return None
            return type(x)(a[0], b[0]), type(x)(a[1], b[1])
        if isinstance(x, ir.Select) or (isinstance(x, ir.Call) and x.op == "if_then_else"):
            t, f = (x.true_value, x.false_value) if isinstance(x, ir.Select) else x.args[1:]
            a, b = ev(t), ev(f)
            if a is None or b is None:
                return None
            return ir.Min(a[0], b[0]), ir.Max(a[1], b[1])
        if isinstance(x, ir.Cast) and ir.is_int(x.value.dtype):
            a = ev(x.value)
            return None if a is None else (ir.Cast(x.dtype, a[0]) if a[0].dtype != x.dtype else a[0],
                                           ir.Cast(x.dtype, a[1]) if a[1].dtype != x.dtype else a[1])
        if not ir.uses_var(x, dom):
            return x, x
        return None

    def _same(iv: Interval) -> bool:
        return iv[0] is iv[1]

    return ev(e)


def _minus(hi: ir.PrimExpr, lo: ir.PrimExpr) -> ir.PrimExpr:
    """``hi - lo``, pushed into min/max so the simplifier can cancel terms."""
    if isinstance(hi, (ir.Min, ir.Max)):
        return type(hi)(_minus(hi.a, lo), _minus(hi.b, lo))
    return hi - lo


# ---------------------------------------------------------------------------- the pass
def infer_bounds(sch: Schedule, bodies: dict[Stage, ir.PrimExpr]) -> dict[Stage, StageInfo]:
    """Domains of every non-inline compute stage. ``bodies`` are the stage bodies after inlining."""
    infos: dict[Stage, StageInfo] = {}
    consumers: dict[Stage, list[Stage]] = {s: [] for s in bodies}
    for s, body in bodies.items():
        for t in input_tensors(body):
            p = sch[t]
            if p in consumers:
                consumers[p].append(s)
    var_extent: dict[ir.Var, ir.PrimExpr] = {}   # every leaf loop variable -> its extent
    var_tag: dict[ir.Var, str] = {}              # thread-bound loop variables -> tag
    an = Analyzer()

    for stage in reversed([s for s in sch.stages if s in bodies]):
        info = StageInfo(stage, bodies[stage])
        info.scope_vars = _scope_vars(stage, infos)
        info.scope = stage.scope or _default_scope(info.scope_vars, var_tag)
        if stage.attach_type == "scope":  # lowering checked: the parent is computed and reads this stage
            _check_rebound_threads(info, var_tag)
            _infer_region(info, consumers[stage], infos, var_extent, var_tag, an)
        else:
            info.region = [(ir.IntImm("int32", 0), ir.convert(n)) for n in stage.tensor.shape]
            info.buffer_shape = list(stage.tensor.shape)  # may hold shape variables
        for iv, (mn, ext) in zip(stage.axis, info.region):
            info.root_min[iv], info.extent[iv] = mn, ext
        for iv in stage.reduce_axis:
            info.root_min[iv], info.extent[iv] = iv.dom.min, iv.dom.extent
        _pass_down(info, an)
        _pass_up(info, an)
        for iv, v in info.loop_var.items():
            # a thread variable bound by several stages (a cooperative fetch re-binding the threads
            # of the loop it is attached in) ranges over the widest of their extents
            ext, hi = info.extent[iv], max(an.const_int_bound(info.extent[iv])[1] - 1, 0)
            if v in var_extent and var_extent[v] is not ext:
                ext = an.simplify(ir.Max(var_extent[v], ext))
                hi = max(hi, an.bounds[v][1])
            var_extent[v] = ext
            an.bind(v, 0, hi)
            attr = stage.iter_var_attrs.get(iv)
            if attr is not None and attr.bind_thread is not None:
                var_tag[v] = attr.bind_thread.thread_tag
        infos[stage] = info
    return infos


def _check_rebound_threads(info: StageInfo, var_tag: dict[ir.Var, str]) -> None:
    """A stage attached inside a thread loop may bind that thread again only to share work on a
    buffer common to the threads (a cooperative fetch into shared memory); a per-thread buffer
    has nothing to share."""
    stage = info.stage
    enclosing = {var_tag[v] for v in info.scope_vars if v in var_tag}
    for iv in stage.leaf_iter_vars:
        attr = stage.iter_var_attrs.get(iv)
        tag = attr.bind_thread.thread_tag if attr is not None and attr.bind_thread is not None else None
        if tag in enclosing and scope_rank(info.scope) > thread_rank(tag):
            raise ScheduleError(f"stage {stage.name}: axis {iv.name} is bound to {tag}, which already encloses its "
                                f"attach point, but its {info.scope} buffer is private to each {tag} thread; "
                                "bind only stages in a memory shared by those threads (e.g. \"shared\")")


def _default_scope(scope_vars: list[ir.Var], var_tag: dict[ir.Var, str]) -> str:
    """TVM's InferStorageScope: by the highest thread rank around the attach point."""
    rank = max((thread_rank(var_tag[v]) for v in scope_vars if v in var_tag), default=-1)
    return ("global", "shared", "local")[rank + 1]


def _scope_vars(stage: Stage, infos: dict[Stage, StageInfo]) -> list[ir.Var]:
    if stage.attach_type != "scope":
        return []
    parent = infos[stage.attach_stage]
    leaves = stage.attach_stage.leaf_iter_vars
    upto = leaves[:leaves.index(stage.attach_ivar) + 1]
    return parent.scope_vars + [parent.loop_var[iv] for iv in upto if iv in parent.loop_var]


def _infer_region(info: StageInfo, consumers: list[Stage], infos: dict[Stage, StageInfo],
                  var_extent: dict[ir.Var, ir.PrimExpr], var_tag: dict[ir.Var, str], an: Analyzer) -> None:
    stage = info.stage
    points = set(info.scope_vars)
    rank = scope_rank(info.scope)
    for v in list(points):
        if v in var_tag and rank <= thread_rank(var_tag[v]):
            points.discard(v)
    one = ir.IntImm("int32", 1)
    dom: dict[ir.Var, Interval] = {v: (ir.IntImm("int32", 0), ext - one)
                                   for v, ext in var_extent.items() if v not in points}
    shape = stage.tensor.shape
    lo: list[ir.PrimExpr | None] = [None] * len(shape)
    hi: list[ir.PrimExpr | None] = [None] * len(shape)
    unknown = [False] * len(shape)
    for c in consumers:
        cinfo = infos[c]
        cdom = dict(dom)
        rename: dict[ir.Var, ir.Var] = {}
        for iv in c.axis + c.reduce_axis:
            rename[iv.var] = fresh = ir.Var(iv.var.name, iv.var.dtype)
            off = eval_interval(cinfo.offset[iv], dom, an)
            ext = cinfo.extent[iv]
            if off is None:
                cdom[fresh] = (cinfo.root_min[iv], cinfo.root_min[iv] + ext - one)
            else:
                cdom[fresh] = (cinfo.root_min[iv] + ir.Max(off[0], ir.IntImm("int32", 0)),
                                cinfo.root_min[iv] + ir.Min(off[1], ext - one))
        for load in _loads_of(cinfo.body, stage.tensor):
            for k, idx in enumerate(load.indices):
                r = eval_interval(ir.substitute(idx, rename), cdom, an)
                if r is None:
                    unknown[k] = True
                    continue
                lo[k] = r[0] if lo[k] is None else ir.Min(lo[k], r[0])
                hi[k] = r[1] if hi[k] is None else ir.Max(hi[k], r[1])
    info.region, info.buffer_shape = [], []
    for k, n in enumerate(shape):
        if unknown[k] or lo[k] is None:
            mn, mx = ir.IntImm("int32", 0), ir.convert(n) - one
        else:
            mn = an.simplify(ir.Max(an.simplify(lo[k]), ir.IntImm("int32", 0)))
            mx = an.simplify(ir.Min(an.simplify(hi[k]), ir.convert(n) - one))
        ext = an.simplify(_minus(mx, mn) + one)
        info.region.append((mn, ext))
        info.buffer_shape.append(_buffer_extent(ext, an, stage, k, var_extent))


def _buffer_extent(ext: ir.PrimExpr, an: Analyzer, stage: Stage, dim: int,
                   loop_vars: dict[ir.Var, ir.PrimExpr]) -> Any:
    """The allocated extent of one dimension of an attached buffer: a constant upper bound of
    ``ext`` when there is one, else a loop-invariant upper bound (shape variables only, as TVM
    allocates ``n`` elements when the region is the whole of a symbolic dimension)."""
    forms = _bounding_forms(ext, True)
    ub = min([an.const_int_bound(ext)[1]] + [an.const_int_bound(an.simplify(c))[1] for c in forms[1:]])
    bounded = ub != float("inf") and ub < 2 ** 31 - 1  # by more than the dtype range
    # A shape variable's only constant bound is its dtype's range, so a constant that still depends on
    # one (``(m + 2) // 3`` <= 715,827,883) is no allocation size: take the loop-invariant form then.
    if bounded and not ir.uses_var(ext, lambda v: v not in loop_vars and an.const_int_bound(v)[1] >= 2 ** 31 - 1):
        return max(int(ub), 0)
    invariant = _invariant_upper(ext, loop_vars)
    if invariant is None and bounded:
        return max(int(ub), 0)
    if invariant is None:
        raise CompileError(f"stage {stage.name}: cannot bound the extent {ext} of dimension {dim} by a constant "
                           "or a loop-invariant expression")
    return invariant


_MAX_FORMS = 64


def _bounding_forms(e: ir.PrimExpr, upper: bool) -> list[ir.PrimExpr]:
    """Expressions each ``>= e`` (``upper``) or each ``<= e`` (lower), ``e`` itself first.

    ``const_int_bound`` bounds the terms of a sum independently, so the extent of a tile clipped
    at the end of its axis, ``min(2*xo + 1, 8)*2 - 4*xo + 3`` (at most 5), comes out as 19. Since
    ``min(a, b) <= a`` and the sum grows with the min, replacing it by either side gives an upper
    bound whose terms cancel (``2*(2*xo + 1) - 4*xo + 3 = 5``); likewise ``max(a, b) >= a`` in a
    lower bound. The caller takes the tightest constant bound over the forms."""
    forms = [e]
    if isinstance(e, (ir.Add, ir.Sub)):
        a = _bounding_forms(e.a, upper)
        b = _bounding_forms(e.b, upper if isinstance(e, ir.Add) else not upper)
        pairs = ((x, y) for x in a for y in b if x is not e.a or y is not e.b)
        forms += [type(e)(x, y) for x, y in islice(pairs, _MAX_FORMS)]
    elif isinstance(e, ir.Mul) and (isinstance(e.a, ir.IntImm) or isinstance(e.b, ir.IntImm)):
        c, x = (e.a, e.b) if isinstance(e.a, ir.IntImm) else (e.b, e.a)
        forms += [ir.Mul(y, c) for y in _bounding_forms(x, upper if c.value >= 0 else not upper)[1:]]
    elif isinstance(e, ir.FloorDiv) and isinstance(e.b, ir.IntImm) and e.b.value > 0:
        forms += [ir.FloorDiv(y, e.b) for y in _bounding_forms(e.a, upper)[1:]]
    elif isinstance(e, ir.Min if upper else ir.Max):  # either side bounds it
        forms += _bounding_forms(e.a, upper) + _bounding_forms(e.b, upper)
    return forms[:_MAX_FORMS]


def _invariant_upper(ext: ir.PrimExpr, loop_vars: dict[ir.Var, ir.PrimExpr]) -> ir.PrimExpr | None:
    if not ir.uses_var(ext, loop_vars):
        return ext
    if isinstance(ext, ir.Min):  # min(a, b) <= either side
        a = _invariant_upper(ext.a, loop_vars)
        return a if a is not None else _invariant_upper(ext.b, loop_vars)
    return None


def _loads_of(body: ir.PrimExpr, tensor: Any) -> list[ir.ProducerLoad]:
    out: list[ir.ProducerLoad] = []

    def visit(n: Any) -> None:
        if isinstance(n, ir.ProducerLoad) and n.producer is tensor:
            out.append(n)

    ir.walk(body, visit)
    return out


def _pass_down(info: StageInfo, an: Analyzer) -> None:
    """Extents of split/fuse results from their parents'."""
    ext = info.extent
    for rel in info.stage.relations:
        if isinstance(rel, Split):
            e = ext[rel.parent]
            if rel.factor is not None:
                f = ir.IntImm("int32", rel.factor)
                ext[rel.outer] = an.simplify(ir.FloorDiv(e + (rel.factor - 1), f))
                ext[rel.inner] = f
            else:
                n = ir.IntImm("int32", rel.nparts)
                ext[rel.outer] = n
                ext[rel.inner] = an.simplify(ir.FloorDiv(e + (rel.nparts - 1), n))
        else:  # an empty region (a consumer's tail iteration) may have a negative extent: 0 parts
            ext[rel.fused] = an.simplify(_nonnegative(ext[rel.outer], an) * _nonnegative(ext[rel.inner], an))


def _nonnegative(e: ir.PrimExpr, an: Analyzer) -> ir.PrimExpr:
    return e if an.const_int_bound(e)[0] >= 0 else ir.Max(e, ir.IntImm(e.dtype, 0))


def _pass_up(info: StageInfo, an: Analyzer) -> None:
    """Offsets of every iter var in terms of the leaf loop variables, and the tail predicates."""
    stage = info.stage
    for iv in stage.leaf_iter_vars:
        attr = stage.iter_var_attrs.get(iv)
        v = attr.bind_thread.var if attr is not None and attr.bind_thread is not None else iv.var
        info.loop_var[iv] = v
        info.offset[iv] = v
    scope = Analyzer(an.bounds)  # loops of other stages; this stage's own loops take precedence
    scope.bounds.update({v: (0, max(an.const_int_bound(info.extent[iv])[1] - 1, 0))
                         for iv, v in info.loop_var.items()})
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            inner_ext = info.extent[rel.inner]
            value = info.offset[rel.outer] * inner_ext + info.offset[rel.inner]
            info.offset[rel.parent] = scope.simplify(value)
            parent_ext = info.extent[rel.parent]
            covered = info.extent[rel.outer] * inner_ext
            if not scope.can_prove(ir.EQ(scope.simplify(covered - parent_ext), ir.IntImm("int32", 0))):
                info.predicates.append(ir.LT(info.offset[rel.parent], parent_ext))
        else:
            fused = info.offset[rel.fused]
            info.offset[rel.outer] = scope.simplify(ir.FloorDiv(fused, info.extent[rel.inner]))
            info.offset[rel.inner] = scope.simplify(ir.FloorMod(fused, info.extent[rel.inner]))
