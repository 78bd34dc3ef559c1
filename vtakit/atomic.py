"""Write a file so that readers see the old file or the whole new one, never a part of it.

Every file vtakit writes that a user or another process may read while it is being written (network
packages, kernel-cache entries, ``vtakit run`` outputs, tuning logs picked to their best) goes through
:func:`atomic_write`: the data goes to a temporary file beside the target, which replaces the target
only once it is complete. An error (or Ctrl-C) on the way removes the temporary file and leaves the
target as it was. A leaf module: it imports nothing from vtakit, so every layer may use it.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

__all__ = ["atomic_write"]


@contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file object whose contents become ``path`` when the ``with`` block ends without an error."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
