"""The target registry: which builder compiles for a target name, and which PassContext lowers for it.

A backend registers itself when its module is imported (``register_target``, ``register_lowering``);
the names in ``_LAZY`` are imported on first use, so ``build(..., target="llvm")`` needs no import.
``vtakit.build`` dispatches through it and ``vtakit.lower`` asks it for a target's lowering
context; it imports neither, so both can import it.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Sequence

from vtakit.errors import CompileError

__all__ = ["TargetBuilder", "register_target", "registered_targets", "register_lowering", "lowering_context",
           "implied_target", "target_builder"]

TargetBuilder = Callable[[Any, Sequence[Any], str, Any, str], Any]

_TARGETS: dict[str, TargetBuilder] = {}
# modules that register a target when imported (so `build(..., target="llvm")` works without imports)
_LAZY: dict[str, str] = {
    "llvm": "vtakit.compiler.backend.llvm",
    "cuda": "vtakit.compiler.backend.nvptx",
    "nvptx": "vtakit.compiler.backend.nvptx",  # an alias of cuda
    "vta": "vtakit.compiler.vta.module",
}


def register_target(name: str, builder: TargetBuilder, override: bool = False) -> None:
    """Make ``build(..., target=name)`` call ``builder``."""
    if name in _TARGETS and not override and _TARGETS[name] is not builder:
        raise CompileError(f"target {name!r} is already registered; pass override=True to replace it")
    _TARGETS[name] = builder


# target -> factory(config) of the PassContext that lowers for it (passes + memory scopes)
_LOWERINGS: dict[str, Callable[[Any], Any]] = {}
# memory scopes that only a target's lowering understands: using one implies that target
_SCOPE_TARGETS: dict[str, str] = {
    "local.inp_buffer": "vta",
    "local.wgt_buffer": "vta",
    "local.acc_buffer": "vta",
    "local.uop_buffer": "vta",
}


def register_lowering(name: str, context: Callable[[Any], Any]) -> None:
    """Make ``vtakit.lower(..., target=name, config=cfg)`` lower inside ``context(cfg)``."""
    _LOWERINGS[name] = context


def lowering_context(target: str, config: Any = None) -> Any:
    """The PassContext that lowers for ``target`` (None when the target adds no lowering passes)."""
    target_builder(target)  # imports the target's module, which registers its lowering; rejects unknown targets
    factory = _LOWERINGS.get(_target_kind(target))
    return factory(config) if factory is not None else None


def implied_target(scopes: Sequence[str]) -> str | None:
    """The target a schedule needs because it stores stages in that target's memory scopes."""
    targets = {_SCOPE_TARGETS[s] for s in scopes if s in _SCOPE_TARGETS}
    if len(targets) > 1:
        raise CompileError(f"the schedule mixes memory scopes of targets {sorted(targets)}")
    return targets.pop() if targets else None


def registered_targets() -> list[str]:
    """The names ``build`` accepts now (lazily loaded backends appear once imported)."""
    return sorted(_TARGETS)


def _target_kind(target: Any) -> Any:
    """``"llvm -mcpu=x"`` -> ``"llvm"``: the registered name in a target string."""
    return target.split()[0] if isinstance(target, str) and target.strip() else target


def target_builder(target: str) -> TargetBuilder:
    """The builder registered for ``target``'s name, importing its backend first if need be."""
    kind = _target_kind(target)
    if kind not in _TARGETS and kind in _LAZY:
        try:
            importlib.import_module(_LAZY[kind])
        except ImportError as exc:
            raise CompileError(f"target {kind!r} is not available: {exc}") from exc
    if kind not in _TARGETS:
        raise CompileError(f"unknown target {target!r}; registered targets: {registered_targets()}")
    return _TARGETS[kind]
