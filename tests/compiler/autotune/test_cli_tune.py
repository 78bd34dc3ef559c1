"""``vtakit tune`` / ``tune-report``: SIGKILL mid-run and resume, bad input, the report and its plot."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vtakit import autotune
from vtakit.cli import main

REPO = Path(__file__).resolve().parents[3]
TUNE = ["tune", "--workload", "dense:16,16,16", "--trials", "24", "--tuner", "random", "--seed", "5",
        "--parallel", "2", "--timeout", "30"]


def _small_config(tmp_path):
    from vtakit.hw.config import VTAConfig

    path = tmp_path / "small.json"
    VTAConfig.small().to_json(path)
    return path


def _cli(*args):
    return subprocess.Popen([sys.executable, "-m", "vtakit.cli", "--quiet", *map(str, args)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_sigkill_mid_run_then_resume_loses_nothing_and_measures_nothing_twice(tmp_path):
    cfg = _small_config(tmp_path)
    whole, cut = tmp_path / "whole.log", tmp_path / "cut.log"
    assert _cli(*TUNE, "--config", cfg, "--log", whole).wait(timeout=300) == 0
    proc = _cli(*TUNE, "--config", cfg, "--log", cut)
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline and proc.poll() is None:
        if cut.exists() and cut.read_bytes().count(b"\n") >= 6:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)               # the command and its measuring workers
    proc.wait()
    before = [line for line in cut.read_text().split("\n")[:-1]]   # the newline-terminated records
    assert len(before) >= 6
    again = _cli(*TUNE, "--config", cfg, "--log", cut, "--json")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    report = json.loads(out)
    assert report["trials"] == 24 and report["resumed"] >= len(before)
    lines = cut.read_text().split("\n")
    assert lines[:len(before)] == before              # no record lost
    indices = [r.index for r in autotune.load_records(cut)]
    assert len(indices) == 24 == len(set(indices))    # N in total, none twice
    assert set(indices) == {r.index for r in autotune.load_records(whole)}   # the seeded run's set


def test_tune_report_table_json_and_plot(tmp_path, capsys):
    cfg = _small_config(tmp_path)
    log = tmp_path / "t.log"
    assert main(["--quiet", "tune", "--workload", "dense:16,16,16", "--config", str(cfg), "--trials", "6",
                 "--tuner", "grid", "--log", str(log), "--parallel", "2"]) == 0
    assert "best config" in capsys.readouterr().out
    assert main(["tune-report", str(log), "--json"]) == 0
    (task,) = json.loads(capsys.readouterr().out)["tasks"]
    assert task["trials"] == 6 and task["unit"] == "cycles" and task["tuners"] == ["grid"]
    pytest.importorskip("matplotlib")
    assert main(["tune-report", str(log), "--plot", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 1000
    assert "vta.dense(16, 16, 16)" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--workload", "resnet18.C99"], "unknown workload 'resnet18.C99'"),
    (["--workload", "conv2d:1,2,3"], "expected conv2d:H,W,CI,CO,K,PAD,STRIDE"),
    (["--workload", "matmul:1,2,3"], "unknown workload 'matmul:1,2,3'"),
    (["--workload", "dense:16,16,16", "--target", "llvm", "--config", "x.json"], "--config applies to --target vta"),
])
def test_bad_tune_input_is_a_one_line_error(argv, message, tmp_path, capsys):
    assert main(["tune", *argv, "--trials", "2", "--log", str(tmp_path / "l.log")]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_bad_counts_are_usage_errors(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["tune", "--workload", "dense:16,16,16", "--trials", "0", "--log", str(tmp_path / "l.log")])
    assert exc.value.code == 2


def test_unknown_template_and_empty_space_are_tuning_errors():
    from vtakit.compiler.autotune.space import ConfigSpace
    from vtakit.errors import TuningError

    with pytest.raises(TuningError, match="unknown template 'vta.pool'; registered: .*'vta.conv2d'"):
        autotune.create_task("vta.pool", (1, 2))

    @autotune.template("llvm.test_empty", reference=lambda *a, **k: ([], None), override=True)
    def _empty(cfg, n, config=None):
        cfg.define_split("tile", n, filter=lambda e: e.size[-1] > n)   # nothing passes
        return None, []

    with pytest.raises(TuningError, match=r"empty config space: knob\(s\) \['tile'\] have no choices"):
        autotune.create_task("llvm.test_empty", (8,))
    with pytest.raises(TuningError, match="is for target 'vta', not 'llvm'"):
        autotune.create_task("vta.dense", (16, 16, 16), target="llvm")
    with pytest.raises(TuningError, match="a dense; template 'vta.conv2d' needs a conv2d"):
        autotune.create_task("vta.conv2d", "dense:16,16,16")
    assert isinstance(ConfigSpace(), ConfigSpace)


def test_a_log_of_another_vta_config_is_ignored_and_the_command_says_so(tmp_path, capsys):
    log = tmp_path / "t.log"
    base = ["--quiet", "tune", "--workload", "dense:16,16,16", "--trials", "2", "--tuner", "random",
            "--log", str(log), "--parallel", "2"]
    assert main(base) == 0
    capsys.readouterr()
    assert main([*base, "--config", str(_small_config(tmp_path)), "--json"]) == 0
    captured = capsys.readouterr()
    assert "ignored 2 record(s) of this workload measured on another VTAConfig" in captured.err
    assert json.loads(captured.out)["resumed"] == 0
