"""The runtime's graph executor: plan checks, binding, and the import direction (runtime never imports
the compiler)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from vtakit.errors import ArgumentError
from vtakit.runtime.graph_executor import GraphExecutor, Plan, Step, ValueInfo


def _vtakit_imports(module: str) -> set[str]:
    """The vtakit modules ``module``'s source imports (statically, at any depth in the file)."""
    source = Path(importlib.util.find_spec(module).origin).read_text()
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {m for m in found if m.split(".")[0] == "vtakit"}


def test_the_executor_imports_nothing_from_the_compiler():
    seen, todo = set(), ["vtakit.runtime.graph_executor"]
    while todo:  # the executor's vtakit imports, and theirs (package __init__ files aside)
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(_vtakit_imports(module))
    assert "vtakit.errors" in seen
    assert not [m for m in seen if m.startswith("vtakit.compiler")]


def _add(a, b, out):
    np.add(a, b, out=out)


def _plan(arena: int = 64) -> Plan:
    values = {"x": ValueInfo("x", (4,), "float32", 0), "c": ValueInfo("c", (4,), "float32", None),
              "t": ValueInfo("t", (4,), "float32", 32), "y": ValueInfo("y", (4,), "float32", 0)}
    steps = (Step("add0", 0, ("x", "c", "t"), 1, ("Add",)), Step("add1", 0, ("t", "c", "y"), 1, ("Add",)))
    return Plan(values, ("x",), ("y",), steps, arena)


def test_plain_callables_run_over_the_arena_and_values_share_storage():
    ex = GraphExecutor(_plan(), [_add], {"c": np.full(4, 2, np.float32)})
    out = ex.run([np.arange(4, dtype=np.float32)])
    np.testing.assert_array_equal(out[0], np.arange(4) + 4)  # y reused x's bytes after x died


def test_bind_is_used_once_per_step():
    bound = []

    class Kernel:
        def __call__(self, *arrays):
            raise AssertionError("a kernel with bind is never called per run")

        def bind(self, *arrays):
            bound.append(arrays)
            return lambda: _add(*arrays)

    ex = GraphExecutor(_plan(), [Kernel()], {"c": np.ones(4, np.float32)})
    assert len(bound) == 2
    np.testing.assert_array_equal(ex.run({"x": np.zeros(4, np.float32)})[0], np.full(4, 2))
    assert len(bound) == 2


@pytest.mark.parametrize("mutate, message", [
    (lambda p, c: (Plan(p.values, p.inputs, p.outputs, p.steps, 40), c), "outside the 40-byte arena"),
    (lambda p, c: (p, {}), "constant 'c' was not given"),
    (lambda p, c: (p, {"c": np.ones(5, np.float32)}), "constant 'c' has shape"),
    (lambda p, c: (Plan(p.values, p.inputs, p.outputs, (Step("s", 3, ("x", "c", "t"), 1),), p.arena_bytes), c),
     "calls kernel 3"),
    (lambda p, c: (Plan(p.values, p.inputs, p.outputs, (Step("s", 0, ("x", "q", "t"), 1),), p.arena_bytes), c),
     "does not place"),
])
def test_inconsistent_plans_are_rejected(mutate, message):
    plan, consts = mutate(_plan(), {"c": np.ones(4, np.float32)})
    with pytest.raises(ArgumentError, match=message):
        GraphExecutor(plan, [_add], consts)


def test_plan_json_round_trip():
    plan = _plan()
    assert Plan.from_json(plan.to_json()) == plan


def test_zero_dimensional_constants_and_values_keep_their_shape():
    values = {"x": ValueInfo("x", (), "float32", 0), "c": ValueInfo("c", (), "float32", None),
              "y": ValueInfo("y", (), "float32", 64)}
    plan = Plan(values, ("x",), ("y",), (Step("add", 0, ("x", "c", "y"), 1),), 128)
    c = np.array(2.5, np.float32)
    ex = GraphExecutor(plan, [_add], {"c": c})
    out = ex.run([np.array(1.0, np.float32)])
    assert out[0].shape == () and out[0] == 3.5
    assert c.flags.writeable  # the caller's array is not made read-only


def test_values_live_in_a_known_space_and_dram_values_need_a_device():
    plan = _plan()
    values = dict(plan.values, t=ValueInfo("t", (4,), "float32", 32, "sram"))
    with pytest.raises(ArgumentError, match="space 'sram'"):
        GraphExecutor(Plan(values, plan.inputs, plan.outputs, plan.steps, plan.arena_bytes), [_add],
                      {"c": np.ones(4, np.float32)})
    values = dict(plan.values, t=ValueInfo("t", (4,), "float32", 0, "dram"))
    with pytest.raises(ArgumentError, match="needs a Device"):
        GraphExecutor(Plan(values, plan.inputs, plan.outputs, plan.steps, plan.arena_bytes, 64), [_add],
                      {"c": np.ones(4, np.float32)})


def test_steps_keep_their_note_and_old_plans_without_one_load():
    plan = _plan()
    noted = Plan(plan.values, plan.inputs, plan.outputs,
                 (Step("add0", 0, ("x", "c", "t"), 1, ("Add",), "llvm", "on the CPU: no accelerator add"),
                  plan.steps[1]), plan.arena_bytes)
    assert Plan.from_json(noted.to_json()) == noted
    assert len(plan.to_json()["steps"][0]) == 6   # as version 1 packages store them
    assert Plan.from_json(plan.to_json()).steps[0].note == ""
