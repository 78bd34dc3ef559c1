"""``vtakit tune MODEL.onnx``: a network's accelerator layers as tasks, the trial split, per-task resume,
``vtakit compile --tuning-log``; ``autotune.extract_tasks`` and ``split_trials``; bad input."""

import json
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from vtakit import autotune
from vtakit.cli import main
from vtakit.errors import TuningError


def _tiny_model():
    """A float CNN: a stem conv (kept on the CPU by the quantiser), two small convs and a dense."""
    from onnx import TensorProto, helper

    from vtakit.compiler.graph.zoo import ModelBuilder

    b = ModelBuilder(3)
    x = b.node("Relu", [b.conv("x", 8, 16, 3, bias=True)])
    x = b.node("Relu", [b.conv(x, 16, 16, 3, bias=True)])
    x = b.node("Relu", [b.conv(x, 16, 32, 3, 2, bias=True)])
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = b.constant(b.he_normal((16, 32), 32), "fc_w")
    bias = b.constant(np.zeros(16, np.float32), "fc_b")
    b.nodes.append(helper.make_node("Gemm", [x, w, bias], ["y"], name="fc", transB=1))
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], "tiny")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import onnx

    from vtakit.hw.config import VTAConfig

    d = tmp_path_factory.mktemp("tune_network")
    onnx.save(_tiny_model(), d / "tiny.onnx")
    VTAConfig.small().to_json(d / "small.json")
    np.savez(d / "calib.npz", x=np.random.default_rng(0).standard_normal((4, 8, 8, 8)).astype(np.float32))
    return SimpleNamespace(dir=d, model=d / "tiny.onnx", config=d / "small.json", calib=d / "calib.npz")


@pytest.fixture(autouse=True)
def _private_kernel_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VTAKIT_CACHE_DIR", str(tmp_path / "cache"))


def _tune(files, log, *extra):
    return ["--quiet", "tune", str(files.model), "--target", "vta", "--calibration", str(files.calib),
            "--config", str(files.config), "--trials", "30", "--tuner", "random", "--seed", "3", "--parallel", "2",
            "--log", str(log), "--json", *extra]


def test_tune_a_network_resume_it_and_compile_with_its_log(files, tmp_path, capsys):
    from vtakit import graph
    from vtakit.hw.config import VTAConfig

    log = tmp_path / "tiny.log"
    assert main(_tune(files, log)) == 0
    report = json.loads(capsys.readouterr().out)
    tasks = autotune.extract_tasks(files.model, config=VTAConfig.small(), calibration=files.calib)
    assert [t["template"] for t in report["tasks"]] == ["vta.conv2d", "vta.conv2d", "vta.dense"]
    assert [t["task"] for t in report["tasks"]] == [str(t) for t in tasks]
    per_task = Counter(r.task_key for r in autotune.load_records(log))
    for row, task in zip(report["tasks"], tasks):
        assert row["trials"] == per_task[task.key()] >= min(autotune.MIN_TRIALS_PER_TASK, row["space"])
        assert row["measured"] == row["trials"] and row["resumed"] == 0
        assert row["default_cost"] is not None and row["best_cost"] <= row["default_cost"]   # the default is measured
    assert sum(per_task.values()) == report["totals"]["trials"] == len(log.read_text().splitlines())
    assert report["totals"]["best_cost"] <= report["totals"]["default_cost"]
    assert {r.tuner for r in autotune.load_records(log)} == {"default", "random"}

    lines = log.read_text()
    assert main(_tune(files, log)) == 0                    # the same run again: everything from the log
    again = json.loads(capsys.readouterr().out)
    assert log.read_text() == lines
    assert again["totals"]["measured"] == 0 and again["totals"]["resumed"] == report["totals"]["trials"]
    assert [t["best_cost"] for t in again["tasks"]] == [t["best_cost"] for t in report["tasks"]]

    common = ["--target", "vta", "--calibration", str(files.calib), "--config", str(files.config), "--json"]
    tuned, plain = tmp_path / "tuned.vtapkg", tmp_path / "plain.vtapkg"
    assert main(["--quiet", "compile", str(files.model), *common, "--tuning-log", str(log), "-o", str(tuned)]) == 0
    assert main(["--quiet", "compile", str(files.model), *common, "-o", str(plain)]) == 0
    capsys.readouterr()
    a, b = graph.load(tuned), graph.load(plain)
    assert any("tuning log" in s.note for s in a.plan.steps)          # some layer took the log's knobs
    assert not any("tuning log" in s.note for s in b.plan.steps)
    x = {"x": np.random.default_rng(1).standard_normal((1, 8, 8, 8)).astype(np.float32)}
    np.testing.assert_array_equal(a.run(x)[0], b.run(x)[0])


