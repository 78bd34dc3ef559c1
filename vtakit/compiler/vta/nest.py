"""Helpers shared by the VTA passes: perfect loop nests and their affine access patterns.

A pragma'd copy or element-wise stage lowers to a perfect nest of constant-extent loops around
one store. The DMA and ALU passes view the nest as a list of :class:`Loop` and each access as
coefficients per loop plus a loop-invariant base; they then split the innermost loops that
cover one SRAM entry (``lanes`` scalars) from the loops that become DMA rows/columns or
micro-op loops.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.compiler import ir
from vtakit.compiler.arith import linear_coefficients, simplify
from vtakit.errors import CompileError

__all__ = ["Loop", "perfect_nest", "affine", "split_entry", "const_value", "access_ptr"]


@dataclass
class Loop:
    """A serial loop of a perfect nest: its variable and constant extent."""

    var: ir.Var
    extent: int


def const_value(e: ir.PrimExpr, what: str) -> int:
    """The integer value of ``e`` after simplification; a :class:`CompileError` naming ``what`` otherwise."""
    e = simplify(e)
    if not isinstance(e, ir.IntImm):
        raise CompileError(f"{what} must be a constant, got {e}")
    return e.value


def perfect_nest(stmt: ir.Stmt, where: str) -> tuple[list[Loop], ir.BufferStore]:
    """The loops (outer to inner, extent-1 loops dropped) and the store of a perfect nest."""
    loops: list[Loop] = []
    vmap: dict[ir.Var, ir.PrimExpr] = {}
    s = stmt
    while True:
        if isinstance(s, ir.For):
            if not isinstance(s.min, ir.IntImm) or s.min.value != 0:
                raise CompileError(f"{where}: loop {s.loop_var.name} starts at {s.min}, expected 0")
            ext = simplify(s.extent)
            if not isinstance(ext, ir.IntImm):
                raise CompileError(f"{where}: loop {s.loop_var.name} has the non-constant extent {ext}; the tail "
                                   "of a split that does not divide is peeled off into its own loop, but not "
                                   "inside a virtual thread (vthread/cthread) or for symbolic shapes: there, "
                                   "choose split factors that divide the axes evenly")
            ext = ext.value
            if ext == 1:
                vmap[s.loop_var] = ir.IntImm(s.loop_var.dtype, 0)
            else:
                loops.append(Loop(s.loop_var, ext))
            s = s.body
        elif isinstance(s, ir.AttrStmt) and s.key.startswith("pragma_"):
            s = s.body
        elif isinstance(s, ir.BufferStore):
            return loops, ir.substitute(s, vmap) if vmap else s
        elif isinstance(s, ir.IfThenElse):
            raise CompileError(f"{where}: the loop nest has a guard ({s.cond}) that peeling the tails of splits "
                               "did not remove (inside a virtual thread, or not affine in the loops); choose split "
                               "factors that divide the axes evenly")
        else:
            raise CompileError(f"{where}: expected a perfect loop nest around one store, found "
                               f"{type(s).__name__}: {str(s).strip()[:120]}")


def affine(index: ir.PrimExpr, loops: list[Loop], where: str) -> tuple[list[int], ir.PrimExpr]:
    """Coefficients of ``index`` per loop and its loop-invariant base."""
    bounds = {lp.var: (0, lp.extent - 1) for lp in loops}
    res = linear_coefficients(index, [lp.var for lp in loops], bounds)
    if res is None:
        raise CompileError(f"{where}: index {index} is not affine in the loops "
                           f"{[lp.var.name for lp in loops]}")
    return res


def split_entry(loops: list[Loop], coefs: list[list[int]], lanes: int, where: str,
                what: str) -> tuple[list[int], list[int]]:
    """Split the loop positions into (outer, entry): ``entry`` are the innermost loops that walk
    one SRAM entry of ``lanes`` scalars contiguously in every access of ``coefs``; the outer
    ones must step in whole entries."""
    order = sorted(range(len(loops)), key=lambda k: coefs[0][k])
    entry: list[int] = []
    span = 1
    for k in order:
        if span == lanes:
            break
        if any(c[k] != span for c in coefs) or span * loops[k].extent > lanes:
            raise CompileError(f"{where}: {what} does not walk whole SRAM entries of {lanes} scalars "
                               f"contiguously (loop {loops[k].var.name}, extent {loops[k].extent}, "
                               f"coefficients {[c[k] for c in coefs]}, expected {span}); keep the innermost "
                               "tensor axes of the packed layout inside the copy")
        entry.append(k)
        span *= loops[k].extent
    if span != lanes:
        raise CompileError(f"{where}: {what} covers {span} scalars per step, expected whole SRAM entries of "
                           f"{lanes}")
    outer = [k for k in range(len(loops)) if k not in entry]
    for k in outer:
        for c in coefs:
            if c[k] % lanes:
                raise CompileError(f"{where}: {what}: loop {loops[k].var.name} steps {c[k]} scalars, not a "
                                   f"multiple of the SRAM entry ({lanes} scalars)")
    return outer, entry


def access_ptr(buf: ir.Buffer, offset: ir.PrimExpr, extent: int | ir.PrimExpr, mask: int) -> ir.Call:
    """``tvm_access_ptr`` of ``buf`` at a scalar ``offset`` (what virtual-thread injection shifts)."""
    return ir.Call("handle", "tvm_access_ptr", (buf.dtype, buf.data, simplify(offset), ir.convert(extent),
                                                ir.IntImm("int32", mask)))
