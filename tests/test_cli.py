"""The vtakit command: every verb, --help everywhere, and clean errors (exit 1, no traceback)."""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vtakit.cli import build_parser, main
from vtakit.hw.config import VTAConfig
from vtakit.runtime.random_program import random_program

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def small_config(tmp_path):
    path = tmp_path / "small.json"
    VTAConfig.small().to_json(path)
    return path


@pytest.fixture
def program_file(tmp_path):
    path = tmp_path / "p.vtaprog"
    random_program(VTAConfig.small(), 3).save(path)
    return path


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _commands(parser, prefix=()):
    """Every command path of the parser, e.g. ('bench', 'gemm'), found by walking its sub-parsers."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + (name,)
                yield from _commands(sub, prefix + (name,))


def test_every_command_has_help(capsys):
    commands = list(_commands(build_parser()))
    assert {("info",), ("disasm",), ("run-program",), ("random-program",), ("bench", "gemm")} <= set(commands)
    for argv in [()] + commands:
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--help"])
        assert exit_info.value.code == 0
        assert "usage: vtakit" in capsys.readouterr().out


def test_info(capsys, small_config):
    code, out, _ = run(capsys, "info")
    assert code == 0 and "1x16_i8w8a32_15_15_18_17" in out and "fsim" in out
    code, out, _ = run(capsys, "info", "--config", str(small_config), "--json")
    info = json.loads(out)
    assert code == 0 and info["model"] == VTAConfig.small().model and info["derived"]["block_in"] == 4
    assert info["config"] == VTAConfig.small().to_dict() and "fsim" in info["backends"]


def test_info_json_is_a_config_file(capsys, tmp_path):
    """`vtakit info --json > c.json && vtakit info --config c.json` gives the same configuration."""
    wide = tmp_path / "wide.json"
    VTAConfig.small(bus_width=128).to_json(wide)
    code, first, _ = run(capsys, "info", "--config", str(wide), "--json")
    saved = tmp_path / "c.json"
    saved.write_text(first)
    code2, second, _ = run(capsys, "info", "--config", str(saved), "--json")
    assert (code, code2) == (0, 0) and second == first and json.loads(second)["config"]["BUS_WIDTH"] == 128


def test_disasm(capsys, program_file, small_config):
    code, out, _ = run(capsys, "disasm", str(program_file), "--config", str(small_config))
    assert code == 0 and out.startswith("; random-3-") and "FINISH" in out and "micro-ops" in out


def test_run_program_is_reproducible(capsys, program_file):
    code, out, _ = run(capsys, "run-program", str(program_file), "--backend", "fsim", "--json")
    first = json.loads(out)
    assert code == 0 and first["program"].startswith("random-3") and first["cycles"] is None
    assert first["counters"]["gemm_counter"] > 0 and len(first["dram_sha256"]) == 64
    code, out, _ = run(capsys, "run-program", str(program_file))
    assert code == 0 and first["dram_sha256"] in out


def test_random_program_then_replay(capsys, tmp_path, small_config):
    path = tmp_path / "r.vtaprog"
    code, out, _ = run(capsys, "random-program", "--seed", "9", "--max-insns", "64", "--vthreads", "2",
                       "--config", str(small_config), "-o", str(path))
    assert code == 0 and "random-9-vt2" in out
    code, out, _ = run(capsys, "run-program", str(path), "--json")
    assert code == 0 and json.loads(out)["instructions"] <= 64


@pytest.mark.parametrize("vthreads", ["1", "2"])
def test_bench_gemm_json(capsys, small_config, vthreads):
    code, out, _ = run(capsys, "bench", "gemm", "--m", "16", "--n", "16", "--k", "32", "--backend", "fsim",
                       "--vthreads", vthreads, "--config", str(small_config), "--json")
    result = json.loads(out)
    assert code == 0 and set(result) == {"correct", "cycles", "ideal_cycles", "utilization", "sim_seconds",
                                         "useful_macs", "ideal_macs", "vthreads"}
    assert result["correct"] is True and result["ideal_cycles"] == 16 * 16 * 32 // 16
    assert result["useful_macs"] == result["ideal_macs"] == 16 * 16 * 32
    assert result["vthreads"] == int(vthreads)
    assert result["cycles"] is None and result["utilization"] is None


def test_bench_gemm_vthreads_above_the_token_queue_depth(capsys, tmp_path):
    """--vthreads is a maximum, as for conv2d/dense: the run uses what the token queues allow."""
    config = tmp_path / "shallow.json"
    VTAConfig.small(token_queue_depth=2).to_json(config)
    code, out, _ = run(capsys, "bench", "gemm", "--m", "16", "--n", "16", "--k", "32", "--vthreads", "12",
                       "--config", str(config), "--json")
    result = json.loads(out)
    assert code == 0 and result["correct"] is True and result["vthreads"] == 2
    code, out, _ = run(capsys, "bench", "gemm", "--m", "16", "--n", "16", "--k", "32", "--vthreads", "12",
                       "--config", str(config))
    assert code == 0 and "virtual threads  2 (12 asked; more do not split this output or fit the token queues)" in out


def test_bench_gemm_defaults(capsys):
    code, out, _ = run(capsys, "bench", "gemm")
    assert code == 0
    assert out.startswith("GEMM 256x256x256 int8 on fsim (1x16_i8w8a32_15_15_18_17)\n")
    assert re.search(r"^correct +yes$", out, re.M) and re.search(r"^ideal cycles +65536$", out, re.M)
    assert re.search(r"^virtual threads +2$", out, re.M)


def _bad_inputs(tmp_path, program_file):
    garbage = tmp_path / "garbage.vtaprog"
    garbage.write_bytes(b"not a zip at all")
    bad_config = tmp_path / "bad.json"
    bad_config.write_text('{"LOG_BLOCK": 4, "NOT_A_KEY": 1}')
    log_block_3 = tmp_path / "log_block_3.json"
    log_block_3.write_text('{"LOG_BLOCK": 3}')
    npy = tmp_path / "array.npy"
    with open(npy, "wb") as f:
        np.save(f, np.arange(3))
    return [
        (["disasm", str(npy)], "not a vtakit program file .*: it does not start with a zip archive's header$"),
        (["run-program", str(npy)], "not a vtakit program file .*: it does not start with a zip archive's header$"),
        (["disasm", str(tmp_path / "missing.vtaprog")], "cannot read program file"),
        (["disasm", str(garbage)], "is not a vtakit program file"),
        (["info", "--config", str(bad_config)], r"unknown configuration key\(s\) \['NOT_A_KEY'\]"),
        (["info", "--config", str(tmp_path / "none.json")], "cannot read configuration file"),
        (["run-program", str(program_file), "--config", str(tmp_path / "default.json")], "was built for"),
        (["bench", "gemm", "--k", "0"], "GEMM size K=0 must be a positive integer"),
        (["info", "--config", str(log_block_3)], r"micro-op needs 36 bits of 32 .*; shrink LOG_ACC_BUFF_SIZE to 13$"),
        (["bench", "gemm", "--vthreads", "0"], "vthreads=0 must be a positive integer"),
        (["random-program", "-o", str(tmp_path / "no" / "such" / "dir.vtaprog")], "No such file or directory"),
    ]


def test_bad_input_gives_one_line_errors(capsys, tmp_path, program_file):
    VTAConfig().to_json(tmp_path / "default.json")
    for argv, message in _bad_inputs(tmp_path, program_file):
        code, out, err = run(capsys, *argv)
        assert code == 1, argv
        assert err.startswith("vtakit: error: ") and "Traceback" not in err, err
        assert re.search(message, err), (argv, err)


def test_usage_errors_exit_2(capsys):
    for argv in (["frobnicate"], ["bench"], ["bench", "gemm", "--m", "many"], ["bench", "gemm", "--seed", "-1"],
                 ["bench", "conv2d", "--seed", "x"], ["random-program", "--seed", "-5", "-o", "unused.vtaprog"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        capsys.readouterr()


def test_unknown_backend_is_a_usage_error_before_any_work(capsys, program_file):
    """A bench title or a run never starts on a backend that does not exist."""
    for argv in (["run-program", str(program_file), "--backend", "quantum"], ["bench", "gemm", "--backend", "quantum"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        out, err = capsys.readouterr()
        assert exit_info.value.code == 2 and out == ""
        assert "argument --backend: unknown backend 'quantum'; expected one of ['cycle', 'fsim', 'rtl', 'verilator']" in err


def test_module_entry_point_exit_status(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "vtakit.cli", "bench", "gemm", "--m", "16", "--n", "16", "--k", "16",
                         "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and json.loads(ok.stdout)["correct"] is True
    bad = subprocess.run([sys.executable, "-m", "vtakit.cli", "disasm", str(tmp_path / "missing")], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "cannot read program file" in bad.stderr
