"""The graph executor: run a compiled network's plan of kernel calls over one planned memory arena.

This is runtime code (it imports nothing from :mod:`vtakit.compiler`), as TVM's graph executor
imports nothing from Relay: the compiler hands it a :class:`Plan` (which value lives where in the
arena, which kernel each step calls on which values) and one callable per kernel. Everything that
can be decided before the first run is decided when the executor is created: the arena is
allocated once, every value becomes a fixed view of it (or of a constant), and each step's kernel
is bound to its argument arrays, so a run is a copy of the inputs into the arena, one call per
step and a copy of the outputs out of it. ``run`` compiles nothing and allocates no tensor storage
besides the returned outputs.

A kernel is any callable taking its arguments as numpy arrays (inputs then outputs, TVM style).
A kernel that can do better offers ``bind(*arrays) -> callable()``: called once per step with the
step's arrays, it returns a callable that runs the step with no per-call argument handling.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from vtakit.errors import ArgumentError

__all__ = ["ValueInfo", "Step", "Plan", "LayerTiming", "GraphExecutor"]


@dataclass(frozen=True)
class ValueInfo:
    """A tensor of the plan: its shape and dtype, and where it lives: ``offset`` bytes into the host
    arena (``space="host"``) or into the module's region of accelerator DRAM (``space="dram"``), or
    ``None`` for a host constant, which the executor is given by name. A constant in DRAM has an
    offset too; the executor copies it there once, when it places the module on a device."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int | None = None
    space: str = "host"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Step:
    """One kernel call: ``kernels[kernel](*args)`` on the named values (inputs, then outputs).

    ``name``, ``ops`` and ``target`` describe the step in profiles; ``outputs`` counts the trailing
    ``args`` the kernel writes."""

    name: str
    kernel: int
    args: tuple[str, ...]
    outputs: int
    ops: tuple[str, ...] = ()
    target: str = "llvm"

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.args[len(self.args) - self.outputs:]


@dataclass(frozen=True)
class Plan:
    """What the executor runs: the values (inputs and every intermediate in the arena, constants by
    name), the steps in order, the arena's size and the outputs to return.

    A plan with accelerator steps (``target="vta"``, whose kernels are program templates) also
    has the bytes of accelerator DRAM its values need (``dram_bytes``) and the accelerator
    configuration it was compiled for (``config``, as ``VTAConfig.to_dict`` writes it)."""

    values: Mapping[str, ValueInfo]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    steps: tuple[Step, ...]
    arena_bytes: int
    dram_bytes: int = 0
    config: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"values": [[v.name, list(v.shape), v.dtype, v.offset, v.space] for v in self.values.values()],
                "inputs": list(self.inputs), "outputs": list(self.outputs),
                "steps": [[s.name, s.kernel, list(s.args), s.outputs, list(s.ops), s.target] for s in self.steps],
                "arena_bytes": self.arena_bytes, "dram_bytes": self.dram_bytes,
                "config": None if self.config is None else dict(self.config)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Plan":
        values = {v[0]: ValueInfo(v[0], tuple(v[1]), v[2], v[3], *v[4:5]) for v in data["values"]}
        steps = tuple(Step(s[0], s[1], tuple(s[2]), s[3], tuple(s[4]), s[5]) for s in data["steps"])
        return cls(values, tuple(data["inputs"]), tuple(data["outputs"]), steps, int(data["arena_bytes"]),
                   int(data.get("dram_bytes", 0)), data.get("config"))


@dataclass(frozen=True)
class LayerTiming:
    """One executed step of a profiled run."""

    name: str
    ops: tuple[str, ...]
    target: str
    shape: tuple[int, ...]
    seconds: float


