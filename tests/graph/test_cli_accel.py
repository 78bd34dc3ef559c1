"""``vtakit compile --target vta`` and ``vtakit run`` of accelerator modules: the packaged digits CNN
quantised from the command line, saved, and run on the cycle model with a profile; a float model
without calibration is a one-line error that says why."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from vtakit import datasets
import vtakit.graph as vg
from vtakit.cli import main



@pytest.fixture
def digits(tmp_path):
    """(the float digits model copied into tmp_path, its calibration .npz)."""
    model = tmp_path / "digits.onnx"
    shutil.copyfile(datasets.digits_model_path(), model)
    calib = tmp_path / "calib.npz"
    np.savez(calib, **datasets.load_digits_calibration())
    return model, calib


def test_compile_a_float_model_for_vta_without_calibration_says_why(digits, capsys):
    model, _ = digits
    out = model.with_suffix(".vtapkg")
    assert main(["compile", str(model), "--target", "vta"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("vtakit: error:") and err.count("\n") == 1
    assert "is a float model" in err and "int8" in err and "--calibration" in err
    assert not out.exists()


def test_compile_for_vta_then_run_on_cycle_with_a_profile(digits, tmp_path, capsys):
    model, calib = digits
    pkg = tmp_path / "digits.vtapkg"
    assert main(["compile", str(model), "--target", "vta", "--calibration", str(calib), "-o", str(pkg),
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["target"] == "vta" and pkg.is_file()

    x, _ = datasets.load_digits_test()
    np.save(tmp_path / "x.npy", x[:1])
    out = tmp_path / "out.npz"
    assert main(["run", str(pkg), "--input", str(tmp_path / "x.npy"), "--backend", "cycle", "--profile", "--json",
                 "-o", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["outputs"][0]["name"] == "logits" and report["cycles"] > 0
    profile = report["profile"]
    assert profile["total_cycles"] == report["cycles"]
    on_vta = [r for r in profile["layers"] if r["target"] == "vta"]
    assert {r["name"] for r in on_vta} == {"conv2", "conv3", "fc"} and all(r["cycles"] > 0 for r in on_vta)
    assert profile["macs"] > profile["accel_macs"] > 0 and 0.9 < profile["accel_mac_share"] < 1
    # the same bits as the module built in Python
    q = vg.quantize(vg.from_onnx(str(model)), datasets.load_digits_calibration())
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["logits"], vg.build(q, "vta").run({"input": x[:1]})[0])

    assert main(["run", str(pkg), "--input", str(tmp_path / "x.npy"), "--backend", "cycle", "--profile"]) == 0
    text = capsys.readouterr().out
    assert "accelerator cycles:" in text and "vta.conv2d" in text
