"""What a tuning log says: the best result per task, and best-so-far curves per tuner
(``vtakit tune-report``); the plot needs matplotlib (``pip install 'vtakit[plot]'``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from vtakit.compiler.autotune.record import TuningRecord
from vtakit.errors import TuningError

__all__ = ["TaskSummary", "summarize", "best_so_far", "plot_curves", "COST_UNITS"]

#: What a cost is, per target.
COST_UNITS = {"vta": "cycles", "llvm": "s", "cuda": "s"}


@dataclass
class TaskSummary:
    task: str
    target: str
    trials: int
    errors: int
    best_cost: float | None
    best_config: dict[str, Any] | None
    tuners: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "target": self.target, "trials": self.trials, "errors": self.errors,
                "best_cost": self.best_cost, "unit": COST_UNITS.get(self.target, ""),
                "best_config": self.best_config, "tuners": self.tuners}


def _label(r: TuningRecord) -> str:
    return f"{r.task_name}{tuple(r.args)}"


def summarize(records: Sequence[TuningRecord]) -> list[TaskSummary]:
    """One summary per task (template, workload, target, VTAConfig), in order of first appearance."""
    out: dict[str, TaskSummary] = {}
    for r in records:
        s = out.setdefault(r.task_key, TaskSummary(_label(r), r.target, 0, 0, None, None, []))
        s.trials += 1
        s.errors += not r.result.ok
        if r.tuner and r.tuner not in s.tuners:
            s.tuners.append(r.tuner)
        if r.result.ok and (s.best_cost is None or r.result.cost < s.best_cost):
            s.best_cost = r.result.cost
            s.best_config = {name: (value[1:] if kind == "sp" else value) for name, kind, value in r.entity}
    return list(out.values())


def best_so_far(records: Sequence[TuningRecord]) -> dict[tuple[str, str], list[float]]:
    """``(task label, tuner) -> best cost after each trial`` (inf until a valid one), in log order."""
    curves: dict[tuple[str, str], list[float]] = {}
    for r in records:
        curve = curves.setdefault((_label(r), r.tuner or "?"), [])
        prev = curve[-1] if curve else float("inf")
        curve.append(min(prev, r.result.cost))
    return curves


def plot_curves(curves: dict[tuple[str, str], list[float]], path: str | Path, units: dict[str, str] | None = None) -> None:
    """Best-so-far against trials, one panel per task, one line per tuner."""
    try:
        import matplotlib  # noqa: PLC0415 -- optional extra, imported only to plot
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as exc:
        raise TuningError("--plot needs matplotlib: pip install 'vtakit[plot]'") from exc
    tasks = list(dict.fromkeys(task for task, _ in curves))
    if not tasks:
        raise TuningError("nothing to plot: the log holds no records")
    fig, axes = plt.subplots(len(tasks), 1, figsize=(7, 3.2 * len(tasks)), squeeze=False)
    for ax, task in zip(axes[:, 0], tasks):
        for (t, tuner), curve in curves.items():
            if t == task:
                ax.plot(range(1, len(curve) + 1), curve, label=tuner)
        ax.set_title(task)
        ax.set_xlabel("trials")
        ax.set_ylabel(f"best so far ({(units or {}).get(task, 'cost')})")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
