"""Compiled layers run on the simulators' compiled cores.

Every fsim and cycle-model launch of a compiled op must take the native engine: a core that
declines what the compiler emits would fall back to the Python engines silently (same results,
10-1000x slower), and only this test would notice. It skips when the cores are not built, unless
``VTAKIT_REQUIRE_NATIVE=1`` (as in CI).
"""

import os

import pytest

from vtakit.compiler.topi_vta.bench import run_conv2d, run_dense
from vtakit.compiler.topi_vta.workloads import RESNET18, Conv2dWorkload
from vtakit.hw.config import VTAConfig
from vtakit.sim import cycle, fsim, native

SMALL = VTAConfig.small()


@pytest.fixture
def engines(monkeypatch):
    """The engine each fsim and cycle-model run took, as ``(simulator, "native" or why not)``."""
    monkeypatch.setenv("VTAKIT_NATIVE", "1")
    for name in ("_fsim_core", "_timing_core"):
        if native.core(name) is None:
            if os.environ.get("VTAKIT_REQUIRE_NATIVE") == "1":
                pytest.fail(f"vtakit.sim.{name} is not built")
            pytest.skip(f"vtakit.sim.{name} is not built")
    used = []
    fsim_run, cycle_simulate = fsim._native_run, cycle.simulate

    def fsim_native_run(*args):
        run, why = fsim_run(*args)
        used.append(("fsim", "native" if run is not None else f"python: {why}"))
        return run, why

    def cycle_run(launch, **kwargs):
        run = cycle_simulate(launch, **kwargs)
        used.append(("cycle", "native" if run.engine == "native" else
                     f"{run.engine}: the core says {cycle.native_timing(launch)!r}"))
        return run

    monkeypatch.setattr(fsim, "_native_run", fsim_native_run)
    monkeypatch.setattr(cycle, "simulate", cycle_run)
    return used


@pytest.mark.parametrize("backend", ["fsim", "cycle"])
def test_compiled_layers_run_on_the_compiled_cores(engines, backend):
    runs = [run_conv2d(RESNET18["C10"], backend=backend, vthreads=2),
            run_conv2d(RESNET18["C11"], backend=backend, vthreads=1),
            run_dense(256, 256, 256, backend=backend, vthreads=2),
            run_conv2d(Conv2dWorkload(7, 7, 12, 12, 3, 1, 1), SMALL, backend=backend, vthreads=2)]
    assert all(r.correct for r in runs)
    simulators = {"fsim"} if backend == "fsim" else {"fsim", "cycle"}   # the cycle model's data is fsim's
    assert {s for s, _ in engines} == simulators and len(engines) == len(runs) * len(simulators)
    fallbacks = [(s, e) for s, e in engines if e != "native"]
    assert not fallbacks, f"compiled layers fell back to the Python engines: {fallbacks}"


def test_a_fallback_is_seen(engines, monkeypatch):
    """With the cores turned off the same runs report the Python engines (the check above can fail)."""
    monkeypatch.setenv("VTAKIT_NATIVE", "0")
    assert run_dense(16, 32, 16, SMALL, backend="cycle", vthreads=2).correct
    assert engines and all(e != "native" for _, e in engines)
