"""Integer arithmetic analysis: canonical affine forms, constant bounds and a bound-aware simplifier.

Lowering uses it to clean index expressions and to drop split predicates it can prove; the
accelerator backend uses :func:`linear_coefficients` for DMA pattern detection and micro-op loop
folding. Integer expressions are rewritten into a canonical sum ``c0 + sum(ci * atom_i)`` where
atoms are variables or non-linear terms (``floordiv``, ``floormod``, products, loads, ...);
like terms merge, ``floordiv``/``floormod`` by constants split off their divisible parts, and
bounds (``var -> (lo, hi)``, inclusive) decide comparisons, ``min``/``max`` and divisions.
As in TVM, simplification assumes index arithmetic does not overflow. Float expressions are only
constant-folded, never reassociated. Within one query (a public call) simplified forms, bounds and
min/max proofs are memoised by hash-consed structure (:mod:`.hashcons`): the min/max case split
re-simplifies what it distributes, which is exponential in the nesting depth without sharing.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, Mapping, Sequence

from vtakit.compiler import ir
from vtakit.compiler.arith.hashcons import HashCons

__all__ = ["Analyzer", "simplify", "const_int_bound", "can_prove", "linear_coefficients", "structural_key"]

Bound = tuple[int, int]
_INF = math.inf


def _dtype_range(dtype: str) -> tuple[float, float]:
    base = ir.element_of(dtype)
    if base == "bool":
        return 0, 1
    if base.startswith("uint"):
        return 0, 2 ** int(base[4:]) - 1
    if base.startswith("int"):
        bits = int(base[3:])
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return -_INF, _INF


def _wrap(value: int, dtype: str) -> int:
    base = ir.element_of(dtype)
    if base == "bool":
        return int(bool(value))
    bits = int(base.lstrip("uint"))
    value &= (1 << bits) - 1
    if base.startswith("int") and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def structural_key(e: Any) -> Any:
    """A hashable key equal for structurally equal trees (variables and buffers by identity)."""
    if isinstance(e, (ir.Var, ir.Buffer)):
        return id(e)
    if isinstance(e, (ir.PrimExpr, ir.Stmt)):
        return (type(e).__name__,) + tuple(structural_key(getattr(e, f.name)) for f in fields(e))
    if isinstance(e, tuple):
        return tuple(structural_key(x) for x in e)
    if isinstance(e, (int, float, str, bool, type(None))):
        return e
    return id(e)


def _is_int_scalar(e: ir.PrimExpr) -> bool:
    return ir.is_int(e.dtype) and ir.lanes_of(e.dtype) == 1


class _Lin:
    """``const + sum(coef * atom)``; terms keyed structurally, in first-seen order."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: dict | None = None, const: int = 0) -> None:
        self.terms: dict[Any, list] = terms if terms is not None else {}
        self.const = const

    def copy(self) -> "_Lin":
        return _Lin({k: [a, c] for k, (a, c) in self.terms.items()}, self.const)

    def add_term(self, atom: ir.PrimExpr, coef: int, key: Any) -> None:
        """Add ``coef * atom``; ``key`` is the atom's like-term key (see ``Analyzer._key``)."""
        if key in self.terms:
            self.terms[key][1] += coef
            if self.terms[key][1] == 0:
                del self.terms[key]
        elif coef:
            self.terms[key] = [atom, coef]

    def add(self, other: "_Lin", scale: int = 1) -> None:
        for key, (atom, coef) in other.terms.items():
            self.add_term(atom, coef * scale, key)
        self.const += other.const * scale

    def scaled(self, k: int) -> "_Lin":
        out = _Lin()
        out.add(self, k)
        return out


