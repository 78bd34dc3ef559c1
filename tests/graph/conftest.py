"""Graph tests write nothing outside their temporary directories: onnx's test harness (ONNX_HOME),
onnxruntime and other tools (XDG_CACHE_HOME) and vtakit's kernel cache (VTAKIT_CACHE_DIR) are pointed
at one directory per test session."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("caches")
    saved = {key: os.environ.get(key) for key in ("ONNX_HOME", "XDG_CACHE_HOME", "VTAKIT_CACHE_DIR")}
    for key in saved:
        os.environ[key] = str(root / key.lower())
    yield root
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
