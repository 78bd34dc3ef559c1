"""Every script in examples/ runs as a new user runs it, checks itself against numpy and says so."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# script -> what its output must say (each example asserts its results itself and exits non-zero
# when they are wrong; these lines check that it got to the end and reported what it measured)
EXPECTED = {
    "cpu_schedule.py": [r"tiled schedule .* GFLOP/s  \(equals numpy\)", r"numpy \(BLAS\)"],
    "vta_matrix_multiply.py": [r"vta\.gemm|vta\.uop_push", r"my_gemm on cycle: 1x256x256 int8 GEMM equals numpy; "
                                                         r"\d+ instructions, 256 GEMM micro-ops, \d+ cycles"],
    "conv2d_virtual_threads.py": [r"1 virtual thread :\s+\d+ cycles .* equals numpy",
                                  r"2 virtual threads:\s+\d+ cycles .* equals numpy",
                                  r"two threads run \d\.\d\dx faster"],
    "chrome_trace.py": [r"dense 64x256x512 on the cycle model: \d+ cycles, .* equals numpy",
                        r"wrote dense_trace.json: \d+ events", r"compute\s+\d+"],
    "rtl_waveform.py": [r"tiny_gemm: 13 instructions on the RTL .* equals numpy",
                        r"wrote gemm.vcd: \d+ signals .* 'done' rises in cycle \d+, as the run's statistics say"],
}
OUTPUTS = {"chrome_trace.py": ["dense_trace.json"], "rtl_waveform.py": ["gemm.vcd", "gemm.gtkw"]}


def test_every_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs_as_it_is(script, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(EXAMPLES / script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    for pattern in EXPECTED[script]:
        assert re.search(pattern, done.stdout), (pattern, done.stdout[-3000:])
    for name in OUTPUTS.get(script, []):
        assert (tmp_path / name).stat().st_size > 0, name


def test_the_round_trip_in_docs_vta_compiler_runs():
    doc = (ROOT / "docs" / "vta_compiler.md").read_text()
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(code, "docs/vta_compiler.md", "exec"), scope)   # the snippet asserts its result itself
    assert scope["stats"].cycles > scope["stats"].ideal_cycles == 256
    assert scope["c"].shape == (1, 256)
