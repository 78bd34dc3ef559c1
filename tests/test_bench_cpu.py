"""scripts/bench_cpu.py keeps its honesty checks: the OpenBLAS baseline runs without the kernel
overrides, the run records the BLAS kernel and environment, and a wrong result fails the run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_cpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_cpu_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_tolerance_separates_rounding_from_wrong_results(bench):
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (64, 256)), rng.uniform(-1, 1, (256, 32))
    want = a @ b
    error, tolerance = bench.check((a.astype("float32") @ b.astype("float32")), want, 256)
    assert error <= tolerance
    wrong = want.copy()
    wrong[3, 5] += 0.01
    error, tolerance = bench.check(wrong, want, 256)
    assert error > tolerance


def test_baseline_environment_drops_the_kernel_overrides(bench, monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("OPENBLAS_L2_SIZE", "524288")
    monkeypatch.setenv("OPENBLAS_VERBOSE", "2")
    env = bench.baseline_env()
    assert "OPENBLAS_CORETYPE" not in env and "OPENBLAS_L2_SIZE" not in env
    assert env["OPENBLAS_VERBOSE"] == "2" and env["OPENBLAS_NUM_THREADS"] == str(bench.num_threads())
    recorded = bench.environment(None)
    assert recorded["openblas_env_removed_for_baseline"] == ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"]
    assert recorded["openblas_env"]["OPENBLAS_CORETYPE"] == "Haswell"


def test_run_records_the_machine_and_the_blas_kernel(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--gemm-size", "64", "--layers", "C11", "--repeat", "1",
                           "--no-tvm", "--no-ort", "--no-roofline", "--json"],
                          capture_output=True, text=True, timeout=300, env={"OPENBLAS_CORETYPE": "Haswell",
                                                                            "PATH": "/usr/bin:/bin",
                                                                            "VTAKIT_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    machine = report["machine"]
    assert machine["openblas_env_removed_for_baseline"] == ["OPENBLAS_CORETYPE"]
    assert machine["cpu"]["llvm_cpu"] and "flags" in machine["cpu"] and machine["target"].startswith("llvm")
    blas = machine["numpy_blas_baseline"]
    assert blas and all("architecture" in lib or "error" in lib for lib in blas)
    if blas[0].get("internal_api") == "openblas":  # the child ran the kernel OpenBLAS picks, not the override
        assert blas[0]["architecture"] != "Haswell" or "avx512f" not in machine["cpu"]["flags"]
    assert [r["workload"] for r in report["rows"]] == ["gemm 64^3", "C11"]
    assert all(r["correct"] for r in report["rows"]) and "numpy" in report["rows"][0]["baselines_ms"]
    assert report["wrong"] == []


def test_a_wrong_result_fails_the_run(bench, monkeypatch, capsys):
    def wrong_row(*args):
        return bench.Row("gemm 64^3", 0.0005, 1.0, 0.1, {"numpy": 1.0}, {}, 0.5, 1e-4)

    monkeypatch.setattr(bench, "bench_gemm", wrong_row)
    monkeypatch.setattr(sys, "argv", ["bench_cpu.py", "--layers", "", "--no-tvm", "--no-ort", "--no-roofline"])
    assert bench.main() == 1
    assert "wrong results" in capsys.readouterr().err
