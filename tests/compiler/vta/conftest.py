"""Fixtures of the VTA backend tests."""

import pytest


@pytest.fixture
def small_env():
    from vtakit.compiler.vta import get_env
    from vtakit.hw.config import VTAConfig

    return get_env(VTAConfig.small())
