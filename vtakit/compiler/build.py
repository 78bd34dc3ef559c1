"""``vtakit.build``: compile a schedule for a target, dispatching to builders registered by name.

A target builder is ``builder(sch, args, name, config, target) -> module`` (``target`` is the
full target string, options included, e.g. ``"llvm -mcpu=skylake"``); it lowers the schedule itself
(usually inside its own :class:`~vtakit.compiler.transform.PassContext`, to add passes and memory
scopes) and returns a callable module. ``sch`` may also be an already lowered ``PrimFunc``.
The llvm, cuda (alias nvptx) and vta backends register themselves in :mod:`vtakit.compiler.targets`
when their modules are imported (the registry's functions are re-exported here); the builtin
``"interpreter"`` target runs the reference interpreter.
"""

from __future__ import annotations

from typing import Any, Sequence

from vtakit.compiler import ir
from vtakit.compiler.interpreter import Interpreter
from vtakit.compiler.lower import lower
from vtakit.compiler.targets import (
    implied_target, lowering_context, register_lowering, register_target, registered_targets, target_builder,
)
from vtakit.compiler.te.schedule import Schedule
from vtakit.errors import CompileError

__all__ = ["register_target", "registered_targets", "build", "InterpreterModule", "register_lowering",
           "lowering_context", "implied_target"]


def build(s: Any, args: Sequence[Any] | None = None, target: str = "llvm", name: str = "main",
          config: Any = None) -> Any:
    """Compile schedule ``s`` (or a lowered PrimFunc) with parameters ``args`` for ``target``.

    As in TVM, ``args`` lists every tensor the module reads or writes: the schedule's outputs
    must be among them, or the module would compute into memory the caller never sees.
    """
    args = list(args) if args is not None else []
    if isinstance(s, Schedule):
        _check_outputs_passed(s, args)
    return target_builder(target)(s, args, name, config, target)


def _check_outputs_passed(s: Schedule, args: Sequence[Any]) -> None:
    passed = {id(getattr(a, "op", None)) for a in args}
    missing = [op.name for op in s.outputs if id(op) not in passed]
    if missing:
        raise CompileError(f"build: the schedule's output tensor(s) {missing} are not among the arguments "
                           f"{[getattr(a, 'name', a) for a in args]}; pass every input and output, outputs included")


class InterpreterModule:
    """A built module that runs the lowered function in the reference interpreter."""

    def __init__(self, func: ir.PrimFunc) -> None:
        self.func = func
        self._run = Interpreter(func)

    def __call__(self, *arrays: Any) -> None:
        self._run(*arrays)


def _interpreter_builder(s: Any, args: Sequence[Any], name: str, config: Any, target: str) -> InterpreterModule:
    func = s if isinstance(s, ir.PrimFunc) else lower(s, args, name=name)
    return InterpreterModule(func)


register_target("interpreter", _interpreter_builder)
