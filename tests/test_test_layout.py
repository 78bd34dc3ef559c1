"""The test tree's layout: pytest imports test modules by basename (the test directories are not
packages), so two test files with the same name in different directories fail to collect."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path


def test_no_two_test_files_share_a_basename():
    seen: dict[str, list[str]] = defaultdict(list)
    root = Path(__file__).parent
    for path in root.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(root)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
