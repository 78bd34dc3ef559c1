"""Memory scopes: what a tagged storage scope (``local.acc_buffer``, ...) holds and how much.

A target registers its scopes (unit bits, capacity bits, SIMD width, optional CPU-visible head
address) globally with :func:`register_memory_scope`, or per compilation through
``PassContext(memory_scopes=...)``, where ``transform.get_memory_info`` looks first (the
accelerator's scopes depend on its configuration).
Lowering checks every allocation in a tagged scope against the capacity: a
:class:`~vtakit.errors.CompileError` names the buffer, its size and the capacity.
Untagged scopes (``global``, ``shared``, ``warp``, ``local``) need no registration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vtakit.errors import CompileError

__all__ = ["MemoryInfo", "register_memory_scope", "registered_info", "is_tagged", "registered_scopes"]


@dataclass(frozen=True)
class MemoryInfo:
    """TVM's ``MemoryInfoNode``: addressable unit, capacity, alignment width, head address."""

    unit_bits: int
    max_num_bits: int
    max_simd_bits: int = 0
    head_address: Any = None

    def __post_init__(self) -> None:
        for name in ("unit_bits", "max_num_bits"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise CompileError(f"MemoryInfo.{name} must be a positive int, got {v!r}")


_REGISTRY: dict[str, MemoryInfo] = {}


def is_tagged(scope: str) -> bool:
    """Whether ``scope`` has a tag after its rank (``local.inp_buffer`` does, ``shared`` does not)."""
    return "." in scope and not scope.endswith((".dyn", ".workspace"))


def register_memory_scope(scope: str, info: MemoryInfo, override: bool = False) -> None:
    """Register ``info`` for the memory ``scope`` globally."""
    if not isinstance(info, MemoryInfo):
        raise CompileError(f"register_memory_scope({scope!r}): expected a MemoryInfo, got {info!r}")
    if scope in _REGISTRY and not override and _REGISTRY[scope] != info:
        raise CompileError(f"memory scope {scope!r} is already registered as {_REGISTRY[scope]}; "
                           "pass override=True to replace it")
    _REGISTRY[scope] = info


def registered_info(scope: str) -> MemoryInfo | None:
    """The globally registered info of ``scope``, if any (``transform.get_memory_info`` looks in
    the current PassContext first)."""
    return _REGISTRY.get(scope)


def registered_scopes() -> dict[str, MemoryInfo]:
    """A copy of the global scope registry."""
    return dict(_REGISTRY)
