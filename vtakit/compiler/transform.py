"""Pass infrastructure: the PassContext that targets use to add passes and memory scopes.

A pass is a callable ``PrimFunc -> PrimFunc``. ``lower`` runs its built-in passes in four phases
(reference/tvm_compiler.md §1.4); a target adds its own per phase with
``PassContext(config={"tir.add_lower_pass": [(phase, pass), ...]})``, registers its memory scopes
with ``memory_scopes=``, and can switch built-in passes off by name with ``disabled_pass=``.

Config keys: ``tir.add_lower_pass`` (list of (phase, pass)), ``tir.UnrollLoop.auto_max_step``
(int, default 0), ``tir.disable_vectorize`` (bool: vectorized loops stay serial),
``tir.LoopPartition.partition_const_loop`` (bool, default False: peel split tails off loops).
TVM's nested spelling is accepted too: ``config={"tir.UnrollLoop": {"auto_max_step": 16}}``;
``opt_level`` is accepted for TVM compatibility (vtakit runs the same passes at every level).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from vtakit.compiler import ir
from vtakit.compiler.scope import MemoryInfo, registered_info
from vtakit.errors import CompileError

__all__ = ["Pass", "PassContext", "BUILTIN_PASSES", "KNOWN_CONFIG", "get_memory_info"]

Pass = Callable[[ir.PrimFunc], ir.PrimFunc]

BUILTIN_PASSES = ("StorageFlatten", "Simplify", "LoopPartition", "VectorizeLoop", "InjectVirtualThread",
                  "InjectDoubleBuffer", "VerifyMemoryScopes", "UnrollLoop", "RemoveNoOp")
KNOWN_CONFIG = ("tir.add_lower_pass", "tir.UnrollLoop.auto_max_step", "tir.disable_vectorize",
                "tir.LoopPartition.partition_const_loop")


@dataclass
class PassContext:
    """Compilation options in effect inside ``with PassContext(...):``."""

    config: dict[str, Any] = field(default_factory=dict)
    memory_scopes: dict[str, Any] = field(default_factory=dict)
    disabled_pass: tuple[str, ...] = ()
    opt_level: int = 2

    _local: ClassVar[threading.local] = threading.local()  # a stack of active contexts per thread

    def __post_init__(self) -> None:
        self.config = _flatten_config(self.config)
        self.disabled_pass = tuple(self.disabled_pass)
        for key in self.config:
            if key not in KNOWN_CONFIG:
                raise CompileError(f"unknown PassContext config key {key!r}; known keys: {list(KNOWN_CONFIG)}")
        for phase, p in self.config.get("tir.add_lower_pass", []):
            if phase not in (0, 1, 2, 3) or not callable(p):
                raise CompileError(f"tir.add_lower_pass entries are (phase 0-3, callable), got ({phase!r}, {p!r})")
        for name in self.disabled_pass:
            if name not in BUILTIN_PASSES:
                raise CompileError(f"cannot disable unknown pass {name!r}; built-in passes: {list(BUILTIN_PASSES)}")
        for scope, info in self.memory_scopes.items():
            if not isinstance(info, MemoryInfo):
                raise CompileError(f"memory_scopes[{scope!r}] must be a MemoryInfo, got {info!r}")

    @staticmethod
    def _stack() -> list["PassContext"]:
        if not hasattr(PassContext._local, "stack"):
            PassContext._local.stack = []
        return PassContext._local.stack

    def __enter__(self) -> "PassContext":
        PassContext._stack().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        PassContext._stack().pop()

    @staticmethod
    def current() -> "PassContext":
        stack = PassContext._stack()
        return stack[-1] if stack else _DEFAULT

    def user_passes(self, phase: int) -> list[Pass]:
        return [p for ph, p in self.config.get("tir.add_lower_pass", []) if ph == phase]

    def enabled(self, name: str) -> bool:
        return name not in self.disabled_pass


def _flatten_config(config: dict[str, Any]) -> dict[str, Any]:
    """TVM's ``{"tir.UnrollLoop": {"auto_max_step": 16}}`` as ``{"tir.UnrollLoop.auto_max_step": 16}``."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and key in ("tir.UnrollLoop", "tir.LoopPartition"):
            out.update({f"{key}.{sub}": v for sub, v in value.items()})
        else:
            out[key] = value
    return out


_DEFAULT = PassContext()


def get_memory_info(scope: str) -> MemoryInfo | None:
    """The info of the memory ``scope``: the current PassContext's first, then the global registry."""
    ctx = PassContext.current()
    if scope in ctx.memory_scopes:
        return ctx.memory_scopes[scope]
    return registered_info(scope)
