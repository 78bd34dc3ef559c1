"""The shipped templates: their spaces, fallbacks and the choices the schedules honour (every
measured config is checked against numpy, so NO_ERROR means the output equals numpy's)."""

import re

import pytest

import vtakit
from vtakit import autotune
from vtakit.compiler import te
from vtakit.compiler.ops import cpu, nn
from vtakit.compiler.autotune.measure import LocalBuilder, LocalRunner, MeasureErrorNo, run_trial
from vtakit.compiler.autotune.templates.vta import conv2d_knobs
from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles
from vtakit.compiler.topi_vta.workloads import Conv2dWorkload
from vtakit.compiler.vta.env import get_env
from vtakit.hw.config import VTAConfig

CONV = "conv2d:8,8,16,32,3,1,1"


def _find(space, **want):
    for cfg in space:
        values = cfg.knob_values()
        if all(values[k] == v for k, v in want.items()):
            return cfg
    raise AssertionError(f"no config with {want}")


def test_conv2d_space_holds_todays_knobs_and_falls_back_to_the_default_tiler():
    task = autotune.create_task("vta.conv2d", CONV, config=VTAConfig.small())
    assert list(task.config_space.knobs) == ["tile_h", "tile_w", "tile_co", "tile_ci", "oc_nthread", "h_nthread",
                                             "tile_order", "load_at", "epilogue_at"]
    assert [e.val for e in task.config_space.knobs["oc_nthread"].entities] == [1, 2, 3, 4]
    fallback = task.config_space.fallback
    env = get_env(VTAConfig.small())
    assert fallback.is_fallback
    assert conv2d_knobs(fallback) == choose_conv2d_tiles(env, Conv2dWorkload(8, 8, 16, 32, 3, 1, 1))


@pytest.mark.parametrize("choice", [
    dict(tile_order="co_h", oc_nthread=2, h_nthread=1),
    dict(tile_order="co_h", oc_nthread=2, h_nthread=2, tile_h=[2]),     # 4 threads, 2 x 2
    dict(tile_order="h_co", oc_nthread=4, h_nthread=1, tile_co=[1], tile_ci=[1], tile_h=[2], tile_w=[4]),  # 4 x 1
], ids=["order", "2x2-threads", "4-threads"])
def test_conv2d_choices_beyond_the_default_are_honoured_and_equal_numpy(choice):
    task = autotune.create_task("vta.conv2d", CONV, config=VTAConfig.small())
    cfg = _find(task.config_space, **choice)
    res = run_trial(task, cfg.index, LocalBuilder(timeout=60), LocalRunner(timeout=60))
    assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_msg


def test_threads_beyond_the_token_queues_are_not_offered_or_are_rejected():
    cfg = VTAConfig.small(token_queue_depth=2)
    task = autotune.create_task("vta.conv2d", CONV, config=cfg)
    assert [e.val for e in task.config_space.knobs["oc_nthread"].entities] == [1, 2]
    cfg4 = _find(task.config_space, oc_nthread=2, h_nthread=2, tile_h=[2], tile_co=[2])
    assert "TOKEN_QUEUE_DEPTH=2" in task.config_space.invalid_reason(cfg4)      # filtered: never proposed
    res = run_trial(task, cfg4.index, LocalBuilder(), LocalRunner())            # and rejected if measured
    assert res.error_no == MeasureErrorNo.INSTANTIATION_ERROR and "TOKEN_QUEUE_DEPTH=2" in res.error_msg


