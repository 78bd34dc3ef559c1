"""The backend registry: lookup by name, lazy import, re-registration, and clear errors."""

import sys
import types

import pytest

from vtakit.errors import VtakitError
from vtakit.sim import backend, fsim
from vtakit.sim.stats import RunStats


@pytest.fixture
def scratch_backends(monkeypatch):
    """Register test backends on a copy of the registry, and fake modules that vanish afterwards."""
    monkeypatch.setattr(backend, "BACKENDS", dict(backend.BACKENDS))
    monkeypatch.setattr(backend, "_modules", {})

    def add_module(name: str, execute) -> None:
        module = types.ModuleType(name)
        module.execute = execute
        monkeypatch.setitem(sys.modules, name, module)

    return add_module


def test_builtin_backends_resolve():
    assert backend.get_backend("fsim") is fsim.execute
    assert backend.get_backend("fsim") is fsim.execute     # second lookup: remembered module


def test_lookup_sees_patches_and_re_registration(scratch_backends, monkeypatch):
    scratch_backends("_vtakit_test_a", lambda launch: RunStats("a"))
    scratch_backends("_vtakit_test_b", lambda launch: RunStats("b"))
    backend.BACKENDS["probe"] = "_vtakit_test_a:execute"
    assert backend.get_backend("probe")(None).backend == "a"
    monkeypatch.setattr(sys.modules["_vtakit_test_a"], "execute", lambda launch: RunStats("patched"))
    assert backend.get_backend("probe")(None).backend == "patched"   # the module's current function
    backend.BACKENDS["probe"] = "_vtakit_test_b:execute"
    assert backend.get_backend("probe")(None).backend == "b"         # a new entry is honoured


def test_unknown_and_missing_backends(scratch_backends):
    with pytest.raises(VtakitError, match=r"unknown backend 'quantum'; expected one of "
                                          r"\['cycle', 'fsim', 'rtl', 'verilator'\]"):
        backend.get_backend("quantum")
    with pytest.raises(VtakitError, match=r"unknown backend \['fsim'\]"):
        backend.get_backend(["fsim"])
    backend.BACKENDS["gone"] = "_vtakit_no_such_module:execute"
    with pytest.raises(VtakitError, match=r"backend 'gone' is not available in this build "
                                          r"\(_vtakit_no_such_module missing\)"):
        backend.get_backend("gone")
