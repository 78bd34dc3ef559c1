"""``vtakit.build``: compile a schedule for a target, dispatching to builders registered by name.

A target builder is ``builder(sch, args, name, config, target) -> module`` (``target`` is the
full target string, options included, e.g. ``"llvm -mcpu=skylake"``); it lowers the schedule itself
(usually inside its own :class:`~vtakit.compiler.transform.PassContext`, to add passes and memory
scopes) and returns a callable module. ``sch`` may also be an already lowered ``PrimFunc``.
The llvm, cuda (alias nvptx) and vta backends register themselves when their modules are imported; the
builtin ``"interpreter"`` target runs the reference interpreter.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Sequence

from vtakit.compiler import ir
from vtakit.compiler.te.schedule import Schedule
from vtakit.errors import CompileError

__all__ = ["register_target", "registered_targets", "build", "InterpreterModule", "register_lowering",
           "lowering_context", "implied_target"]

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
    _lookup(target)  # imports the target's module, which registers its lowering; rejects unknown targets
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


def _lookup(target: str) -> TargetBuilder:
    kind = _target_kind(target)
    if kind not in _TARGETS and kind in _LAZY:
        try:
            importlib.import_module(_LAZY[kind])
        except ImportError as exc:
            raise CompileError(f"target {kind!r} is not available: {exc}") from exc
    if kind not in _TARGETS:
        raise CompileError(f"unknown target {target!r}; registered targets: {registered_targets()}")
    return _TARGETS[kind]


def build(s: Any, args: Sequence[Any] | None = None, target: str = "llvm", name: str = "main",
          config: Any = None) -> Any:
    """Compile schedule ``s`` (or a lowered PrimFunc) with parameters ``args`` for ``target``.

    As in TVM, ``args`` lists every tensor the module reads or writes: the schedule's outputs
    must be among them, or the module would compute into memory the caller never sees.
    """
    args = list(args) if args is not None else []
    if isinstance(s, Schedule):
        _check_outputs_passed(s, args)
    return _lookup(target)(s, args, name, config, target)


def _check_outputs_passed(s: Schedule, args: Sequence[Any]) -> None:
    passed = {id(getattr(a, "op", None)) for a in args}
    missing = [op.name for op in s.outputs if id(op) not in passed]
    if missing:
        raise CompileError(f"build: the schedule's output tensor(s) {missing} are not among the arguments "
                           f"{[getattr(a, 'name', a) for a in args]}; pass every input and output, outputs included")


class InterpreterModule:
    """A built module that runs the lowered function in the reference interpreter."""

    def __init__(self, func: ir.PrimFunc) -> None:
        from vtakit.compiler.interpreter import Interpreter  # noqa: PLC0415

        self.func = func
        self._run = Interpreter(func)

    def __call__(self, *arrays: Any) -> None:
        self._run(*arrays)


def _interpreter_builder(s: Any, args: Sequence[Any], name: str, config: Any, target: str) -> InterpreterModule:
    from vtakit.compiler.lower import lower  # noqa: PLC0415

    func = s if isinstance(s, ir.PrimFunc) else lower(s, args, name=name)
    return InterpreterModule(func)


register_target("interpreter", _interpreter_builder)