@pytest.mark.parametrize("choice", [
    dict(load_at="dy", tile_h=[2]),
    dict(load_at="dy", tile_h=[3], tile_ci=[2], oc_nthread=2),
    dict(epilogue_at="co", tile_co=[2]),
    dict(epilogue_at="co", tile_co=[4], load_at="dy", tile_h=[2], tile_order="co_h"),
    dict(oc_nthread=1, h_nthread=3, tile_h=[1], tile_co=[1]),        # 3 threads: not in the old space
], ids=["dy", "dy-2-threads", "epilogue-co", "epilogue-co-dy", "3-threads"])
def test_conv2d_extended_choices_are_honoured_and_equal_numpy(choice):
    task = autotune.create_task("vta.conv2d", "conv2d:6,8,16,32,3,1,1", config=VTAConfig.small())
    space = task.config_space
    cfg = next(c for c in space if space.invalid_reason(c) is None
               and all(c.knob_values()[k] == v for k, v in choice.items()))
    res = run_trial(task, cfg.index, LocalBuilder(timeout=60), LocalRunner(timeout=60))
    assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_msg


def test_records_written_before_the_new_knobs_load_with_their_defaults(tmp_path):
    """A record of the older space (no load_at / epilogue_at, threads 1, 2, 4) names the config
    with today's load placement and epilogue, for apply_history_best and for a resumed tuning run."""
    from vtakit.compiler.autotune.dispatch import apply_history_best, lookup
    from vtakit.compiler.autotune.measure import MeasureInput, MeasureResult
    from vtakit.compiler.autotune.record import TuningRecord

    small = VTAConfig.small()
    task = autotune.create_task("vta.conv2d", CONV, config=small)
    cfg = _find(task.config_space, tile_h=[2], tile_co=[2], oc_nthread=2, tile_order="co_h")
    record = TuningRecord.of(MeasureInput(task, cfg), MeasureResult((1000.0,), MeasureErrorNo.NO_ERROR), 0.0)
    old = record.to_json()
    import json
    raw = json.loads(old)
    _strip_new_knobs(raw)
    log = tmp_path / "old.log"
    log.write_text(json.dumps(raw) + "\n")
    with apply_history_best(log):
        got = lookup("vta.conv2d", task.args, config=small)
    assert not got.is_fallback
    knobs = conv2d_knobs(got)
    assert (knobs.tile_h, knobs.tile_co, knobs.oc_nthread, knobs.tile_order) == (2, 2, 2, "co_h")
    assert (knobs.load_at, knobs.epilogue_at) == ("k_o", "tile")
    tuner = autotune.RandomTuner(task, seed=0)
    summary = tuner.tune(1, log_file=log)      # resumes the old record: nothing more to measure
    assert summary.resumed == 1 and summary.measured == 0 and not summary.notes


def _strip_new_knobs(raw):
    """Drop the knobs an older log did not have from a record's JSON (wherever the entity sits)."""
    if isinstance(raw, dict):
        for v in raw.values():
            _strip_new_knobs(v)
    elif isinstance(raw, list):
        raw[:] = [x for x in raw if not (isinstance(x, list) and x and x[0] in ("load_at", "epilogue_at"))]
        for x in raw:
            _strip_new_knobs(x)


def test_statically_invalid_configs_are_filtered_and_never_proposed():
    """Configs the knobs' static checks reject (SRAM overflow, thread splits that do not divide, too
    many threads, redundant choices) are counted as visited from the start: no tuner measures one."""
    task = autotune.create_task("vta.conv2d", "resnet18.C9")
    space = task.config_space
    invalid = space.invalid_indices()
    assert 0 < len(invalid) < len(space) and space.valid_count() == len(space) - len(invalid)
    reasons = " ".join(space.invalid_reason(i) for i in list(invalid)[::97])
    assert "overflow" in reasons and "virtual threads" in reasons
    assert space.invalid_reason(space.fallback) is None
    for tuner in (autotune.RandomTuner(task, seed=1), autotune.GridSearchTuner(task),
                  autotune.XGBTuner(task, plan_size=8, seed=1)):
        proposed = [c.index for c in tuner.next_batch(40)]
        assert proposed and not set(proposed) & invalid


