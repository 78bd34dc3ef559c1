"""``vtakit bench conv2d`` and ``vtakit bench dense``: JSON keys, correctness, errors."""

import json

from vtakit.cli import main

KEYS = {"correct", "cycles", "ideal_cycles", "utilization", "sim_seconds"}


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


def test_bench_dense_json(capsys):
    assert main(["bench", "dense", "--m", "32", "--n", "64", "--k", "48", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert KEYS <= set(out) and out["correct"] is True and out["ideal_cycles"] == 32 * (64 // 16) * (48 // 16)


def test_bench_errors(capsys):
    assert main(["bench", "conv2d", "--layer", "resnet18.C1"]) == 1
    assert "unknown workload 'resnet18.C1'" in capsys.readouterr().err
    assert main(["bench", "dense", "--k", "10"]) == 1
    assert "k = 10" in capsys.readouterr().err
    assert main(["bench", "conv2d", "--ci", "3"]) == 1
    assert "input channels = 3" in capsys.readouterr().err
    assert main(["bench", "dense", "--backend", "nosuch"]) == 1
    assert "nosuch" in capsys.readouterr().err
