"""``NetModule``: a built network, ready to run: the executor's plan, its kernels and its constants.

The compiler side of a built network. It holds what :class:`vtakit.runtime.graph_executor.GraphExecutor`
runs (a plan over a planned arena, kernels as callables, the constants) plus the descriptions a
user asks for (input names, shapes and dtypes; a profile table).

Accelerator modules. A module whose plan has accelerator steps (``target="vta"``, program
templates as kernels; :attr:`NetModule.is_accelerated`) runs them on a simulated accelerator of
the plan's configuration (:attr:`NetModule.config`). ``run``, ``debug_run`` and ``profile`` take
``backend=`` (``"fsim"``, ``"cycle"``, ``"rtl"``: the names of
:data:`vtakit.sim.backend.BACKENDS`) or ``device=`` (a :class:`~vtakit.runtime.device.Device` of
the same configuration, whose backend is used). The module creates one device and executor per
backend on its first run there and keeps them: the weights are placed in the device's DRAM once
and every later run on that backend only writes the inputs. After each run
:attr:`NetModule.last_stats` holds the accelerator's statistics (:class:`AccelStats`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from vtakit.compiler.backend.llvm_object import KernelObject, load_object
from vtakit.compiler.graph.package import Package, read_package, write_package
from vtakit.errors import ArgumentError, CompileError, ConfigError, GraphError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.runtime.device import Device, default_alignment
from vtakit.runtime.graph_executor import GraphExecutor, LayerTiming, Plan, dram_traffic
from vtakit.runtime.layout_kernels import LayoutKernel
from vtakit.runtime.template import ProgramTemplate
from vtakit.sim.backend import BACKENDS
from vtakit.sim.program import MAX_DRAM_SIZE
from vtakit.sim.stats import RunStats

__all__ = ["NetModule", "Profile", "InputInfo", "AccelStats", "load"]

#: The backend ``run``/``debug_run`` use on accelerator modules when none is given, and ``profile``'s.
DEFAULT_RUN_BACKEND = "fsim"
DEFAULT_PROFILE_BACKEND = "cycle"
_DRAM_MARGIN = 1 << 20      # spare DRAM besides what the plan and its programs need
_PAGE = 4096
_USER_DEVICES = 4           # executors kept for devices given to run() (each holds a DRAM region there)


@dataclass(frozen=True)
class InputInfo:
    """A run-time input: its name, shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class AccelStats:
    """The accelerator's statistics of one run of an accelerator module (:attr:`NetModule.last_stats`).

    ``steps``: ``(step name, RunStats)`` for each accelerator program, in order; ``cycles``: their
    sum (None on a backend without timing, such as fsim); ``ideal_cycles``: GEMM micro-ops summed
    (what a machine doing one GEMM per cycle would need); ``utilization``: ideal / cycles (None
    without timing); ``dram_bytes``: bytes the programs loaded from and stored to DRAM;
    ``accel_seconds``: ``cycles`` at the configuration's clock (None without timing)."""

    backend: str
    steps: list[tuple[str, RunStats]] = field(default_factory=list)
    cycles: int | None = None
    ideal_cycles: int = 0
    utilization: float | None = None
    dram_bytes: int = 0
    accel_seconds: float | None = None

    @classmethod
    def of(cls, backend: str, steps: list[tuple[str, RunStats]], clock_mhz: float) -> "AccelStats":
        timed = bool(steps) and all(s.cycles is not None for _, s in steps)
        cycles = sum(s.cycles for _, s in steps) if timed else None
        ideal = sum(s.ideal_cycles for _, s in steps)
        return cls(backend, list(steps), cycles, ideal, ideal / cycles if cycles else None,
                   sum(dram_traffic(s) for _, s in steps), None if cycles is None else cycles / (clock_mhz * 1e6))

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "cycles": self.cycles, "ideal_cycles": self.ideal_cycles,
                "utilization": self.utilization, "dram_bytes": self.dram_bytes, "accel_seconds": self.accel_seconds,
                "steps": [{"name": n, "cycles": s.cycles, "ideal_cycles": s.ideal_cycles,
                           "utilization": s.utilization, "dram_bytes": dram_traffic(s)} for n, s in self.steps]}


def _kib(nbytes: int | None) -> str:
    return "" if nbytes is None else f"{nbytes / 1024:.1f}"