def test_cpu_gemm_space_has_more_than_ten_thousand_configs_and_random_ones_are_correct():
    task = autotune.create_task("llvm.dense", "dense:1024,1024,1024", target="llvm")
    assert len(task.config_space) >= 10 ** 4
    small = autotune.create_task("llvm.dense", "dense:32,64,32", target="llvm")
    runner = LocalRunner(timeout=60, number=1, repeat=1)
    for index in (0, len(small.config_space) // 3, len(small.config_space) - 1):
        res = run_trial(small, index, LocalBuilder(timeout=60), runner)
        assert res.ok, (small.config_space.get(index), res.error_msg)


def test_cpu_conv2d_template_is_correct():
    task = autotune.create_task("llvm.conv2d", "conv2d:8,8,4,8,3,1,1", target="llvm")
    res = run_trial(task, task.config_space.fallback.index, LocalBuilder(timeout=60),
                    LocalRunner(timeout=60, number=1, repeat=1))
    assert res.ok, res.error_msg


def test_conv2d_template_takes_the_workload_key_and_the_older_seven_ints():
    """A non-square, asymmetrically padded, per-axis-strided workload tunes by its key; the older 7-int
    form (earlier logs, ``conv2d:`` specs) names the same workload."""
    wl = Conv2dWorkload(7, 9, 3, 20, (3, 1), (0, 1, 1, 0), (2, 1))
    task = autotune.create_task("vta.conv2d", wl.key, config=VTAConfig.small())
    assert task.args == wl.key and len(task.args) == 13
    assert conv2d_knobs(task.config_space.fallback) == choose_conv2d_tiles(get_env(VTAConfig.small()), wl)
    res = run_trial(task, task.config_space.fallback.index, LocalBuilder(timeout=60), LocalRunner(timeout=60))
    assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_msg
    old = autotune.create_task("vta.conv2d", (8, 8, 16, 32, 3, 1, 1), config=VTAConfig.small())
    assert Conv2dWorkload.from_key(old.args) == Conv2dWorkload(8, 8, 16, 32, 3, 1, 1)
    assert old.config_space.fallback.knob_values() == \
        autotune.create_task("vta.conv2d", Conv2dWorkload(8, 8, 16, 32, 3, 1, 1).key,
                             config=VTAConfig.small()).config_space.fallback.knob_values()


def _loop_ir(schedule, tensors) -> str:
    """The lowered function with split/fused loop names reduced to their axis (``b.outer.outer`` ->
    ``b``): two schedules that differ only in how they named their loops compare equal."""
    return re.sub(r"\b([a-z_]+)(\.(outer|inner|fused))+\b", r"\1", str(vtakit.lower(schedule, tensors)))


@pytest.mark.parametrize("n", [64, 256, 1024])
def test_cpu_gemm_fallback_is_the_hand_schedule(n):
    """The hand schedule (``ops.cpu.schedule_dense`` on the weight block the graph compiler packs)
    is a config of the space, its fallback: the same loop nest, so tuning can only match or beat it."""
    task = autotune.create_task("llvm.dense", (n, n, n), target="llvm")
    data = te.placeholder((n, n), "float32", name="data")
    weight = te.placeholder((n, n), "float32", name="weight")
    out = nn.dense(data, weight, pack_block=cpu.dense_pack_block("float32", out_features=n))
    assert _loop_ir(*task.instantiate(task.config_space.fallback)) == \
        _loop_ir(cpu.schedule_dense(out), [data, weight, out])


def test_cpu_gemm_packs_per_panel_only_inside_parallel_column_tiles():
    task = autotune.create_task("llvm.dense", "dense:32,64,32", target="llvm")
    space = task.config_space
    panel = [c for c in space if c["pack_at"].val == "panel"]
    assert panel and all((space.invalid_reason(c) is None) == (tuple(c["order"].perm) == (1, 0)
                                                                and c["parallel"].val == "outer") for c in panel)
    good = next(c for c in panel if space.invalid_reason(c) is None and c["tile_x"].size[-1] == 16)
    res = run_trial(task, good.index, LocalBuilder(timeout=60), LocalRunner(timeout=60, number=1, repeat=1))
    assert res.ok, res.error_msg


@pytest.mark.parametrize("wl", [(28, 28, 128, 128, 3, 1, 1), (14, 14, 256, 512, 3, 1, 2), (56, 56, 64, 64, 1, 0, 1)])
def test_cpu_conv2d_fallback_is_the_packed_hand_schedule(wl):
    """Where the graph compiler packs the weight, ``llvm.conv2d`` tunes the packed convolution it
    runs; the fallback is ``ops.cpu.schedule_conv2d_nchw_packed``'s loop nest."""
    h, w, ci, co, k, pad, stride = wl
    task = autotune.create_task("llvm.conv2d", wl, target="llvm")
    block = cpu.conv2d_channel_block(co, "float32")
    data = te.placeholder((1, ci, h, w), "float32", name="data")
    kernel = te.placeholder((co // block, ci, k, k, block), "float32", name="kernel")
    out = nn.conv2d_nchw_packed(data, kernel, stride, pad)
    assert _loop_ir(*task.instantiate(task.config_space.fallback)) == \
        _loop_ir(cpu.schedule_conv2d_nchw_packed(out), [data, kernel, out])


def test_cpu_packed_conv2d_choices_equal_numpy():
    task = autotune.create_task("llvm.conv2d", "conv2d:8,8,16,32,3,1,1", target="llvm")
    space = task.config_space
    assert list(space.knobs) == ["tile_oh", "tile_ow", "reduce_order", "ann_kx", "parallel"]
    picks = [_find(space, tile_oh=[2], tile_ow=[4], reduce_order="y_x_c", ann_kx=["unroll"], parallel="blocks"),
             _find(space, tile_oh=[4], tile_ow=[2], reduce_order="c_y_x", ann_kx=["none"], parallel="rows")]
    for cfg in picks:
        assert space.invalid_reason(cfg) is None
        res = run_trial(task, cfg.index, LocalBuilder(timeout=60), LocalRunner(timeout=60, number=1, repeat=1))
        assert res.ok, (cfg, res.error_msg)
    too_big = _find(space, tile_oh=[4], tile_ow=[8])
    assert "register tile" in space.invalid_reason(too_big)


def test_dense_filter_accepts_exactly_the_configs_that_build_and_equal_numpy():
    """vta.dense's filter (DenseKnobs.static_error) on a space with every kind of invalid config
    (threads that do not divide the column tiles, input/weight/accumulator tiles overflowing small
    SRAMs): each config it accepts builds and equals numpy, each it rejects fails to build."""
    config = VTAConfig.small(log_inp_buff_size=6, log_wgt_buff_size=6, log_acc_buff_size=8)   # 16/4/16 entries
    task = autotune.create_task("vta.dense", "dense:12,16,8", config=config)   # tiles at the SRAM limits
    space = task.config_space
    invalid = space.invalid_indices()
    assert 0 < len(invalid) < len(space) and space.invalid_reason(space.fallback) is None
    kinds = {re.sub(r"\d+", "N", space.invalid_reason(i)) for i in invalid}
    for what in ("virtual threads", "input SRAM", "weight SRAM", "accumulator SRAM"):
        assert any(what in k for k in kinds), (what, kinds)
    builder, runner = LocalBuilder(timeout=60), LocalRunner(timeout=60)
    for index in range(len(space)):
        res = run_trial(task, index, builder, runner)
        if index in invalid:
            assert res.error_no in (MeasureErrorNo.INSTANTIATION_ERROR, MeasureErrorNo.COMPILE_DEVICE), \
                (space.get(index), space.invalid_reason(index), res.error_no)
        else:
            assert res.error_no == MeasureErrorNo.NO_ERROR, (space.get(index), res.error_msg)
    for tuner in (autotune.RandomTuner(task, seed=1), autotune.GridSearchTuner(task),
                  autotune.XGBTuner(task, plan_size=8, seed=1)):
        proposed = [c.index for c in tuner.next_batch(16)]
        assert proposed and not set(proposed) & invalid
