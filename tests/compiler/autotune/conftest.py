"""Fixtures of the tuner tests: a small accelerator dense task whose trials take milliseconds."""

import pytest


@pytest.fixture(scope="session")
def small_dense_task():
    from vtakit import autotune
    from vtakit.hw.config import VTAConfig

    return autotune.create_task("vta.dense", "dense:16,16,16", config=VTAConfig.small())


@pytest.fixture
def fast_option():
    from vtakit import autotune

    return autotune.measure_option(autotune.LocalBuilder(timeout=20, n_parallel=2), autotune.LocalRunner(timeout=20))
