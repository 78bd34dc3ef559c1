"""Helpers for testing one pass on hand-built loop IR: the nodes of a kind in a function, and the
reference interpreter as the golden model (a pass must not change what a function computes)."""

from __future__ import annotations

import numpy as np

from vtakit.compiler import ir
from vtakit.compiler.interpreter import run

__all__ = ["nodes", "assert_same_results"]


def nodes(func: ir.PrimFunc, kind: type) -> list:
    """Every node of ``func``'s body that is a ``kind``, in walk order."""
    found: list = []
    ir.walk(func.body, lambda n: found.append(n) if isinstance(n, kind) else None)
    return found


def assert_same_results(before: ir.PrimFunc, after: ir.PrimFunc, seed: int = 0) -> None:
    """Run both functions on the same random integer arguments (outputs pre-filled with the same
    values, so a missing or extra store shows) and require every argument to end equal."""
    rng = np.random.default_rng(seed)
    args = [rng.integers(-1000, 1000, [ir.int_value(d) for d in buf.shape]).astype(buf.dtype)
            for buf in before.params]
    ran_before, ran_after = [a.copy() for a in args], [a.copy() for a in args]
    run(before, *ran_before)
    run(after, *ran_after)
    for buf, got, want in zip(before.params, ran_after, ran_before):
        np.testing.assert_array_equal(got, want, err_msg=f"argument {buf.name}")