class Analyzer:
    """Bounds of variables plus the simplifier and bound analysis that use them.

    ``bounds`` maps a variable to an inclusive ``(lo, hi)`` pair of ints.
    """

    def __init__(self, bounds: Mapping[ir.Var, Bound] | None = None) -> None:
        self.bounds: dict[ir.Var, Bound] = dict(bounds or {})
        self._memo: _Memo | None = None  # set for the span of one public query

    def _key(self, e: ir.PrimExpr) -> Any:
        """``e``'s like-term key: hash-consed inside a query, else :func:`structural_key`."""
        return structural_key(e) if self._memo is None else self._memo.key(e)

    def _reads_memory(self, e: ir.PrimExpr) -> bool:
        memo = self._memo
        if memo is None:
            return ir.contains(e, (ir.BufferLoad, ir.ProducerLoad))
        key = memo.key(e)
        found = memo.reads_memory.get(key)
        if found is None:
            found = memo.reads_memory[key] = ir.contains(e, (ir.BufferLoad, ir.ProducerLoad))
        return found

    def _enter(self) -> bool:
        """Open a memo for this query unless an enclosing one is open; True when this call owns it.

        Results are memoised only within a query: the bounds cannot change during one, while
        callers may rebind variables between queries."""
        if self._memo is not None:
            return False
        self._memo = _Memo()
        return True

    # ------------------------------------------------------------------ context
    def bind(self, var: ir.Var, lo: int | float, hi: int | float) -> None:
        self.bounds[var] = (lo, hi)

    def bind_range(self, var: ir.Var, min_: ir.PrimExpr, extent: ir.PrimExpr) -> None:
        """Bound ``var`` to ``[min, min + extent)``, as tight as the constant bounds allow."""
        lo = self.const_int_bound(min_)[0]
        hi = self.const_int_bound(ir.convert(min_) + extent - 1)[1]
        if lo > hi:  # an empty loop: keep the variable consistent anyway
            hi = lo
        self.bounds[var] = (lo, hi)

    # ------------------------------------------------------------------ bounds
    def const_int_bound(self, e: Any) -> tuple[int | float, int | float]:
        """Inclusive constant bounds of an integer expression (``±inf`` when unknown)."""
        e = ir.convert(e)
        owner = self._enter()
        try:
            if _is_int_scalar(e) and isinstance(e, (ir.Add, ir.Sub, ir.Mul)):
                return self._lin_bound(self._to_lin(e))
            return self._atom_bound(e)
        finally:
            if owner:
                self._memo = None

    def _lin_bound(self, lin: _Lin) -> tuple[float, float]:
        lo = hi = lin.const
        terms = list(lin.terms.values())
        pair_lo, pair_hi, terms = self._floordiv_pairs(terms)
        lo, hi = lo + pair_lo, hi + pair_hi
        for atom, coef in terms:
            a_lo, a_hi = self._atom_bound(atom)
            if coef >= 0:
                lo, hi = lo + coef * a_lo, hi + coef * a_hi
            else:
                lo, hi = lo + coef * a_hi, hi + coef * a_lo
            if lo != lo or hi != hi:  # inf - inf
                return -_INF, _INF
        return lo, hi

    def _floordiv_pairs(self, terms: list) -> tuple[int, int, list]:
        """Bound ``k*floordiv(a + c, d) - k*floordiv(a, d)`` together: it lies in
        ``k*[c // d, -(-c // d)]``, however wide ``a`` is (the halo of a relaxed fused axis)."""
        lo = hi = 0
        used: set[int] = set()
        for i, (a, ca) in enumerate(terms):
            if i in used or not (isinstance(a, ir.FloorDiv) and isinstance(a.b, ir.IntImm) and a.b.value > 0
                                 and ca > 0):
                continue
            for j, (b, cb) in enumerate(terms):
                if j in used or cb != -ca or not (isinstance(b, ir.FloorDiv) and isinstance(b.b, ir.IntImm)
                                                  and b.b.value == a.b.value):
                    continue
                diff = self._linear_result(ir.Sub(a.a, b.a))
                if isinstance(diff, ir.IntImm):
                    d, c = a.b.value, diff.value
                    lo, hi = lo + ca * (c // d), hi + ca * -(-c // d)
                    used.update((i, j))
                    break
        return lo, hi, [t for k, t in enumerate(terms) if k not in used]

    def _atom_bound(self, e: ir.PrimExpr) -> tuple[float, float]:
        memo = self._memo
        if memo is None or isinstance(e, (ir.IntImm, ir.Var)):
            return self._atom_bound_node(e)
        key = memo.key(e)
        found = memo.bounds.get(key)
        if found is None:
            found = memo.bounds[key] = self._atom_bound_node(e)
        return found

    def _atom_bound_node(self, e: ir.PrimExpr) -> tuple[float, float]:
        rng = _dtype_range(e.dtype)
        if isinstance(e, ir.IntImm):
            return e.value, e.value
        if isinstance(e, ir.Var):
            b = self.bounds.get(e)
            return (max(b[0], rng[0]), min(b[1], rng[1])) if b is not None else rng
        if not ir.is_int(e.dtype) and e.dtype != "bool":
            return rng
        if isinstance(e, (ir.Add, ir.Sub)) or (isinstance(e, ir.Mul) and
                                               (ir.int_value(e.a) is not None or ir.int_value(e.b) is not None)):
            return self._lin_bound(self._to_lin(e))
        if isinstance(e, ir.Mul):
            a, b = self.const_int_bound(e.a), self.const_int_bound(e.b)
            prods = [x * y for x in a for y in b]
            prods = [p if p == p else 0 for p in prods]  # inf * 0
            return _clip((min(prods), max(prods)), rng)
        if isinstance(e, (ir.FloorDiv, ir.Div)):
            c = ir.int_value(e.b)
            a = self.const_int_bound(e.a)
            if c is not None and c > 0:
                if isinstance(e, ir.FloorDiv) or a[0] >= 0:
                    return _clip((_fdiv(a[0], c), _fdiv(a[1], c)), rng)
                return _clip((-_fdiv(-a[0], c) if a[0] < 0 else 0, _fdiv(a[1], c) if a[1] > 0 else 0), rng)
            return rng
        if isinstance(e, (ir.FloorMod, ir.Mod)):
            c = ir.int_value(e.b)
            if c is not None and c > 0:
                a = self.const_int_bound(e.a)
                if a[0] >= 0 and a[1] < c:
                    return a
                if isinstance(e, ir.FloorMod) or a[0] >= 0:
                    return 0, c - 1
                return -(c - 1), c - 1
            b = self.const_int_bound(e.b)
            if isinstance(e, ir.FloorMod) and b[0] > 0:
                return 0, b[1] - 1
            return rng
        if isinstance(e, ir.Min):
            a, b = self.const_int_bound(e.a), self.const_int_bound(e.b)
            return min(a[0], b[0]), min(a[1], b[1])
        if isinstance(e, ir.Max):
            a, b = self.const_int_bound(e.a), self.const_int_bound(e.b)
            return max(a[0], b[0]), max(a[1], b[1])
        if isinstance(e, ir.Select):
            a, b = self.const_int_bound(e.true_value), self.const_int_bound(e.false_value)
            return min(a[0], b[0]), max(a[1], b[1])
        if isinstance(e, ir.Cast):
            if ir.is_int(e.value.dtype) or e.value.dtype == "bool":
                inner = self.const_int_bound(e.value)
                if inner[0] >= rng[0] and inner[1] <= rng[1]:
                    return inner
            return rng
        if isinstance(e, ir.Call) and e.op == "shift_right" and ir.int_value(e.args[1]) is not None:
            a, k = self.const_int_bound(e.args[0]), ir.int_value(e.args[1])
            return _fdiv(a[0], 2 ** k), _fdiv(a[1], 2 ** k)
        if isinstance(e, ir.Let):
            return self.const_int_bound(ir.substitute(e.body, {e.var: e.value}))
        return rng

    def prove_ge(self, a: ir.PrimExpr, b: ir.PrimExpr, depth: int = 4) -> bool:
        """Whether ``a >= b`` provably, using bounds and the monotonicity of min/max."""
        owner = self._enter()
        try:
            memo = self._memo
            key = (memo.key(a), memo.key(b), depth)
            proved = memo.proofs.get(key)
            if proved is None:
                proved = memo.proofs[key] = self._prove_ge(a, b, depth)
            return proved
        finally:
            if owner:
                self._memo = None

    def _prove_ge(self, a: ir.PrimExpr, b: ir.PrimExpr, depth: int) -> bool:
        if self._lin_bound(self._to_lin(self._linear_result(ir.Sub(a, b))))[0] >= 0:
            return True
        if depth == 0:
            return False
        d = depth - 1
        if isinstance(a, ir.Min) and self.prove_ge(a.a, b, d) and self.prove_ge(a.b, b, d):
            return True
        if isinstance(b, ir.Max) and self.prove_ge(a, b.a, d) and self.prove_ge(a, b.b, d):
            return True
        if isinstance(a, ir.Max) and (self.prove_ge(a.a, b, d) or self.prove_ge(a.b, b, d)):
            return True
        if isinstance(b, ir.Min) and (self.prove_ge(a, b.a, d) or self.prove_ge(a, b.b, d)):
            return True
        return False

    def can_prove(self, cond: Any) -> bool:
        """Whether ``cond`` is provably true under the known bounds."""
        c = self.simplify(cond)
        return isinstance(c, ir.IntImm) and bool(c.value)

    # ------------------------------------------------------------------ canonical forms
    def _to_lin(self, e: ir.PrimExpr) -> _Lin:
        if isinstance(e, ir.IntImm):
            return _Lin(const=e.value)
        if isinstance(e, ir.Add):
            out = self._to_lin(e.a)
            out.add(self._to_lin(e.b))
            return out
        if isinstance(e, ir.Sub):
            out = self._to_lin(e.a)
            out.add(self._to_lin(e.b), -1)
            return out
        if isinstance(e, ir.Mul):
            ca, cb = ir.int_value(e.a), ir.int_value(e.b)
            if cb is not None:
                return self._to_lin(e.a).scaled(cb)
            if ca is not None:
                return self._to_lin(e.b).scaled(ca)
        lin = _Lin()
        lin.add_term(e, 1, self._key(e))
        return lin

    def _from_lin(self, lin: _Lin, dtype: str) -> ir.PrimExpr:
        self._fold_div_mod_pairs(lin)
        pos = [(a, c) for a, c in lin.terms.values() if c > 0]
        neg = [(a, -c) for a, c in lin.terms.values() if c < 0]
        result: ir.PrimExpr | None = None
        if not pos and neg and lin.const > 0:
            result, lin = ir.IntImm(dtype, lin.const), _Lin(lin.terms, 0)
        for atom, coef in pos:
            term = atom if coef == 1 else ir.Mul(atom, ir.IntImm(dtype, coef))
            result = term if result is None else ir.Add(result, term)
        for atom, coef in neg:
            term = atom if coef == 1 else ir.Mul(atom, ir.IntImm(dtype, coef))
            result = ir.Sub(ir.IntImm(dtype, 0), term) if result is None else ir.Sub(result, term)
        if result is None:
            return ir.IntImm(dtype, lin.const)
        if lin.const > 0:
            result = ir.Add(result, ir.IntImm(dtype, lin.const))
        elif lin.const < 0:
            result = ir.Sub(result, ir.IntImm(dtype, -lin.const))
        return result

    def _fold_div_mod_pairs(self, lin: _Lin) -> None:
        """``k*c*floordiv(x, c) + k*floormod(x, c)`` is ``k*x``."""
        changed = True
        while changed:
            changed = False
            for key, (atom, coef) in list(lin.terms.items()):
                if not isinstance(atom, ir.FloorMod) or ir.int_value(atom.b) is None:
                    continue
                c = atom.b.value
                div_key = self._key(ir.FloorDiv(atom.a, atom.b))
                if div_key in lin.terms and lin.terms[div_key][1] == coef * c:
                    del lin.terms[key]
                    del lin.terms[div_key]
                    lin.add(self._to_lin(atom.a), coef)
                    changed = True
                    break

    # ------------------------------------------------------------------ simplifier
    def simplify(self, e: Any) -> Any:
        """A simplified, canonical copy of the expression ``e``."""
        if not isinstance(e, ir.PrimExpr):
            return e
        owner = self._enter()
        try:
            return self._simplify(e)
        finally:
            if owner:
                self._memo = None

    def _simplify(self, e: ir.PrimExpr) -> ir.PrimExpr:
        if isinstance(e, (ir.IntImm, ir.FloatImm)):
            return e
        memo = self._memo
        if memo is None:
            return self._simplify_node(e)
        key = memo.key(e)
        out = memo.simplified.get(key)
        if out is None:
            out = memo.simplified[key] = self._simplify_node(e)
        return out

    def _simplify_node(self, e: ir.PrimExpr) -> ir.PrimExpr:
        if isinstance(e, ir.Var):
            b = self.bounds.get(e)
            if b is not None and b[0] == b[1] and _is_int_scalar(e):
                return ir.IntImm(e.dtype, int(b[0]))
            return e
        method = getattr(self, f"_s_{type(e).__name__}", None)
        if method is not None:
            return method(e)
        return self._generic(e)

    def _generic(self, e: Any) -> Any:
        return _ChildSimplifier(self).generic_visit(e)

    def _linear_result(self, e: ir.PrimExpr) -> ir.PrimExpr:
        lin = self._to_lin(e)
        minmax = [(k, a, c) for k, (a, c) in lin.terms.items() if isinstance(a, (ir.Min, ir.Max)) and c in (1, -1)]
        rest_terms = {k: v for k, v in lin.terms.items() if not minmax or k != minmax[0][0]}
        # Only index arithmetic gains from distributing: a loaded value never cancels, and pushing it
        # into both arms turns a clip-then-add data expression into one no ALU sequence computes.
        reads_memory = any(self._reads_memory(atom) for atom, _ in rest_terms.values())
        if len(minmax) == 1 and (lin.const or len(lin.terms) > 1) and not reads_memory:
            # min(a, b) + r -> min(a + r, b + r);  r - min(a, b) -> max(r - a, r - b): lets terms cancel
            key, atom, coef = minmax[0]
            rest = _Lin(rest_terms, lin.const)
            r = self._from_lin(rest, e.dtype)
            if coef == 1:
                return self._minmax(type(atom)(atom.a + r, atom.b + r, e.dtype))
            flipped = ir.Max if isinstance(atom, ir.Min) else ir.Min
            return self._minmax(flipped(r - atom.a, r - atom.b, e.dtype))
        return self._from_lin(lin, e.dtype)

    def _arith(self, e: ir.BinaryOp) -> ir.PrimExpr:
        a, b = self._simplify(e.a), self._simplify(e.b)
        if not _is_int_scalar(e):
            folded = _fold_float(type(e), a, b)
            if folded is not None:
                return folded
            return e if a is e.a and b is e.b else type(e)(a, b, e.dtype)
        return self._linear_result(type(e)(a, b, e.dtype))

    _s_Add = _s_Sub = _s_Mul = _arith

    def _s_FloorDiv(self, e: ir.FloorDiv) -> ir.PrimExpr:
        a, b = self._simplify(e.a), self._simplify(e.b)
        if not _is_int_scalar(e):
            return ir.FloorDiv(a, b, e.dtype)
        return self._floordiv(a, b, e.dtype)

    def _floordiv(self, a: ir.PrimExpr, b: ir.PrimExpr, dtype: str) -> ir.PrimExpr:
        c = ir.int_value(b)
        if c is None or c <= 0:
            ca = ir.int_value(a)
            if ca is not None and c is not None and c != 0:
                return ir.IntImm(dtype, ca // c)
            return ir.FloorDiv(a, b, dtype)
        if c == 1:
            return a
        lin = self._to_lin(a)
        quot, rest = _Lin(), _Lin()
        for key, (atom, coef) in lin.terms.items():
            if coef % c == 0:
                quot.add_term(atom, coef // c, key)
            else:
                rest.add_term(atom, coef, key)
        quot.const, rest.const = lin.const // c, lin.const % c
        if rest.terms:
            lo, hi = self._lin_bound(rest)
            if lo > -_INF and hi < _INF and _fdiv(lo, c) == _fdiv(hi, c):
                quot.const += _fdiv(lo, c)
            else:
                g = math.gcd(c, *(coef for _, coef in rest.terms.values()))
                if g > 1:
                    rest = _Lin({k: [a_, cf // g] for k, (a_, cf) in rest.terms.items()}, rest.const // g)
                    c //= g
                inner = self._from_lin(rest, dtype)
                if (isinstance(inner, ir.FloorDiv) and ir.int_value(inner.b) is not None
                        and inner.b.value > 0):
                    atom = ir.FloorDiv(inner.a, ir.IntImm(dtype, inner.b.value * c), dtype)
                else:
                    atom = ir.FloorDiv(inner, ir.IntImm(dtype, c), dtype)
                quot.add_term(atom, 1, self._key(atom))
        return self._from_lin(quot, dtype)

    def _s_FloorMod(self, e: ir.FloorMod) -> ir.PrimExpr:
        a, b = self._simplify(e.a), self._simplify(e.b)
        if not _is_int_scalar(e):
            return ir.FloorMod(a, b, e.dtype)
        return self._floormod(a, b, e.dtype)

    def _floormod(self, a: ir.PrimExpr, b: ir.PrimExpr, dtype: str) -> ir.PrimExpr:
        c = ir.int_value(b)
        if c is None or c <= 0:
            ca = ir.int_value(a)
            if ca is not None and c is not None and c != 0:
                return ir.IntImm(dtype, ca % c)
            return ir.FloorMod(a, b, dtype)
        if c == 1:
            return ir.IntImm(dtype, 0)
        lin = self._to_lin(a)
        rest = _Lin(const=lin.const % c)
        for key, (atom, coef) in lin.terms.items():
            if coef % c:
                rest.add_term(atom, coef, key)
        if not rest.terms:
            return ir.IntImm(dtype, rest.const)
        lo, hi = self._lin_bound(rest)
        if lo > -_INF and hi < _INF and _fdiv(lo, c) == _fdiv(hi, c):
            rest.const -= _fdiv(lo, c) * c
            return self._from_lin(rest, dtype)
        g = math.gcd(c, *(coef for _, coef in rest.terms.values()))
        if g > 1:  # floormod(g*y + r, c) = g*floormod(y + r//g, c/g) + r%g
            inner = _Lin({k: [a_, cf // g] for k, (a_, cf) in rest.terms.items()}, rest.const // g)
            out = _Lin(const=rest.const % g)
            mod = self._floormod(self._from_lin(inner, dtype), ir.IntImm(dtype, c // g), dtype)
            out.add_term(mod, g, self._key(mod))
            return self._from_lin(out, dtype)
        inner = self._from_lin(rest, dtype)
        if (isinstance(inner, ir.FloorMod) and ir.int_value(inner.b) is not None
                and inner.b.value % c == 0):
            inner = inner.a
        return ir.FloorMod(inner, ir.IntImm(dtype, c), dtype)

    def _s_Div(self, e: ir.Div) -> ir.PrimExpr:
        a, b = self._simplify(e.a), self._simplify(e.b)
        if not _is_int_scalar(e):
            folded = _fold_float(ir.Div, a, b)  # a FloatImm: never test it for truth
            return folded if folded is not None else ir.Div(a, b, e.dtype)
        c = ir.int_value(b)
        if c is not None and c > 0 and self.const_int_bound(a)[0] >= 0:
            return self._floordiv(a, b, e.dtype)
        ca = ir.int_value(a)
        if ca is not None and c:
            return ir.IntImm(e.dtype, int(ca / c) if abs(ca) < 2 ** 52 else _tdiv(ca, c))
        return ir.Div(a, b, e.dtype)

    def _s_Mod(self, e: ir.Mod) -> ir.PrimExpr:
        a, b = self._simplify(e.a), self._simplify(e.b)
        if not _is_int_scalar(e):
            return ir.Mod(a, b, e.dtype)
        c = ir.int_value(b)
        if c is not None and c > 0 and self.const_int_bound(a)[0] >= 0:
            return self._floormod(a, b, e.dtype)
        ca = ir.int_value(a)
        if ca is not None and c:
            return ir.IntImm(e.dtype, ca - _tdiv(ca, c) * c)
        return ir.Mod(a, b, e.dtype)

    def _minmax(self, e: ir.BinaryOp) -> ir.PrimExpr:
        a, b = self._simplify(e.a), self._simplify(e.b)
        is_min = isinstance(e, ir.Min)
        if isinstance(a, (ir.IntImm, ir.FloatImm)) and isinstance(b, (ir.IntImm, ir.FloatImm)):
            v = min(a.value, b.value) if is_min else max(a.value, b.value)
            return ir.const(v, e.dtype)
        if _is_int_scalar(e):
            if self.prove_ge(b, a):
                return a if is_min else b
            if self.prove_ge(a, b):
                return b if is_min else a
        elif ir.structural_equal(a, b):
            return a
        return type(e)(a, b, e.dtype)

    _s_Min = _s_Max = _minmax

    def _compare(self, e: ir.BinaryOp) -> ir.PrimExpr:
        a, b = self._simplify(e.a), self._simplify(e.b)
        if isinstance(a, (ir.IntImm, ir.FloatImm)) and isinstance(b, (ir.IntImm, ir.FloatImm)):
            return ir.IntImm("bool", int(_CMP[type(e)](a.value, b.value)))
        if _is_int_scalar(a) and _is_int_scalar(b):
            diff = self._linear_result(ir.Sub(a, b))
            lo, hi = self.const_int_bound(diff)
            verdict = _decide(type(e), lo, hi)
            if verdict is not None:
                return ir.IntImm("bool", int(verdict))
        return type(e)(a, b)

    _s_EQ = _s_NE = _s_LT = _s_LE = _s_GT = _s_GE = _compare

    def _s_And(self, e: ir.And) -> ir.PrimExpr:
        a, b = self._simplify(e.a), self._simplify(e.b)
        for x, y in ((a, b), (b, a)):
            if isinstance(x, ir.IntImm):
                return y if x.value else ir.IntImm("bool", 0)
        return ir.And(a, b)

    def _s_Or(self, e: ir.Or) -> ir.PrimExpr:
        a, b = self._simplify(e.a), self._simplify(e.b)
        for x, y in ((a, b), (b, a)):
            if isinstance(x, ir.IntImm):
                return ir.IntImm("bool", 1) if x.value else y
        return ir.Or(a, b)

    def _s_Not(self, e: ir.Not) -> ir.PrimExpr:
        a = self._simplify(e.a)
        if isinstance(a, ir.IntImm):
            return ir.IntImm("bool", int(not a.value))
        return ir.Not(a)

    def _s_Select(self, e: ir.Select) -> ir.PrimExpr:
        cond = self._simplify(e.cond)
        if isinstance(cond, ir.IntImm):
            return self._simplify(e.true_value if cond.value else e.false_value)
        return ir.Select(cond, self._simplify(e.true_value), self._simplify(e.false_value), e.dtype)

    def _s_Cast(self, e: ir.Cast) -> ir.PrimExpr:
        v = self._simplify(e.value)
        if v.dtype == e.dtype:
            return v
        if isinstance(v, (ir.IntImm, ir.FloatImm)) and ir.lanes_of(e.dtype) == 1:
            if ir.is_float(e.dtype):
                return ir.FloatImm(e.dtype, float(v.value))
            if ir.is_int(e.dtype) or e.dtype == "bool":
                if isinstance(v, ir.FloatImm) and not math.isfinite(v.value):
                    return ir.Cast(e.dtype, v)
                return ir.IntImm(e.dtype, _wrap(int(v.value), e.dtype))
        return ir.Cast(e.dtype, v)

    def _s_Let(self, e: ir.Let) -> ir.PrimExpr:
        value = self._simplify(e.value)
        if isinstance(value, (ir.IntImm, ir.FloatImm, ir.Var)):
            return self._simplify(ir.substitute(e.body, {e.var: value}))
        return ir.Let(e.var, value, self._simplify(e.body), e.dtype)


class _Memo:
    """Simplified forms and min/max proofs of one query, keyed by hash-consed structure: the
    min/max case split re-simplifies the arms it distributes sums into, and without sharing,
    nested clipped extents (bound inference's tiles) cost exponential time in their depth."""

    __slots__ = ("key", "simplified", "proofs", "bounds", "reads_memory")

    def __init__(self) -> None:
        self.key = HashCons().key
        self.simplified: dict[int, ir.PrimExpr] = {}
        self.proofs: dict[tuple[int, int, int], bool] = {}
        self.bounds: dict[int, tuple[float, float]] = {}
        self.reads_memory: dict[int, bool] = {}


class _ChildSimplifier(ir.IRMutator):
    """Rebuilds a node with each expression child simplified."""

    def __init__(self, analyzer: Analyzer) -> None:
        self.analyzer = analyzer

    def visit(self, node: Any) -> Any:
        if isinstance(node, ir.PrimExpr):
            return self.analyzer._simplify(node)
        return super().visit(node)


_CMP = {ir.EQ: lambda x, y: x == y, ir.NE: lambda x, y: x != y, ir.LT: lambda x, y: x < y,
        ir.LE: lambda x, y: x <= y, ir.GT: lambda x, y: x > y, ir.GE: lambda x, y: x >= y}


def _decide(kind: type, lo: float, hi: float) -> bool | None:
    """The truth of ``d <op> 0`` for ``d`` in ``[lo, hi]``, or None when unknown."""
    if kind is ir.LT:
        return True if hi < 0 else False if lo >= 0 else None
    if kind is ir.LE:
        return True if hi <= 0 else False if lo > 0 else None
    if kind is ir.GT:
        return True if lo > 0 else False if hi <= 0 else None
    if kind is ir.GE:
        return True if lo >= 0 else False if hi < 0 else None
    if kind is ir.EQ:
        return True if lo == hi == 0 else False if lo > 0 or hi < 0 else None
    if kind is ir.NE:
        return False if lo == hi == 0 else True if lo > 0 or hi < 0 else None
    return None


def _fold_float(kind: type, a: ir.PrimExpr, b: ir.PrimExpr) -> ir.PrimExpr | None:
    if not (isinstance(a, ir.FloatImm) and isinstance(b, ir.FloatImm)):
        return None
    import numpy as np  # noqa: PLC0415

    np_t = np.dtype(a.dtype).type
    x, y = np_t(a.value), np_t(b.value)
    with np.errstate(all="ignore"):
        ops = {ir.Add: lambda: x + y, ir.Sub: lambda: x - y, ir.Mul: lambda: x * y,
               ir.Div: lambda: x / y if y != 0 else None}
        fn = ops.get(kind)
        v = fn() if fn else None
    return None if v is None else ir.FloatImm(a.dtype, float(v))


def _fdiv(a: float, c: int) -> float:
    if a in (_INF, -_INF):
        return a
    return int(a) // c


def _tdiv(a: int, c: int) -> int:
    q = abs(a) // abs(c)
    return q if (a >= 0) == (c > 0) else -q


def _clip(b: tuple[float, float], rng: tuple[float, float]) -> tuple[float, float]:
    return max(b[0], rng[0]), min(b[1], rng[1])


# ---------------------------------------------------------------------------- functional API
def _analyzer(bounds: Any) -> Analyzer:
    if isinstance(bounds, Analyzer):
        return bounds
    return Analyzer(bounds)


def simplify(expr: Any, bounds: Mapping[ir.Var, Bound] | Analyzer | None = None) -> Any:
    """``expr`` simplified, knowing ``bounds`` (var -> inclusive (lo, hi))."""
    return _analyzer(bounds).simplify(ir.convert(expr) if not isinstance(expr, ir.PrimExpr) else expr)


def const_int_bound(expr: Any, bounds: Mapping[ir.Var, Bound] | Analyzer | None = None
                    ) -> tuple[int | float, int | float]:
    """Inclusive constant bounds ``(lo, hi)`` of an integer expression; ``±math.inf`` if unknown."""
    a = _analyzer(bounds)
    return a.const_int_bound(a.simplify(ir.convert(expr)))


def can_prove(cond: Any, bounds: Mapping[ir.Var, Bound] | Analyzer | None = None) -> bool:
    """Whether ``cond`` is provably true knowing ``bounds``."""
    return _analyzer(bounds).can_prove(cond)


def linear_coefficients(expr: Any, vars: Sequence[ir.Var],
                        bounds: Mapping[ir.Var, Bound] | Analyzer | None = None
                        ) -> tuple[list[int], ir.PrimExpr] | None:
    """``(coefs, base)`` with ``expr == sum(coefs[i] * vars[i]) + base`` and ``base`` free of
    ``vars``; None when ``expr`` is not affine in ``vars`` with integer coefficients."""
    a = _analyzer(bounds)
    e = a.simplify(ir.convert(expr))
    if not _is_int_scalar(e):
        return None
    lin = a._to_lin(e)
    coefs = [0] * len(vars)
    index = {id(v): k for k, v in enumerate(vars)}
    base = _Lin(const=lin.const)
    for key, (atom, coef) in lin.terms.items():
        if isinstance(atom, ir.Var) and id(atom) in index:
            coefs[index[id(atom)]] += coef
        elif ir.uses_var(atom, lambda v: id(v) in index):
            return None
        else:
            base.add_term(atom, coef, key)
    return coefs, a._from_lin(base, e.dtype)
