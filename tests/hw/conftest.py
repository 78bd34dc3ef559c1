"""Fixtures of the hardware tests: the session-wide RTL result cache (see rtl_cache.py)."""

from pathlib import Path

import pytest

from tests.hw.rtl_cache import session_cache_dir


@pytest.fixture(scope="session")
def rtl_cache_dir(tmp_path_factory, worker_id) -> Path:
    return session_cache_dir(tmp_path_factory, worker_id)
