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

Accelerator plans. Values with ``space="dram"`` live in one region of ``plan.dram_bytes`` bytes
that the executor allocates on its :class:`~vtakit.runtime.device.Device` when it is created;
each such value is a numpy view of the device's DRAM there, so CPU kernels (packing, unpacking)
read and write accelerator memory in place. Constants placed in DRAM (packed weights, addends)
are copied there once, at creation. A step with ``target="vta"`` has a
:class:`~vtakit.runtime.template.ProgramTemplate` as its kernel; it is relocated once onto its
arguments' DRAM addresses (:func:`~vtakit.runtime.template.instantiate`) and each run calls
``device.run(program)``, recording the step's :class:`~vtakit.sim.stats.RunStats`
(:attr:`GraphExecutor.step_stats`). The region, the programs and their micro-op images stay for
the executor's life, so the same executor runs again on new inputs with nothing placed anew.
"""

from __future__ import annotations

import json
import tempfile
from contextlib import ExitStack, contextmanager
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from vtakit.atomic import atomic_write
from vtakit.errors import AllocationError, ArgumentError, ConfigError
from vtakit.hw.config import VTAConfig
from vtakit.progress import Progress, progress
from vtakit.runtime.device import Device, default_alignment
from vtakit.runtime.template import ProgramTemplate, instantiate
from vtakit.sim.stats import COUNTER_NAMES, RunStats

__all__ = ["ValueInfo", "Step", "Plan", "LayerTiming", "GraphExecutor", "SPACES", "ACCEL_TARGET", "dram_traffic",
           "stall_breakdown"]

#: Where a value can live: the host arena or the module's region of accelerator DRAM.
SPACES = ("host", "dram")
#: The step target whose kernels are accelerator program templates.
ACCEL_TARGET = "vta"
_LOADED = tuple(name for name in COUNTER_NAMES if name.endswith("_load_nbytes"))
_STORED = tuple(name for name in COUNTER_NAMES if name.endswith("_store_nbytes"))
#: Track (pid) of the host steps in a whole-network trace (the accelerator's is 0).
_CPU_PID = 1
_LAYER_TID = 9
_NO_PROGRESS = Progress(None)


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
    ``args`` the kernel writes. ``note`` is a remark for profiles, such as why a layer the
    accelerator could not take runs on the CPU. ``macs`` counts the useful multiply-accumulates of
    the step's convolutions and matrix products (the unpacked ops', batch included; 0 for steps
    without any)."""

    name: str
    kernel: int
    args: tuple[str, ...]
    outputs: int
    ops: tuple[str, ...] = ()
    target: str = "llvm"
    note: str = ""
    macs: int = 0

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.args[len(self.args) - self.outputs:]

    @property
    def on_accelerator(self) -> bool:
        return self.target == ACCEL_TARGET


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

    @property
    def is_accelerated(self) -> bool:
        """Whether a step runs on the accelerator."""
        return any(s.on_accelerator for s in self.steps)

    @property
    def uses_dram(self) -> bool:
        """Whether the plan needs a device: accelerator steps or values in DRAM."""
        return self.is_accelerated or any(v.space == "dram" for v in self.values.values())

    def to_json(self) -> dict[str, Any]:
        return {"values": [[v.name, list(v.shape), v.dtype, v.offset, v.space] for v in self.values.values()],
                "inputs": list(self.inputs), "outputs": list(self.outputs),
                "steps": [[s.name, s.kernel, list(s.args), s.outputs, list(s.ops), s.target, *_optional(s)]
                          for s in self.steps],
                "arena_bytes": self.arena_bytes, "dram_bytes": self.dram_bytes,
                "config": None if self.config is None else dict(self.config)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Plan":
        values = {v[0]: ValueInfo(v[0], tuple(v[1]), v[2], v[3], *v[4:5]) for v in data["values"]}
        steps = tuple(Step(s[0], s[1], tuple(s[2]), s[3], tuple(s[4]), s[5], *s[6:7], *(int(m) for m in s[7:8]))
                      for s in data["steps"])
        return cls(values, tuple(data["inputs"]), tuple(data["outputs"]), steps, int(data["arena_bytes"]),
                   int(data.get("dram_bytes", 0)), data.get("config"))


def _optional(step: Step) -> list[Any]:
    """The optional trailing elements of a step's JSON: ``note``, then ``macs`` (each only when it,
    or a later one, is set), so plans without them read and write as before."""
    if step.macs:
        return [step.note, int(step.macs)]
    return [step.note] if step.note else []


@dataclass(frozen=True)
class LayerTiming:
    """One executed step of a profiled run.

    ``seconds`` is the host's wall time of the step (for an accelerator step, the simulation's).
    Accelerator steps also carry their :class:`~vtakit.sim.stats.RunStats` figures: ``cycles``,
    ``ideal_cycles`` (GEMM micro-ops) and ``utilization`` (None on backends without timing, such
    as fsim), ``dram_bytes`` (bytes loaded plus stored), ``stalls`` (``{"token": {module: cycles},
    "memory": {module: cycles}}`` on timed backends, else None) and ``accel_seconds`` (``cycles``
    at the configuration's clock). ``note`` is the step's note (why it runs on the CPU, say);
    ``macs`` the step's multiply-accumulates (:attr:`Step.macs`)."""

    name: str
    ops: tuple[str, ...]
    target: str
    shape: tuple[int, ...]
    seconds: float
    cycles: int | None = None
    ideal_cycles: int | None = None
    utilization: float | None = None
    dram_bytes: int | None = None
    stalls: dict[str, dict[str, int]] | None = None
    accel_seconds: float | None = None
    note: str = ""
    macs: int = 0

    @property
    def on_accelerator(self) -> bool:
        return self.target == ACCEL_TARGET


def dram_traffic(stats: RunStats) -> int:
    """Bytes a run loaded from and stored to DRAM (its counters)."""
    return sum(int(stats.counters.get(n, 0)) for n in _LOADED + _STORED)


def stall_breakdown(stats: RunStats) -> dict[str, dict[str, int]] | None:
    """The per-module stall cycles of a timed run (``{"token": ..., "memory": ...}``), or None."""
    found = {kind: dict(cycles) for kind, cycles in (("token", stats.token_stall_cycles),
                                                     ("memory", stats.memory_stall_cycles)) if cycles is not None}
    return found or None


class _AccelCall:
    """A bound accelerator step: runs its program on the device and records the statistics."""

    __slots__ = ("executor", "program", "name")

    def __init__(self, executor: "GraphExecutor", program: Any, name: str) -> None:
        self.executor = weakref.proxy(executor)    # the executor owns its calls; no reference cycle
        self.program = program
        self.name = name

    def __call__(self, trace: Path | None = None) -> RunStats:
        stats = self.executor.device.run(self.program, trace=trace)
        self.executor._record(self.name, stats)
        return stats


class GraphExecutor:
    """Runs a :class:`Plan` with its kernels and constants (and, for plans with values in DRAM or
    accelerator steps, on ``device``)."""

    def __init__(self, plan: Plan, kernels: Sequence[Callable[..., Any] | ProgramTemplate],
                 constants: Mapping[str, np.ndarray], device: Device | None = None) -> None:
        self.plan = plan
        self.device = device
        self._step_stats: list[tuple[str, RunStats]] = []
        self._last_stats: list[tuple[str, RunStats]] = []
        self._region: int | None = None
        self._arena = np.zeros(max(plan.arena_bytes, 1), np.uint8)
        self._views: dict[str, np.ndarray] = {}
        dram = self._place_on(device) if plan.uses_dram else None
        for info in plan.values.values():
            if info.space not in SPACES:
                raise ArgumentError(f"value {info.name!r} lives in space {info.space!r}; expected one of "
                                    f"{list(SPACES)}")
            if info.space == "dram":
                self._views[info.name] = self._dram_view(info, dram, constants)
            elif info.offset is None:
                if info.name not in constants:
                    raise ArgumentError(f"the plan's constant {info.name!r} was not given to the executor")
                const = self._constant(info, constants[info.name])
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
        self._calls: list[Callable[..., Any]] = [self._bind_step(s, kernels[s.kernel]) for s in plan.steps]

    # -- placement -------------------------------------------------------------------------------
    def _place_on(self, device: Device | None) -> np.ndarray:
        """Check ``device`` against the plan and allocate the plan's DRAM region on it."""
        plan = self.plan
        if device is None:
            raise ArgumentError("this plan keeps values in accelerator DRAM or runs accelerator steps: the "
                                "executor needs a Device (GraphExecutor(plan, kernels, constants, device))")
        if not isinstance(device, Device):
            raise ArgumentError(f"device must be a vtakit.runtime.Device, got {type(device).__name__}")
        if plan.config is not None:
            try:
                wanted = VTAConfig.from_dict(dict(plan.config))
            except (ConfigError, TypeError, ValueError) as exc:
                raise ArgumentError(f"the plan's accelerator configuration is invalid: {exc}") from None
            if wanted != device.config:
                raise ArgumentError(wanted.mismatch(device.config, "the network", "the device"))
        alignment = max(64, default_alignment(device.config))
        try:
            self._region = device.allocator.alloc(max(plan.dram_bytes, 1), alignment)
        except AllocationError as exc:
            raise ArgumentError(f"cannot place the network's {plan.dram_bytes} bytes of DRAM values on {device!r}: "
                                f"{exc}") from None
        weakref.finalize(self, device.allocator.free, self._region)
        return device.dram[self._region:self._region + plan.dram_bytes]

    def _dram_view(self, info: ValueInfo, dram: np.ndarray, constants: Mapping[str, np.ndarray]) -> np.ndarray:
        end = (info.offset or 0) + info.nbytes
        if info.offset is None or info.offset < 0 or end > self.plan.dram_bytes:
            raise ArgumentError(f"DRAM value {info.name!r} at bytes [{info.offset}, {end}) lies outside the "
                                f"{self.plan.dram_bytes}-byte DRAM region of the plan")
        view = dram[info.offset:end].view(info.dtype).reshape(info.shape)
        if info.name in constants:          # placed once, here; never copied again
            np.copyto(view, self._constant(info, constants[info.name]))
            view.flags.writeable = False
        return view

    @staticmethod
    def _constant(info: ValueInfo, value: Any) -> np.ndarray:
        const = np.require(value, dtype=info.dtype, requirements="C").view()
        if const.shape != info.shape:
            raise ArgumentError(f"constant {info.name!r} has shape {const.shape}, the plan expects {info.shape}")
        return const

    def address(self, name: str) -> int:
        """The DRAM byte address of the DRAM value ``name``."""
        info = self.plan.values.get(name)
        if info is None or info.space != "dram" or self._region is None:
            raise ArgumentError(f"{name!r} is not a DRAM value of this plan")
        return self._region + int(info.offset)

    # -- binding ---------------------------------------------------------------------------------
    def _bind_step(self, step: Step, kernel: Any) -> Callable[..., Any]:
        if not step.on_accelerator:
            if isinstance(kernel, ProgramTemplate):
                raise ArgumentError(f"step {step.name!r} (target {step.target!r}) calls kernel {step.kernel}, an "
                                    f"accelerator program template; only {ACCEL_TARGET!r} steps run templates")
            return self._bind(kernel, [self._views[a] for a in step.args])
        if not isinstance(kernel, ProgramTemplate):
            raise ArgumentError(f"accelerator step {step.name!r} calls kernel {step.kernel}, a "
                                f"{type(kernel).__name__}; {ACCEL_TARGET!r} steps take a ProgramTemplate")
        host = [a for a in step.args if self.plan.values[a].space != "dram"]
        if host:
            raise ArgumentError(f"accelerator step {step.name!r} reads or writes {host}, which are not in DRAM; "
                                "every argument of an accelerator step must be a DRAM value")
        try:
            program = instantiate(kernel, self.device, [self.address(a) for a in step.args], step.name, step.args)
        except ArgumentError as exc:
            raise ArgumentError(f"accelerator step {step.name!r}: {exc}") from None
        return _AccelCall(self, program, step.name)

    @staticmethod
    def _bind(kernel: Callable[..., Any], arrays: list[np.ndarray]) -> Callable[[], Any]:
        bind = getattr(kernel, "bind", None)
        if bind is not None:
            return bind(*arrays)
        return lambda: kernel(*arrays)

    def _record(self, name: str, stats: RunStats) -> None:
        self._step_stats.append((name, stats))

    @property
    def step_stats(self) -> list[tuple[str, RunStats]]:
        """``(step name, RunStats)`` of each accelerator step of the last complete run, in order."""
        return list(self._last_stats)

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
    @contextmanager
    def _running(self) -> Iterator[Progress]:
        """One run: a progress bar on stderr for accelerator plans (shown only when the run lasts),
        and the statistics of the accelerator steps kept once the run completes. An exception
        (Ctrl-C included) leaves the previous run's statistics and an executor ready to run again."""
        self._step_stats = []
        if not self.plan.is_accelerated:
            yield _NO_PROGRESS
        else:
            with progress("running the network", total=len(self.plan.steps), unit="step") as bar:
                yield bar
        self._last_stats = self._step_stats

    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """The network's outputs for ``inputs``, in the plan's output order."""
        self.set_inputs(inputs)
        if not self.plan.is_accelerated:
            for call in self._calls:
                call()
            return self._outputs()
        with self._running() as bar:
            for step, call in zip(self.plan.steps, self._calls):
                bar.step(step.name)
                call()
                bar.advance()
        return self._outputs()

    def debug_run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
        """Every value (inputs, constants read by a step, each step's outputs) after its step, DRAM
        values included (copies). Kernels read and write the graph's layouts (blocked layouts live
        inside kernels and in packed constants, or in the packed values of accelerator plans)."""
        self.set_inputs(inputs)
        seen: dict[str, np.ndarray] = {name: view.copy() for name, view in self._inputs}
        with self._running() as bar:
            for step, call in zip(self.plan.steps, self._calls):
                bar.step(step.name)
                for name in step.args[:len(step.args) - step.outputs]:
                    if name not in seen:
                        seen[name] = self._views[name].copy()
                call()
                for name in step.output_names:
                    seen[name] = self._views[name].copy()
                bar.advance()
        for name in self.plan.outputs:
            seen.setdefault(name, self._views[name].copy())
        return seen

    def profile(self, inputs: Mapping[str, Any] | Sequence[Any], trace: str | Path | None = None
                ) -> tuple[list[np.ndarray], list[LayerTiming]]:
        """The outputs and one row per step: its wall time, and for accelerator steps the run's
        statistics (see :class:`LayerTiming`).

        ``trace`` (a ``.json`` path; cycle backend only) gets one Chrome trace-event timeline of
        the whole network (open it in https://ui.perfetto.dev): each accelerator program's
        timeline, shifted to start where the previous accelerator steps end and named after its
        step, a "layers" track with one slice per accelerator step, and the host steps on a
        process of their own. One microsecond of trace time is one accelerator cycle; a host
        step's slice starts where the network reaches it and lasts its wall time at the
        accelerator's clock. The file is written whole once the run succeeds, or not at all."""
        if trace is not None:
            self._check_trace(Path(trace))
        self.set_inputs(inputs)
        rows: list[LayerTiming] = []
        clock = time.perf_counter
        mhz = self.device.config.clock_mhz if self.device is not None else 0.0
        events: list[dict[str, Any]] | None = [] if trace is not None else None
        offset, first = 0, True
        with ExitStack() as stack:
            tmp = None if trace is None else stack.enter_context(tempfile.TemporaryDirectory(prefix="vtakit-trace-"))
            bar = stack.enter_context(self._running())
            for index, (step, call) in enumerate(zip(self.plan.steps, self._calls)):
                bar.step(step.name)
                shape = self.plan.values[step.output_names[0]].shape if step.outputs else ()
                if not isinstance(call, _AccelCall):
                    start = clock()
                    call()
                    seconds = clock() - start
                    rows.append(LayerTiming(step.name, step.ops, step.target, shape, seconds, note=step.note,
                                            macs=step.macs))
                    if events is not None:
                        events.append({"name": step.name, "cat": "cpu", "ph": "X", "ts": offset,
                                       "dur": max(1, round(seconds * mhz * 1e6)), "pid": _CPU_PID, "tid": 0,
                                       "args": {"us": seconds * 1e6, "ops": "+".join(step.ops), "step": index}})
                else:
                    path = None if tmp is None else Path(tmp) / f"step{index}.json"
                    start = clock()
                    stats = call(path)
                    seconds = stats.sim_seconds or clock() - start
                    cycles = stats.cycles
                    rows.append(LayerTiming(step.name, step.ops, step.target, shape, seconds, cycles,
                                            stats.ideal_cycles, stats.utilization, dram_traffic(stats),
                                            stall_breakdown(stats), None if cycles is None else cycles / (mhz * 1e6),
                                            step.note, step.macs))
                    if events is not None:
                        events.extend(_shifted_events(path, step.name, index, offset, cycles or 0, first))
                        offset, first = offset + (cycles or 0), False
                bar.advance()
            if events is not None:
                self._write_trace(Path(trace), events, offset)
        return self._outputs(), rows

    def _check_trace(self, path: Path) -> None:
        if self.device is None or not self.plan.is_accelerated:
            raise ArgumentError("a trace shows the accelerator's timeline; this network runs no accelerator step")
        if self.device.backend != "cycle":
            raise ArgumentError(f"a whole-network trace needs the cycle backend (Chrome trace-event JSON); this "
                                f"device runs on {self.device.backend!r}")
        if path.suffix != ".json":
            raise ArgumentError(f"trace path {str(path)!r} must end in .json (a Chrome trace-event file)")
        if not path.parent.is_dir():
            raise ArgumentError(f"cannot write the trace {str(path)!r}: its directory does not exist")

    def _write_trace(self, path: Path, events: list[dict[str, Any]], cycles: int) -> None:
        meta = [{"name": "process_name", "ph": "M", "pid": 0,
                 "args": {"name": f"accelerator {self.device.config.model}"}},
                {"name": "thread_name", "ph": "M", "pid": 0, "tid": _LAYER_TID, "args": {"name": "layers"}},
                {"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": _LAYER_TID, "args": {"sort_index": -1}},
                {"name": "process_name", "ph": "M", "pid": _CPU_PID, "args": {"name": "host (CPU steps)"}},
                {"name": "thread_name", "ph": "M", "pid": _CPU_PID, "tid": 0, "args": {"name": "cpu"}}]
        doc = {"traceEvents": meta + events, "displayTimeUnit": "ns",
               "otherData": {"time_unit": "1 us of trace time = 1 accelerator cycle",
                             "config": self.device.config.model,
                             "clock_mhz": self.device.config.clock_mhz, "cycles": cycles,
                             "steps": [s.name for s in self.plan.steps]}}
        with atomic_write(path) as f:
            f.write(json.dumps(doc).encode())


def _shifted_events(path: Path, step: str, index: int, offset: int, cycles: int, keep_meta: bool
                    ) -> list[dict[str, Any]]:
    """The events of one program's trace at ``path``, ``offset`` cycles later, named after ``step``;
    plus one slice for the whole step on the layers track. Track metadata is kept once."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    out = [{"name": step, "cat": "layer", "ph": "X", "ts": offset, "dur": max(cycles, 1), "pid": 0,
            "tid": _LAYER_TID, "args": {"step": index, "cycles": cycles}}]
    for event in doc.get("traceEvents", []):
        ph = event.get("ph")
        if ph == "M":
            if keep_meta and event.get("name") != "process_name":
                out.append(event)
            continue
        event = dict(event)
        if "ts" in event:
            event["ts"] = event["ts"] + offset
        if ph == "X":
            event["name"] = f"{step}: {event.get('name', '')}"
            event["args"] = {**event.get("args", {}), "step": step}
        out.append(event)
    return out
