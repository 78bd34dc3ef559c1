"""Tuning logs: one JSON object per trial per line, appended and flushed as each trial finishes.

A record holds the task (template, workload, target), the VTAConfig (``null`` for the CPU), the
config (index and the knob entities, which name it independently of the index), the result
(costs, error kind and message), timestamps, the tuner, the vtakit version and the format
version :data:`LOG_VERSION`. Lines are self-contained, so a log survives being killed mid-write:
a line without its newline (or otherwise unreadable) is skipped with a warning, and the writer
starts a new line before appending to such a file. Logs of several tasks, tuners or runs can be
concatenated.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from vtakit.atomic import atomic_write
from vtakit.compiler.autotune.measure import MeasureErrorNo, MeasureInput, MeasureResult
from vtakit.compiler.autotune.task import Task
from vtakit.errors import TuningError, VtakitError
from vtakit.hw.config import VTAConfig

__all__ = ["LOG_VERSION", "TuningRecord", "RecordWriter", "load_records", "pick_best", "best_by_task",
           "split_records"]

LOG_VERSION = 1


def _version() -> str:
    from vtakit import __version__  # noqa: PLC0415 -- the package root imports the compiler

    return __version__


@dataclass(frozen=True)
class TuningRecord:
    """One measured trial, as stored in a log."""

    task_name: str
    args: tuple[int, ...]
    target: str
    vta_config: dict[str, Any] | None
    index: int
    entity: list[list[Any]]
    result: MeasureResult
    started: float
    tuner: str = ""
    vtakit_version: str = ""
    version: int = LOG_VERSION

    @property
    def task_key(self) -> str:
        """Equal to :meth:`Task.key` of the task the record was measured for."""
        return json.dumps([self.task_name, list(self.args), self.target, self.vta_config], sort_keys=True)

    @classmethod
    def of(cls, inp: MeasureInput, result: MeasureResult, started: float, tuner: str = "") -> "TuningRecord":
        task = inp.task
        return cls(task.name, task.args, task.target, task.config_dict, inp.config.index, inp.config.to_json(), result,
                   started, tuner, _version())

    def to_json(self) -> str:
        r = self.result
        return json.dumps({
            "version": self.version, "vtakit": self.vtakit_version,
            "task": {"name": self.task_name, "args": list(self.args), "target": self.target},
            "vta_config": self.vta_config,
            "config": {"index": self.index, "entity": self.entity},
            "result": {"costs": list(r.costs), "error_no": int(r.error_no), "error": r.error_no.name,
                       "error_msg": r.error_msg, "all_cost": r.all_cost},
            "started": self.started, "finished": r.timestamp, "tuner": self.tuner}, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> "TuningRecord":
        raw = json.loads(line)
        if not isinstance(raw, dict) or raw.get("version") != LOG_VERSION:
            raise ValueError(f"not a version-{LOG_VERSION} tuning record")
        task, res, cfg = raw["task"], raw["result"], raw["config"]
        result = MeasureResult(tuple(float(c) for c in res["costs"]), MeasureErrorNo(res["error_no"]),
                               res.get("error_msg", ""), float(res.get("all_cost", 0.0)), float(raw["finished"]))
        return cls(str(task["name"]), tuple(int(a) for a in task["args"]), str(task["target"]),
                   _normalized_config(raw["vta_config"]), int(cfg["index"]), cfg["entity"], result,
                   float(raw["started"]), raw.get("tuner", ""), raw.get("vtakit", ""), raw["version"])


def _normalized_config(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    """A record's VTAConfig with every key the configuration has now: a key added after the record
    was written takes its default (the value the record was measured with), so the record still
    belongs to its task. A configuration this version cannot read stays as written (and so
    matches no task of this version)."""
    if raw is None:
        return None
    try:
        return VTAConfig.from_dict(raw).to_dict()
    except (VtakitError, TypeError, ValueError):
        return raw


class RecordWriter:
    """Appends records to a log, one flushed line each (only the tuning process writes)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._file = open(self.path, "a+b")
            self._file.seek(0, os.SEEK_END)
            if self._file.tell():
                self._file.seek(-1, os.SEEK_END)
                if self._file.read(1) != b"\n":   # a record cut short by a kill: keep it on its own line
                    self._file.write(b"\n")
        except OSError as exc:
            raise TuningError(f"cannot open tuning log {str(path)!r} for appending: {exc.strerror}") from exc

    def write(self, record: TuningRecord) -> None:
        self._file.write(record.to_json().encode() + b"\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def load_records(path: str | Path) -> list[TuningRecord]:
    """Every record of a log, in order. Unreadable lines (a truncated last line after a kill, a
    line of another format) are skipped with a warning."""
    try:
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise TuningError(f"cannot read tuning log {str(path)!r}: {exc.strerror}") from exc
    records = []
    lines = text.split("\n")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(TuningRecord.from_json(line))
        except (ValueError, KeyError, TypeError) as exc:
            where = "its last line" if lineno >= len(lines) - 1 else f"line {lineno}"
            warnings.warn(f"tuning log {str(path)!r}: skipped {where}, not a readable record ({exc})", stacklevel=2)
    return records


def split_records(records: Iterable[TuningRecord], task: Task) -> tuple[list[TuningRecord], list[str]]:
    """The records of ``task``, and a note for each group of records of the same template and
    workload left out because another target or VTAConfig measured them."""
    mine, other_config, other_target = [], 0, 0
    key = task.key()
    for r in records:
        if r.task_key == key:
            mine.append(r)
        elif r.task_name.split(".", 1)[1:] == task.name.split(".", 1)[1:] and list(r.args) == list(task.args):
            if r.target != task.target:
                other_target += 1
            else:
                other_config += 1
    notes = []
    if other_target:
        notes.append(f"ignored {other_target} record(s) of this workload measured for another target")
    if other_config:
        notes.append(f"ignored {other_config} record(s) of this workload measured on another VTAConfig")
    return mine, notes


def best_by_task(records: Iterable[TuningRecord]) -> dict[str, TuningRecord]:
    """The lowest-cost valid record of each task (ties: the earliest)."""
    best: dict[str, TuningRecord] = {}
    for r in records:
        if r.result.ok and (r.task_key not in best or r.result.cost < best[r.task_key].result.cost):
            best[r.task_key] = r
    return best


def pick_best(in_path: str | Path, out_path: str | Path) -> int:
    """Write the best record of each task of ``in_path`` to ``out_path``; returns how many."""
    best = best_by_task(load_records(in_path))
    with atomic_write(out_path) as f:
        f.write("".join(r.to_json() + "\n" for r in best.values()).encode())
    return len(best)