@dataclass(frozen=True)
class Profile:
    """A profiled run: the outputs and one row per executed kernel.

    Totals: ``total_seconds`` (every step's wall time, simulations included), ``cpu_seconds``
    (the host steps' wall time), ``total_cycles`` (accelerator cycles summed over every program;
    0 for a CPU-only module, None on a backend without timing), ``ideal_cycles``, ``utilization``
    (ideal / total cycles; None without cycles), ``accel_seconds`` (``total_cycles`` at the
    accelerator's clock, ``clock_mhz``) and ``cpu_share`` (the host's part of
    ``cpu_seconds + accel_seconds``; None without cycles); ``macs`` (the multiply-accumulates of
    every step's convolutions and matrix products), ``accel_macs`` (those of the accelerator steps)
    and ``accel_mac_share`` (accel_macs / macs; 0.0 for a network without any)."""

    outputs: list[np.ndarray]
    layers: list[LayerTiming]
    clock_mhz: float | None = None

    @property
    def total_seconds(self) -> float:
        return sum(row.seconds for row in self.layers)

    @property
    def _accel(self) -> list[LayerTiming]:
        return [r for r in self.layers if r.on_accelerator]

    @property
    def cpu_seconds(self) -> float:
        return sum(row.seconds for row in self.layers if not row.on_accelerator)

    @property
    def total_cycles(self) -> int | None:
        rows = self._accel
        if any(r.cycles is None for r in rows):
            return None
        return sum(r.cycles for r in rows)

    @property
    def ideal_cycles(self) -> int:
        return sum(r.ideal_cycles or 0 for r in self._accel)

    @property
    def utilization(self) -> float | None:
        total = self.total_cycles
        return self.ideal_cycles / total if total else None

    @property
    def accel_seconds(self) -> float | None:
        if self.total_cycles is None:
            return None
        if self.clock_mhz:
            return self.total_cycles / (self.clock_mhz * 1e6)
        return sum(r.accel_seconds or 0.0 for r in self._accel)

    @property
    def cpu_share(self) -> float | None:
        accel = self.accel_seconds
        if accel is None:
            return None
        both = self.cpu_seconds + accel
        return self.cpu_seconds / both if both else None

    @property
    def macs(self) -> int:
        return sum(r.macs for r in self.layers)

    @property
    def accel_macs(self) -> int:
        return sum(r.macs for r in self._accel)

    @property
    def accel_mac_share(self) -> float:
        total = self.macs
        return self.accel_macs / total if total else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"total_seconds": self.total_seconds, "cpu_seconds": self.cpu_seconds,
                "total_cycles": self.total_cycles, "ideal_cycles": self.ideal_cycles,
                "utilization": self.utilization, "accel_seconds": self.accel_seconds, "cpu_share": self.cpu_share,
                "clock_mhz": self.clock_mhz, "macs": self.macs, "accel_macs": self.accel_macs,
                "accel_mac_share": self.accel_mac_share,
                "layers": [{"name": r.name, "ops": list(r.ops), "target": r.target, "shape": list(r.shape),
                            "seconds": r.seconds, "cycles": r.cycles, "ideal_cycles": r.ideal_cycles,
                            "utilization": r.utilization, "dram_bytes": r.dram_bytes, "stalls": r.stalls,
                            "accel_seconds": r.accel_seconds, "note": r.note, "macs": r.macs} for r in self.layers]}

    def __str__(self) -> str:
        notes = any(r.note for r in self.layers)
        if not self._accel:
            total = self.total_seconds or 1.0
            rows = [(r.name, "+".join(r.ops), r.target, "x".join(map(str, r.shape)), f"{r.seconds * 1e6:.1f}",
                     f"{100 * r.seconds / total:.1f}", *((r.note,) * notes)) for r in self.layers]
            head = ("layer", "ops", "target", "shape", "us", "%", *(("note",) * notes))
            footer = [f"total {self.total_seconds * 1e3:.3f} ms in {len(self.layers)} kernels"]
        else:
            rows = []
            for r in self.layers:
                if r.on_accelerator:
                    timing = ("", "-" if r.cycles is None else f"{r.cycles:,}",
                              "-" if r.utilization is None else f"{100 * r.utilization:.1f}", _kib(r.dram_bytes))
                else:
                    timing = (f"{r.seconds * 1e6:.1f}", "", "", "")
                rows.append((r.name, "+".join(r.ops), r.target, "x".join(map(str, r.shape)), *timing,
                             *((r.note,) * notes)))
            head = ("layer", "ops", "target", "shape", "us", "cycles", "util %", "DRAM KiB", *(("note",) * notes))
            n_accel = len(self._accel)
            footer = [f"CPU {self.cpu_seconds * 1e3:.3f} ms in {len(self.layers) - n_accel} kernels"]
            if self.total_cycles is None:
                footer.append(f"accelerator: {n_accel} programs, {self.ideal_cycles:,} ideal cycles (no timing on "
                              "this backend)")
            else:
                util = "-" if self.utilization is None else f"{100 * self.utilization:.1f}%"
                footer.append(f"accelerator {self.total_cycles:,} cycles in {n_accel} programs "
                              f"({self.accel_seconds * 1e3:.3f} ms at {self.clock_mhz:g} MHz), ideal "
                              f"{self.ideal_cycles:,}, utilization {util}")
                if self.cpu_share is not None:
                    footer.append(f"CPU share {100 * self.cpu_share:.1f}% of CPU + accelerator time")
        widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
        lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in (head, *rows)]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines += footer
        return "\n".join(lines)


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


