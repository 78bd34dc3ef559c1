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


@st.composite
def wide_exprs(draw, depth=4):
    """Integer expressions over x, y, z with truncating and flooring division by positive and
    negative constants and by never-zero expressions, products, min/max and selects."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            return draw(st.sampled_from([x, y, z]))
        return ir.IntImm("int32", draw(st.integers(-9, 9)))
    op = draw(st.sampled_from(["add", "sub", "mul", "mulc", "fdiv", "fmod", "tdiv", "tmod", "min", "max", "select",
                               "fdiv_expr", "fmod_expr"]))
    a = draw(wide_exprs(depth - 1))
    if op == "mulc":
        return a * draw(st.integers(-4, 4))
    if op in ("fdiv", "fmod", "tdiv", "tmod"):
        c = ir.IntImm("int32", draw(st.sampled_from([1, 2, 3, 4, 6, 7, 8, -2, -3])))
        return {"fdiv": ir.FloorDiv, "fmod": ir.FloorMod, "tdiv": ir.Div, "tmod": ir.Mod}[op](a, c)
    b = draw(wide_exprs(depth - 1))
    if op in ("fdiv_expr", "fmod_expr"):  # a divisor that is never zero: in [-3, -1] or >= 1
        if draw(st.booleans()):
            b = ir.Max.make(ir.Min.make(b, ir.IntImm("int32", -1)), ir.IntImm("int32", -3))
        else:
            b = ir.Max.make(b, ir.IntImm("int32", 1))
        return (ir.FloorDiv if op == "fdiv_expr" else ir.FloorMod)(a, b)
    if op == "select":
        cmp = draw(st.sampled_from([ir.LT, ir.LE, ir.EQ, ir.NE, ir.GE, ir.GT]))
        return ir.Select(cmp(a, b), a, b)
    return {"add": a + b, "sub": a - b, "mul": a * b, "min": ir.Min.make(a, b), "max": ir.Max.make(a, b)}[op]


@settings(max_examples=250, deadline=None, derandomize=True)
@given(wide_exprs(), st.integers(-6, 4), st.integers(0, 5), st.integers(-3, 3), st.integers(0, 4),
       st.sampled_from([ir.LT, ir.LE, ir.EQ, ir.GE]), st.integers(-5, 5))
def test_simplifier_is_sound_on_signed_ranges(e, lo_x, span_x, lo_y, span_y, cmp, k):
    """Soundness against direct evaluation, with negative variable ranges: the simplified
    expression, a comparison decided by the bounds, and the constant bounds all agree with the
    value of the original expression at every point of the domain."""
    bounds = {x: (lo_x, lo_x + span_x), y: (lo_y, lo_y + span_y), z: (-2, 3)}
    an = Analyzer(bounds)
    simplified = an.simplify(e)
    cond = cmp(e, ir.IntImm("int32", k))
    simplified_cond = an.simplify(cond)
    lo, hi = an.const_int_bound(e)
    for vx, vy, vz in itertools.product(range(lo_x, lo_x + span_x + 1), range(lo_y, lo_y + span_y + 1), (-2, 0, 3)):
        env = {x: vx, y: vy, z: vz}
        value = _eval(e, env)
        assert _eval(simplified, env) == value, (str(e), str(simplified), env)
        assert lo <= value <= hi, (str(e), (lo, hi), env, value)
        assert bool(_eval(simplified_cond, env)) == bool(_eval(cond, env)), (str(cond), str(simplified_cond), env)


@st.composite
def index_exprs(draw, depth=4):
    """Index expressions over a point variable x and relaxed variables y, z (z's range depends on x)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from([x, y, z, ir.IntImm("int32", draw(st.integers(-5, 7)))]))
    op = draw(st.sampled_from(["add", "sub", "mulc", "mul", "fdiv", "fmod", "tdiv", "tmod", "min", "max", "select"]))
    a = draw(index_exprs(depth - 1))
    if op == "mulc":
        return a * draw(st.integers(-3, 4))
    if op in ("fdiv", "fmod", "tdiv", "tmod"):
        c = ir.IntImm("int32", draw(st.integers(1, 7)))
        return {"fdiv": ir.FloorDiv, "fmod": ir.FloorMod, "tdiv": ir.Div, "tmod": ir.Mod}[op](a, c)
    b = draw(index_exprs(depth - 1))
    if op == "select":
        return ir.Call("int32", "if_then_else", (ir.LT(a, b), a, b))
    return {"add": a + b, "sub": a - b, "mul": ir.Mul(a, b), "min": ir.Min(a, b), "max": ir.Max(a, b)}[op]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(index_exprs(), st.integers(-3, 3), st.integers(0, 4), st.integers(0, 4))
def test_bound_inference_intervals_cover_every_value(e, lo_y, span_y, hi_x):
    """eval_interval (the region a consumer reads per iteration of the attach loop) contains the
    index value at every point: x stays symbolic, y and z = [0, x] are relaxed."""
    from vtakit.compiler.lower.bound import eval_interval

    an = Analyzer({x: (0, hi_x)})
    dom = {y: (ir.IntImm("int32", lo_y), ir.IntImm("int32", lo_y + span_y)), z: (ir.IntImm("int32", 0), x)}
    result = eval_interval(e, dom, an)
    if result is None:  # unknown: lowering falls back to the whole tensor
        return
    for vx in range(hi_x + 1):
        lo, hi = _eval(result[0], {x: vx}), _eval(result[1], {x: vx})
        for vy, vz in itertools.product(range(lo_y, lo_y + span_y + 1), range(vx + 1)):
            assert lo <= _eval(e, {x: vx, y: vy, z: vz}) <= hi, (str(e), str(result[0]), str(result[1]), vx, vy, vz)
