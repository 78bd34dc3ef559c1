"""Measurement: every trial checked against numpy, run in a killable child; a hang, a crash or a
wrong answer becomes an error record and tuning goes on."""

import os
import time

import numpy as np
import pytest

from vtakit import autotune
from vtakit.compiler.autotune.measure import LocalBuilder, LocalRunner, MeasureErrorNo, run_trial
from vtakit.compiler.autotune.space import ConfigSpace
from vtakit.compiler.autotune.templates.vta import _dense_reference, _dense_template
from vtakit.errors import TuningError
from vtakit.hw.config import VTAConfig


def _wrong_reference(*args, config=None, seed=0):
    inputs, expected = _dense_reference(*args, config=config, seed=seed)
    return inputs, expected ^ np.int8(1)


@autotune.template("vta.test_hang", reference=_dense_reference, override=True)
def _hanging(cfg, m, n, k, config=None):
    cfg.define_knob("hang", [0, 1])
    cfg.define_knob("crash", [0, 1])
    if not isinstance(cfg, ConfigSpace):
        if cfg["hang"].val:
            time.sleep(3600)
        if cfg["crash"].val:
            os.kill(os.getpid(), 9)
    space = ConfigSpace()
    return _dense_template(space, m, n, k, config=config)


@autotune.template("vta.test_wrong", reference=_wrong_reference, override=True)
def _wrong(cfg, m, n, k, config=None):
    return _dense_template(cfg, m, n, k, config=config)


def _task(name):
    return autotune.create_task(name, (16, 32, 32), config=VTAConfig.small())


def test_a_trial_is_cycles_on_the_cycle_model_checked_against_numpy(small_dense_task):
    cfg = small_dense_task.config_space.fallback
    res = run_trial(small_dense_task, cfg.index, LocalBuilder(), LocalRunner())
    assert res.ok, res.error_msg
    assert len(res.costs) == 1 and res.cost == int(res.cost) > 0
    again = run_trial(small_dense_task, cfg.index, LocalBuilder(), LocalRunner())
    assert again.costs == res.costs                         # deterministic: no repeats needed


def test_a_wrong_kernel_is_an_error_record_never_a_fast_one():
    task = _task("vta.test_wrong")
    res = run_trial(task, task.config_space.fallback.index, LocalBuilder(), LocalRunner())
    assert res.error_no == MeasureErrorNo.WRONG_ANSWER and "differ from numpy" in res.error_msg
    assert res.cost == float("inf")


def test_a_hanging_template_becomes_a_timeout_record_and_tuning_continues(tmp_path):
    task = _task("vta.test_hang")
    space = task.config_space
    assert len(space) == 4
    option = autotune.measure_option(LocalBuilder(timeout=5.0, n_parallel=2), LocalRunner(timeout=10))
    start = time.monotonic()
    summary = autotune.GridSearchTuner(task).tune(4, option, log_file=tmp_path / "h.log")
    assert time.monotonic() - start < 60
    kinds = {r.index: r.result.error_no for r in autotune.load_records(tmp_path / "h.log")}
    by_knobs = {tuple(space.index_to_point(i)): kind for i, kind in kinds.items()}
    assert by_knobs[(1, 0)] == MeasureErrorNo.BUILD_TIMEOUT and by_knobs[(1, 1)] == MeasureErrorNo.BUILD_TIMEOUT
    assert by_knobs[(0, 1)] == MeasureErrorNo.COMPILE_HOST                # the child died: a crash record
    assert by_knobs[(0, 0)] == MeasureErrorNo.NO_ERROR
    assert summary.measured == 4 and summary.errors == 3


def test_cpu_gemm_is_wall_time_median_of_repeats():
    task = autotune.create_task("llvm.dense", "dense:16,32,32", target="llvm")
    assert len(task.config_space) > 100
    res = run_trial(task, task.config_space.fallback.index, LocalBuilder(timeout=60),
                    LocalRunner(timeout=60, number=2, repeat=3))
    assert res.ok, res.error_msg
    assert len(res.costs) == 3 and 0 < res.cost < 1


def test_cpu_trials_can_be_timed_in_process_cpu_time():
    """``timer="process"``: the process's CPU time per call, for comparisons on a loaded host."""
    task = autotune.create_task("llvm.dense", "dense:16,32,32", target="llvm")
    res = run_trial(task, task.config_space.fallback.index, LocalBuilder(timeout=60),
                    LocalRunner(timeout=60, number=50, repeat=3, timer="process"))
    assert res.ok, res.error_msg
    assert len(res.costs) == 3 and 0 < res.cost < 1
    with pytest.raises(TuningError, match="timer 'cycles'"):
        LocalRunner(timer="cycles")


def test_an_invalid_config_is_an_instantiation_or_compile_error(small_dense_task):
    space = small_dense_task.config_space
    kinds = set()
    for index in range(len(space)):
        cfg = space.get(index)
        knobs = cfg.knob_values()
        if knobs["oc_nthread"] == 4 and knobs["tile_co"] == [4]:    # 4 column blocks cannot give 4 threads 4 each
            kinds.add(run_trial(small_dense_task, index, LocalBuilder(), LocalRunner()).error_no)
            break
    assert kinds == {MeasureErrorNo.INSTANTIATION_ERROR}