class NetModule:
    """A compiled network: ``run(inputs) -> outputs``, ``debug_run``, ``profile``, ``save``.

    ``kernels`` are callables (CPU kernels) and, for accelerator steps, program templates;
    ``kernel_objects`` what :meth:`save` writes for each kernel (object code; program templates and
    named layout kernels save as themselves)."""

    def __init__(self, plan: Plan, kernels: Sequence[Callable[..., Any] | ProgramTemplate],
                 constants: Mapping[str, np.ndarray], *, target: str = "llvm", kernel_objects: Sequence[Any] = (),
                 stats: Any = None) -> None:
        self.plan = plan
        self.target = target
        self.constants = dict(constants)
        self.kernel_objects = list(kernel_objects)  # what save() writes for each kernel (object code)
        self.stats = stats  # the build's BuildStats (None for a loaded module)
        self._kernels = list(kernels)
        self.last_stats: AccelStats | None = None
        self._executors: dict[str, GraphExecutor] = {}      # backend -> executor on the module's own device
        self._user_executors: list[GraphExecutor] = []       # on devices given to run(), most recent first
        self.config: VTAConfig | None = None
        if plan.config is not None:
            try:
                self.config = VTAConfig.from_dict(dict(plan.config))
            except (ConfigError, TypeError, ValueError) as exc:
                raise GraphError(f"the module's accelerator configuration is invalid: {exc}") from None
        if plan.uses_dram:
            if self.config is None:
                raise GraphError("the module's plan runs accelerator steps or keeps values in DRAM but names no "
                                 "accelerator configuration (Plan.config)")
            self._executor: GraphExecutor | None = None
        else:
            self._executor = GraphExecutor(plan, self._kernels, self.constants)

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

    @property
    def is_accelerated(self) -> bool:
        """Whether some step runs on the accelerator."""
        return self.plan.is_accelerated

    # -- devices ---------------------------------------------------------------------------------
    @property
    def dram_size(self) -> int:
        """The DRAM a device of this module gets: the plan's values, each accelerator step's
        micro-op image, the largest instruction stream, alignment and a margin."""
        if self.config is None:
            return 0
        align = max(64, default_alignment(self.config))
        need = _align(self.plan.dram_bytes, align) + align
        longest = 0
        for step in self.plan.steps:
            kernel = self._kernels[step.kernel] if 0 <= step.kernel < len(self._kernels) else None
            if step.on_accelerator and isinstance(kernel, ProgramTemplate):
                need += _align(len(kernel.uops) * isa.UOP_BYTES, align) + align
                longest = max(longest, len(kernel.insns) * isa.INSN_BYTES)
        need += _align(longest, align) + align
        size = _align(need + need // 4 + _DRAM_MARGIN, _PAGE)
        if need > MAX_DRAM_SIZE:
            raise ArgumentError(f"this network needs {need} bytes of accelerator DRAM, more than the "
                                f"{MAX_DRAM_SIZE}-byte address space")
        return min(size, MAX_DRAM_SIZE)

    def _executor_for(self, backend: str | None, device: Device | None, default: str) -> GraphExecutor:
        if not self.plan.uses_dram:
            if backend is not None or device is not None:
                raise ArgumentError("this module runs on the CPU only; backend/device apply to accelerator modules "
                                    "(built for the vta target)")
            return self._executor
        if device is not None:
            if not isinstance(device, Device):
                raise ArgumentError(f"device must be a vtakit.runtime.Device, got {type(device).__name__}")
            if device.config != self.config:
                raise ArgumentError(self.config.mismatch(device.config, "this module", "the device"))
            if backend is not None and backend != device.backend:
                raise ArgumentError(f"backend {backend!r} differs from the given device's backend "
                                    f"{device.backend!r}; give one of them")
            for k, executor in enumerate(self._user_executors):
                if executor.device is device:
                    self._user_executors.insert(0, self._user_executors.pop(k))
                    return executor
            executor = GraphExecutor(self.plan, self._kernels, self.constants, device)
            self._user_executors.insert(0, executor)
            del self._user_executors[_USER_DEVICES:]       # the oldest gives its DRAM region back
            return executor
        backend = default if backend is None else backend
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise ArgumentError(f"unknown backend {backend!r}; expected one of {sorted(BACKENDS)}")
        executor = self._executors.get(backend)
        if executor is None:
            dev = Device(self.config, backend, dram_size=self.dram_size)
            executor = self._executors[backend] = GraphExecutor(self.plan, self._kernels, self.constants, dev)
        return executor

    def device(self, backend: str = DEFAULT_RUN_BACKEND) -> Device | None:
        """The device this module runs on with ``backend`` (created on first use; None for a CPU-only module)."""
        if not self.plan.uses_dram:
            return None
        return self._executor_for(backend, None, DEFAULT_RUN_BACKEND).device

    def _note(self, executor: GraphExecutor) -> None:
        if executor.device is not None:
            self.last_stats = AccelStats.of(executor.device.backend, executor.step_stats,
                                            executor.device.config.clock_mhz)

    # -- running ---------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any] | Sequence[Any], *, backend: str | None = None,
            device: Device | None = None) -> list[np.ndarray]:
        """The outputs for ``inputs`` (a dict by input name, or arrays in input order), in output order.

        Accelerator modules run their accelerator steps on ``backend`` (default ``"fsim"``) or on
        ``device``; :attr:`last_stats` then holds the run's accelerator statistics."""
        executor = self._executor_for(backend, device, DEFAULT_RUN_BACKEND)
        outputs = executor.run(inputs)
        self._note(executor)
        return outputs

    def debug_run(self, inputs: Mapping[str, Any] | Sequence[Any], *, backend: str | None = None,
                  device: Device | None = None) -> dict[str, np.ndarray]:
        """Every tensor the network materialises (its inputs, the constants its kernels read and every value
        a kernel writes, as TVM's debug executor), keyed by value name, in the graph's layout. Values
        inside a fused kernel are never stored; build with ``disabled_passes=("FuseOps",)`` to see them.
        In accelerator modules this includes the values in accelerator DRAM (packed activations and
        weights, under their own names); ``backend``/``device`` as for :meth:`run`."""
        executor = self._executor_for(backend, device, DEFAULT_RUN_BACKEND)
        values = executor.debug_run(inputs)
        self._note(executor)
        return values

    def profile(self, inputs: Mapping[str, Any] | Sequence[Any], *, backend: str | None = None,
                device: Device | None = None, trace: str | os.PathLike | None = None) -> Profile:
        """A run timed kernel by kernel. Accelerator modules run on ``backend`` (default ``"cycle"``,
        so that every accelerator layer has its cycles) or ``device``; ``trace`` (a ``.json`` path,
        cycle backend) gets a Chrome trace-event timeline of the whole network
        (:meth:`GraphExecutor.profile <vtakit.runtime.graph_executor.GraphExecutor.profile>`)."""
        if trace is not None and not self.plan.uses_dram:
            raise ArgumentError("this module runs on the CPU only; a trace shows the accelerator's timeline")
        executor = self._executor_for(backend, device, DEFAULT_PROFILE_BACKEND)
        outputs, rows = executor.profile(inputs, trace=trace)
        self._note(executor)
        return Profile(outputs, rows, None if self.config is None else self.config.clock_mhz)

    # -- saving ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write the module to one file (see :mod:`.package`); :func:`load` reads it back."""
        objects = list(self.kernel_objects)
        if len(objects) != len(self._kernels):
            objects = [None] * len(self._kernels)
        # accelerator templates and named layout kernels are saved as themselves
        objects = [k if isinstance(k, (ProgramTemplate, LayoutKernel)) else o for k, o in zip(self._kernels, objects)]
        write_package(path, Package(self.target, self.plan, objects, self.constants))

    def __repr__(self) -> str:
        ins = ", ".join(f"{i.name}: {i.dtype}{list(i.shape)}" for i in self.input_info)
        where = self.target if self.config is None else f"{self.target} ({self.config.model})"
        return f"<NetModule ({ins}) -> {self.output_names} on {where}, {self.num_kernels} kernels>"


def load(path: str | os.PathLike) -> NetModule:
    """The module saved at ``path``, ready to run: its kernels are linked, nothing is compiled."""
    package = read_package(path)
    try:
        # object code is linked; program templates and layout kernels run as they are
        functions = [load_object(k) if isinstance(k, KernelObject) else k for k in package.kernels]
        return NetModule(package.plan, functions, package.constants, target=package.target,
                         kernel_objects=package.kernels)
    except (CompileError, ArgumentError, GraphError) as exc:
        raise GraphError(f"{os.fspath(path)!r} is damaged: {exc}") from None
