"""The ONNX ``Einsum`` converter: an equation rewritten into existing graph operators.

Models use Einsum for batched matrix products (attention's ``bhid,bhjd->bhij``), transposes and sums,
so vtakit has no Einsum operator: the converter parses the equation (explicit ``->`` or implicit,
``...`` for broadcast dims) and, operand by operand, takes repeated letters' diagonals (a ``Mul`` by
an identity mask, then ``ReduceSum``), sums out letters no later term needs (``ReduceSum``), and
contracts two operands as one batched ``MatMul`` between ``Transpose``/``Reshape`` nodes (batch letters
kept as separate axes, so size-1 ones broadcast as ``MatMul`` does); the result is transposed into the
output's order. More than two operands are contracted left to right.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

from vtakit.compiler.graph.frontend.registry import ConvertContext, OnnxNode, converter
from vtakit.errors import GraphError

__all__ = ["parse_einsum"]


@dataclass
class _Term:
    """A value and the letter of each of its axes."""

    name: str
    letters: str
    shape: tuple[int, ...]


def parse_einsum(equation: str, ranks: list[int], label: str = "Einsum") -> tuple[list[str], str]:
    """The letters of each input and of the output, ``...`` expanded to letters the equation does not use
    (right-aligned, as numpy broadcasts); the implicit output is the letters used once, sorted, after the
    broadcast ones."""
    eq = "".join(equation.split())
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise GraphError(f"{label}: equation {equation!r} has {len(terms)} operands, the node has {len(ranks)} inputs")
    used = set(eq) - set(".,->")
    bad = sorted(c for c in used if c not in string.ascii_letters)
    if bad:
        raise GraphError(f"{label}: equation {equation!r} uses {bad}; expected letters a-z, A-Z and '...'")
    spare = [c for c in string.ascii_letters if c not in used]
    explicit = [len(t.replace("...", "")) for t in terms]
    ell_rank = max([r - e for t, r, e in zip(terms, ranks, explicit) if "..." in t] or [0])
    ell = "".join(spare[:ell_rank])
    out_terms = []
    for t, r, e in zip(terms, ranks, explicit):
        if "..." in t:
            t = t.replace("...", ell[ell_rank - (r - e):] if r - e else "")
        if len(t) != r:
            raise GraphError(f"{label}: term {t!r} of equation {equation!r} names {len(t)} axes for an input of "
                             f"rank {r}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
        missing = sorted(set(out) - set("".join(out_terms)))
        if missing or len(set(out)) != len(out):
            raise GraphError(f"{label}: output {rhs!r} of equation {equation!r} names letters {missing or sorted(out)} "
                             "that no input has, or one twice")
    else:
        joined = "".join(out_terms)
        out = ell + "".join(sorted(c for c in set(joined) - set(ell) if joined.count(c) == 1))
    return out_terms, out


def _transpose(ctx: ConvertContext, t: _Term, letters: str, hint: str) -> _Term:
    if letters == t.letters:
        return t
    perm = [t.letters.index(c) for c in letters]
    out = ctx.fresh(hint)
    ctx.emit("Transpose", [t.name], [out], {"perm": perm})
    return _Term(out, letters, tuple(t.shape[p] for p in perm))


def _reshape(ctx: ConvertContext, name: str, shape: tuple[int, ...], hint: str) -> str:
    out = ctx.fresh(hint)
    ctx.emit("Reshape", [name, ctx.add_constant(np.array(shape, np.int64), f"{hint}_shape")], [out])
    return out


def _reduce_sum(ctx: ConvertContext, t: _Term, drop: str, hint: str) -> _Term:
    if not drop:
        return t
    axes = [t.letters.index(c) for c in drop]
    out = ctx.fresh(hint)
    ctx.emit("ReduceSum", [t.name, ctx.add_constant(np.array(axes, np.int64), f"{hint}_axes")], [out],
             {"keepdims": 0})
    keep = [i for i in range(len(t.letters)) if i not in axes]
    return _Term(out, "".join(t.letters[i] for i in keep), tuple(t.shape[i] for i in keep))


def _diagonals(ctx: ConvertContext, t: _Term, dtype: str, label: str) -> _Term:
    """``t`` with each repeated letter's axes reduced to their diagonal (one axis per letter)."""
    while len(set(t.letters)) != len(t.letters):
        c = next(c for c in t.letters if t.letters.count(c) > 1)
        p = t.letters.index(c)
        q = t.letters.index(c, p + 1)
        if t.shape[p] != t.shape[q]:
            raise GraphError(f"{label}: letter {c!r} labels axes of sizes {t.shape[p]} and {t.shape[q]}; a repeated "
                             "letter's axes must be equal")
        mask_shape = [1] * len(t.shape)
        mask_shape[p] = mask_shape[q] = t.shape[p]
        mask = np.eye(t.shape[p], dtype=dtype).reshape(mask_shape)
        masked = ctx.fresh(f"{t.name}_diag_mask")
        ctx.emit("Mul", [t.name, ctx.add_constant(mask, f"{t.name}_eye")], [masked])
        summed = _reduce_sum(ctx, _Term(masked, t.letters[:q] + "\0" + t.letters[q + 1:], t.shape), "\0",
                             f"{t.name}_diag")
        t = summed
    return t


