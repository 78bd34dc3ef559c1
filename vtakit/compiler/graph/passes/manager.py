"""The pass manager: run a named list of graph passes, as TVM's ``Sequential`` under a ``PassContext``.

Passes named in ``disabled`` are skipped, and so are passes whose ``opt_level`` is above the
build's. A pass whose required pass did not run before it is an error naming both. In debug mode
(``debug=True`` or ``VTAKIT_GRAPH_DEBUG=1``) the graph is verified after every pass, so a broken
rewrite is caught where it happens; ``dump_dir`` (or ``VTAKIT_GRAPH_DUMP``) receives the graph as
text after each pass, one file per pass named by its position and name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from vtakit.compiler.graph.ir import Graph
from vtakit.compiler.graph.passes.registry import get_pass
from vtakit.errors import GraphError

__all__ = ["run_passes"]


def run_passes(graph: Graph, names: Sequence[str], *, disabled: Sequence[str] = (), opt_level: int = 3,
               debug: bool | None = None, dump_dir: str | os.PathLike | None = None) -> Graph:
    """``graph`` after the passes ``names`` in order (minus ``disabled`` and those above ``opt_level``)."""
    passes = [get_pass(name) for name in names]
    for name in disabled:
        get_pass(name)  # an unknown name in disabled is a typo worth reporting
    if debug is None:
        debug = os.environ.get("VTAKIT_GRAPH_DEBUG", "") not in ("", "0")
    if dump_dir is None and os.environ.get("VTAKIT_GRAPH_DUMP"):
        dump_dir = os.environ["VTAKIT_GRAPH_DUMP"]
    if dump_dir is not None:
        Path(dump_dir).mkdir(parents=True, exist_ok=True)
    done: set[str] = set()
    for index, p in enumerate(passes):
        if p.name in disabled or p.info.opt_level > opt_level:
            continue
        missing = [r for r in p.info.required if r not in done]
        if missing:
            raise GraphError(f"pass {p.name} requires {missing} to run before it, but they were disabled or not "
                             "listed earlier")
        graph = p(graph)
        done.add(p.name)
        if debug:
            try:
                graph.verify()
            except GraphError as exc:
                raise GraphError(f"the graph is malformed after pass {p.name}: {exc}") from exc
        if dump_dir is not None:
            (Path(dump_dir) / f"{index:02d}_{p.name}.txt").write_text(str(graph) + "\n")
    return graph
