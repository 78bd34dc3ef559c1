"""``vtakit.graph.build`` and ``NetModule``: a small graph compiled for the CPU runs like the reference."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit import graph as vg
from vtakit.compiler.graph.ir import Graph, Node, TensorType
from vtakit.errors import ArgumentError, GraphError


def _graph() -> Graph:
    c = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    g = Graph([Node("Add", ["x", "c"], ["a"], name="add0"), Node("Relu", ["a"], ["r"], name="relu0"),
               Node("Add", ["r", "y"], ["out/0"], name="add1")],
              ["x", "y"], ["out/0", "r"], constants={"c": c})
    g.types = {"x": TensorType((2, 3, 4), "float32"), "y": TensorType((4,), "float32"),
               "c": TensorType((3, 4), "float32"), "a": TensorType((2, 3, 4), "float32"),
               "r": TensorType((2, 3, 4), "float32"), "out/0": TensorType((2, 3, 4), "float32")}
    return g


def _inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 3, 4)).astype(np.float32), "y": rng.standard_normal(4).astype(np.float32)}


def test_build_runs_like_the_reference_by_name_and_by_position():
    g = _graph()
    mod = vg.build(g, "llvm")
    assert mod.input_names == ["x", "y"] and mod.output_names == ["out/0", "r"]
    assert [(i.name, i.shape, i.dtype) for i in mod.input_info] == [("x", (2, 3, 4), "float32"), ("y", (4,), "float32")]
    for seed in range(3):
        inputs = _inputs(seed)
        want = vg.evaluate(g, inputs)
        by_name = mod.run(inputs)
        by_position = mod.run([inputs["x"], inputs["y"]])
        for k, name in enumerate(g.outputs):
            np.testing.assert_allclose(by_name[k], want[name], rtol=1e-6)
            np.testing.assert_array_equal(by_position[k], by_name[k])


def test_outputs_are_not_overwritten_by_the_next_run():
    mod = vg.build(_graph())
    first = mod.run(_inputs(0))
    kept = [o.copy() for o in first]
    mod.run(_inputs(1))
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("inputs, message", [
    (lambda i: {**i, "z": i["x"]}, "unknown input 'z'"),
    (lambda i: {"x": i["x"]}, "input 'y' is missing"),
    (lambda i: {**i, "x": i["x"][:1]}, r"input 'x' has shape \(1, 3, 4\), expected \(2, 3, 4\)"),
    (lambda i: {**i, "y": i["y"].astype(np.float64)}, "input 'y' has dtype float64, expected float32"),
    (lambda i: [i["x"]], "takes 2 inputs"),
])
def test_bad_inputs_name_the_input_the_expected_and_the_actual(inputs, message):
    mod = vg.build(_graph())
    with pytest.raises(ArgumentError, match=message):
        mod.run(inputs(_inputs()))


def test_debug_run_gives_every_tensor_a_kernel_writes():
    g = _graph()
    inputs = _inputs(2)
    every = vg.evaluate(g, inputs, keep_all=True)
    fused = vg.build(g).debug_run(inputs)
    assert "a" not in fused  # inside the fused Add+Relu kernel: never materialised
    unfused = vg.build(g, disabled_passes=("FuseOps",)).debug_run(inputs)
    for dumped, names in ((fused, ("x", "y", "r", "out/0")), (unfused, ("x", "y", "a", "r", "out/0"))):
        for name in names:
            np.testing.assert_allclose(dumped[name], every[name], rtol=1e-6)


def test_profile_has_a_row_per_kernel():
    g = _graph()
    mod = vg.build(g)
    inputs = _inputs(2)
    every = vg.evaluate(g, inputs, keep_all=True)
    profile = mod.profile(inputs)
    np.testing.assert_allclose(profile.outputs[0], every["out/0"], rtol=1e-6)
    assert profile.layers and all(row.seconds >= 0 and row.target == "llvm" for row in profile.layers)
    text = str(profile)
    assert "layer" in text and "kernels" in text
    assert profile.to_json()["layers"][0]["name"] == profile.layers[0].name


def _many_kernels() -> Graph:
    """Six additions with differently shaped constants: six kernels with distinct workloads (of shapes
    no other test uses, so they are compiled here)."""
    shapes = [(3, 7), (7,), (1, 7), (2, 3, 7), (1, 1, 7), (3, 1)]
    nodes, g_types, consts, prev = [], {"x": TensorType((2, 3, 7), "float32")}, {}, "x"
    for k, shape in enumerate(shapes):
        consts[f"c{k}"] = np.full(shape, k + 1, np.float32)
        g_types[f"c{k}"] = TensorType(shape, "float32")
        nodes.append(Node("Add", [prev, f"c{k}"], [f"v{k}"], name=f"add{k}"))
        g_types[f"v{k}"] = TensorType((2, 3, 7), "float32")
        prev = f"v{k}"
    return Graph(nodes, ["x"], [prev], g_types, consts)


def test_a_cold_build_compiles_in_helper_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("VTAKIT_BUILD_JOBS", "2")
    mod = vg.build(_many_kernels(), disabled_passes=("FuseOps",), cache_dir=tmp_path)
    stats = mod.stats
    assert stats.kernels == stats.unique_kernels == 6
    assert stats.compiled + stats.loaded_from_disk + stats.already_loaded == 6
    x = np.zeros((2, 3, 7), np.float32)
    np.testing.assert_array_equal(mod.run([x])[0], np.full((2, 3, 7), 21, np.float32))
    assert len(list(tmp_path.rglob("*.o"))) == 6 and not list(tmp_path.rglob("*.tmp"))


def test_build_jobs_must_be_a_positive_integer(monkeypatch):
    monkeypatch.setenv("VTAKIT_BUILD_JOBS", "zero")
    with pytest.raises(GraphError, match="VTAKIT_BUILD_JOBS must be a positive integer, got 'zero'"):
        vg.build(_many_kernels(), cache_dir=None)


def test_extract_tasks_lists_unique_kernels_with_counts():
    g = _many_kernels()
    g.nodes.append(Node("Add", ["v5", "c1"], ["w"], name="again"))  # the same workload as add1
    g.types["w"] = TensorType((2, 3, 7), "float32")
    g.outputs = ["w"]
    tasks = vg.extract_tasks(g, "llvm", disabled_passes=("FuseOps",))
    assert sorted(t.count for t in tasks) == [1, 1, 1, 1, 1, 2]
    template, workload, count = next(t for t in tasks if t.count == 2)
    assert template == "llvm.Add" and isinstance(workload, tuple) and count == 2
    assert vg.build(g, disabled_passes=("FuseOps",)).stats.unique_kernels == len(tasks)


def test_unknown_target_lists_the_registered_ones():
    with pytest.raises(GraphError, match="unknown graph target 'tpu'; registered: cuda, llvm, vta"):
        vg.build(_graph(), "tpu")


def test_target_options_are_refused_rather_than_ignored():
    with pytest.raises(GraphError, match="'llvm -mcpu=haswell': options are not supported yet"):
        vg.build(_graph(), "llvm -mcpu=haswell")
    with pytest.raises(GraphError, match="options are not supported yet"):
        vg.extract_tasks(_graph(), "llvm -vector-width=256")


def test_run_allocates_only_the_returned_outputs():
    import tracemalloc

    g = Graph([Node("Relu", ["x"], ["a"]), Node("Add", ["a", "x"], ["b"]), Node("Relu", ["b"], ["y"])],
              ["x"], ["y"], {n: TensorType((64, 256), "float32") for n in "xaby"})
    mod = vg.build(g, disabled_passes=("FuseOps",))  # three kernels, two 64 KiB intermediates
    inputs = [np.ones((64, 256), np.float32)]
    out_bytes = sum(o.nbytes for o in mod.run(inputs))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        mod.run(inputs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < out_bytes + 8192  # the outputs plus Python's bookkeeping: no tensor storage per run


@pytest.mark.parametrize("outputs", [["y"], ["y", "r"]])
def test_view_ops_alias_their_input(outputs):
    g = Graph([Node("Relu", ["x"], ["r"]), Node("Flatten", ["r"], ["y"], {"axis": 1})],
              ["x"], outputs, {"x": TensorType((2, 3, 5), "float32")})
    g = vg.passes.get_pass("InferType")(g)
    mod = vg.build(g)
    assert mod.num_kernels == 1 and mod.plan.values["y"].offset == mod.plan.values["r"].offset
    x = np.linspace(-1, 1, 30, dtype=np.float32).reshape(2, 3, 5)
    out = mod.run([x])
    np.testing.assert_array_equal(out[0], np.maximum(x, 0).reshape(2, 15))
    assert out[0].shape == (2, 15) and all(o.base is None or o.base is not out[0].base for o in out[1:])
