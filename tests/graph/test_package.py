"""Saved modules (``.vtapkg``): save/load round trip without compiling, clear errors, no partial files."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from vtakit import graph as vg
from vtakit.compiler.backend import llvm_object
from vtakit.compiler.graph import kernel_cache
from vtakit.compiler.graph.ir import Graph, Node, TensorType
from vtakit.errors import GraphError


def _graph() -> Graph:
    g = Graph([Node("Add", ["x", "c"], ["a"]), Node("Relu", ["a"], ["y"])], ["x"], ["y"],
              constants={"c": np.linspace(-1, 1, 8, dtype=np.float32)})
    g.types = {"x": TensorType((2, 8), "float32"), "c": TensorType((8,), "float32"),
               "a": TensorType((2, 8), "float32"), "y": TensorType((2, 8), "float32")}
    return g


def _no_compiling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the compiler was called")
    monkeypatch.setattr(llvm_object, "compile_object", refuse)
    monkeypatch.setattr(kernel_cache.KernelCache, "get", refuse)


def test_saved_module_loads_and_runs_without_compiling(tmp_path, monkeypatch):
    mod = vg.build(_graph())
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    want = mod.run([x])[0]
    path = tmp_path / "net.vtapkg"
    mod.save(path)
    assert zipfile.is_zipfile(path) and not [p for p in tmp_path.iterdir() if p.name != "net.vtapkg"]
    _no_compiling(monkeypatch)
    loaded = vg.load(path)
    np.testing.assert_array_equal(loaded.run({"x": x})[0], want)
    assert loaded.input_names == ["x"] and loaded.output_names == ["y"]
    assert len(loaded.profile([x]).layers) == mod.num_kernels


def test_run_compiles_nothing(monkeypatch):
    mod = vg.build(_graph())
    _no_compiling(monkeypatch)
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(mod.run([x])[0], np.maximum(x + _graph().constants["c"], 0))


def _corrupt(path, tmp_path):
    cases = {}
    raw = path.read_bytes()
    cases["truncated"] = raw[:len(raw) // 2]
    cases["not a zip"] = b"hello, this is not a module"
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("meta.json", json.dumps({"format": "something-else"}))
    cases["other format"] = other.read_bytes()
    with zipfile.ZipFile(path) as z:
        meta = json.loads(z.read("meta.json"))
        parts = {n: z.read(n) for n in z.namelist()}
    newer = tmp_path / "newer.zip"
    with zipfile.ZipFile(newer, "w") as z:
        for name, data in parts.items():
            z.writestr(name, json.dumps({**meta, "version": 99}) if name == "meta.json" else data)
    cases["newer version"] = newer.read_bytes()
    elsewhere = tmp_path / "elsewhere.zip"
    with zipfile.ZipFile(elsewhere, "w") as z:
        for name, data in parts.items():
            z.writestr(name, json.dumps({**meta, "cpu": "riscv64|generic|"}) if name == "meta.json" else data)
    cases["other cpu"] = elsewhere.read_bytes()
    return cases


@pytest.mark.parametrize("case, message", [("truncated", "not a vtakit network module"),
                                           ("not a zip", "not a vtakit network module"),
                                           ("other format", "format is 'something-else'"),
                                           ("newer version", "version 99 is not supported"),
                                           ("other cpu", "compiled for the CPU 'riscv64")])
def test_corrupt_or_foreign_module_is_a_clear_error(tmp_path, case, message):
    path = tmp_path / "net.vtapkg"
    vg.build(_graph()).save(path)
    bad = tmp_path / "bad.vtapkg"
    bad.write_bytes(_corrupt(path, tmp_path)[case])
    with pytest.raises(GraphError, match=message):
        vg.load(bad)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(GraphError, match="does not exist"):
        vg.load(tmp_path / "nothing.vtapkg")


def test_failed_save_leaves_no_file(tmp_path, monkeypatch):
    mod = vg.build(_graph())
    path = tmp_path / "net.vtapkg"

    write = zipfile.ZipFile.writestr

    def broken(self, name, data, *args, **kwargs):  # fails after the first parts are written
        if name == "constants.npz":
            raise OSError("disk full")
        return write(self, name, data, *args, **kwargs)
    monkeypatch.setattr(zipfile.ZipFile, "writestr", broken)
    with pytest.raises(OSError, match="disk full"):
        mod.save(path)
    assert list(tmp_path.iterdir()) == []


def test_version_1_packages_still_load(tmp_path):
    mod = vg.build(_graph())
    path = tmp_path / "net.vtapkg"
    mod.save(path)
    with zipfile.ZipFile(path) as z:
        meta = json.loads(z.read("meta.json"))
        parts = {n: z.read(n) for n in z.namelist()}
    assert meta["version"] == 2 and all(k["kind"] == "object" for k in meta["kernels"])
    meta["version"] = 1
    for k in meta["kernels"]:
        del k["kind"]
    old = tmp_path / "old.vtapkg"
    with zipfile.ZipFile(old, "w") as z:
        for name, data in parts.items():
            z.writestr(name, json.dumps(meta) if name == "meta.json" else data)
    x = np.ones((2, 8), np.float32)
    np.testing.assert_array_equal(vg.load(old).run([x])[0], mod.run([x])[0])


def test_a_module_without_object_code_is_not_saved(tmp_path):
    mod = vg.build(_graph())
    mod.kernel_objects = []
    with pytest.raises(GraphError, match="no object code"):
        mod.save(tmp_path / "net.vtapkg")
    assert list(tmp_path.iterdir()) == []
