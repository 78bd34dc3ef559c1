"""The RTL result cache's key changes with everything that decides an RTL run, so a cached result
is never reused for a run that would differ."""

import pytest

from tests.hw import rtl_cache
from tests.programs import CASES
from vtakit.hw.config import VTAConfig


@pytest.fixture
def program():
    return CASES["acc_roundtrip"](VTAConfig.small()).program


def test_the_key_covers_the_rtl_its_harness_the_program_format_and_the_runner():
    names = {str(p.relative_to(rtl_cache._REPO)) for p in rtl_cache.source_files()}
    assert {"vtakit/hw/core.py", "vtakit/hw/isa.py", "vtakit/sim/rtl.py", "vtakit/sim/backend.py",
            "vtakit/sim/fsim.py", "vtakit/sim/program.py", "tests/programs/runner.py",
            "tests/hw/rtl_cache.py"} <= names


def test_the_key_changes_with_the_instruction_address(program, monkeypatch):
    before = rtl_cache.program_key(program)
    monkeypatch.setattr(rtl_cache, "insn_address", lambda p: 1 << 20)
    assert rtl_cache.program_key(program) != before


def test_the_key_changes_with_the_source_of_any_file_that_runs_the_program(program, monkeypatch, tmp_path):
    runner = tmp_path / "runner.py"
    runner.write_text("# one runner\n")
    monkeypatch.setattr(rtl_cache, "_REPO", tmp_path)
    monkeypatch.setattr(rtl_cache, "source_files", lambda: [runner])
    rtl_cache._rtl_source_hash.cache_clear()
    try:
        before = rtl_cache.program_key(program)
        runner.write_text("# another runner\n")
        rtl_cache._rtl_source_hash.cache_clear()
        assert rtl_cache.program_key(program) != before
    finally:
        rtl_cache._rtl_source_hash.cache_clear()


def test_the_key_changes_with_the_program(program):
    other = CASES["acc8_roundtrip"](VTAConfig.small()).program
    assert rtl_cache.program_key(program) != rtl_cache.program_key(other)
