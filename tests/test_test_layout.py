"""The test tree's layout: pytest imports test modules by basename (the test directories are not
packages), so two test files with the same name in different directories fail to collect; and a
file's name says what it tests, not how it came about."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path


def test_no_two_test_files_share_a_basename():
    seen: dict[str, list[str]] = defaultdict(list)
    root = Path(__file__).parent
    for path in root.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(root)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"



# Words of a file name (between underscores) that say how it came about rather than what it tests.
_HISTORY_WORDS = ("audit", "second_reader", "review", "followup", "new", "old", "v2")


def test_test_files_are_named_after_their_subject():
    root = Path(__file__).parent
    named_after_history = sorted(str(path.relative_to(root)) for path in root.rglob("test_*.py")
                                 if any(f"_{word}_" in f"{path.stem}_" for word in _HISTORY_WORDS))
    assert not named_after_history, f"name these after what they test: {named_after_history}"


# ---------------------------------------------------------------------------- every test checks something
# A test function passes when it checks something: an assert statement, ``raise`` of AssertionError or
# ``pytest.fail``, pytest.raises / pytest.warns / pytest.deprecated_call, a call whose name starts with
# ``assert`` (np.testing.assert_allclose, self.assertEqual, a helper named assert_same), or a call of a
# helper that does one of these: a function of the same module, or one imported (at the top or inside the
# function) from a module of tests/ or from a ``testing`` module of vtakit (vtakit.compiler.testing).
_CHECK_CALLS = {"raises", "warns", "deprecated_call", "fail"}
_REPO = Path(__file__).resolve().parent.parent


def _dotted(func) -> str:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _checks_directly(fn) -> tuple[bool, set[str]]:
    """Whether ``fn`` checks something itself; the plain names it calls (candidate helpers)."""
    called: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True, called
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if _dotted(exc) in ("AssertionError", "pytest.fail"):
                return True, called
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            last = name.rsplit(".", 1)[-1]
            if last.startswith("assert") or (name.startswith("pytest.") and last in _CHECK_CALLS):
                return True, called
            if name and "." not in name:
                called.add(name)
    return False, called


def _helper_module(module: str) -> Path | None:
    path = _REPO / (module.replace(".", "/") + ".py")
    if path.is_file() and (module.startswith("tests.") or module.rsplit(".", 1)[-1] == "testing"):
        return path
    return None


def _statements(body: list[ast.stmt]):
    """Every statement in ``body`` and the bodies nested in it (functions and imports are statements: no
    need to walk the expressions, most of a module's nodes)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, name, None)
            if isinstance(block, list):
                stack.extend(block)


class _Module:
    _cache: dict[Path, _Module] = {}

    def __init__(self, path: Path):
        self.tree = ast.parse(path.read_text(), str(path))
        self.functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = defaultdict(list)
        self.imports: dict[str, tuple[Path, str]] = {}
        for node in _statements(self.tree.body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name].append(node)
            elif isinstance(node, ast.ImportFrom) and node.module and (source := _helper_module(node.module)):
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (source, alias.name)

    @classmethod
    def of(cls, path: Path) -> _Module:
        if path not in cls._cache:
            cls._cache[path] = cls(path)
        return cls._cache[path]


def _helper_checks(path: Path, name: str, seen: set[tuple[Path, str]]) -> bool:
    if (path, name) in seen:
        return False
    seen.add((path, name))
    module = _Module.of(path)
    if name in module.functions:
        return any(ok or any(_helper_checks(path, c, seen) for c in called)
                   for ok, called in map(_checks_directly, module.functions[name]))
    if name in module.imports:
        return _helper_checks(*module.imports[name], seen)
    return False


def _is_fixture(fn) -> bool:
    return any("fixture" in _dotted(d.func if isinstance(d, ast.Call) else d) for d in fn.decorator_list)


def _unchecked_tests(path: Path) -> list[str]:
    """The tests of the module at ``path`` that check nothing, as ``Class::name`` or ``name``."""
    found = []

    def visit(body, prefix=""):
        for node in body:
            if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                visit(node.body, f"{prefix}{node.name}::")
            elif (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
                  and not _is_fixture(node)):
                ok, called = _checks_directly(node)
                if not ok and not any(_helper_checks(path, c, set()) for c in called):
                    found.append(prefix + node.name)
            elif isinstance(node, ast.Assign):      # test_x = given(...)(check_x): a checking function wrapped
                names = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
                for target in node.targets:
                    if (isinstance(target, ast.Name) and target.id.startswith("test")
                            and not any(_helper_checks(path, n, set()) for n in names)):
                        found.append(prefix + target.id)

    visit(_Module.of(path).tree.body)
    return found


def _tests_without_checks() -> list[str]:
    return [f"{path.relative_to(_REPO).as_posix()}::{name}"
            for path in sorted((_REPO / "tests").rglob("test_*.py")) for name in _unchecked_tests(path)]


def test_every_test_function_checks_something():
    unchecked = _tests_without_checks()
    assert not unchecked, ("these tests pass whatever the code does (no assert, pytest.raises, assert_* call "
                           f"or checking helper): {unchecked}")


def test_the_no_check_scan_sees_a_test_that_checks_nothing(tmp_path):
    """The scan itself: a test without checks is found; one through a checking helper (called or wrapped),
    pytest.raises, an assert* method, or a fixture named test_*, is not."""
    source = ("import pytest\n"
              "def _helper(x):\n    assert x\n"
              "def _quiet(x):\n    return x\n"
              "@pytest.fixture\ndef test_data():\n    return 1\n"
              "def test_through_helper():\n    _helper(1)\n"
              "def test_raises():\n    with pytest.raises(ValueError):\n        int('x')\n"
              "def test_quiet():\n    _quiet(1)\n"
              "test_wrapped = pytest.mark.skip(_helper)\n"
              "test_wrapped_quiet = pytest.mark.skip(_quiet)\n"
              "class TestGroup:\n    def test_method(self):\n        self.assertEqual(1, 1)\n"
              "    def test_nothing(self):\n        pass\n")
    path = tmp_path / "test_sample.py"
    path.write_text(source)
    assert _unchecked_tests(path) == ["test_quiet", "test_wrapped_quiet", "TestGroup::test_nothing"]
