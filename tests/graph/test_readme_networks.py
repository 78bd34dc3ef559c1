"""The README's "Networks" example runs and computes what onnxruntime computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

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
