"""onnx's node tests against vtakit, through onnx's own harness (``onnx.backend.test.BackendTest``).

The tests run are those of :func:`vtakit.compiler.graph.onnx_node_tests.node_test_plan`: every node test
of the installed onnx whose operators and dtypes vtakit supports, so operators registered later join
by themselves. In-scope tests listed in ``EXCLUDED`` are reported as skipped with their reason; the
other tests onnx ships (and their CUDA variants) are not collected at all.
"""

from __future__ import annotations

import os
import re
import unittest

import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx import helper

import vtakit.graph
import vtakit.graph.onnx_backend as onnx_backend
from vtakit.compiler.graph.onnx_node_tests import EXCLUDED, classify, excluded_reason, node_test_dir, node_test_plan
from vtakit.errors import GraphError, UnsupportedOperatorError

_PLAN = node_test_plan()
_IN_SCOPE = set(_PLAN.in_scope)


def _node_test_case() -> type[unittest.TestCase]:
    backend_test = onnx.backend.test.BackendTest(onnx_backend, __name__)
    backend_test.include("^(" + "|".join(re.escape(name) for name in _PLAN.in_scope) + ")_cpu$")
    cls = backend_test.test_cases["OnnxBackendNodeModelTest"]
    for attr in [a for a in vars(cls) if a.startswith("test_")]:
        name = attr[:-len("_cpu")] if attr.endswith("_cpu") else None
        if name not in _IN_SCOPE:
            delattr(cls, attr)
        elif name in _PLAN.excluded:
            setattr(cls, attr, unittest.skip(_PLAN.excluded[name])(getattr(cls, attr)))
    return cls


OnnxBackendNodeModelTest = _node_test_case()


def test_the_plan_covers_every_node_test_once():
    names = {n for n in os.listdir(node_test_dir()) if os.path.isfile(os.path.join(node_test_dir(), n, "model.onnx"))}
    assert set(_PLAN.in_scope) | set(_PLAN.out_of_scope) == names
    assert not set(_PLAN.in_scope) & set(_PLAN.out_of_scope)
    assert len(_PLAN.in_scope) >= 300   # the element-wise and tensor operators alone bring about 340


def test_every_exclusion_matches_an_in_scope_test():
    """A stale pattern (a renamed test, or one now out of scope anyway) would hide nothing and mislead the docs."""
    for pattern, reason in EXCLUDED.items():
        assert any(re.fullmatch(pattern, name) for name in _PLAN.in_scope), pattern
        assert reason.strip()
    assert set(_PLAN.excluded) <= _IN_SCOPE
    assert excluded_reason("test_wrap_pad") and excluded_reason("test_add") is None


def test_registered_test_methods_are_the_in_scope_tests():
    methods = {a[:-len("_cpu")] for a in vars(OnnxBackendNodeModelTest) if a.startswith("test_")}
    assert methods == _IN_SCOPE


def _model(nodes, inputs, outputs, opset=17, domain_ops=()):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                             opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, elem=onnx.TensorProto.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.mark.parametrize("model, reason", [
    (_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x")], [_vi("y")]), None),
    (_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", onnx.TensorProto.BFLOAT16)], [_vi("y")]), "BFLOAT16"),
    (_model([helper.make_node("NoSuchOp", ["x"], ["y"])], [_vi("x")], [_vi("y")]), "NoSuchOp"),
    (_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x")], [_vi("y")], opset=5), "opset 5"),
])
def test_classify_gives_the_reason_a_model_is_out_of_scope(model, reason):
    got = classify(model)
    assert got is None if reason is None else reason in got


def test_backend_functions_follow_onnx_backend_base():
    assert onnx_backend.supports_device("CPU") and not onnx_backend.supports_device("CUDA")
    model = _model([helper.make_node("Add", ["a", "b"], ["c"])], [_vi("a"), _vi("b", shape=(3,))], [_vi("c")])
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2, 3], np.float32)
    (c,) = onnx_backend.run_model(model, [a, b])
    np.testing.assert_array_equal(c, a + b)
    node = helper.make_node("Sub", ["p", "q"], ["r"])
    (r,) = onnx_backend.run_node(node, [a, b])
    np.testing.assert_array_equal(r, a - b)
    with pytest.raises(GraphError, match="reads 2 inputs"):
        onnx_backend.run_node(node, [a])
    with pytest.raises(GraphError, match="CUDA"):
        onnx_backend.prepare(model, "CUDA")


def test_prepare_specialises_on_inputs_needed_at_compile_time():
    """A Reshape whose shape is a run-time input is built at the first run, then again only for a new shape."""
    model = _model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                   [_vi("x"), helper.make_tensor_value_info("s", onnx.TensorProto.INT64, (2,))],
                   [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    rep = onnx_backend.prepare(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = rep.run([x, np.array([3, 2])])
    assert y.shape == (3, 2)
    first = rep._module_for({"x": x, "s": np.array([3, 2])})
    assert rep.run([x, np.array([3, 2])])[0].shape == (3, 2) and rep._module_for(
        {"x": x, "s": np.array([3, 2])}) is first
    (y,) = rep.run([x + 1, np.array([6, 1])])
    np.testing.assert_array_equal(y, (x + 1).reshape(6, 1))
    assert len(rep._specialised) == 2
    np.testing.assert_array_equal(rep.run({"x": x, "s": np.array([3, 2])})[0], x.reshape(3, 2))
    with pytest.raises(GraphError, match=r"inputs \['s'\] are missing"):
        rep.run({"x": x})
    with pytest.raises(GraphError, match="takes inputs"):
        rep.run([x])


def test_prepare_raises_an_unsupported_operator_at_once():
    model = _model([helper.make_node("NoSuchOp", ["x"], ["y"])], [_vi("x")], [_vi("y")])
    with pytest.raises(UnsupportedOperatorError, match="NoSuchOp"):
        onnx_backend.prepare(model)


def test_the_backend_is_reachable_as_attribute_and_submodule():
    import importlib
    assert vtakit.graph.onnx_backend is onnx_backend
    assert importlib.import_module("vtakit.graph.onnx_backend") is onnx_backend


def test_docs_onnx_support_is_generated_from_the_current_registries():
    """docs/onnx_support.md lists the operators and every node test not run with its reason; after registering
    an operator or changing an exclusion, regenerate it with ``python3 scripts/gen_onnx_doc.py``."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "gen_onnx_doc.py"
    spec = importlib.util.spec_from_file_location("gen_onnx_doc", script)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = gen.render()
    for name, reason in _PLAN.excluded.items():
        assert f"| `{name}` | {reason} |" in text
    assert all(f"`{name}`" in text for name in _PLAN.out_of_scope)
    assert gen.DOC.read_text() == text, "docs/onnx_support.md is out of date: run python3 scripts/gen_onnx_doc.py"
