"""The graph IR and the operator registry: verifier, printing, attribute schemas, type inference, folding."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.graph import op as op_registry
from vtakit.compiler.graph import ops  # noqa: F401  (registers the operators)
from vtakit.compiler.graph.ir import Graph, Node, TensorType
from vtakit.compiler.graph.op import (REQUIRED, Pattern, fold_node, get_op, infer_types, normalize_attrs,
                                      register_op, registered_ops, run_reference)
from vtakit.errors import GraphError


@pytest.fixture
def scratch_registry(monkeypatch):
    """Ops registered by a test go into a copy of the registry, so they never leak into other tests."""
    monkeypatch.setattr(op_registry, "_OPS", dict(op_registry._OPS))


def _graph() -> Graph:
    g = Graph([Node("Add", ["x", "c"], ["a"], name="add0"), Node("Relu", ["a"], ["y"], name="relu0")],
              ["x"], ["y"], constants={"c": np.arange(3, dtype=np.float32)})
    g.types = {"x": TensorType((2, 3), "float32"), "c": TensorType((3,), "float32"),
               "a": TensorType((2, 3), "float32"), "y": TensorType((2, 3), "float32")}
    return g


def test_tensor_type_normalises_and_rejects():
    ty = TensorType((np.int64(2), 3), np.float32)
    assert ty.shape == (2, 3) and ty.dtype == "float32" and ty.size == 6 and ty.nbytes == 24
    assert str(ty) == "float32[2x3]"
    with pytest.raises(GraphError, match="non-negative"):
        TensorType((2, -1), "float32")


def test_verify_accepts_a_well_formed_graph_and_prints_one_line_per_node():
    g = _graph().verify()
    text = str(g)
    assert "a: float32[2x3] = Add(x, c)" in text and "y: float32[2x3] = Relu(a)" in text
    assert text.count("\n") == len(g.nodes) + 1
    assert g.producers()["a"].name == "add0"
    assert [n.name for n in g.consumers()["a"]] == ["relu0"]


@pytest.mark.parametrize("mutate, message", [
    (lambda g: g.nodes.reverse(), "reads 'a'"),
    (lambda g: g.nodes.append(Node("Relu", ["x"], ["y"])), "written twice"),
    (lambda g: g.outputs.append("nowhere"), "never produced"),
    (lambda g: g.inputs.append("c"), "also a constant"),
    (lambda g: g.nodes.append(Node("Relu", ["x"], [""])), "unnamed output"),
    (lambda g: g.constants.__setitem__("c", np.zeros(4, np.float32)), "typed float32\\[3\\]"),
])
def test_verify_names_the_violation(mutate, message):
    g = _graph()
    mutate(g)
    with pytest.raises(GraphError, match=message):
        g.verify()


def test_copy_is_independent_of_the_original():
    g = _graph()
    h = g.copy()
    h.nodes.pop()
    h.nodes[0].name = "renamed"
    assert len(g.nodes) == 2 and g.nodes[0].name == "add0"


def test_normalize_attrs_fills_defaults_and_rejects_unknown_or_missing(scratch_registry):
    register_op("TestScale", pattern=Pattern.ELEMWISE, attrs={"factor": REQUIRED, "bias": 0.0},
                override=True)(lambda ins, attrs: (ins[0] * attrs["factor"] + attrs["bias"],))
    assert normalize_attrs("TestScale", {"factor": 2.0}) == {"factor": 2.0, "bias": 0.0}
    with pytest.raises(GraphError, match="missing required attribute 'factor'"):
        normalize_attrs("TestScale", {}, "n1")
    with pytest.raises(GraphError, match=r"unknown attribute\(s\) \['gain'\]"):
        normalize_attrs("TestScale", {"factor": 1.0, "gain": 3})
    with pytest.raises(GraphError, match="unknown graph operator 'NoSuchOp'"):
        get_op("NoSuchOp")
    with pytest.raises(GraphError, match="already registered"):
        register_op("TestScale", pattern=Pattern.ELEMWISE)(lambda ins, attrs: ins)


def test_reference_results_are_checked(scratch_registry):
    register_op("TestBroken", pattern=Pattern.OPAQUE, override=True)(lambda ins, attrs: ins[0])
    with pytest.raises(GraphError, match="expected a non-empty tuple"):
        run_reference(Node("TestBroken", ["x"], ["y"]), [np.zeros(2)])


def test_types_come_from_the_compute_and_constants_fold():
    node = Node("Add", ["x", "c"], ["a"])
    types = [TensorType((4, 1, 3), "float32"), TensorType((5, 1), "float32")]
    assert infer_types(node, types, [None, np.zeros((5, 1), np.float32)]) == [TensorType((4, 5, 3), "float32")]
    assert fold_node(node, types, [None, np.zeros((5, 1), np.float32)]) is None
    a, b = np.ones((2, 1), np.float32), np.arange(3, dtype=np.float32)
    (folded,) = fold_node(node, [TensorType((2, 1), "float32"), TensorType((3,), "float32")], [a, b])
    np.testing.assert_array_equal(folded, a + b)


def test_shape_folds_from_types_alone():
    node = Node("Shape", ["x"], ["s"], {"start": 1, "end": -1})
    (value,) = fold_node(node, [TensorType((2, 3, 5, 7), "float32")], [None])
    assert value.dtype == np.int64 and value.tolist() == [3, 5]


def test_every_registered_op_documents_its_reference():
    missing = [name for name, op in registered_ops().items() if not op.doc]
    assert not missing, f"ops without a docstring on their reference: {missing}"
