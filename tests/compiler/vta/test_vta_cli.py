"""``vtakit bench conv2d`` and ``vtakit bench dense``: JSON keys, correctness, errors."""

import json

import pytest

from vtakit.cli import main
from vtakit.hw.config import VTAConfig

KEYS = {"correct", "cycles", "ideal_cycles", "utilization", "sim_seconds", "useful_macs", "ideal_macs", "shift",
        "unsaturated", "compile_seconds"}


def test_bench_conv2d_explicit_shape_json(capsys):
    assert main(["bench", "conv2d", "--h", "8", "--w", "8", "--ci", "16", "--co", "32", "--kernel", "3", "--pad", "1",
                 "--stride", "2", "--vthreads", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert KEYS <= set(out) and out["correct"] is True and out["cycles"] is None
    assert out["ideal_cycles"] == 4 * 4 * 2 * 1 * 9


def test_bench_conv2d_layer_table(capsys):
    assert main(["bench", "conv2d", "--layer", "resnet18.C10", "--vthreads", "1"]) == 0
    text = capsys.readouterr().out
    assert "correct" in text and "yes" in text and "resnet18.C10" in text
    assert "requant shift" in text and "unsaturated      100.0% of the outputs" in text


def test_bench_dense_json(capsys):
    assert main(["bench", "dense", "--m", "32", "--n", "64", "--k", "48", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert KEYS <= set(out) and out["correct"] is True and out["ideal_cycles"] == 32 * (64 // 16) * (48 // 16)
    assert out["unsaturated"] > 0.95 and 1 <= out["shift"] <= 31


def test_bench_errors(capsys):
    assert main(["bench", "conv2d", "--layer", "resnet18.C1"]) == 1
    assert "unknown workload 'resnet18.C1'" in capsys.readouterr().err
    assert main(["bench", "dense", "--k", "0"]) == 1
    assert "dense: k = 0 must be a positive integer" in capsys.readouterr().err
    assert main(["bench", "conv2d", "--ci", "0"]) == 1
    assert "ci must be a positive int, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:    # a usage error, before any work
        main(["bench", "dense", "--backend", "nosuch"])
    assert exit_info.value.code == 2 and "unknown backend 'nosuch'" in capsys.readouterr().err


def test_bench_conv2d_batch_defaults_to_the_config(capsys, tmp_path):
    config = tmp_path / "batch2.json"
    VTAConfig.small(log_batch=1).to_json(config)
    argv = ["bench", "conv2d", "--h", "4", "--w", "4", "--ci", "4", "--co", "8", "--config", str(config)]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["correct"] is True and out["ideal_cycles"] == 1 * 2 * 4 * 4 * 9   # batch blocks x co x oh x ow x k^2
    assert main([*argv, "--batch", "4"]) == 0
    assert ", batch 4 on fsim" in capsys.readouterr().out
    assert main([*argv, "--batch", "3", "--json"]) == 0   # padded to 2 batch blocks
    out = json.loads(capsys.readouterr().out)
    assert out["correct"] is True and out["ideal_cycles"] == 2 * 2 * 4 * 4 * 9
    assert (out["useful_macs"], out["ideal_macs"]) == (3 * 4 * 8 * 4 * 4 * 9, 4 * 4 * 8 * 4 * 4 * 9)


def test_bench_conv2d_channels_that_are_not_whole_blocks(capsys):
    argv = ["bench", "conv2d", "--h", "7", "--w", "7", "--ci", "24", "--co", "40", "--kernel", "3"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["correct"] is True
    assert out["useful_macs"] == 7 * 7 * 24 * 40 * 9 and out["ideal_macs"] == 7 * 7 * 32 * 48 * 9
    assert out["ideal_macs"] == out["ideal_cycles"] * 256
    assert main(argv) == 0
    assert "MACs             423360 useful of 677376 ideal (62.5%; the rest is zero padding to whole blocks)" \
        in capsys.readouterr().out
    assert main(["bench", "gemm", "--m", "16", "--n", "16", "--k", "16"]) == 0
    assert "MACs             4096 useful of 4096 ideal\n" in capsys.readouterr().out


def test_bench_uses_fewer_threads_when_the_output_does_not_split(capsys):
    assert main(["bench", "dense", "--m", "4", "--n", "16", "--k", "16", "--vthreads", "2"]) == 0
    assert "virtual threads  1 (2 asked; more do not split this output or fit the token queues)" in \
        capsys.readouterr().out
    assert main(["bench", "conv2d", "--h", "7", "--w", "7", "--ci", "16", "--co", "32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["correct"] is True and out["vthreads"] == 2 and out["knobs"]["oc_nthread"] == 2
