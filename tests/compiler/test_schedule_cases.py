"""Every schedule case of vtakit.compiler.testing, lowered and interpreted, equals numpy."""

import pytest

from vtakit.compiler.testing import CASES, check_case, interpreter_runner


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_interpreter_matches_numpy(case):
    check_case(case, interpreter_runner(case.intrinsics))
