"""Graph tests write nothing outside their temporary directories: onnx's test harness (ONNX_HOME),
onnxruntime and other tools (XDG_CACHE_HOME) and vtakit's kernel cache (VTAKIT_CACHE_DIR) are pointed
at one directory per test run (shared by pytest-xdist's workers, so a kernel one worker compiled is
loaded by the others: the kernel cache is safe for concurrent use)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_caches(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # one directory for all the workers of this run: they share compiled kernels
    root = base / "graph-caches"
    root.mkdir(exist_ok=True)
    saved = {key: os.environ.get(key) for key in ("ONNX_HOME", "XDG_CACHE_HOME", "VTAKIT_CACHE_DIR",
                                                 "VTAKIT_BUILD_JOBS")}
    for key in saved:
        os.environ[key] = str(root / key.lower())
    os.environ["VTAKIT_BUILD_JOBS"] = "1"  # the workers already use every core; tests that fork say so
    yield root
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