def _contract(ctx: ConvertContext, a: _Term, b: _Term, keep: set[str], hint: str) -> _Term:
    """``a`` and ``b`` multiplied, the letters outside ``keep`` summed: one batched MatMul."""
    batch = "".join(c for c in a.letters if c in b.letters and c in keep)
    summed = "".join(c for c in a.letters if c in b.letters and c not in keep)
    rows = "".join(c for c in a.letters if c not in b.letters)
    cols = "".join(c for c in b.letters if c not in a.letters)
    a = _transpose(ctx, a, batch + rows + summed, f"{hint}_a")
    b = _transpose(ctx, b, batch + summed + cols, f"{hint}_b")
    size = dict(zip(a.letters, a.shape)) | {c: s for c, s in zip(b.letters, b.shape) if c not in a.letters}
    for c in summed:
        sa, sb = a.shape[a.letters.index(c)], b.shape[b.letters.index(c)]
        if sa != sb:
            raise GraphError(f"{hint}: summed letter {c!r} has sizes {sa} and {sb}; expected equal sizes")
    nb = len(batch)
    m = int(np.prod([size[c] for c in rows], dtype=np.int64))
    k = int(np.prod([a.shape[a.letters.index(c)] for c in summed], dtype=np.int64))
    n = int(np.prod([size[c] for c in cols], dtype=np.int64))
    lhs = _reshape(ctx, a.name, a.shape[:nb] + (m, k), f"{hint}_a2")
    rhs = _reshape(ctx, b.name, b.shape[:nb] + (k, n), f"{hint}_b2")
    prod = ctx.fresh(f"{hint}_matmul")
    ctx.emit("MatMul", [lhs, rhs], [prod])
    out_batch = ctx.type_of(prod).shape[:nb]
    shape = tuple(out_batch) + tuple(size[c] for c in rows) + tuple(size[c] for c in cols)
    return _Term(_reshape(ctx, prod, shape, f"{hint}_out"), batch + rows + cols, shape)


@converter("Einsum", since=12)
def _einsum(ctx: ConvertContext, node: OnnxNode) -> None:
    """Rewritten: diagonals (Mul by an identity mask, ReduceSum), sums (ReduceSum), each pair of operands one
    batched MatMul between Transposes and Reshapes, the result transposed to the output's order."""
    if "equation" not in node.attrs:
        raise GraphError(f"{node.label}: missing required attribute 'equation'")
    equation = node.attrs["equation"]
    equation = equation.decode() if isinstance(equation, bytes) else equation
    types = [ctx.type_of(i) for i in node.inputs]
    letters, out = parse_einsum(equation, [len(t.shape) for t in types], node.label)
    hint = node.outputs[0]
    terms = [_diagonals(ctx, _Term(name, ls, tuple(t.shape)), t.dtype, node.label)
             for name, ls, t in zip(node.inputs, letters, types)]
    for i, t in enumerate(terms):  # letters no other term and not the output needs are summed at once
        others = set(out).union(*(u.letters for j, u in enumerate(terms) if j != i))
        terms[i] = _reduce_sum(ctx, t, "".join(c for c in t.letters if c not in others), f"{hint}_sum{i}")
    acc = terms[0]
    for i, t in enumerate(terms[1:], start=1):
        keep = set(out).union(*(u.letters for u in terms[i + 1:]))
        acc = _contract(ctx, acc, t, keep, f"{hint}_c{i}")
    acc = _transpose(ctx, acc, out, f"{hint}_t")
    ctx.emit("Identity", [acc.name], node.outputs, {}, node.name)