def test_compile_for_the_cpu_with_a_tuning_log_is_an_error(files, tmp_path, capsys):
    log = tmp_path / "any.log"
    log.write_text("")
    assert main(["compile", str(files.model), "--tuning-log", str(log), "-o", str(tmp_path / "m.vtapkg")]) == 1
    err = capsys.readouterr().err
    assert "no tunable schedule templates" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["{model}", "--workload", "dense:16,16,16"], "either MODEL.onnx"),
    ([], "either MODEL.onnx"),
    (["{model}"], "is a float model"),
    (["{dir}/missing.onnx", "--calibration", "{calib}"], "missing.onnx' is not a file"),
    (["{model}", "--calibration", "{calib}", "--target", "llvm"], "no tunable schedule templates"),
    (["--workload", "dense:16,16,16", "--calibration", "{calib}"], "apply to a MODEL.onnx"),
])
def test_bad_network_tune_input_is_a_one_line_error(argv, message, files, tmp_path, capsys):
    argv = [a.format(model=files.model, dir=files.dir, calib=files.calib) for a in argv]
    assert main(["tune", *argv, "--trials", "2", "--log", str(tmp_path / "l.log")]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "l.log").exists()


def test_extract_tasks_takes_a_graph_or_a_path_and_merges_identical_layers(files):
    from vtakit import graph
    from vtakit.hw.config import VTAConfig

    small = VTAConfig.small()
    by_path = autotune.extract_tasks(str(files.model), config=small, calibration=files.calib)
    qgraph = graph.quantize(graph.from_onnx(files.model), files.calib)
    by_graph = autotune.extract_tasks(qgraph, target="vta", config=small)   # int8 already: no calibration
    assert [t.key() for t in by_path] == [t.key() for t in by_graph]
    assert [(t.count, t.weight) for t in by_graph] == [(1, 8 * 8 * 16 * 16 * 9), (1, 4 * 4 * 16 * 32 * 9),
                                                        (1, 16 * 32)]
    assert all(t.config == small for t in by_graph)
    with pytest.raises(TuningError, match="is a float model"):
        autotune.extract_tasks(graph.from_onnx(files.model), config=small)


def _fake(weight, size):
    return SimpleNamespace(weight=weight, config_space=range(size))


def test_split_trials_is_proportional_with_a_minimum_and_the_space_as_cap():
    assert autotune.split_trials([_fake(3, 1000), _fake(1, 1000)], 200) == [150, 50]
    assert autotune.split_trials([_fake(100, 1000), _fake(1, 1000)], 100) == [84, 16]     # at least 16
    assert autotune.split_trials([_fake(1, 1000)] * 3, 10) == [16, 16, 16]                  # minimums win
    assert autotune.split_trials([_fake(1, 8), _fake(1, 1000)], 100) == [8, 92]             # a small space: all of it
    assert autotune.split_trials([_fake(9, 20), _fake(1, 1000)], 100) == [20, 80]           # capped; the rest moves
    shares = autotune.split_trials([_fake(w, 10_000) for w in (5, 7, 11, 13)], 1001)
    assert sum(shares) == 1001 and shares == sorted(shares)
