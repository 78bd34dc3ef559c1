"""The GPU templates ``cuda.dense`` and ``cuda.conv2d``: their spaces keep to a block's limits, their
configs build for cuda (ptxas accepts the PTX) and emulate to numpy's result, and a trial measured
where no GPU is present is an error record that says so (one is measured only on a GPU)."""

import numpy as np
import pytest

import vtakit
from vtakit import autotune
from vtakit.compiler.autotune.measure import LocalBuilder, LocalRunner, MeasureErrorNo, run_trial
from vtakit.compiler.backend.nvptx.driver import cuda_driver
from vtakit.compiler.ops import cuda
from vtakit.errors import DeviceError


def _has_gpu() -> bool:
    try:
        cuda_driver()
    except DeviceError:
        return False
    return True


def _emulate(task, cfg):
    s, tensors = task.instantiate(cfg)
    mod = vtakit.build(s, tensors, target="cuda")
    mod.ptxas()
    for k in mod.kernels:
        assert k.block[0] * k.block[1] * k.block[2] <= cuda.MAX_THREADS and k.shared_bytes <= cuda.SHARED_BUDGET
    inputs, want = task.reference()
    out = np.zeros_like(want)
    mod.emulate(*inputs, out)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_dense_space_filters_block_limits_and_falls_back_to_the_default_tiling():
    task = autotune.create_task("cuda.dense", "dense:4096,4096,4096", target="cuda")
    space = task.config_space
    assert len(space) > 10_000
    fb = space.fallback
    t = cuda.dense_tiles(4096, 4096, 4096)
    assert fb["tile_y"].size[1:] == (t.rows.vthreads, t.rows.threads, t.rows.inner)
    assert space.invalid_reason(fb) is None
    rng = np.random.default_rng(0)
    for index in rng.choice(len(space), 200, replace=False):
        reason = space.invalid_reason(int(index))
        cfg = space.get(int(index))
        (_, vy, ty, ry), (_, vx, tx, rx) = cfg["tile_y"].size, cfg["tile_x"].size
        shared = (vy * ty * ry + vx * tx * rx) * cfg["tile_k"].size[-1] * 4
        assert (reason is None) == (ty * tx <= cuda.MAX_THREADS and shared <= cuda.SHARED_BUDGET), (cfg, reason)


def test_dense_configs_emulate_to_numpy():
    task = autotune.create_task("cuda.dense", "dense:16,32,16", target="cuda")
    space = task.config_space
    _emulate(task, space.fallback)
    valid = [i for i in range(len(space)) if space.invalid_reason(i) is None]
    for index in np.random.default_rng(1).choice(valid, 2, replace=False):
        _emulate(task, space.get(int(index)))


def test_conv2d_configs_emulate_to_numpy():
    task = autotune.create_task("cuda.conv2d", "conv2d:6,6,4,8,3,1,1", target="cuda")
    space = task.config_space
    _emulate(task, space.fallback)
    valid = [i for i in range(len(space)) if space.invalid_reason(i) is None]
    _emulate(task, space.get(int(np.random.default_rng(2).choice(valid))))


def test_conv2d_space_rejects_too_much_shared_memory():
    task = autotune.create_task("cuda.conv2d", "conv2d:56,56,64,64,3,1,1", target="cuda")
    space = task.config_space
    reasons = {space.invalid_reason(i) for i in range(0, len(space), max(1, len(space) // 2000))}
    assert any(r and "bytes of shared memory" in r for r in reasons)
    assert space.invalid_reason(space.fallback) is None


@pytest.mark.skipif(_has_gpu(), reason="a GPU is present: the trial is measured (see the GPU benchmark)")
def test_a_trial_without_a_gpu_is_a_clear_error_record():
    task = autotune.create_task("cuda.dense", "dense:16,16,16", target="cuda")
    res = run_trial(task, task.config_space.fallback.index, LocalBuilder(timeout=60), LocalRunner(timeout=60))
    assert res.error_no == MeasureErrorNo.RUNTIME_DEVICE
    assert "cuda trials are measured on a GPU" in res.error_msg and "emulate" in res.error_msg


@pytest.mark.skipif(_has_gpu(), reason="a GPU is present: the trials are measured")
def test_cli_tune_for_cuda_without_a_gpu_logs_error_records(tmp_path, capsys):
    import json

    from vtakit.cli import main
    from vtakit.compiler.autotune.record import load_records

    log = tmp_path / "cuda.jsonl"
    assert main(["tune", "--workload", "dense:16,16,16", "--target", "cuda", "--trials", "2", "--tuner", "random",
                 "--log", str(log), "--parallel", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["template"] == "cuda.dense" and result["errors"] == 2 and result["best_cost"] is None
    records = load_records(log)
    assert len(records) == 2 and all("measured on a GPU" in r.result.error_msg for r in records)


def test_a_gpu_trial_times_its_kernels_under_the_host_wide_gpu_lock(monkeypatch):
    """Concurrent trials would share the GPU's SMs: the timing runs only while this process holds
    the GPU lock (a second open of the lock file cannot take it meanwhile)."""
    import fcntl

    from vtakit.compiler.autotune import measure

    held = []

    def fake_time_kernels(module, args, number, repeat):
        with open(measure.GPU_LOCK_PATH, "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(True)
            else:
                fcntl.flock(f, fcntl.LOCK_UN)
                held.append(False)
        module.emulate(*args)
        return [1e-3] * repeat

    monkeypatch.setattr(measure, "cuda_driver", lambda: None)
    monkeypatch.setattr(measure, "time_kernels", fake_time_kernels)
    task = autotune.create_task("cuda.dense", "dense:16,16,16", target="cuda")
    module = vtakit.build(*task.instantiate(task.config_space.fallback), target="cuda")
    costs = LocalRunner(timeout=60).run(task, module)
    assert held == [True] and costs == (1e-3,) * 3
