"""atomic_write: the target holds the old contents or the whole new ones, and no temporary file is left."""

from __future__ import annotations

import pytest

from vtakit.atomic import atomic_write


def test_a_completed_write_replaces_the_file(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with atomic_write(target) as f:
        f.write(b"new contents")
    assert target.read_bytes() == b"new contents"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


@pytest.mark.parametrize("error", [ValueError("bad data"), KeyboardInterrupt()])
def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, error):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(type(error)):
        with atomic_write(target) as f:
            f.write(b"half")
            raise error
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_a_failed_first_write_creates_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_write(tmp_path / "new.bin"):
            raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []
