"""Callbacks for :meth:`Tuner.tune`: progress shown as trials finish (AutoTVM's ``progress_bar``)."""

from __future__ import annotations

from typing import Any, Sequence

from vtakit.compiler.autotune.measure import MeasureInput, MeasureResult

__all__ = ["progress_callback"]


def progress_callback(bar: Any, unit: str) -> Any:
    """A callback that advances ``bar`` (a :class:`vtakit.progress.Progress`) by one per trial and
    shows the best cost so far in ``unit``; the bar's total gives the ETA."""

    def callback(tuner: Any, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        bar.advance(len(results))
        if tuner.best_config is not None:
            bar.step(f"best {tuner.best_cost:.4g} {unit}")

    return callback
