"""Hash-consing of expression trees: one small integer per structurally distinct subtree.

The simplifier memoises its results per expression for the span of one top-level query (bounds
do not change within it). Keying a memo by :func:`structural_key` would hash a nested tuple as
large as the expression at every lookup, quadratic in depth; here each node gets an integer id
from its type, its scalar fields and its children's ids, so a lookup costs one dictionary probe
per new node and one per already-seen object.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from vtakit.compiler import ir

__all__ = ["HashCons"]

_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    return names


class HashCons:
    """Integer ids, equal exactly when :func:`~vtakit.compiler.arith.structural_key` calls trees equal."""

    __slots__ = ("_by_object", "_by_shape")

    def __init__(self) -> None:
        self._by_object: dict[int, tuple[int, Any]] = {}   # id(node) -> (key, node kept alive)
        self._by_shape: dict[tuple, int] = {}

    def key(self, e: Any) -> Any:
        """The id of ``e``'s structure: variables and buffers by identity, like ``structural_key``."""
        hit = self._by_object.get(id(e))
        if hit is not None:
            return hit[0]
        if isinstance(e, (ir.Var, ir.Buffer)):
            shape: tuple = ("object", id(e))
        elif isinstance(e, (ir.PrimExpr, ir.Stmt)):
            shape = (type(e),) + tuple(self._field(getattr(e, name)) for name in _field_names(type(e)))
        else:
            return self._field(e)
        k = self._by_shape.setdefault(shape, len(self._by_shape))
        self._by_object[id(e)] = (k, e)  # the node stays alive, so its id is not reused meanwhile
        return k

    def _field(self, x: Any) -> Any:
        if isinstance(x, (ir.PrimExpr, ir.Stmt, ir.Var, ir.Buffer)):
            return ("node", self.key(x))
        if isinstance(x, tuple):
            return ("tuple",) + tuple(self._field(y) for y in x)
        if isinstance(x, (int, float, str, bool, type(None))):
            return x  # as in structural_key (1 == 1.0 == True there too)
        return ("object", id(x))  # tensors, ops, lists: by identity, as in structural_key
