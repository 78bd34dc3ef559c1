"""scripts/bench_cycle.py says loudly when the compiled simulator cores are missing (its figures
would then measure the Python engines), and its compiled workloads check unsaturated outputs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from vtakit.hw.config import VTAConfig
from vtakit.sim import native

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_cycle.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_cycle_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_missing_cores_are_announced_on_stderr(bench, monkeypatch, capsys):
    monkeypatch.setenv("VTAKIT_NATIVE", "0")
    missing = bench.missing_cores()
    assert missing == ["_timing_core", "_fsim_core"]
    bench.warn_missing_cores(missing)
    err = capsys.readouterr().err
    assert "WARNING: the compiled simulator cores _timing_core, _fsim_core are missing (VTAKIT_NATIVE=0)" in err
    assert "do not measure vtakit's cycle backend" in err


def test_present_cores_are_not_announced(bench, monkeypatch, capsys):
    monkeypatch.setenv("VTAKIT_NATIVE", "1")
    if any(native.core(name) is None for name in ("_timing_core", "_fsim_core")):
        pytest.skip("the compiled cores are not built")
    assert bench.missing_cores() == []
    bench.warn_missing_cores([])
    assert capsys.readouterr().err == ""


def test_compiled_workloads_check_their_result(bench):
    from tests.programs import run_program
    b = bench._compiled("dense", VTAConfig.small(), (16, 32, 16))
    dram, _ = run_program(b.program, "fsim")
    assert b.check(dram)
    at = b.program.segments[-1].addr
    dram[at] ^= 1                                    # one output byte off
    assert not b.check(dram)
