"""Progress on stderr for long work: RTL runs, long compiles, Verilog generation, benchmarks.

Long work says what it is doing and how far along it is, in one style everywhere: a tqdm bar on
stderr, so stdout (tables, JSON) stays clean. Bars are shown only when stderr is a terminal, so
pipes, logs and tests see nothing; ``vtakit --quiet`` (:func:`set_enabled`) turns them off and
``VTAKIT_PROGRESS=1`` on (``0`` off). A bar appears only once its work has lasted ``delay``
seconds, so quick runs stay silent, and a timer thread redraws it while one long step runs (an RTL
GEMM of many micro-ops, one slow compiler pass), so the elapsed time keeps moving. The work itself
only sets numbers (:meth:`Progress.advance`, :meth:`Progress.step`): it never waits on the terminal.

This module imports nothing from vtakit, so every layer (sim, compiler, cli) may use it.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from tqdm import tqdm

__all__ = ["progress", "Progress", "enabled", "set_enabled", "DELAY_SECONDS", "QUICK_WORK_DELAY_SECONDS",
           "REFRESH_SECONDS"]

#: How long work runs before its bar appears, unless the caller says otherwise.
DELAY_SECONDS = 0.5
#: The delay for work that is usually quick (a compile): its bar appears only when it is not.
QUICK_WORK_DELAY_SECONDS = 1.0
#: How often the timer thread redraws a bar.
REFRESH_SECONDS = 0.25

_forced: bool | None = None
# Work of unknown length shows what it does and for how long, not a meaningless count.
_STEPS_FORMAT = "{desc} [{elapsed}{postfix}]"


def set_enabled(on: bool | None) -> bool | None:
    """Force bars on (True) or off (False); None restores the default (``VTAKIT_PROGRESS``, else
    whether stderr is a terminal). Returns the previous setting, to restore it."""
    global _forced
    previous, _forced = _forced, on
    return previous


def enabled() -> bool:
    """Whether a bar started now would be shown."""
    if _forced is not None:
        return _forced
    env = os.environ.get("VTAKIT_PROGRESS", "")
    if env in ("0", "1"):
        return env == "1"
    return sys.stderr is not None and sys.stderr.isatty()


class Progress:
    """What a running piece of work tells its bar; every method is a no-op when bars are off."""

    def __init__(self, bar: tqdm | None) -> None:
        self._bar = bar

    def advance(self, n: int = 1) -> None:
        """``n`` more units of the total are done."""
        if self._bar is not None:
            self._bar.n += n

    def step(self, text: str) -> None:
        """What is being done now (a pass name, a cycle count), shown after the count."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)


@contextmanager
def progress(desc: str, total: int | None = None, unit: str = "it", delay: float | None = None) -> Iterator[Progress]:
    """A bar for the work done inside the ``with`` block: ``desc``, then ``n/total unit``, the rate
    and the current step; without a ``total``, the elapsed time and the current step. It is
    removed when the block ends, normally or by an exception (Ctrl-C included)."""
    if not enabled():
        yield Progress(None)
        return
    delay = DELAY_SECONDS if delay is None else delay
    bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True,
               delay=delay, miniters=0, mininterval=0, bar_format=None if total is not None else _STEPS_FORMAT)
    stop = threading.Event()
    ticker = threading.Thread(target=_redraw, args=(bar, stop, delay), name=f"progress: {desc}", daemon=True)
    ticker.start()
    try:
        yield Progress(bar)
    finally:
        stop.set()
        ticker.join()
        bar.close()


def _redraw(bar: tqdm, stop: threading.Event, delay: float) -> None:
    """Redraw ``bar`` every REFRESH_SECONDS after ``delay``, until ``stop`` is set."""
    if stop.wait(delay):
        return
    while True:
        bar.update(0)     # draws the numbers the work set (tqdm's own delay and interval rules apply)
        if stop.wait(REFRESH_SECONDS):
            return
