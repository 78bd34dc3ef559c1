"""The README's "Networks" example runs and computes what onnxruntime computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from vtakit import graph as vg


def test_readme_networks_example_runs(tmp_path, monkeypatch, capsys):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Networks\n", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    session = ort.InferenceSession(scope["model"].SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"data": scope["x"]})[0]
    np.testing.assert_allclose(scope["logits"], want, rtol=0, atol=1e-4 * np.abs(want).max())
    assert "kernels" in capsys.readouterr().out
    np.testing.assert_array_equal(vg.load(tmp_path / "resnet18.vtapkg").run([scope["x"]])[0], scope["logits"])


@pytest.mark.slow  # ResNet-18 at 224x224 quantised and built; tests/graph/test_networks_accel.py runs the flow at 64x64
def test_readme_accelerator_example_runs(tmp_path, monkeypatch):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Networks\n", 1)[1]
    first, accelerated = (part.split("```", 1)[0] for part in section.split("```python\n")[1:3])
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(first.replace('mod.save("resnet18.vtapkg")', ""), "README.md", "exec"), scope)
    exec(compile(accelerated, "README.md", "exec"), scope)
    # the accelerator's int8 result is the quantised network's integer result, bit for bit
    cpu_int8, = vg.build(scope["qgraph"], target="llvm").run({"data": scope["x"]})
    np.testing.assert_array_equal(scope["logits"], cpu_int8)
    assert scope["profile"].total_cycles > 0 and 0 < scope["profile"].utilization <= 1
