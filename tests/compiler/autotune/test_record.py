"""Tuning logs: JSON-lines round trip, corrupt lines skipped with a warning, pick_best, dispatch."""

import json
import warnings

import pytest

from vtakit import autotune
from vtakit.compiler.autotune.measure import MeasureErrorNo, MeasureInput, MeasureResult
from vtakit.compiler.autotune.record import LOG_VERSION, RecordWriter, TuningRecord
from vtakit.errors import TuningError
from vtakit.hw.config import VTAConfig


def _record(task, index, cost):
    ok = cost is not None
    res = MeasureResult((float(cost),) if ok else (), MeasureErrorNo.NO_ERROR if ok else MeasureErrorNo.WRONG_ANSWER,
                        "" if ok else "differs", 0.1, 2.0)
    return TuningRecord.of(MeasureInput(task, task.config_space.get(index)), res, 1.0, "random")


def test_record_round_trips_with_task_config_result_and_versions(small_dense_task, tmp_path):
    rec = _record(small_dense_task, 7, 1234)
    raw = json.loads(rec.to_json())
    assert raw["version"] == LOG_VERSION and raw["vtakit"] and raw["vta_config"]["LOG_BLOCK"] == 2
    assert raw["task"] == {"name": "vta.dense", "args": [16, 16, 16], "target": "vta"}
    assert raw["result"]["error"] == "NO_ERROR" and raw["started"] == 1.0 and raw["finished"] == 2.0
    back = TuningRecord.from_json(rec.to_json())
    assert back == rec and back.task_key == small_dense_task.key()


def test_a_record_written_before_a_config_key_existed_still_belongs_to_its_task(small_dense_task, tmp_path):
    """A VTAConfig key added later (at its default) must not orphan the logs written before it."""
    raw = json.loads(_record(small_dense_task, 7, 1234).to_json())
    added = [k for k, v in raw["vta_config"].items() if v == VTAConfig.from_dict({}).to_dict()[k]
             and k not in ("LOG_BLOCK", "LOG_BATCH")][-1]
    del raw["vta_config"][added]
    back = TuningRecord.from_json(json.dumps(raw))
    assert back.task_key == small_dense_task.key()
    raw["vta_config"]["NO_SUCH_KEY"] = 1       # a configuration this version cannot read matches no task
    assert TuningRecord.from_json(json.dumps(raw)).task_key != small_dense_task.key()


def test_truncated_last_line_is_skipped_with_a_warning_and_the_writer_starts_a_new_line(small_dense_task, tmp_path):
    log = tmp_path / "t.log"
    with RecordWriter(log) as w:
        w.write(_record(small_dense_task, 1, 100))
        w.write(_record(small_dense_task, 2, 90))
    full = log.read_text()
    log.write_text(full + full.splitlines()[0][:40])      # killed mid-write
    with pytest.warns(UserWarning, match="skipped its last line"):
        assert [r.index for r in autotune.load_records(log)] == [1, 2]
    with RecordWriter(log) as w:                           # appending after the cut keeps both readable
        w.write(_record(small_dense_task, 3, 80))
    with pytest.warns(UserWarning, match="line 3"):
        assert [r.index for r in autotune.load_records(log)] == [1, 2, 3]


def test_pick_best_keeps_the_fastest_valid_record_per_task(small_dense_task, tmp_path):
    other = autotune.create_task("vta.dense", "dense:16,32,32", config=VTAConfig.small())
    log, best = tmp_path / "all.log", tmp_path / "best.log"
    with RecordWriter(log) as w:
        for rec in (_record(small_dense_task, 1, 300), _record(small_dense_task, 2, None),
                    _record(small_dense_task, 3, 200), _record(other, 0, 50), _record(other, 1, 60)):
            w.write(rec)
    assert autotune.pick_best(log, best) == 2
    assert sorted((r.args, r.index) for r in autotune.load_records(best)) == [((16, 16, 16), 3), ((16, 32, 32), 0)]


def test_apply_history_best_is_the_lookup_the_compiler_calls(small_dense_task, tmp_path):
    log = tmp_path / "t.log"
    with RecordWriter(log) as w:
        w.write(_record(small_dense_task, 5, 300))
        w.write(_record(small_dense_task, 9, 100))
        w.write(_record(small_dense_task, 11, None))
    args = small_dense_task.args
    fallback = autotune.lookup("vta.dense", args, config=VTAConfig.small())
    assert fallback.is_fallback
    with autotune.apply_history_best(log) as ctx:
        assert len(ctx) == 1
        cfg = autotune.lookup("vta.dense", args, config=VTAConfig.small())
        assert cfg.index == 9 and not cfg.is_fallback
        # another VTAConfig is another task: the log does not apply
        assert autotune.lookup("vta.dense", args, config=VTAConfig.small(bus_width=128)).is_fallback
    assert autotune.lookup("vta.dense", args, config=VTAConfig.small()).is_fallback


def test_a_conv2d_record_of_the_older_7_int_workload_applies_to_its_13_int_key(tmp_path):
    """``resnet18.C5`` tasks (7 ints) and the network's layers (Conv2dWorkload.key, 13 ints) are one
    workload: a log of one form is looked up by the other (the build's layers ask with 13 ints)."""
    config = VTAConfig.small()
    old = autotune.create_task("vta.conv2d", "conv2d:8,8,16,16,3,1,1", config=config)
    new_args = (8, 8, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1)
    valid = [i for i in range(len(old.config_space)) if i not in old.config_space.invalid_indices()]
    pick = next(i for i in valid if i != old.config_space.fallback.index)
    log = tmp_path / "c.log"
    with RecordWriter(log) as w:
        w.write(_record(old, pick, 100))
    assert autotune.lookup("vta.conv2d", new_args, config=config).is_fallback
    with autotune.apply_history_best(log):
        cfg = autotune.lookup("vta.conv2d", new_args, config=config)
        assert cfg.index == pick and not cfg.is_fallback
        assert autotune.lookup("vta.conv2d", old.args, config=config).index == pick
        # another workload (stride 2) is still another task
        assert autotune.lookup("vta.conv2d", (8, 8, 16, 16, 3, 3, 1, 1, 1, 1, 2, 2, 1), config=config).is_fallback


def test_unreadable_log_is_a_tuning_error(tmp_path):
    with pytest.raises(TuningError, match="cannot read tuning log"):
        autotune.load_records(tmp_path / "missing.log")


def test_a_log_with_only_foreign_lines_warns_per_line(tmp_path):
    log = tmp_path / "x.log"
    log.write_text('{"version": 0.2, "input": []}\nnot json\n')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert autotune.load_records(log) == []
    assert len(caught) == 2
