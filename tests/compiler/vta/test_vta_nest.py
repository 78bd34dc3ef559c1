"""The perfect-nest helpers the VTA DMA and ALU passes share (``vta/nest.py``): ``perfect_nest``
(loops outer to inner with extent-1 loops substituted away, pragmas skipped; guards, symbolic extents,
nonzero mins and other statements rejected by name), ``affine`` (per-loop coefficients and base, or
an error), ``split_entry`` (the innermost loops covering one SRAM entry contiguously vs the outer
loops stepping whole entries, with the reasons it refuses), ``const_value`` and ``access_ptr``."""

from __future__ import annotations

import pytest

from vtakit.compiler import ir
from vtakit.compiler.arith import simplify
from vtakit.compiler.vta.nest import Loop, access_ptr, affine, const_value, perfect_nest, split_entry
from vtakit.errors import CompileError

BUF = ir.Buffer("buf", (256,), "int32", "local.acc_buffer")
I, J, K = ir.Var("i"), ir.Var("j"), ir.Var("k")


def _for(var: ir.Var, extent, body: ir.Stmt, lo: int = 0) -> ir.For:
    return ir.For(var, ir.const(lo), extent if isinstance(extent, ir.PrimExpr) else ir.const(extent),
                  ir.ForKind.SERIAL, body)


def _store(index: ir.PrimExpr) -> ir.BufferStore:
    return ir.BufferStore(BUF, ir.const(1), (index,))


def test_perfect_nest_lists_the_loops_and_substitutes_extent_one_loops():
    nest = _for(I, 3, ir.AttrStmt(ir.const(0), "pragma_x", ir.const(1), _for(J, 1, _for(K, 4, _store(I * 8 + J * 4 + K)))))
    loops, store = perfect_nest(nest, "t")
    assert [(lp.var, lp.extent) for lp in loops] == [(I, 3), (K, 4)]
    assert not ir.uses_var(store, {J}) and ir.uses_var(store, {I, K})


def test_perfect_nest_folds_constant_extent_expressions():
    loops, _ = perfect_nest(_for(I, ir.const(2) * 3, _store(I)), "t")
    assert [lp.extent for lp in loops] == [6]


@pytest.mark.parametrize("nest, match", [
    (_for(I, 4, _store(I), lo=1), r"where: loop i starts at 1, expected 0"),
    (_for(I, ir.Var("n"), _store(I)), r"where: loop i has the non-constant extent n"),
    (_for(I, 4, ir.IfThenElse(ir.LT(I, ir.const(3)), _store(I))), r"where: the loop nest has a guard \(\(?i < 3\)?\)"),
    (_for(I, 4, ir.seq(_store(I), _store(I + 1))), r"where: expected a perfect loop nest around one store, found SeqStmt"),
], ids=["nonzero-min", "symbolic-extent", "guard", "two-stores"])
def test_perfect_nest_rejects_what_is_not_one(nest, match):
    with pytest.raises(CompileError, match=match):
        perfect_nest(nest, "where")


def test_affine_gives_coefficients_and_base():
    loops = [Loop(I, 3), Loop(J, 4)]
    coefs, base = affine(I * 16 + J * 4 + 7, loops, "t")
    assert coefs == [16, 4] and ir.int_value(simplify(base)) == 7
    with pytest.raises(CompileError, match=r"t: index .* is not affine in the loops \['i', 'j'\]"):
        affine(I * J, loops, "t")


def test_split_entry_separates_the_entry_loops_from_the_outer_ones():
    loops = [Loop(I, 3), Loop(J, 2), Loop(K, 2)]
    # k, j walk one entry of 4 scalars contiguously (strides 1, 2); i steps whole entries (8 scalars)
    outer, entry = split_entry(loops, [[8, 2, 1], [16, 2, 1]], 4, "t", "the copy")
    assert outer == [0] and entry == [2, 1]


@pytest.mark.parametrize("coefs, match", [
    # the second access walks the entry k-major: k steps 2 scalars where 1 was expected
    ([[8, 2, 1], [8, 1, 2]], r"the copy does not walk whole SRAM entries of 4 scalars contiguously \(loop k, "
                             r"extent 2, coefficients \[1, 2\], expected 1\)"),
    ([[6, 2, 1]], r"the copy: loop i steps 6 scalars, not a multiple of the SRAM entry \(4 scalars\)"),
], ids=["entry-order", "outer-step"])
def test_split_entry_rejects_layouts_that_are_not_whole_entries(coefs, match):
    with pytest.raises(CompileError, match=match):
        split_entry([Loop(I, 3), Loop(J, 2), Loop(K, 2)], coefs, 4, "t", "the copy")


def test_split_entry_needs_the_entry_covered_exactly():
    with pytest.raises(CompileError, match=r"covers 2 scalars per step, expected whole SRAM entries of 4"):
        split_entry([Loop(J, 2)], [[1]], 4, "t", "the copy")
    with pytest.raises(CompileError, match=r"\(loop i, extent 3, coefficients \[2\], expected 2\)"):
        split_entry([Loop(I, 3), Loop(J, 2)], [[2, 1]], 4, "t", "the copy")     # 2 x 3 overshoots the entry


def test_const_value_and_access_ptr():
    assert const_value(ir.const(3) * 4 - 2, "the extent") == 10
    with pytest.raises(CompileError, match=r"the extent must be a constant, got n"):
        const_value(ir.Var("n") + 0, "the extent")
    ptr = access_ptr(BUF, I * 4 + ir.const(2) * 4, 16, 3)
    assert ptr.op == "tvm_access_ptr" and ptr.args[0] == "int32" and ptr.args[1] is BUF.data
    assert ir.structural_equal(ptr.args[2], simplify(I * 4 + 8)) and ir.int_value(ptr.args[3]) == 16
    assert ir.int_value(ptr.args[4]) == 3
