"""One RTL run per program per test session, shared by every test that needs it.

RTL simulation is slow, and the same corpus and random programs are checked by several tests
(rtl == fsim here, cycle model == rtl in the cycle-model tests). :func:`rtl_run` keys a result by
everything that decides it: the program's bytes, the address its instructions are placed at, and
the source of the code that runs it (the RTL and its harness under vtakit/hw and vtakit/sim, the
program format, the corpus runner and this cache). It keeps results in a directory shared by all
pytest-xdist workers of the session (or in ``$VTAKIT_RTL_CACHE`` to keep them across sessions; the
key changes whenever one of those files changes).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from tests.programs import run_program
from tests.programs.runner import insn_address
from vtakit.sim.program import Program

__all__ = ["RtlResult", "rtl_run", "program_key", "session_cache_dir", "source_files"]

_REPO = Path(__file__).resolve().parents[2]
_RUNNER = _REPO / "tests" / "programs" / "runner.py"


@dataclass
class RtlResult:
    dram: np.ndarray
    cycles: int
    retire_cycles: list[int]
    busy_cycles: dict[str, int]


def source_files() -> list[Path]:
    """The files whose code decides an RTL run: the hardware, the simulators and harness (the rtl
    backend checks programs with fsim first), the program format, the runner and this cache."""
    vtakit = _REPO / "vtakit"
    return sorted(vtakit.joinpath("hw").glob("*.py")) + sorted(vtakit.joinpath("sim").glob("*.py")) + [
        _RUNNER, Path(__file__).resolve()]


@lru_cache(maxsize=1)
def _rtl_source_hash() -> str:
    digest = hashlib.sha256()
    for path in source_files():
        digest.update(str(path.relative_to(_REPO)).encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def program_key(program: Program) -> str:
    """A digest of everything that determines an RTL run of ``program``."""
    digest = hashlib.sha256()
    digest.update(_rtl_source_hash().encode())
    digest.update(program.config.to_json().encode())
    digest.update(program.encoded_insns())
    digest.update(program.uop_segment.data + program.uop_addr.to_bytes(8, "little"))
    digest.update(program.dram_size.to_bytes(8, "little") + insn_address(program).to_bytes(8, "little"))
    for segment in program.segments:
        digest.update(segment.addr.to_bytes(8, "little") + segment.data)
    return digest.hexdigest()[:32]


def session_cache_dir(tmp_path_factory, worker_id: str) -> Path:
    """The cache directory of this pytest session, shared by its xdist workers."""
    if os.environ.get("VTAKIT_RTL_CACHE"):
        return Path(os.environ["VTAKIT_RTL_CACHE"])
    base = tmp_path_factory.getbasetemp()
    return (base.parent if worker_id != "master" else base) / "rtl-cache"


def rtl_run(program: Program, cache_dir: Path) -> RtlResult:
    """The RTL run of ``program``, computed once per cache directory.

    A per-program lock file makes xdist workers that reach the same program at once wait for
    one run instead of each simulating it.
    """
    path = Path(cache_dir) / f"{program_key(program)}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            _store(path, *run_program(program, "rtl"))
    with np.load(path) as archive:
        meta = json.loads(bytes(archive["meta"]).decode())
        return RtlResult(archive["dram"].copy(), meta["cycles"], meta["retire_cycles"], meta["busy_cycles"])


def _store(path: Path, dram: np.ndarray, stats) -> None:
    meta = json.dumps({"cycles": stats.cycles, "retire_cycles": list(stats.retire_cycles),
                       "busy_cycles": dict(stats.busy_cycles)}).encode()
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(tmp, dram=dram, meta=np.frombuffer(meta, dtype=np.uint8))
    os.replace(tmp, path)
