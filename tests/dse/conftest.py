"""Fixtures of the co-design search tests: one small search on the digits CNN (8 evaluations), run
once per session into a log that the resume, reproducibility and CLI tests start from."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

#: The small search every test shares: the digits CNN on the xc7z020, 8 configurations in rounds of 4.
SMALL = dict(trials=8, batch_size=4, n_parallel=2, seed=3, timeout=60)


@pytest.fixture(scope="session")
def small_options() -> dict:
    return dict(SMALL)


@pytest.fixture(scope="session")
def small_search(tmp_path_factory):
    """(result, log path) of the shared search. Under pytest-xdist the workers share one log: the first
    to take the lock evaluates the 8 configurations, the others resume from its complete log (nothing is
    evaluated again, and the same seed and log give the same result), so CI pays for one search, not one
    per worker."""
    from vtakit import dse

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "dse-small-search"
    root.mkdir(exist_ok=True)
    os.environ.setdefault("VTAKIT_CACHE_DIR", str(root / "kernels"))
    log = root / "search.jsonl"
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = dse.search("digits", "xc7z020", log=log, **SMALL)
    return result, Path(log)
