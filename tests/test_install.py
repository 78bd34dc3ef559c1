"""The package as a user installs it (a wheel, not an editable checkout) carries what `vtakit demo` needs.

An editable install reads data files from the checkout, so a data file missing from the package
data would only show on a user's machine; this test builds the wheel, unpacks it into a fresh
directory and runs the demo from there, outside the checkout.
"""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_runs_from_the_installed_wheel(tmp_path):
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
                           capture_output=True, text=True, cwd=tmp_path)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("vtakit-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "vtakit/data/digits/digits_cnn.onnx" in names and "vtakit/data/digits/test.npz" in names
        zf.extractall(site)
    env = dict(os.environ, PYTHONPATH=str(site), VTAKIT_PROGRESS="0")
    code = ("import sys, vtakit, vtakit.cli; assert vtakit.__file__.startswith(sys.argv[1]), vtakit.__file__; "
            "sys.exit(vtakit.cli.main(['demo', '--limit', '4', '--json']))")
    run = subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["model"] == "digits" and result["images"] == 4
    assert result["cycles_per_image"] > 0 and 0 < result["utilization"] <= 1
