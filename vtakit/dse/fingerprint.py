"""The code fingerprint of a search log's records: what an evaluation's figures depend on.

An evaluation's cycles, resources and clock are computed by the compiler (the default tilings and
the programs), the simulators (the cycle model, including its C core), the hardware description
and its resource estimate, the runtime and the search's own evaluation code. A log written by other
code is stale: the same configuration may measure differently now. :func:`code_fingerprint` is
vtakit's version and a SHA-256 over the source files of those parts (path and bytes, in sorted
order; ``__pycache__`` and compiled cores excluded, their C sources included), and the search log
(:mod:`vtakit.dse.log`) reuses only records of the running code's fingerprint.

Any edit to those files changes the fingerprint, including one that does not change a figure: the
search then measures again rather than trust a stale record.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

import vtakit

__all__ = ["FINGERPRINT_SOURCES", "code_fingerprint", "fingerprint_of"]

#: The parts of the vtakit package (relative to it) whose source decides an evaluation's figures.
FINGERPRINT_SOURCES = ("compiler", "sim", "hw", "runtime", "data", "dse/evaluate.py", "dse/space.py", "dse/fmax.py",
                       "dse/network.py")
_SUFFIXES = (".py", ".c", ".h", ".onnx", ".npz", ".json")


def fingerprint_of(root: str | Path, sources: tuple[str, ...] = FINGERPRINT_SOURCES, version: str = "") -> str:
    """``version`` and a digest of the files of ``sources`` under ``root`` (folders recursively), as
    ``"<version>-<16 hex digits>"``; a source that does not exist is a :class:`FileNotFoundError`."""
    root = Path(root)
    digest = hashlib.sha256(version.encode())
    for part in sources:
        path = root / part
        if not path.exists():
            raise FileNotFoundError(f"fingerprint source {str(path)!r} does not exist")
        files = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix in _SUFFIXES
                       and "__pycache__" not in f.parts) if path.is_dir() else [path]
        for file in files:
            digest.update(file.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    return f"{version}-{digest.hexdigest()[:16]}"


@cache
def code_fingerprint() -> str:
    """The running vtakit's fingerprint (computed once per process): its version and the digest of
    :data:`FINGERPRINT_SOURCES`."""
    return fingerprint_of(Path(vtakit.__file__).resolve().parent, version=str(vtakit.__version__))
