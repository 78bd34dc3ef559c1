"""Evaluating one configuration of the co-design search: a job on the tuner's measurement executor.

:func:`evaluate_job` first asks :func:`vtakit.hw.estimate` whether the configuration fits the part
(in milliseconds; a configuration that does not is *rejected*, and the record names the binding
resource), then extracts the network's tasks for it (``vtakit.autotune.extract_tasks``) and
measures each task's default tiling (its template's fallback) with the tuner's trial job
(:func:`vtakit.compiler.autotune.measure.run_trial`: a killable child, cycles on the cycle model,
the output checked against numpy): ``sum(count x cycles)`` over the tasks is ``task_cycles``. The
accelerator's cycles of one inference are measured on the whole network (:func:`network_cycles`):
the network built for the configuration with the same default tilings and profiled on the cycle
model, which counts every offloaded layer, the residual additions and the fused epilogues the tasks
leave out; its outputs must equal the integer CPU reference bit for bit, else the evaluation is an
error. ``ideal_cycles`` counts the GEMM micro-ops (one per cycle on a perfect machine), as
``scripts/bench_vta.py`` does. Every evaluated configuration is also elaborated (Amaranth, 0.2-1 s,
more with many LUT-lane products; :func:`elaborate`). The task extraction and the network's build
share their compiled layers (:func:`~vtakit.compiler.graph.vta.context.shared_kernels`). The job
returns plain JSON-able data (it may run on a dask worker); :class:`Evaluation` is its typed form,
the line the search log stores.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from vtakit.compiler.autotune.measure import LocalBuilder, LocalRunner, MeasureInput, run_trial
from vtakit.compiler.autotune.record import TuningRecord
from vtakit.compiler.autotune.task import Task, extract_tasks
from vtakit.compiler.graph.vta.context import shared_kernels
from vtakit.compiler.topi_vta.knobs import conv2d_blocks, dense_blocks
from vtakit.compiler.topi_vta.workloads import Conv2dWorkload
from vtakit.compiler.vta.env import get_env
from vtakit.dse.space import DesignSpace, config_key
from vtakit.errors import DSEError, VtakitError
from vtakit.hw.config import VTAConfig

__all__ = ["TaskCycles", "NetworkCycles", "Evaluation", "evaluate_job", "measure_tasks", "network_cycles", "elaborate",
           "ideal_cycles", "STATUSES"]

#: ``ok``: measured; ``rejected``: the estimate says it does not fit; ``error``: a task failed.
STATUSES = ("ok", "rejected", "error")


@dataclass(frozen=True)
class TaskCycles:
    """One task of the network on one configuration: how many layers use it, and its cycles."""

    template: str
    args: tuple[int, ...]
    count: int
    cycles: int
    ideal_cycles: int

    def to_dict(self) -> dict[str, Any]:
        return {"template": self.template, "args": list(self.args), "count": self.count, "cycles": self.cycles,
                "ideal_cycles": self.ideal_cycles}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "TaskCycles":
        return cls(str(raw["template"]), tuple(int(a) for a in raw["args"]), int(raw["count"]), int(raw["cycles"]),
                   int(raw["ideal_cycles"]))


def _total(tasks: tuple[TaskCycles, ...], what: str) -> int:
    return sum(t.count * getattr(t, what) for t in tasks)


@dataclass(frozen=True)
class NetworkCycles:
    """The whole network on one configuration, profiled on the cycle model: accelerator cycles and
    ideal cycles summed over every accelerator step, and each step's ``(name, cycles)``."""

    cycles: int
    ideal_cycles: int
    steps: tuple[tuple[str, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"cycles": self.cycles, "ideal_cycles": self.ideal_cycles, "steps": [list(s) for s in self.steps]}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> "NetworkCycles | None":
        if raw is None:
            return None
        return cls(int(raw["cycles"]), int(raw["ideal_cycles"]), tuple((str(n), int(c)) for n, c in raw["steps"]))


@dataclass
class Evaluation:
    """One evaluated configuration: status, resources, clock, per-task cycles with default tilings
    and, when it was among the top configurations, with tuned schedules (``tuned``)."""

    config: VTAConfig
    status: str
    message: str = ""
    binding: str = ""
    fits: bool = True
    resources: dict[str, dict[str, float]] = field(default_factory=dict)
    largest_fraction: float = 0.0
    fmax_mhz: float = 0.0
    tasks: tuple[TaskCycles, ...] = ()
    seconds: float = 0.0
    round: int = -1                       # the search round that proposed it (-1: the reference)
    trials: tuple[str, ...] = ()          # the default tilings' tuning records (JSON lines)
    tuned: tuple[TaskCycles, ...] | None = None
    schedule_trials: int = 0
    network: NetworkCycles | None = None        # the whole network, default tilings
    tuned_network: NetworkCycles | None = None  # the whole network with the tuned schedules

    @property
    def key(self) -> str:
        return config_key(self.config)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def task_cycles(self) -> int:
        """``sum(count x cycles)`` over the tuning tasks, default tilings (no residual additions)."""
        return _total(self.tasks, "cycles")

    @property
    def cycles(self) -> int:
        """Accelerator cycles of one inference with default tilings: the whole network's when measured
        (every offloaded step), else the tasks' sum."""
        return self.network.cycles if self.network is not None else self.task_cycles

    @property
    def ideal_cycles(self) -> int:
        return self.network.ideal_cycles if self.network is not None else _total(self.tasks, "ideal_cycles")

    @property
    def utilization(self) -> float | None:
        return self.ideal_cycles / self.cycles if self.ok and self.cycles else None

    @property
    def latency_s(self) -> float:
        """Accelerator seconds of one inference with default tilings (infinite unless ``ok``)."""
        return self.cycles / (self.fmax_mhz * 1e6) if self.ok and self.fmax_mhz else float("inf")

    @property
    def tuned_cycles(self) -> int | None:
        """The whole network's cycles with the tuned schedules (the tasks' sum when not measured)."""
        if self.tuned_network is not None:
            return self.tuned_network.cycles
        return None if self.tuned is None else _total(self.tuned, "cycles")

    @property
    def tuned_task_cycles(self) -> int | None:
        return None if self.tuned is None else _total(self.tuned, "cycles")

    @property
    def best_cycles(self) -> int:
        """Tuned cycles when tuned, else the default tilings'."""
        tuned = self.tuned_cycles
        return self.cycles if tuned is None else tuned

    @property
    def best_latency_s(self) -> float:
        return self.best_cycles / (self.fmax_mhz * 1e6) if self.ok and self.fmax_mhz else float("inf")

    def summary(self) -> dict[str, Any]:
        """One row of the Pareto table (CSV/JSON)."""
        util = self.utilization
        tuned = self.tuned_cycles
        return {"model": self.config.model, "status": self.status, "latency_ms": _ms(self.latency_s),
                "cycles": self.cycles if self.ok else None, "ideal_cycles": self.ideal_cycles if self.ok else None,
                "task_cycles": self.task_cycles if self.ok else None,
                "utilization": None if util is None else round(util, 4),
                "tuned_cycles": tuned, "tuned_task_cycles": self.tuned_task_cycles, "tuned_latency_ms": _ms(self.best_latency_s) if tuned else None,
                "fmax_mhz": self.fmax_mhz, "largest_fraction": round(self.largest_fraction, 4),
                "binding": self.binding,
                **{f"{k}_used": v["used"] for k, v in self.resources.items()},
                "config": self.config.to_dict()}

    # ------------------------------------------------------------------ log lines
    def to_record(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "status": self.status, "message": self.message,
                "binding": self.binding, "fits": self.fits, "resources": self.resources,
                "largest_fraction": self.largest_fraction, "fmax_mhz": self.fmax_mhz,
                "tasks": [t.to_dict() for t in self.tasks],
                "network_cycles": None if self.network is None else self.network.to_dict(),
                "seconds": self.seconds, "round": self.round, "trials": list(self.trials)}

    @classmethod
    def from_record(cls, raw: Mapping[str, Any]) -> "Evaluation":
        if raw.get("status") not in STATUSES:
            raise ValueError(f"status {raw.get('status')!r} is not one of {STATUSES}")
        return cls(VTAConfig.from_dict(raw["config"]), raw["status"], str(raw.get("message", "")),
                   str(raw.get("binding", "")), bool(raw.get("fits", True)), dict(raw.get("resources", {})),
                   float(raw.get("largest_fraction", 0.0)), float(raw.get("fmax_mhz", 0.0)),
                   tuple(TaskCycles.from_dict(t) for t in raw.get("tasks", ())), float(raw.get("seconds", 0.0)),
                   int(raw.get("round", -1)), tuple(str(t) for t in raw.get("trials", ())),
                   network=NetworkCycles.from_dict(raw.get("network_cycles")))


def _ms(seconds: float) -> float | None:
    return None if seconds == float("inf") else round(seconds * 1e3, 6)


def ideal_cycles(task: Task) -> int:
    """GEMM micro-ops of one run of ``task`` (channels and batch padded to whole blocks)."""
    env = get_env(task.config)
    if task.name == "vta.conv2d":
        wl = Conv2dWorkload.from_key(task.args)
        nb, cib, cob = conv2d_blocks(env, wl)
        return nb * wl.oh * wl.ow * cib * cob * wl.kh * wl.kw
    mb, nb, kb = dense_blocks(env, *task.args)
    return mb * nb * kb


def measure_tasks(tasks: list[Task], timeout: float) -> tuple[list[TaskCycles], list[str], str]:
    """Each task's default tiling measured (cycles), its tuning record, and the first error ('' if none)."""
    builder, runner = LocalBuilder(timeout=timeout, n_parallel=1), LocalRunner(timeout=timeout)
    out, trials = [], []
    for task in tasks:
        cfg = task.config_space.fallback
        started = time.time()
        result = run_trial(task, cfg.index, builder, runner)
        trials.append(TuningRecord.of(MeasureInput(task, cfg), result, started, "default").to_json())
        if not result.ok:
            return out, trials, f"{task}: default tiling failed ({result.error_no.name}: {result.error_msg})"
        out.append(TaskCycles(task.name, task.args, task.count, int(result.cost), ideal_cycles(task)))
    return out, trials, ""


def elaborate(config: VTAConfig) -> None:
    """Elaborate the accelerator of ``config`` (``VTAShell``, every submodule, Amaranth's design
    checks; no netlist): raises what the RTL raises for a configuration it cannot build."""
    from amaranth.hdl import Fragment  # noqa: PLC0415 -- the HDL loads only where a job runs

    from vtakit.hw.shell import VTAShell  # noqa: PLC0415

    Fragment.get(VTAShell(config), None).prepare()


def network_cycles(graph: Any, config: VTAConfig, sample: Mapping[str, Any], expected: list[Any] | None = None,
                   tuning_log: str | None = None) -> tuple[NetworkCycles, Any]:
    """Build ``graph`` for ``config`` (``tuning_log``: the tuned schedules, else default tilings) and
    profile one inference of ``sample`` on the cycle model; returns its accelerator cycles and the
    :class:`~vtakit.compiler.graph.module.Profile`. ``expected``: the integer CPU reference's outputs,
    which the accelerator's must equal bit for bit (a :class:`DSEError` says where they differ)."""
    import numpy as np  # noqa: PLC0415

    from vtakit.compiler import graph as vg  # noqa: PLC0415 -- the graph compiler loads only when used

    module = vg.build(graph, "vta", config=config, tuning_log=tuning_log)
    profile = module.profile(sample, backend="cycle")
    if expected is not None:
        for name, got, want in zip(graph.outputs, profile.outputs, expected):
            if not np.array_equal(got, want):
                bad = int(np.count_nonzero(np.asarray(got) != np.asarray(want)))
                raise DSEError(f"the network's output {name!r} on {config.model} differs from the integer CPU "
                               f"reference in {bad} of {np.asarray(want).size} values")
    steps = tuple((r.name, int(r.cycles)) for r in profile.layers if r.on_accelerator)
    if profile.total_cycles is None:
        raise DSEError(f"the cycle model gave no cycles for the network on {config.model}")
    return NetworkCycles(int(profile.total_cycles), int(profile.ideal_cycles), steps), profile


def evaluate_job(graph: Any, config: dict[str, Any], part: str, budget: dict[str, float], max_batch: int,
                 timeout: float, round_: int, reference: bool = False, sample: Mapping[str, Any] | None = None,
                 expected: list[Any] | None = None) -> dict[str, Any]:
    """Evaluate one configuration (``config``: its JSON keys) of ``graph`` on ``part``; returns
    :meth:`Evaluation.to_record`. Never raises for a bad configuration: it becomes a record.
    ``reference``: measure even when it does not fit (the baseline). ``sample``: one input of the
    network, to measure the whole network's cycles (None: the tasks' sum only); ``expected``: the
    integer CPU reference's outputs for it, which the accelerator's must equal."""
    start = time.perf_counter()
    space = DesignSpace(part, max_batch, budget, lut_margin=0.0)    # ``budget``: the search's, margin included
    cfg = VTAConfig.from_dict(config)
    fit = space.fit(cfg)
    ev = Evaluation(cfg, "ok", binding=fit.binding, fits=fit.fits, resources=fit.resources(),
                    largest_fraction=fit.largest_fraction, fmax_mhz=cfg.clock_mhz, round=round_)
    if not fit.fits:
        ev.message = f"does not fit {space.part.name}: {fit.describe()}"
        if not reference:
            ev.status = "rejected"
            ev.seconds = time.perf_counter() - start
            return ev.to_record()
    try:
        elaborate(cfg)
    except Exception as exc:   # noqa: BLE001 -- whatever the RTL raises is this configuration's error
        ev.status, ev.message = "error", f"the RTL of {cfg.model} does not elaborate: {type(exc).__name__}: {exc}"
        ev.seconds = time.perf_counter() - start
        return ev.to_record()
    with shared_kernels():   # the network's build reuses the layers extract_tasks compiled (same keys, exact)
        try:
            tasks = extract_tasks(graph, target="vta", config=cfg)
        except VtakitError as exc:
            ev.status, ev.message = "error", f"the network does not compile for {cfg.model}: {exc}"
            ev.seconds = time.perf_counter() - start
            return ev.to_record()
        measured, trials, error = measure_tasks(tasks, timeout)
        ev.tasks, ev.trials = tuple(measured), tuple(trials)
        if error:
            ev.status, ev.message = "error", error
        elif sample is not None:
            try:
                ev.network, _ = network_cycles(graph, cfg, sample, expected)
            except VtakitError as exc:
                ev.status, ev.message = "error", f"the whole network on {cfg.model}: {exc}"
    ev.seconds = time.perf_counter() - start
    return ev.to_record()

