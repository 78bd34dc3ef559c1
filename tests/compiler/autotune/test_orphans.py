"""A killed ``vtakit tune`` (or ``vtakit dse``) leaves no process behind: the measurement pool's
workers die with the process that made them (SIGKILL gives it no chance to shut the pool down)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

_SCRIPT = """
import time
from vtakit.compiler.autotune.measure import LocalBuilder, measure_option
with measure_option(LocalBuilder(n_parallel=2)).open_executor() as pool:
    futures = [pool.submit(time.sleep, 120) for _ in range(2)]
    while len(pool._processes) < 2:
        time.sleep(0.05)
    print(" ".join(str(pid) for pid in pool._processes), flush=True)
    time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"   # a zombie has exited; only its parent's reaping is missing


def test_pool_workers_die_with_a_killed_tuner():
    parent = subprocess.Popen([sys.executable, "-c", _SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(pid) for pid in workers)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in workers if _alive(pid)], "pool workers outlived the killed tuner"
    finally:
        parent.kill()
        for pid in workers if "workers" in locals() else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
