"""The state of one accelerator build that the ``vta`` graph passes and kernel compiler share.

Graph passes are ``Graph -> Graph`` functions, but the accelerator's depend on the configuration
(block sizes, SRAMs, ALU_MUL) and on the tuning log, and its partitioning decisions (which layer
runs where, and why) must reach the build's steps. :func:`vta_build_context` makes a
:class:`VTABuildContext` current for the duration of a build (or of ``optimize``/``extract_tasks``);
:func:`current_context` returns it, or a default one (``VTAConfig()``, no log) outside a build.
Inside :func:`shared_kernels`, the builds of one configuration and tuning log share their compiled
accelerator kernels (``extract_tasks`` then ``build`` of the same network compile each layer once).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from vtakit.compiler.vta.env import VTAEnv, get_env
from vtakit.errors import GraphError
from vtakit.hw.config import VTAConfig

__all__ = ["VTABuildContext", "vta_build_context", "current_context", "check_config", "shared_kernels"]

_local = threading.local()


@dataclass
class VTABuildContext:
    """A build's configuration, tuning records, layer decisions and compiled accelerator kernels.

    ``notes`` maps a step's output value to why it runs on the CPU (or what a CPU layout step is
    for); ``layer_notes`` maps an accelerator layer's (original) output to a remark on how it runs;
    ``kernels`` maps a layer's kernel key to its compiled kernel (one compile per unique layer)."""

    config: VTAConfig
    tuning_log: str | Path | None = None
    notes: dict[str, str] = field(default_factory=dict)
    layer_notes: dict[str, str] = field(default_factory=dict)
    kernels: dict[Any, Any] = field(default_factory=dict)
    decisions: dict[str, Any] = field(default_factory=dict)
    _history: Any = None

    @property
    def env(self) -> VTAEnv:
        return get_env(self.config)

    @property
    def history(self) -> Any:
        """The log's best records (an ``ApplyHistoryBest``), or None without a log."""
        if self.tuning_log is not None and self._history is None:
            from vtakit.compiler.autotune.dispatch import ApplyHistoryBest  # noqa: PLC0415 -- autotune is heavy

            self._history = ApplyHistoryBest(self.tuning_log)
        return self._history


def check_config(config: Any) -> VTAConfig:
    """``config`` (None: ``VTAConfig()``) as a :class:`VTAConfig`; anything else is a :class:`GraphError`."""
    if config is None:
        return VTAConfig()
    if not isinstance(config, VTAConfig):
        raise GraphError(f"target vta: config must be a vtakit VTAConfig, got {type(config).__name__}")
    return config


@contextlib.contextmanager
def vta_build_context(config: Any = None, tuning_log: str | Path | None = None) -> Iterator[VTABuildContext]:
    """Make a fresh :class:`VTABuildContext` for ``config`` current inside the ``with`` block."""
    ctx = VTABuildContext(check_config(config), tuning_log)
    memo = getattr(_local, "shared", None)
    if memo is not None:   # a kernel depends on its LayerSpec, the configuration and the tuning log only
        ctx.kernels = memo.setdefault((ctx.config.to_json(), None if tuning_log is None else str(tuning_log)), {})
    stack = _stack()
    stack.append(ctx)
    try:
        yield ctx
    finally:
        stack.pop()


@contextlib.contextmanager
def shared_kernels() -> Iterator[None]:
    """Inside the ``with`` block (this thread), every build context of the same configuration and tuning
    log shares one ``kernels`` table: a layer compiled by one build (or ``extract_tasks``) is not compiled
    again by the next. Nested blocks share the outer table; it is dropped when the outermost block ends.
    The tuning log is keyed by its path, so it must not change inside the block."""
    outer = getattr(_local, "shared", None)
    if outer is None:
        _local.shared = {}
    try:
        yield
    finally:
        if outer is None:
            _local.shared = None


def _stack() -> list[VTABuildContext]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def current_context() -> VTABuildContext:
    """The innermost active context, or a default one (``VTAConfig()``, no tuning log)."""
    stack = _stack()
    if not stack:
        stack.append(VTABuildContext(VTAConfig()))  # passes run outside a build: one default context per thread
    return stack[-1]
