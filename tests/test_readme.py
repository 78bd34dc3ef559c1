"""The README's first program runs and computes what it says."""

from pathlib import Path

import numpy as np


def test_readme_python_example_runs(capsys):
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    np.testing.assert_allclose(scope["c"], scope["a"] @ scope["b"], rtol=1e-4)
    assert "for parallel" in capsys.readouterr().out
