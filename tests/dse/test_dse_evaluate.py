"""One evaluation: rejection in milliseconds naming the binding resource, per-task cycles equal to the
tuner's trials, the whole network's cycles equal to its profile on the cycle model (outputs equal to
the integer CPU reference), failures as error records; the latency model is deterministic."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vtakit import autotune, dse
from vtakit.compiler import graph as vg
from vtakit.compiler.autotune.measure import run_trial
from vtakit.dse.evaluate import Evaluation, evaluate_job, ideal_cycles
from vtakit.dse.model import LatencyModel
from vtakit.errors import DSEError
from vtakit.hw.config import VTAConfig


@pytest.fixture(scope="module")
def digits():
    return dse.load_network("digits")


def _job(net, config: VTAConfig, timeout: float = 60.0, reference: bool = False, expected=None) -> Evaluation:
    space = dse.DesignSpace("xc7z020", net.batch)
    return Evaluation.from_record(evaluate_job(net.graph, config.to_dict(), "xc7z020", space.budget, net.batch,
                                               timeout, 0, reference, net.sample,
                                               net.expected() if expected is None else expected))


def test_a_configuration_that_does_not_fit_is_rejected_in_milliseconds(digits):
    space = dse.DesignSpace("xc7z020")
    big = space.config({"log_block_in": 6, "log_block_out": 6, "log_inp_depth": 8, "log_wgt_depth": 6,
                        "log_acc_depth": 8})     # 4096 MACs
    fit = space.fit(big)
    assert not fit.fits
    ev = _job(digits, big)
    assert ev.status == "rejected" and not ev.fits and not ev.tasks and ev.seconds < 0.5
    assert ev.binding == fit.binding and ev.message == f"does not fit xc7z020: {fit.describe()}"
    assert ev.latency_s == float("inf") and ev.utilization is None


def test_task_cycles_are_the_tuners_default_trials(digits):
    config = dse.DesignSpace("xc7z020").clocked(VTAConfig.small())
    ev = _job(digits, config)
    assert ev.ok and ev.fits and ev.fmax_mhz == 100.0
    tasks = autotune.extract_tasks(digits.graph, target="vta", config=config)
    assert [(t.template, t.args, t.count) for t in ev.tasks] == [(t.name, t.args, t.count) for t in tasks]
    option = autotune.measure_option(autotune.LocalBuilder(timeout=60, n_parallel=1), autotune.LocalRunner(timeout=60))
    for got, task in zip(ev.tasks, tasks):
        trial = run_trial(task, task.config_space.fallback.index, option.builder, option.runner)
        assert got.cycles == trial.cost and got.ideal_cycles == ideal_cycles(task) <= got.cycles
    assert ev.task_cycles == sum(t.count * t.cycles for t in ev.tasks)
    # the latency counts every offloaded step: the whole network profiled on the cycle model
    profile = vg.build(digits.graph, "vta", config=config).profile(digits.sample, backend="cycle")
    assert ev.network is not None and ev.cycles == ev.network.cycles == profile.total_cycles
    assert ev.ideal_cycles == profile.ideal_cycles <= ev.cycles
    assert [c for _, c in ev.network.steps] == [r.cycles for r in profile.layers if r.on_accelerator]
    assert ev.latency_s == pytest.approx(ev.cycles / 100e6)
    assert len(ev.trials) == len(tasks)                        # the default tilings' tuning records
    assert Evaluation.from_record(ev.to_record()).to_record() == ev.to_record()


@pytest.mark.parametrize("spec", ["conv2d:10,10,8,12,3,1,1", "conv2d:9,9,8,8,1,0,2", "dense:3,20,12"])
def test_ideal_cycles_are_the_simulators(spec):
    from vtakit.compiler.topi_vta.bench import run_conv2d, run_dense
    from vtakit.compiler.topi_vta.workloads import Conv2dWorkload

    kind, args = autotune.parse_workload(spec)
    task = autotune.create_task(f"vta.{kind}", spec, config=VTAConfig.small())
    run = (run_conv2d(Conv2dWorkload.from_key(task.args), VTAConfig.small(), "cycle") if kind == "conv2d"
           else run_dense(*args, VTAConfig.small(), "cycle"))
    assert run.correct and ideal_cycles(task) == run.ideal_cycles


def test_a_network_output_unlike_the_cpu_reference_makes_an_error_record(digits):
    wrong = [out + 1 for out in digits.expected()]
    ev = _job(digits, dse.DesignSpace("xc7z020").clocked(VTAConfig.small()), expected=wrong)
    assert ev.status == "error" and "differs from the integer CPU reference in" in ev.message
    assert ev.tasks and ev.network is None


def test_a_failing_task_makes_an_error_record(digits):
    ev = _job(digits, dse.DesignSpace("xc7z020").clocked(VTAConfig.small()), timeout=1e-4)
    assert ev.status == "error" and "default tiling failed (BUILD_TIMEOUT" in ev.message
    assert ev.latency_s == float("inf")


def test_the_reference_is_measured_even_when_it_does_not_fit(digits):
    space = dse.DesignSpace("xc7z020", budget={"bram": 0.1})
    ref = space.reference()
    assert not space.fit(ref).fits
    rec = evaluate_job(digits.graph, ref.to_dict(), "xc7z020", space.budget, 1, 60.0, -1, reference=True)
    ev = Evaluation.from_record(rec)
    assert ev.ok and not ev.fits and ev.binding == "bram" and ev.cycles > 0 and "does not fit" in ev.message


def test_latency_model_is_deterministic_and_learns():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, size=(40, 5)).astype(float)
    y = np.exp(3.0 - 0.5 * x[:, 0] + 0.1 * x[:, 1])
    a, b = LatencyModel(seed=1), LatencyModel(seed=1)
    a.fit(x, y)
    b.fit(x, y)
    test = rng.integers(0, 6, size=(20, 5)).astype(float)
    assert np.array_equal(a.predict(test), b.predict(test))
    truth = -0.5 * test[:, 0] + 0.1 * test[:, 1]
    assert np.corrcoef(a.predict(test), truth)[0, 1] > 0.9
    with pytest.raises(DSEError, match="not trained"):
        LatencyModel().predict(test)


def test_evaluations_on_dask(tmp_path):
    """Each evaluation is a job on a dask LocalCluster (about 5 s; CI installs the dask extra)."""
    if os.environ.get("CI") != "true":
        pytest.importorskip("dask.distributed")
    result = dse.search("digits", "xc7z020", trials=2, batch_size=2, seed=1, dask="local:2", log=tmp_path / "d.jsonl")
    assert len(result.evaluations) == 2 and all(e.ok for e in result.evaluations)


def test_the_network_build_reuses_the_layers_task_extraction_compiled(digits, monkeypatch):
    """Inside ``shared_kernels`` the whole network's build compiles no layer that ``extract_tasks`` compiled
    for the same configuration, and measures the same cycles as a build of its own; another configuration
    shares nothing."""
    from vtakit.compiler.graph.vta import layers
    from vtakit.compiler.graph.vta.context import shared_kernels
    from vtakit.dse.evaluate import network_cycles

    compiled = []
    real = layers._compile
    monkeypatch.setattr(layers, "_compile", lambda spec, ctx, use_log: compiled.append(spec) or real(spec, ctx, use_log))
    config = dse.DesignSpace("xc7z020").reference()
    with shared_kernels():
        autotune.extract_tasks(digits.graph, target="vta", config=config)
        extracted = len(compiled)
        shared, _ = network_cycles(digits.graph, config, digits.sample, digits.expected())
        assert extracted > 0 and len(compiled) == extracted                # nothing compiled again
        autotune.extract_tasks(digits.graph, target="vta", config=config.replace(alu_requant=True))
        assert len(compiled) > extracted                                  # another configuration: its own
    alone, _ = network_cycles(digits.graph, config, digits.sample, digits.expected())
    assert shared == alone and shared.cycles > 0
