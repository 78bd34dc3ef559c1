"""``vtakit demo``: the digits CNN quantised, compiled for the accelerator and run on the test images
(``--limit 20`` here; the full split in docs/networks.md), and ``--model resnet18`` (slow), through
:func:`vtakit.cli.main` with ``--json``."""

from __future__ import annotations

import json

import pytest

from vtakit.cli import main

pytest.importorskip("onnx")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VTAKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "demo-kernel-cache"))
    monkeypatch.setenv("VTAKIT_BUILD_JOBS", "1")


def _demo(capsys, *args: str) -> dict:
    assert main(["demo", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_digits_demo_on_twenty_images(capsys):
    result = _demo(capsys, "--limit", "20")
    assert result["model"] == "digits" and result["backend"] == "fsim" and result["images"] == 20
    assert 0.8 <= result["float_accuracy"] <= 1 and result["int8_accuracy"] >= result["float_accuracy"] - 0.1
    assert result["top1_agreement"] >= 0.9
    assert result["cycles_per_image"] > result["ideal_cycles_per_image"] > 0 and 0 < result["utilization"] <= 1
    macs = {row["name"]: row["macs"] for row in result["layers"]}
    on_vta = {row["name"] for row in result["layers"] if row["target"] == "vta"}
    assert on_vta == {"conv2", "conv3", "fc"}
    # every conv but the first (which stays float on the CPU) and the dense run on the accelerator
    expected = {"conv1": 16 * 64 * 9, "conv2": 32 * 64 * 16 * 9, "conv3": 32 * 16 * 32 * 9, "fc": 10 * 512}
    assert {k: v for k, v in macs.items() if v} == expected
    total = sum(expected.values())
    assert result["accelerator_macs_share"] == pytest.approx((total - expected["conv1"]) / total)


@pytest.mark.slow
def test_resnet18_demo(capsys):
    result = _demo(capsys, "--model", "resnet18")
    assert result["model"] == "resnet18" and result["images"] == 1 and result["float_accuracy"] is None
    assert result["cycles_per_image"] > 0
    assert sum(row["macs"] for row in result["layers"]) == 1_814_073_344
    assert result["accelerator_macs_share"] >= 0.93