class GraphExecutor:
    """Runs a :class:`Plan` with its kernels and constants."""

    def __init__(self, plan: Plan, kernels: Sequence[Callable[..., Any]], constants: Mapping[str, np.ndarray]) -> None:
        self.plan = plan
        self._arena = np.zeros(max(plan.arena_bytes, 1), np.uint8)
        self._views: dict[str, np.ndarray] = {}
        for info in plan.values.values():
            if info.offset is None:
                if info.name not in constants:
                    raise ArgumentError(f"the plan's constant {info.name!r} was not given to the executor")
                const = np.require(constants[info.name], dtype=info.dtype, requirements="C").view()
                if const.shape != info.shape:
                    raise ArgumentError(f"constant {info.name!r} has shape {const.shape}, the plan expects "
                                        f"{info.shape}")
                const.flags.writeable = False
                self._views[info.name] = const
            else:
                end = info.offset + info.nbytes
                if info.offset < 0 or end > plan.arena_bytes:
                    raise ArgumentError(f"value {info.name!r} at bytes [{info.offset}, {end}) lies outside the "
                                        f"{plan.arena_bytes}-byte arena")
                self._views[info.name] = self._arena[info.offset:end].view(info.dtype).reshape(info.shape)
        for step in plan.steps:
            if not 0 <= step.kernel < len(kernels):
                raise ArgumentError(f"step {step.name!r} calls kernel {step.kernel}; the executor has "
                                    f"{len(kernels)} kernels")
            missing = [a for a in step.args if a not in self._views]
            if missing:
                raise ArgumentError(f"step {step.name!r} uses values {missing} that the plan does not place")
        self._inputs = [(name, self._views[name]) for name in plan.inputs]
        self._input_info = [plan.values[name] for name in plan.inputs]
        self._calls: list[Callable[[], Any]] = [self._bind(kernels[s.kernel], [self._views[a] for a in s.args])
                                                for s in plan.steps]

    @staticmethod
    def _bind(kernel: Callable[..., Any], arrays: list[np.ndarray]) -> Callable[[], Any]:
        bind = getattr(kernel, "bind", None)
        if bind is not None:
            return bind(*arrays)
        return lambda: kernel(*arrays)

    # -- inputs ----------------------------------------------------------------------------------
    def set_inputs(self, inputs: Mapping[str, Any] | Sequence[Any]) -> None:
        """Check ``inputs`` (by name, or in input order) and copy them into the arena."""
        names = self.plan.inputs
        if isinstance(inputs, Mapping):
            unknown = [k for k in inputs if k not in names]
            if unknown:
                raise ArgumentError(f"unknown input {unknown[0]!r}; the network's inputs are {list(names)}")
            missing = [n for n in names if n not in inputs]
            if missing:
                raise ArgumentError(f"input {missing[0]!r} is missing; the network's inputs are {list(names)}")
            values = [inputs[n] for n in names]
        else:
            values = list(inputs)
            if len(values) != len(names):
                raise ArgumentError(f"the network takes {len(names)} inputs {list(names)}, got {len(values)}")
        for info, (name, view), value in zip(self._input_info, self._inputs, values):
            if not isinstance(value, np.ndarray):
                value = np.asarray(value)
            if value.shape != info.shape:
                raise ArgumentError(f"input {name!r} has shape {value.shape}, expected {info.shape}")
            if value.dtype != view.dtype:
                raise ArgumentError(f"input {name!r} has dtype {value.dtype}, expected {info.dtype}")
            np.copyto(view, value)

    def _outputs(self) -> list[np.ndarray]:
        return [self._views[name].copy() for name in self.plan.outputs]

    # -- running ---------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """The network's outputs for ``inputs``, in the plan's output order."""
        self.set_inputs(inputs)
        for call in self._calls:
            call()
        return self._outputs()

    def debug_run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
        """Every value (inputs, constants read by a step, each step's outputs) after its step. Kernels read
        and write the graph's layouts (blocked layouts live inside kernels and in packed constants)."""
        self.set_inputs(inputs)
        seen: dict[str, np.ndarray] = {name: view.copy() for name, view in self._inputs}
        for step, call in zip(self.plan.steps, self._calls):
            for name in step.args[:len(step.args) - step.outputs]:
                if name not in seen:
                    seen[name] = self._views[name].copy()
            call()
            for name in step.output_names:
                seen[name] = self._views[name].copy()
        for name in self.plan.outputs:
            seen.setdefault(name, self._views[name].copy())
        return seen

    def profile(self, inputs: Mapping[str, Any] | Sequence[Any]) -> tuple[list[np.ndarray], list[LayerTiming]]:
        """The outputs and each step's wall time."""
        self.set_inputs(inputs)
        rows = []
        clock = time.perf_counter
        for step, call in zip(self.plan.steps, self._calls):
            start = clock()
            call()
            seconds = clock() - start
            rows.append(LayerTiming(step.name, step.ops, step.target,
                                    self.plan.values[step.output_names[0]].shape if step.outputs else (), seconds))
        return self._outputs(), rows
