"""Graph passes: each a ``Graph -> Graph`` function registered with its name and requirements.

As TVM's ``PassInfo`` does, a pass declares once, on itself, its name and the passes that must
have run before it; :mod:`.manager` runs a named list of them. Registering here (a leaf module)
lets each pass live in its own file without the manager importing them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from vtakit.compiler.graph.ir import Graph
from vtakit.errors import GraphError

__all__ = ["PassInfo", "GraphPass", "graph_pass", "get_pass", "registered_passes"]


@dataclass(frozen=True)
class PassInfo:
    """A pass's name, the passes it needs to have run before it, and the least ``opt_level`` it runs at."""

    name: str
    required: tuple[str, ...] = ()
    opt_level: int = 0


@dataclass(frozen=True)
class GraphPass:
    """A registered pass: call it on a graph to get the rewritten graph."""

    info: PassInfo
    function: Callable[[Graph], Graph]

    @property
    def name(self) -> str:
        return self.info.name

    def __call__(self, graph: Graph) -> Graph:
        result = self.function(graph)
        if not isinstance(result, Graph):
            raise GraphError(f"pass {self.name} returned {type(result).__name__}, expected a Graph")
        return result


_PASSES: dict[str, GraphPass] = {}


def graph_pass(name: str, *, required: tuple[str, ...] = (), opt_level: int = 0
               ) -> Callable[[Callable[[Graph], Graph]], GraphPass]:
    """Decorator registering ``function(graph) -> graph`` as the pass ``name``."""
    def wrap(function: Callable[[Graph], Graph]) -> GraphPass:
        if name in _PASSES:
            raise GraphError(f"graph pass {name!r} is already registered")
        _PASSES[name] = GraphPass(PassInfo(name, tuple(required), opt_level), function)
        return _PASSES[name]
    return wrap


def get_pass(name: str) -> GraphPass:
    try:
        return _PASSES[name]
    except KeyError:
        raise GraphError(f"unknown graph pass {name!r}; registered: {', '.join(sorted(_PASSES))}") from None


def registered_passes() -> dict[str, GraphPass]:
    return dict(_PASSES)
