"""The project's docs stand alone: README.md and docs/ never point outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
# Markdown links and images whose target is a path (not a URL or an anchor on the same page).
LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s]+)\)")


@pytest.mark.parametrize("path", DOCS, ids=[p.relative_to(REPO).as_posix() for p in DOCS])
def test_no_pointer_outside_the_repository(path):
    text = path.read_text(encoding="utf-8")
    for outside in ("../shared", "/work/shared", "DESIGN.md"):
        assert outside not in text, f"{path.name} points outside the repository: {outside!r}"
    for target in LINK.findall(text):
        resolved = (path.parent / target.split("#")[0]).resolve()
        assert resolved.is_relative_to(REPO), f"{path.name} links outside the repository: {target}"
        assert resolved.exists(), f"{path.name} links to a missing file: {target}"


def test_architecture_page_is_linked_from_the_readme():
    assert "](docs/architecture.md)" in (REPO / "README.md").read_text(encoding="utf-8")
    assert (REPO / "docs" / "architecture.md") in DOCS


SOURCES = sorted(p for d in ("vtakit", "scripts", "examples") for p in (REPO / d).glob("**/*.py"))


def test_source_docstrings_cite_the_repositorys_own_docs():
    offenders = [p.relative_to(REPO).as_posix() for p in SOURCES
                 if any(s in p.read_text(encoding="utf-8") for s in ("DESIGN §", "DESIGN.md", "../shared"))]
    assert not offenders, f"these files cite a design page outside the repository: {offenders}"
