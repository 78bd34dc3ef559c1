"""Lowering schedules whose bound inference built deeply nested min/max extents.

The simplifier's min/max case split distributes sums into both arms and re-simplifies them, and
``prove_ge`` re-runs the simplifier on differences; without sharing, the work grew exponentially
with the nesting depth (storage-reuse equivalence seeds 349: ~13 s, 159: over 5 minutes). The analyzer
now memoises simplified forms, bounds and proofs per query (hash-consed). These tests check the
two schedules lower and compute what numpy does, that the work of a nested clip family stays small
(counted in simplifier calls, not time), and that the memo never outlives a query's bounds.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.compiler.hand_ir import nodes
from tests.compiler.test_storage_reuse_equivalence import SC, SHAPE, _build, _check, _numpy, _random_program
from vtakit.compiler import ir
from vtakit.compiler.arith import Analyzer, structural_key
from vtakit.compiler.arith.analyzer import Analyzer as _AnalyzerImpl
from vtakit.compiler.arith.hashcons import HashCons


def _allocations(func) -> list[ir.Allocate]:
    return nodes(func, ir.Allocate)


@pytest.mark.parametrize("seed", [159, 349])
def test_blowup_schedules_lower_and_match_numpy(seed):
    prog = _random_program(random.Random(seed))
    s, args = _build(*prog)
    x = np.random.default_rng(seed).integers(-9, 9, SHAPE).astype(np.int32)
    plain, shared = _check(s, args, [x], _numpy(*prog[:2], x).astype(np.int32))
    staged = [a for a in _allocations(plain) if a.buffer.scope == SC]
    assert staged, "the schedule attaches its stages into the audit scope"
    copies = 1 if prog[3] == "none" else 2  # one copy per virtual thread at most
    for alloc in staged:  # an attached stage never needs more than its whole (4, 8) tensor
        size = int(np.prod([n.value for n in alloc.buffer.shape]))
        assert 0 < size <= copies * SHAPE[0] * SHAPE[1], (alloc.buffer.name, alloc.buffer.shape)


# ---------------------------------------------------------------------------- the analyzer itself
X = ir.Var("x", "int32")


def _clip_family(depth: int) -> ir.PrimExpr:
    """``e <- max(min(e + 1, 7 - e), e - 2)``, nested ``depth`` times: tiles clipped at both ends."""
    e: ir.PrimExpr = X
    for _ in range(depth):
        e = ir.Max(ir.Min(e + 1, ir.IntImm("int32", 7) - e), e - 2)
    return e


def _evaluate(e: ir.PrimExpr, x: int) -> int:
    """An independent evaluator for the integer nodes the family and its simplified forms use."""
    ops = {ir.Add: lambda a, b: a + b, ir.Sub: lambda a, b: a - b, ir.Mul: lambda a, b: a * b,
           ir.Min: min, ir.Max: max}
    if isinstance(e, ir.IntImm):
        return e.value
    if e is X:
        return x
    return ops[type(e)](_evaluate(e.a, x), _evaluate(e.b, x))


def test_nested_clips_simplify_with_polynomial_work_and_stay_exact(monkeypatch):
    """Depth 3 took ~127,000 min/max simplifications (about a minute) before the memo; now a few
    thousand. The simplified form equals the original at every ``x`` in its bounds."""
    calls = [0]
    original = _AnalyzerImpl._minmax

    def counted(self, e):
        calls[0] += 1
        return original(self, e)

    monkeypatch.setattr(_AnalyzerImpl, "_s_Min", counted)
    monkeypatch.setattr(_AnalyzerImpl, "_s_Max", counted)
    monkeypatch.setattr(_AnalyzerImpl, "_minmax", counted)
    e = _clip_family(3)
    out = Analyzer({X: (0, 7)}).simplify(e)
    assert calls[0] < 10_000, calls[0]
    for x in range(8):
        assert _evaluate(out, x) == _evaluate(e, x), x


def test_memo_does_not_outlive_a_query():
    """Bounds may change between queries (lowering rebinds loop variables): a result proved
    under the old bounds must not be reused."""
    an = Analyzer({X: (0, 3)})
    clipped = ir.Min(X, ir.IntImm("int32", 5))
    assert an.simplify(clipped) is X
    an.bind(X, 0, 9)
    again = an.simplify(clipped)
    assert isinstance(again, ir.Min) and an.const_int_bound(again) == (0, 5)
    assert not an.prove_ge(ir.IntImm("int32", 5), X)
    an.bind(X, 0, 4)
    assert an.prove_ge(ir.IntImm("int32", 5), X)


def test_hash_cons_keys_agree_with_structural_keys():
    y = ir.Var("y", "int32")
    trees = [X + 1, X + 1, ir.Add(X, ir.IntImm("int32", 1)), y + 1, X + 2, ir.Min(X, y), ir.Min(y, X),
             ir.Min(X, y), ir.FloorDiv(X + 1, ir.IntImm("int32", 4)), ir.FloorDiv(X + 1, ir.IntImm("int32", 4)),
             ir.Cast("int64", X), ir.Cast("int16", X)]
    hc = HashCons()
    for a in trees:
        for b in trees:
            assert (hc.key(a) == hc.key(b)) == (structural_key(a) == structural_key(b)), (a, b)
