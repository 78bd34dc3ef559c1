"""What a co-design search found: :class:`DSEResult` (the Pareto front, the best configuration, the
reference it is compared with) and its reports: a table, a dict for ``--json``, a plot, and the
files ``vtakit dse --out DIR`` writes.

The Pareto front is over (accelerator latency with default tilings, largest resource share of the
part) among the configurations that fit; ``best`` is the fastest of the tuned configurations when
schedules were tuned (``schedule_trials > 0``), else the fastest on the front. ``speedup`` compares
accelerator cycles, ``best_cycles`` and ``default_cycles``, both tuned with the same schedule budget;
the CPU part of an inference (the network's layers that stay on the host) is reported apart.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vtakit.atomic import atomic_write
from vtakit.dse.evaluate import Evaluation
from vtakit.errors import DSEError
from vtakit.hw.config import VTAConfig

__all__ = ["DSEResult", "pareto_front", "OUT_FILES"]

#: What :meth:`DSEResult.write` puts in its directory.
OUT_FILES = ("best_config.json", "pareto.csv", "pareto.json", "pareto.png", "best_tuning.log", "verification.json")


def pareto_front(evaluations: list[Evaluation]) -> list[Evaluation]:
    """The fitting, measured configurations no other one beats on both latency and largest resource
    share, fastest first (ties broken by the configuration's key, so the order is reproducible)."""
    points = sorted((e for e in evaluations if e.ok and e.fits),
                    key=lambda e: (e.latency_s, e.largest_fraction, e.key))
    front: list[Evaluation] = []
    for e in points:
        if not front or e.largest_fraction < front[-1].largest_fraction:
            front.append(e)
    return front


@dataclass
class DSEResult:
    """The outcome of :func:`vtakit.dse.search`."""

    network: str
    part: str
    budget: dict[str, float]
    strategy: str
    seed: int
    evaluations: list[Evaluation]
    reference: Evaluation
    schedule_trials: int = 0
    tuning_logs: dict[str, str] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    log: str | None = None
    space: dict[str, Any] = field(default_factory=dict)   # what was searched (DesignSpace.describe)
    verification: dict[str, Any] | None = None            # the winner's check (vtakit.dse.verify), when run

    @property
    def pareto(self) -> list[Evaluation]:
        return pareto_front(self.evaluations)

    @property
    def best_evaluation(self) -> Evaluation:
        tuned = [e for e in self.evaluations if e.ok and e.fits and e.tuned is not None]
        pool = tuned or self.pareto
        if not pool:
            raise DSEError(f"no configuration of the {len(self.evaluations)} evaluated fits {self.part} and compiled "
                           "the network: nothing is best")
        key = (lambda e: (e.best_latency_s, e.key)) if tuned else (lambda e: (e.latency_s, e.key))
        return min(pool, key=key)

    @property
    def best(self) -> VTAConfig:
        return self.best_evaluation.config

    @property
    def best_cycles(self) -> int:
        return self.best_evaluation.best_cycles

    @property
    def default_cycles(self) -> int | None:
        return self.reference.best_cycles if self.reference.ok else None

    @property
    def speedup(self) -> float | None:
        """Reference cycles over the best's (both with the same schedule budget)."""
        return self.default_cycles / self.best_cycles if self.default_cycles and self.best_cycles else None

    # ------------------------------------------------------------------ reports
    def to_dict(self) -> dict[str, Any]:
        best, ref = self.best_evaluation, self.reference
        return {"network": self.network, "part": self.part, "budget": self.budget, "strategy": self.strategy,
                "seed": self.seed, "schedule_trials": self.schedule_trials,
                "best": best.config.to_dict(), "best_model": best.config.model,
                "best_cycles": self.best_cycles, "default_cycles": self.default_cycles, "speedup": self.speedup,
                "best_task_cycles": best.tuned_task_cycles or best.task_cycles,
                "default_task_cycles": (ref.tuned_task_cycles or ref.task_cycles) if ref.ok else None,
                "cycles_of": "network" if best.network is not None else "tasks",
                "best_latency_ms": round(best.best_latency_s * 1e3, 6),
                "default_latency_ms": round(ref.best_latency_s * 1e3, 6) if ref.ok else None,
                "best_utilization": _util(best), "default_utilization": _util(ref),
                "fmax_mhz": best.fmax_mhz,
                "resources": {"part": self.part, "fits": best.fits, "binding": best.binding, **best.resources},
                "default": {"config": ref.config.to_dict(), "model": ref.config.model, "fits": ref.fits,
                            "binding": ref.binding, "message": ref.message, "resources": ref.resources},
                "cpu_seconds": self.cpu_seconds,
                "pareto": [e.summary() for e in self.pareto],
                "evaluations": len(self.evaluations),
                "statuses": {s: sum(e.status == s for e in self.evaluations) for s in ("ok", "rejected", "error")},
                "space": self.space, "notes": self.notes, "log": self.log, "verification": self.verification,
                "tuning_logs": [{"model": e.config.model, "best": e.key == best.key, "default": e.key == ref.key,
                                 "log": self.tuning_logs[e.key]}
                                for e in {e.key: e for e in [ref, *self.evaluations]}.values()
                                if e.key in self.tuning_logs]}

    def table(self) -> str:
        """The Pareto front as text, then the best and the reference."""
        head = f"{'model':<28} {'latency ms':>10} {'cycles':>10} {'tuned':>10} {'util':>6} {'fmax':>6} " \
               f"{'LUT':>7} {'FF':>7} {'DSP':>5} {'BRAM':>6} {'max%':>5} binds"
        rows = [f"Pareto front: {self.network} on {self.part} ({len(self.evaluations)} configurations evaluated)",
                head]
        best = self.best_evaluation
        for e in self.pareto:
            rows.append(_row(e, "*" if e is best else ""))
        rows.append("")
        rows.append(_row(best, "best"))
        rows.append(_row(self.reference, "reference (VTAConfig())"))
        if self.speedup is not None:
            what = "tuned" if self.schedule_trials else "default tilings"
            rows.append(f"speedup {self.speedup:.3f}x in accelerator cycles ({what}): {self.default_cycles:,} -> "
                        f"{self.best_cycles:,}")
        for name, secs in self.cpu_seconds.items():
            rows.append(f"CPU part ({name}): {secs * 1e3:.3f} ms per inference")
        if self.verification is not None:
            rows.append(self.verification["summary"])
        return "\n".join(rows)

    def plot(self, path: str | Path) -> None:
        """Latency against the largest resource share: every fitting configuration, the front, the best
        and the reference (needs matplotlib)."""
        try:
            import matplotlib  # noqa: PLC0415 -- optional extra, imported only to plot
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt  # noqa: PLC0415
        except ImportError as exc:
            raise DSEError("plotting needs matplotlib: pip install 'vtakit[plot]'") from exc
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ok = [e for e in self.evaluations if e.ok and e.fits]
        ax.scatter([100 * e.largest_fraction for e in ok], [e.latency_s * 1e3 for e in ok], s=12, c="0.6",
                   label="evaluated")
        front = self.pareto
        ax.step([100 * e.largest_fraction for e in front], [e.latency_s * 1e3 for e in front], where="post",
                c="C0", marker="o", label="Pareto front")
        best = self.best_evaluation
        ax.scatter([100 * best.largest_fraction], [best.best_latency_s * 1e3], marker="*", s=160, c="C3",
                   label=f"best {best.config.model}", zorder=5)
        if self.reference.ok:
            ax.scatter([100 * self.reference.largest_fraction], [self.reference.best_latency_s * 1e3], marker="x",
                       s=60, c="k", label="VTAConfig()", zorder=5)
        ax.set_xlabel(f"largest resource share of {self.part} (%)")
        ax.set_ylabel("accelerator latency (ms)")
        ax.set_yscale("log")
        ax.set_title(f"{self.network} on {self.part}: {len(self.evaluations)} configurations")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write :data:`OUT_FILES` into ``out_dir`` (the plot only with matplotlib, the verification only when
        it ran); returns them."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        best = self.best_evaluation
        written = []
        with atomic_write(out / "best_config.json") as f:
            f.write(best.config.to_json().encode())
        written.append(out / "best_config.json")
        rows = [e.summary() for e in self.pareto]
        with atomic_write(out / "pareto.json") as f:
            f.write(json.dumps(rows, indent=1).encode())
        written.append(out / "pareto.json")
        with atomic_write(out / "pareto.csv") as f:
            f.write(_csv(rows).encode())
        written.append(out / "pareto.csv")
        with atomic_write(out / "best_tuning.log") as f:
            f.write("".join(t + "\n" for t in best.trials).encode())
            tuned = self.tuning_logs.get(best.key)
            if tuned and Path(tuned).exists():
                with open(tuned, "rb") as src:
                    shutil.copyfileobj(src, f)
        written.append(out / "best_tuning.log")
        if self.verification is not None:
            with atomic_write(out / "verification.json") as f:
                f.write(json.dumps(self.verification, indent=1).encode())
            written.append(out / "verification.json")
        try:
            self.plot(out / "pareto.png")
            written.append(out / "pareto.png")
        except DSEError:
            pass
        return written


def _util(e: Evaluation) -> float | None:
    if not e.ok or not e.best_cycles:
        return None
    return round(e.ideal_cycles / e.best_cycles, 4)


def _row(e: Evaluation, tag: str) -> str:
    res = {k: e.resources.get(k, {}).get("used", 0) for k in ("lut", "ff", "dsp", "bram")}
    lat = f"{e.best_latency_s * 1e3:.3f}" if e.ok else e.status
    cycles = f"{e.cycles:,}" if e.ok else "-"
    tuned = f"{e.tuned_cycles:,}" if e.tuned_cycles else "-"
    util = f"{100 * e.ideal_cycles / e.best_cycles:.1f}%" if e.ok and e.best_cycles else "-"
    return (f"{e.config.model:<28} {lat:>10} {cycles:>10} {tuned:>10} {util:>6} {e.fmax_mhz:>6g} "
            f"{res['lut']:>7g} {res['ff']:>7g} {res['dsp']:>5g} {res['bram']:>6g} "
            f"{100 * e.largest_fraction:>4.0f}% {e.binding.upper()} {tag}").rstrip()


def _csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    if rows:
        flat = [{**{k: v for k, v in r.items() if k != "config"}, **r["config"]} for r in rows]
        names = list(dict.fromkeys(k for r in flat for k in r))
        writer = csv.DictWriter(buf, fieldnames=names)
        writer.writeheader()
        writer.writerows(flat)
    return buf.getvalue()
