"""The search log: JSON lines, one per evaluated configuration or tuned configuration, appended and
flushed as each result arrives, so a killed search resumes with nothing lost.

Each line carries the format name and version, the network, the part and the budget; a search
reads only the lines of its own network, part and budget (others are ignored, with a note). Two
kinds of line: ``eval`` (an :class:`~vtakit.dse.evaluate.Evaluation`: the configuration, its
status, resources, clock, per-task cycles with default tilings and the whole network's cycles)
and ``tuned`` (the per-task cycles after tuning the schedules with a given number of trials and
the whole network's with them; the trials themselves are in that configuration's tuning log).
Version 1 lines (before the whole network was measured) are ignored with a note: their
configurations are evaluated again. Every line also carries the code fingerprint
(:func:`~vtakit.dse.fingerprint.code_fingerprint`: vtakit's version and a digest of the code that
computes an evaluation's figures); a line of another fingerprint, or of none (written before
fingerprints), was measured by other code and is ignored with one warning that counts them: its
configuration is evaluated again. A line without its newline (a kill mid-write) or otherwise
unreadable is skipped with a warning, and the writer starts a new line before appending.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vtakit.compiler.autotune.record import RecordWriter
from vtakit.dse.evaluate import Evaluation, NetworkCycles, TaskCycles
from vtakit.dse.fingerprint import code_fingerprint
from vtakit.dse.space import config_key
from vtakit.errors import DSEError

__all__ = ["LOG_FORMAT", "LOG_VERSION", "LogContents", "SearchLog"]

LOG_FORMAT = "vtakit-dse"
LOG_VERSION = 2


@dataclass
class LogContents:
    """What a log holds for one search: evaluations and tuned cycles by config key, in log order,
    and notes on what was ignored."""

    evaluations: dict[str, Evaluation] = field(default_factory=dict)
    tuned: dict[tuple[str, int], tuple[tuple[TaskCycles, ...], NetworkCycles | None]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Line:
    text: str

    def to_json(self) -> str:   # what RecordWriter writes
        return self.text


class SearchLog:
    """The log of one search (``path`` None: nothing is stored)."""

    def __init__(self, path: str | Path | None, network: str, part: str, budget: dict[str, float],
                 fingerprint: str | None = None) -> None:
        self.path = None if path is None else Path(path)
        self.fingerprint = code_fingerprint() if fingerprint is None else fingerprint
        self.header = {"format": LOG_FORMAT, "version": LOG_VERSION, "network": network, "part": part,
                       "budget": budget, "fingerprint": self.fingerprint}
        self._writer: RecordWriter | None = None

    def load(self) -> LogContents:
        out = LogContents()
        if self.path is None or not self.path.exists():
            return out
        try:
            text = self.path.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            raise DSEError(f"cannot read the search log {str(self.path)!r}: {exc.strerror}") from exc
        lines = text.split("\n")
        foreign = old = 0
        stale: dict[str, int] = {}   # records of other code, by their fingerprint
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                if isinstance(raw, dict) and raw.get("format") == LOG_FORMAT and raw.get("version") == 1:
                    old += 1
                    continue
                if not isinstance(raw, dict) or raw.get("format") != LOG_FORMAT or raw.get("version") != LOG_VERSION:
                    raise ValueError(f"not a version-{LOG_VERSION} {LOG_FORMAT} line")
                if any(raw.get(k) != v for k, v in self.header.items() if k != "fingerprint"):
                    foreign += 1
                    continue
                if raw.get("fingerprint") != self.fingerprint:
                    other = str(raw.get("fingerprint", "none"))
                    stale[other] = stale.get(other, 0) + 1
                    continue
                if raw.get("kind") == "eval":
                    ev = Evaluation.from_record(raw)
                    prev = out.evaluations.get(ev.key)
                    if prev is None or prev.status == "error":   # an error evaluated again: the later line
                        out.evaluations[ev.key] = ev
                elif raw.get("kind") == "tuned":
                    tasks = tuple(TaskCycles.from_dict(t) for t in raw["tasks"])
                    network = NetworkCycles.from_dict(raw.get("network_cycles"))
                    out.tuned.setdefault((str(raw["key"]), int(raw["schedule_trials"])), (tasks, network))
                else:
                    raise ValueError(f"unknown kind {raw.get('kind')!r}")
            except (ValueError, KeyError, TypeError) as exc:
                where = "its last line" if lineno >= len(lines) - 1 else f"line {lineno}"
                warnings.warn(f"search log {str(self.path)!r}: skipped {where}, not a readable record ({exc})",
                              stacklevel=2)
        if old:
            out.notes.append(f"{self.path}: ignored {old} version-1 record(s) (logged before the whole network's "
                             "cycles were measured); their configurations are evaluated again")
        if foreign:
            out.notes.append(f"{self.path}: ignored {foreign} record(s) of another network, part or budget")
        if stale:
            count = sum(stale.values())
            which = ", ".join(f"{n} of {fp}" for fp, n in sorted(stale.items()))
            message = (f"search log {str(self.path)!r}: ignored {count} record(s) measured by other code (code "
                       f"fingerprint {which}; this code's is {self.fingerprint}); their configurations are "
                       "evaluated again")
            warnings.warn(message, stacklevel=2)
            out.notes.append(message)
        return out

    def append_eval(self, ev: Evaluation) -> None:
        self._write({"kind": "eval", **ev.to_record()})

    def append_tuned(self, ev: Evaluation, schedule_trials: int, tuning_log: str) -> None:
        assert ev.tuned is not None
        self._write({"kind": "tuned", "key": config_key(ev.config), "schedule_trials": schedule_trials,
                     "tasks": [t.to_dict() for t in ev.tuned],
                     "network_cycles": None if ev.tuned_network is None else ev.tuned_network.to_dict(),
                     "tuning_log": tuning_log})

    def _write(self, body: dict[str, Any]) -> None:
        if self.path is None:
            return
        clash = set(body) & set(self.header)
        if clash:
            raise DSEError(f"a search log record may not reuse the header's keys {sorted(clash)}")
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = RecordWriter(self.path)
        self._writer.write(_Line(json.dumps({**self.header, **body}, separators=(",", ":"))))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
