"""Progress bars (vtakit.progress) where long work shows them, --quiet, and Ctrl-C in the command."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import vtakit
import vtakit.compiler.lower as lower_module
import vtakit.progress as progress_module
from vtakit import te
from vtakit.cli import main
from vtakit.compiler.transform import PassContext
from vtakit.hw.config import VTAConfig
from vtakit.progress import enabled, progress, set_enabled
from vtakit.runtime import Device
from vtakit.runtime.random_program import random_program

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def shown(monkeypatch):
    """Bars on, drawn at once and often (pytest's stderr is no terminal, so they are off by default)."""
    monkeypatch.setattr(progress_module, "DELAY_SECONDS", 0.0)
    monkeypatch.setattr(progress_module, "REFRESH_SECONDS", 0.01)
    previous = set_enabled(True)
    yield
    set_enabled(previous)


def _progress_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("progress:")]


def test_off_unless_stderr_is_a_terminal(monkeypatch, capsys):
    monkeypatch.delenv("VTAKIT_PROGRESS", raising=False)
    assert not enabled()
    with progress("work", total=3) as bar:
        bar.advance(3)
    assert capsys.readouterr().err == "" and not _progress_threads()
    monkeypatch.setenv("VTAKIT_PROGRESS", "1")
    assert enabled()
    monkeypatch.setenv("VTAKIT_PROGRESS", "0")
    previous = set_enabled(True)
    assert enabled() and previous is None
    set_enabled(previous)
    assert not enabled()


def test_bar_shows_count_and_step_then_goes(shown, capsys):
    with progress("work", total=4, unit="job") as bar:
        bar.advance(3)
        bar.step("the third")
        time.sleep(0.1)
    err = capsys.readouterr().err
    assert "work:" in err and "3/4" in err and "job" in err and "the third" in err
    assert err.endswith("\r") and not _progress_threads()   # the line is cleared, the timer stopped


def test_bar_goes_on_interrupt(shown, capsys):
    with pytest.raises(KeyboardInterrupt):
        with progress("steps") as bar:
            bar.step("slow")
            time.sleep(0.05)
            raise KeyboardInterrupt
    assert "steps [" in capsys.readouterr().err and not _progress_threads()


def test_rtl_run_counts_retired_instructions(shown, capsys):
    program = random_program(VTAConfig.small(), 4, max_insns=60)
    stats = Device(VTAConfig.small(), backend="rtl").run(program)
    err = capsys.readouterr().err
    assert stats.cycles > 0 and "rtl:" in err and re.search(rf"\b\d+/{len(program.insns)} \[", err)
    assert "insn" in err


def test_long_lowering_names_its_passes(shown, capsys, monkeypatch):
    monkeypatch.setattr(lower_module, "QUICK_WORK_DELAY_SECONDS", 0.0)

    def slow_pass(func):
        time.sleep(0.1)
        return func

    a = te.placeholder((8, 8), name="A")
    b = te.compute((8, 8), lambda i, j: a[i, j] + 1, name="B")
    with PassContext(config={"tir.add_lower_pass": [(1, slow_pass)]}):
        vtakit.lower(te.create_schedule(b.op), [a, b], name="addone")
    err = capsys.readouterr().err
    assert "lowering addone [" in err and "slow_pass" in err


def test_quiet_before_or_after_the_verb(shown, capsys, tmp_path):
    path = tmp_path / "p.vtaprog"
    config = tmp_path / "small.json"
    random_program(VTAConfig.small(), 4, max_insns=60).save(path)
    VTAConfig.small().to_json(config)
    argv = ["run-program", str(path), "--backend", "rtl", "--config", str(config)]
    assert main(argv) == 0 and "rtl:" in capsys.readouterr().err
    assert main(["--quiet", *argv]) == 0 and capsys.readouterr().err == ""
    assert main([*argv, "-q"]) == 0 and capsys.readouterr().err == ""
    assert enabled()    # --quiet lasts for its command only


def test_ctrl_c_exits_130_with_one_line():
    """SIGINT during a long rtl benchmark: its title line is already out, then one line, status 130."""
    proc = subprocess.Popen([sys.executable, "-m", "vtakit.cli", "bench", "gemm", "--backend", "rtl"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        title = proc.stdout.readline()
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert title == "GEMM 256x256x256 int8 on rtl (1x16_i8w8a32_15_15_18_17)\n" and out == ""
    assert (proc.returncode, err) == (130, "vtakit: interrupted\n")


INTERRUPTED_WORK = """
import sys, warnings
import vtakit.cli as cli

class HalfBuilt:    # as an Amaranth memory of an interrupted elaboration: it warns when collected
    def __del__(self):
        warnings.warn("created but never used")

def interrupted_work(args):
    half_built = HalfBuilt()
    raise KeyboardInterrupt

cli.cmd_info = interrupted_work
sys.exit(cli.main(["info"]))
"""


def test_ctrl_c_leaves_no_warnings_from_half_built_objects():
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_WORK], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (130, "vtakit: interrupted\n")
