"""InjectDMAIntrin: ``dma_copy`` loop nests become 2-D LOAD/STORE intrinsics (reference/vta.md §6).

A copy into an SRAM scope (``local.inp_buffer``/``wgt_buffer``/``acc_buffer``) from a global
buffer becomes ``vta.load_buffer_2d`` on the load queue (INP, WGT) or the compute queue (ACC;
ACC_8BIT when DRAM holds int8); a copy from the accumulator scope to a global int8 buffer
becomes ``vta.store_buffer_2d`` on the store queue. The pass derives everything from the nest:

* the innermost loops must walk one SRAM entry (a tensor tile of BATCH x BLOCK scalars)
  contiguously on both sides; the remaining loops step in whole entries;
* those loops, ordered by their SRAM stride, merge where the DRAM side is contiguous too; the
  innermost two become the DMA's x (columns, DRAM stride one entry) and y (rows, stride
  ``x_stride``) dimensions, any further ones stay host loops that issue one DMA per iteration;
* one DMA fills a compact SRAM block, so a loop stepping further in SRAM than the block inside
  it (the rows of a partial tile, in the tail of a split that does not divide) is a host loop
  too, except that a load whose rows are wider in SRAM than its columns pads each row with
  zeros after the columns (``x_pad_1``) and stays one DMA;
* a copy whose value is ``if_then_else(cond, load, 0)`` (a padded tensor, e.g. ``topi.nn.pad``
  computed into the input buffer) has each conjunct of ``cond`` bound one of the y/x loops;
  the bounds become the DMA's zero padding before and after (expressions, evaluated per DMA).

Pointers are ``tvm_access_ptr`` calls with scalar offsets, so virtual-thread injection can shift
the SRAM side per thread; the code generator converts them to entry indices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vtakit.compiler import ir
from vtakit.compiler.arith import const_int_bound, linear_coefficients, simplify
from vtakit.compiler.vta.env import (ACC_SCOPE, LOAD_2D, QID_COMPUTE, QID_LOAD, QID_STORE, SCOPE_MEM, STORE_2D,
                                     VTA_AXIS, VTAEnv)
from vtakit.compiler.vta.nest import Loop, access_ptr, affine, perfect_nest, split_entry
from vtakit.errors import CompileError
from vtakit.hw.isa import MemId

_PAD_MAX = 15  # the 4-bit x_pad_1 field: row slack plus right padding wider than this is one DMA per row

__all__ = ["inject_dma_intrin"]


@dataclass
class _Dim:
    """A DMA dimension in SRAM entries: merged loops, extent, SRAM and DRAM steps."""

    loops: list[int]
    extent: int
    sram_step: int
    dram_step: int
    pad: tuple[ir.PrimExpr, ir.PrimExpr] | None = None   # valid range [lo, hi) of the loop, if padded
    padded_var: ir.Var | None = field(default=None)
    slack: int = 0    # SRAM entries after each run of this (column) dimension that the copy skips
    dram_at: ir.PrimExpr | None = None   # padded_var's value at the first DRAM entry read, if not the pad before


def _strip_casts(e: ir.PrimExpr) -> ir.PrimExpr:
    while isinstance(e, ir.Cast):
        e = e.value
    return e


def _is_zero(e: ir.PrimExpr) -> bool:
    e = simplify(_strip_casts(e))
    return isinstance(e, (ir.IntImm, ir.FloatImm)) and e.value == 0


def _pad_ranges(cond: ir.PrimExpr, loops: list[Loop], where: str) -> dict[ir.Var, list[ir.PrimExpr | None]]:
    """Per loop var, the valid range [lo, hi) stated by the padding condition."""
    out: dict[ir.Var, list[ir.PrimExpr | None]] = {}
    vars_ = [lp.var for lp in loops]
    for atom in ir.conjuncts(cond):
        if isinstance(atom, ir.IntImm) and atom.value:
            continue  # a bound that holds throughout (a peeled tail tile that reaches no padding)
        if not isinstance(atom, (ir.GE, ir.GT, ir.LE, ir.LT)):
            raise CompileError(f"{where}: cannot turn the padding condition {atom} into DMA padding; expected "
                               "comparisons of one loop variable with a bound")
        res = linear_coefficients(atom.a - atom.b, vars_)
        nz = [k for k, c in enumerate(res[0])] if res is not None else []
        nz = [k for k in nz if res[0][k] != 0]
        if res is None or len(nz) != 1 or abs(res[0][nz[0]]) != 1:
            raise CompileError(f"{where}: the padding condition {atom} must bound exactly one loop variable "
                               "with coefficient 1")
        k = nz[0]
        c, r = res[0][k], res[1]
        # c*v + r OP 0
        if c == 1:
            bound = {ir.GE: ("lo", -r), ir.GT: ("lo", 1 - r), ir.LE: ("hi", 1 - r), ir.LT: ("hi", -r)}[type(atom)]
        else:
            bound = {ir.GE: ("hi", r + 1), ir.GT: ("hi", r), ir.LE: ("lo", r), ir.LT: ("lo", r + 1)}[type(atom)]
        rng = out.setdefault(vars_[k], [None, None])
        side, value = bound
        idx = 0 if side == "lo" else 1
        value = simplify(value)
        if rng[idx] is None:
            rng[idx] = value
        else:
            rng[idx] = simplify(ir.Max(rng[idx], value) if idx == 0 else ir.Min(rng[idx], value))
    return out


def _clamp(e: ir.PrimExpr, extent: int) -> ir.PrimExpr:
    return simplify(ir.Max(ir.Min(e, ir.IntImm("int32", extent)), ir.IntImm("int32", 0)))


class _DMAInjector(ir.IRMutator):
    def __init__(self, env: VTAEnv) -> None:
        self.env = env

    def visit_AttrStmt(self, node: ir.AttrStmt) -> ir.Stmt:
        if node.key == f"pragma_{self.env.dma_copy}":
            return self.lower_copy(node.body)
        return self.generic_visit(node)

    # ------------------------------------------------------------------ one copy
    def lower_copy(self, body: ir.Stmt) -> ir.Stmt:
        where = "dma_copy"
        loops, store = perfect_nest(body, where)
        where = f"dma_copy into {store.buffer.name}"
        value, cond = _strip_casts(store.value), None
        if isinstance(value, ir.Call) and value.op == "if_then_else":
            cond, value, other = value.args
        elif isinstance(value, ir.Select):
            cond, value, other = value.cond, value.true_value, value.false_value
        if cond is not None and not _is_zero(other):
            raise CompileError(f"{where}: the padding value {other} is not 0; the DMA pads with zeros only")
        src_load = _strip_casts(value)
        if not isinstance(src_load, ir.BufferLoad):
            raise CompileError(f"{where}: a DMA copies a buffer, but the value is {value}; compute it in the "
                               "accumulator scope with the alu pragma instead")
        src, dst = src_load.buffer, store.buffer
        if dst.scope in SCOPE_MEM and src.scope == "global":
            return self.load(where, loops, store, src_load, cond)
        if src.scope == ACC_SCOPE and dst.scope == "global":
            if cond is not None:
                raise CompileError(f"{where}: a store cannot pad")
            return self.store(where, loops, store, src_load)
        raise CompileError(f"{where}: cannot copy {src.name} ({src.scope}) to {dst.name} ({dst.scope}); a DMA loads "
                           f"a global buffer into {sorted(SCOPE_MEM)} or stores {ACC_SCOPE} to a global buffer")

    def _dims(self, where: str, loops: list[Loop], outer: list[int], sram: list[int], dram: list[int],
              lanes: int, pads: dict[ir.Var, list], row_slack: bool) -> tuple[list[_Dim], int]:
        """Entry-level dimensions, outermost first, merged where DRAM is contiguous, and how many of
        the outer ones must be host loops: one instruction fills a compact SRAM block, so a
        dimension stepping further than the block inside it (the rows of a partial tile, as in the
        tail of a split that does not divide) starts a new instruction per step, unless
        ``row_slack`` (a load, which can pad) lets the columns skip the rest of each row: the slack
        goes into ``x_pad_1`` on top of the columns' own right padding, so both must fit the field."""
        order = sorted(outer, key=lambda k: -sram[k])
        dims = [_Dim([k], loops[k].extent, sram[k] // lanes, dram[k] // lanes) for k in order]
        span, n_host = 1, 0
        for i in reversed(range(len(dims))):
            d = dims[i]
            if d.sram_step != span:
                columns = dims[-1]
                if row_slack and i == len(dims) - 2 and columns.dram_step == 1 \
                        and span < d.sram_step <= span + _PAD_MAX - self._max_after(loops, columns, pads):
                    columns.slack, span = d.sram_step - span, d.sram_step
                else:
                    n_host = i + 1
                    break
            span *= d.extent
        for d in dims:
            var = loops[d.loops[0]].var
            if var in pads:
                lo, hi = pads[var]
                d.pad = (ir.IntImm("int32", 0) if lo is None else lo,
                         ir.IntImm("int32", d.extent) if hi is None else hi)
                d.padded_var = var
        extra = set(pads) - {d.padded_var for d in dims}
        if extra:
            raise CompileError(f"{where}: padding on {sorted(v.name for v in extra)}, which are not row or column "
                               "loops of the copy")
        merged: list[_Dim] = []
        for d in reversed(dims[n_host:]):          # innermost first
            inner = merged[-1] if merged else None
            if inner is not None and d.pad is None and inner.pad is None and not inner.slack \
                    and d.dram_step == inner.dram_step * inner.extent:
                inner.loops = d.loops + inner.loops     # one dimension, stepping like its inner part
                inner.extent *= d.extent
                continue
            merged.append(d)
        return dims[:n_host] + list(reversed(merged)), n_host

    @staticmethod
    def _max_after(loops: list[Loop], d: _Dim, pads: dict[ir.Var, list]) -> int:
        """The most zero padding the (unmerged) dimension ``d`` gets after its valid range."""
        rng = pads.get(loops[d.loops[0]].var)
        if rng is None or rng[1] is None:
            return 0
        hi = const_int_bound(_clamp(ir.IntImm("int32", d.extent) - rng[1], d.extent))[1]
        return d.extent if hi == math.inf else int(hi)

    def _plan(self, where: str, loops: list[Loop], dims: list[_Dim], n_host: int):
        """(host loops, y dim or None, x dim or None) with x stepping one DRAM entry; the first
        ``n_host`` dimensions are host loops whatever their steps. A padded host loop right outside
        a lone column dimension (the rows of a partial tile loaded one DMA per row) becomes a
        one-row y dimension whose padding zero-fills the rows outside its valid range."""
        dims, forced = list(dims[n_host:]), dims[:n_host]
        x = y = None
        if dims and dims[-1].dram_step == 1:
            x = dims.pop()
        if dims:
            y = dims.pop()
        if y is None and x is not None and forced and forced[-1].pad is not None:
            row = forced[-1]
            v = loops[row.loops[0]].var
            lo, hi = row.pad
            y = _Dim([], 1, row.sram_step, row.dram_step, (simplify(lo - v), simplify(hi - v)), v,
                     dram_at=simplify(ir.Min(ir.Max(v, lo), hi - 1)))   # a row in the tensor, even when all pad
            forced = forced[:-1] + [_Dim(row.loops, row.extent, row.sram_step, row.dram_step)]
        dims = forced + dims
        for d in dims:
            if d.pad is not None:
                raise CompileError(f"{where}: padding on loop {loops[d.loops[0]].var.name}, which is neither the row "
                                   "nor the column loop of the 2-D DMA")
        host = [k for d in dims for k in d.loops]
        return sorted(host), y, x

    @staticmethod
    def _size_and_pads(d: _Dim | None) -> tuple[ir.PrimExpr, ir.PrimExpr, ir.PrimExpr]:
        if d is None:
            return ir.IntImm("int32", 1), ir.IntImm("int32", 0), ir.IntImm("int32", 0)
        if d.pad is None:
            return ir.IntImm("int32", d.extent), ir.IntImm("int32", 0), ir.IntImm("int32", 0)
        before = _clamp(d.pad[0], d.extent)
        after = _clamp(ir.IntImm("int32", d.extent) - d.pad[1], d.extent)
        return simplify(ir.IntImm("int32", d.extent) - before - after), before, after

    def _emit(self, qid: int, loops: list[Loop], host: list[int], call: ir.Call) -> ir.Stmt:
        stmt: ir.Stmt = ir.Evaluate(call)
        for k in reversed(host):
            stmt = ir.For(loops[k].var, ir.IntImm("int32", 0), ir.IntImm("int32", loops[k].extent),
                          ir.ForKind.SERIAL, stmt)
        return ir.AttrStmt(VTA_AXIS, "coproc_scope", ir.IntImm("int32", qid), stmt)

    def load(self, where: str, loops: list[Loop], store: ir.BufferStore, src: ir.BufferLoad,
             cond: ir.PrimExpr | None) -> ir.Stmt:
        env, dst = self.env, store.buffer
        mem = SCOPE_MEM[dst.scope]
        expect = env.acc_dtype if mem == MemId.ACC else env.inp_dtype
        if dst.dtype != expect:
            raise CompileError(f"{where}: {dst.scope} holds {expect}, not {dst.dtype}")
        if mem == MemId.ACC and src.buffer.dtype == "int8":
            mem = MemId.ACC_8BIT
        elif src.buffer.dtype != expect:
            raise CompileError(f"{where}: loading {src.buffer.name} of dtype {src.buffer.dtype} into {dst.scope} "
                               f"needs {expect}" + (" or int8" if mem == MemId.ACC else ""))
        lanes = env.lanes(dst.scope)
        sram, _ = affine(store.indices[0], loops, where)
        dram, _ = affine(src.indices[0], loops, where)
        outer, entry = split_entry(loops, [sram, dram], lanes, where, "the copy")
        pads = _pad_ranges(cond, loops, where) if cond is not None else {}
        entry_vars = {loops[k].var for k in entry}
        if entry_vars & set(pads):
            raise CompileError(f"{where}: padding inside an SRAM entry (on {[v.name for v in entry_vars & set(pads)]}) "
                               "is not supported; pad whole tiles only")
        host, y, x = self._plan(where, loops, *self._dims(where, loops, outer, sram, dram, lanes, pads, True))
        y_size, y0, y1 = self._size_and_pads(y)
        x_size, x0, x1 = self._size_and_pads(x)
        if x is not None and x.slack:
            x1 = simplify(x1 + x.slack)
        zero = {loops[k].var: ir.IntImm("int32", 0) for k in range(len(loops)) if k not in host}
        sram_off = ir.substitute(store.indices[0], zero)
        first = dict(zero)
        if y is not None and y.padded_var is not None:
            first[y.padded_var] = y0 if y.dram_at is None else y.dram_at
        if x is not None and x.padded_var is not None:
            first[x.padded_var] = x0
        dram_off = ir.substitute(src.indices[0], first)
        footprint = (y.extent if y else 1) * (x.extent + x.slack if x else 1) * lanes
        x_stride = ir.IntImm("int32", y.dram_step) if y is not None else x_size
        call = ir.Call("int32", LOAD_2D, (ir.IntImm("int32", int(mem)), access_ptr(dst, sram_off, footprint, 2),
                                          access_ptr(src.buffer, dram_off, lanes, 1), y_size, x_size, x_stride,
                                          y0, y1, x0, x1))
        qid = QID_COMPUTE if mem in (MemId.ACC, MemId.ACC_8BIT) else QID_LOAD
        return self._emit(qid, loops, host, call)

    def store(self, where: str, loops: list[Loop], store: ir.BufferStore, src: ir.BufferLoad) -> ir.Stmt:
        env, dst = self.env, store.buffer
        if dst.dtype != env.inp_dtype:
            raise CompileError(f"{where}: the accelerator stores {env.inp_dtype} (the low byte of the accumulator), "
                               f"but {dst.name} is {dst.dtype}; cast the result to int8")
        lanes = env.lanes(ACC_SCOPE)
        sram, _ = affine(src.indices[0], loops, where)
        dram, _ = affine(store.indices[0], loops, where)
        outer, _ = split_entry(loops, [sram, dram], lanes, where, "the store")
        host, y, x = self._plan(where, loops, *self._dims(where, loops, outer, sram, dram, lanes, {}, False))
        y_size, _, _ = self._size_and_pads(y)
        x_size, _, _ = self._size_and_pads(x)
        zero = {loops[k].var: ir.IntImm("int32", 0) for k in range(len(loops)) if k not in host}
        sram_off = ir.substitute(src.indices[0], zero)
        dram_off = ir.substitute(store.indices[0], zero)
        footprint = (y.extent if y else 1) * (x.extent if x else 1) * lanes
        x_stride = ir.IntImm("int32", y.dram_step) if y is not None else x_size
        call = ir.Call("int32", STORE_2D, (access_ptr(src.buffer, sram_off, footprint, 1),
                                           access_ptr(dst, dram_off, lanes, 2), y_size, x_size, x_stride))
        return self._emit(QID_STORE, loops, host, call)


def inject_dma_intrin(env: VTAEnv):
    """The pass for ``env`` (phase 1, after storage flattening)."""

    def InjectDMAIntrin(func: ir.PrimFunc) -> ir.PrimFunc:
        return ir.PrimFunc(func.name, func.params, _DMAInjector(env).visit(func.body), dict(func.attrs))

    return InjectDMAIntrin
