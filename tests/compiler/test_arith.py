"""The integer simplifier and bound analysis (vtakit.compiler.arith)."""

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from vtakit.compiler import ir
from vtakit.compiler.arith import Analyzer, can_prove, const_int_bound, linear_coefficients, simplify

x, y, z = ir.Var("x"), ir.Var("y"), ir.Var("z")


def same(a, b):
    return ir.structural_equal(simplify(a), simplify(b))


def test_like_terms_merge_and_cancel():
    assert str(simplify(x * 2 + y + x - y - 3 * x)) == "0"
    assert str(simplify(y - x * 2 + x)) == "(y - x)"
    assert isinstance(simplify(x - x), ir.IntImm)


def test_floordiv_floormod_split_off_divisible_parts():
    assert str(simplify((x * 4 + y) // 4, {y: (0, 3)})) == "x"
    assert str(simplify((x * 4 + y) % 4, {y: (0, 3)})) == "y"
    assert str(simplify((x * 8 + 5) // 4)) == "((x * 2) + 1)"
    assert str(simplify(x // 4 * 4 + x % 4)) == "x"
    assert str(simplify((x // 2) // 3)) == "(x // 6)"


def test_bound_aware_comparisons_and_minmax():
    assert can_prove(x * 4 + y < 12, {x: (0, 2), y: (0, 3)})
    assert not can_prove(x * 4 + y < 10, {x: (0, 2), y: (0, 3)})
    assert str(simplify(ir.Min(x, x + 1))) == "x"
    assert const_int_bound(ir.Min(ir.IntImm("int32", 4), 10 - x * 4), {x: (0, 2)}) == (2, 4)
    assert const_int_bound(ir.FloorMod(x, ir.IntImm("int32", 7))) == (0, 6)


def test_linear_coefficients():
    assert linear_coefficients(x * 3 + y * 2 + 7 + x, [x, y])[0] == [4, 2]
    coefs, base = linear_coefficients(x * 3 + z * 5, [x, y])
    assert coefs == [3, 0] and str(base) == "(z * 5)"
    assert linear_coefficients(x * y, [x]) is None
    assert linear_coefficients(x // 2, [x]) is None


def _eval(e, env):
    from vtakit.compiler.interpreter import Interpreter

    f = Interpreter(ir.PrimFunc("f", (), ir.Evaluate(ir.IntImm("int32", 0))))
    return f.expr(e)(dict(env))


_ATOMS = [x, y, ir.IntImm("int32", 3), ir.IntImm("int32", -2)]


@st.composite
def exprs(draw, depth=3):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(_ATOMS))
    op = draw(st.sampled_from(["add", "sub", "mulc", "div", "mod", "min", "max"]))
    a = draw(exprs(depth - 1))
    if op == "mulc":
        return a * draw(st.integers(-3, 4))
    if op in ("div", "mod"):
        c = ir.IntImm("int32", draw(st.integers(1, 6)))
        return ir.FloorDiv(a, c) if op == "div" else ir.FloorMod(a, c)
    b = draw(exprs(depth - 1))
    return {"add": a + b, "sub": a - b, "min": ir.Min.make(a, b), "max": ir.Max.make(a, b)}[op]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(exprs(), st.integers(0, 5), st.integers(0, 9))
def test_simplify_preserves_value_within_bounds(e, lo_x, span):
    """Random expressions keep their value at every point of the bounds they were simplified with."""
    bounds = {x: (lo_x, lo_x + span % 4), y: (0, span)}
    s = simplify(e, bounds)
    for vx, vy in itertools.product(range(bounds[x][0], bounds[x][1] + 1), range(0, span + 1)):
        assert _eval(s, {x: vx, y: vy}) == _eval(e, {x: vx, y: vy}), (str(e), str(s), vx, vy)
    lo, hi = Analyzer(bounds).const_int_bound(e)
    for vx, vy in itertools.product(range(bounds[x][0], bounds[x][1] + 1), range(0, span + 1)):
        assert lo <= _eval(e, {x: vx, y: vy}) <= hi


def test_floordiv_difference_is_bounded_as_a_pair():
    """floordiv(a + c, d) - floordiv(a, d) is in [c // d, ceil(c / d)] however wide a is."""
    assert const_int_bound((x * 5 + 4) // 7 - (x * 5) // 7 + 1, {x: (0, 8)}) == (1, 2)
    assert const_int_bound((x + 14) // 7 - x // 7, {x: (0, 100)}) == (2, 2)
    assert const_int_bound(x // 7 - (x + 3) // 7, {x: (0, 100)}) == (-1, 0)
