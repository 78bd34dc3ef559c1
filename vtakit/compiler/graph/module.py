"""``NetModule``: a built network, ready to run: the executor's plan, its kernels and its constants.

The compiler side of a built network. It holds what :class:`vtakit.runtime.graph_executor.GraphExecutor`
runs (a plan over a planned arena, kernels as callables, the constants) plus the descriptions a
user asks for (input names, shapes and dtypes; a profile table).
"""

from __future__ import annotations

from dataclasses import dataclass
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from vtakit.compiler.backend.llvm_object import load_object
from vtakit.compiler.graph.package import Package, read_package, write_package
from vtakit.errors import ArgumentError, CompileError, GraphError
from vtakit.runtime.graph_executor import GraphExecutor, LayerTiming, Plan

__all__ = ["NetModule", "Profile", "InputInfo", "load"]


@dataclass(frozen=True)
class InputInfo:
    """A run-time input: its name, shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Profile:
    """A profiled run: the outputs and one row per executed kernel."""

    outputs: list[np.ndarray]
    layers: list[LayerTiming]

    @property
    def total_seconds(self) -> float:
        return sum(row.seconds for row in self.layers)

    def to_json(self) -> dict[str, Any]:
        return {"total_seconds": self.total_seconds,
                "layers": [{"name": r.name, "ops": list(r.ops), "target": r.target, "shape": list(r.shape),
                            "seconds": r.seconds} for r in self.layers]}

    def __str__(self) -> str:
        total = self.total_seconds or 1.0
        rows = [(r.name, "+".join(r.ops), r.target, "x".join(map(str, r.shape)), f"{r.seconds * 1e6:.1f}",
                 f"{100 * r.seconds / total:.1f}") for r in self.layers]
        head = ("layer", "ops", "target", "shape", "us", "%")
        widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
        lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in (head, *rows)]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.append(f"total {self.total_seconds * 1e3:.3f} ms in {len(self.layers)} kernels")
        return "\n".join(lines)


class NetModule:
    """A compiled network: ``run(inputs) -> outputs``, ``debug_run``, ``profile``, ``save``."""

    def __init__(self, plan: Plan, kernels: Sequence[Callable[..., Any]], constants: Mapping[str, np.ndarray],
                 *, target: str = "llvm", kernel_objects: Sequence[Any] = (), stats: Any = None
                 ) -> None:
        self.plan = plan
        self.target = target
        self.constants = dict(constants)
        self.kernel_objects = list(kernel_objects)  # what save() writes for each kernel (object code)
        self.stats = stats  # the build's BuildStats (None for a loaded module)
        self._executor = GraphExecutor(plan, kernels, self.constants)

    @property
    def input_names(self) -> list[str]:
        return list(self.plan.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.plan.outputs)

    @property
    def input_info(self) -> list[InputInfo]:
        return [InputInfo(n, self.plan.values[n].shape, self.plan.values[n].dtype) for n in self.plan.inputs]

    @property
    def num_kernels(self) -> int:
        return len(self.plan.steps)

    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """The outputs for ``inputs`` (a dict by input name, or arrays in input order), in output order."""
        return self._executor.run(inputs)

    def debug_run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
        """Every tensor the network materialises (its inputs, the constants its kernels read and every value
        a kernel writes, as TVM's debug executor), keyed by value name, in the graph's layout. Values
        inside a fused kernel are never stored; build with ``disabled_passes=("FuseOps",)`` to see them."""
        return self._executor.debug_run(inputs)

    def profile(self, inputs: Mapping[str, Any] | Sequence[Any]) -> Profile:
        """A run timed kernel by kernel."""
        outputs, rows = self._executor.profile(inputs)
        return Profile(outputs, rows)

    def save(self, path: str | os.PathLike) -> None:
        """Write the module to one file (see :mod:`.package`); :func:`load` reads it back."""
        write_package(path, Package(self.target, self.plan, list(self.kernel_objects), self.constants))

    def __repr__(self) -> str:
        ins = ", ".join(f"{i.name}: {i.dtype}{list(i.shape)}" for i in self.input_info)
        return f"<NetModule ({ins}) -> {self.output_names} on {self.target}, {self.num_kernels} kernels>"


def load(path: str | os.PathLike) -> NetModule:
    """The module saved at ``path``, ready to run: its kernels are linked, nothing is compiled."""
    package = read_package(path)
    try:
        functions = [load_object(k) for k in package.kernels]
        return NetModule(package.plan, functions, package.constants, target=package.target,
                         kernel_objects=package.kernels)
    except (CompileError, ArgumentError) as exc:
        raise GraphError(f"{os.fspath(path)!r} is damaged: {exc}") from None
