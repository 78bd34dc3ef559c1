"""Fixtures of the co-design search tests: one small search on the digits CNN (8 evaluations), run
once per session into a log that the resume, reproducibility and CLI tests start from."""

from __future__ import annotations

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
    """(result, log path) of the shared search."""
    from vtakit import dse

    root = tmp_path_factory.mktemp("dse")
    os.environ.setdefault("VTAKIT_CACHE_DIR", str(root / "kernels"))
    log = root / "search.jsonl"
    result = dse.search("digits", "xc7z020", log=log, **SMALL)
    return result, Path(log)
