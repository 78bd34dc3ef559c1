"""Indexing, rearranging and selecting operators (GatherElements, Trilu, DepthToSpace, SpaceToDepth, Einsum, TopK)
against onnxruntime, exactly where they move elements, on shapes beyond onnx's node tests: random shapes and
indices, negative axes and indices, int and float types, every mode; bad attributes are errors naming the value."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.graph.onnx_cases import Case, check, model_of, rand
from vtakit import graph as vg
from vtakit.errors import GraphError

I64 = np.int64


# ---------------------------------------------------------------------------- GatherElements
@pytest.mark.parametrize("axis", [0, 1, -1, -3])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_gather_elements_equals_onnxruntime(axis, dtype):
    data = rand(4, 5, 6, seed=1, low=0, high=100).astype(dtype)
    n = data.shape[axis]
    ishape = list(data.shape)
    ishape[axis] = 3  # indices may be shorter than data along the axis
    idx = np.random.default_rng(2).integers(-n, n, ishape).astype(I64)
    check(Case("GatherElements", {"x": data, "i": idx}, {"axis": axis}, opset=13))
    check(Case("GatherElements", {"x": data, "i": idx.astype(np.int32)}, {"axis": axis}, weights=("i",), opset=11))


def test_gather_elements_bad_axis_and_indices():
    data, idx = rand(3, 4), np.zeros((3, 4), I64)
    with pytest.raises(GraphError, match=r"GatherElements: axis 2 is out of range for rank 2 \(expected -2..1\)"):
        vg.from_onnx(model_of(Case("GatherElements", {"x": data, "i": idx}, {"axis": 2}, opset=13)))
    with pytest.raises(GraphError, match=r"indices -5..-5 are out of range for an axis of 3"):
        bad = np.full((3, 4), -5, I64)
        vg.evaluate(vg.from_onnx(model_of(Case("GatherElements", {"x": data, "i": bad}, opset=13))),
                    {"x": data, "i": bad})


# ---------------------------------------------------------------------------- Trilu
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -2, 0, 3, 9])
@pytest.mark.parametrize("shape, dtype", [((5, 7), np.float32), ((2, 6, 4), np.int32), ((3, 1, 4, 4), np.int64)])
def test_trilu_equals_onnxruntime(upper, k, shape, dtype):
    x = rand(*shape, seed=3, low=-9, high=9).astype(dtype)
    inputs = {"x": x} if k is None else {"x": x, "k": np.array(k, I64)}
    check(Case("Trilu", inputs, {"upper": upper}, weights=("k",), opset=14))


def test_trilu_needs_rank_two_and_a_constant_k():
    with pytest.raises(GraphError, match="Trilu: input of rank 1; expected rank 2 or more"):
        vg.from_onnx(model_of(Case("Trilu", {"x": rand(5)}, opset=14)))
    with pytest.raises(GraphError, match="must be a constant"):
        vg.from_onnx(model_of(Case("Trilu", {"x": rand(3, 3), "k": np.array(1, I64)}, opset=14)))


# ---------------------------------------------------------------------------- DepthToSpace / SpaceToDepth
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("shape, b", [((1, 8, 3, 5), 2), ((2, 18, 2, 3), 3), ((1, 4, 1, 1), 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_depth_to_space_equals_onnxruntime(mode, shape, b, dtype):
    check(Case("DepthToSpace", {"x": rand(*shape, seed=4, low=-100, high=100).astype(dtype)},
               {"blocksize": b, "mode": mode}, opset=13))


def test_depth_to_space_before_opset_11_is_dcr():
    check(Case("DepthToSpace", {"x": rand(1, 12, 2, 3, seed=5)}, {"blocksize": 2}, opset=9))


@pytest.mark.parametrize("shape, b", [((1, 3, 4, 6), 2), ((2, 2, 9, 3), 3), ((1, 5, 2, 2), 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_space_to_depth_equals_onnxruntime_and_depth_to_space_inverts_it(shape, b, dtype):
    x = rand(*shape, seed=6, low=-100, high=100).astype(dtype)
    if dtype == np.float32:
        check(Case("SpaceToDepth", {"x": x}, {"blocksize": b}, opset=13))
    else:  # onnxruntime has no int32 SpaceToDepth: its float64 result (exact for these integers), cast back
        model = model_of(Case("SpaceToDepth", {"x": x.astype(np.float64)}, {"blocksize": b}, opset=13))
        (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x.astype(np.float64)})
        check(Case("SpaceToDepth", {"x": x}, {"blocksize": b}, opset=13), want=[want.astype(dtype)])
    g = vg.from_onnx(model_of(Case("SpaceToDepth", {"x": x}, {"blocksize": b}, opset=13)))
    packed = vg.build(g).run({"x": x})[0]
    back = vg.from_onnx(model_of(Case("DepthToSpace", {"x": packed}, {"blocksize": b, "mode": "DCR"}, opset=13)))
    np.testing.assert_array_equal(vg.build(back).run({"x": packed})[0], x)


def test_depth_to_space_bad_attributes_name_the_value():
    x = rand(1, 8, 2, 2)
    with pytest.raises(GraphError, match=r"DepthToSpace: mode 'RDC'; expected one of \['DCR', 'CRD'\]"):
        vg.from_onnx(model_of(Case("DepthToSpace", {"x": x}, {"blocksize": 2, "mode": "RDC"}, opset=13)))
    with pytest.raises(GraphError, match="8 channels are not a multiple of blocksize\\^2 = 9"):
        vg.from_onnx(model_of(Case("DepthToSpace", {"x": x}, {"blocksize": 3}, opset=13)))
    with pytest.raises(GraphError, match="height 2 and width 2 must be multiples of blocksize 3"):
        vg.from_onnx(model_of(Case("SpaceToDepth", {"x": x}, {"blocksize": 3}, opset=13)))
    with pytest.raises(GraphError, match="missing required attribute 'blocksize'"):
        vg.from_onnx(model_of(Case("SpaceToDepth", {"x": x}, opset=13)))


# ---------------------------------------------------------------------------- Einsum (rewritten to MatMul etc.)
EINSUM_CASES = {
    "attention_scores": ("bhid,bhjd->bhij", [(2, 3, 5, 4), (2, 3, 6, 4)]),
    "attention_context": ("bhij,bhjd->bhid", [(2, 3, 5, 6), (2, 3, 6, 4)]),
    "linear": ("bsd,df->bsf", [(2, 5, 8), (8, 3)]),
    "batch_broadcast_ellipsis": ("...ij,...jk->...ik", [(2, 1, 3, 4), (2, 5, 4, 2)]),
    "outer": ("i,j->ij", [(4,), (3,)]),
    "inner_implicit": ("i,i", [(7,)] * 2),
    "transpose_implicit": ("ji", [(3, 5)]),
    "sum_all": ("ij->", [(3, 4)]),
    "trace": ("ii", [(5, 5)]),
    "batch_diagonal": ("...ii->...i", [(2, 3, 4, 4)]),
    "bilinear_three_operands": ("bi,ij,bj->b", [(4, 3), (3, 5), (4, 5)]),
    "summed_free_letter": ("ij,jk->i", [(3, 4), (4, 5)]),
    "upper_case_letters": ("bN,NM->Mb", [(2, 3), (3, 4)]),
}


@pytest.mark.parametrize("name", sorted(EINSUM_CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_einsum_equals_onnxruntime(name, dtype):
    equation, shapes = EINSUM_CASES[name]
    inputs = {f"x{i}": rand(*s, seed=7 + i, low=-5, high=5).astype(dtype) for i, s in enumerate(shapes)}
    g = check(Case("Einsum", inputs, {"equation": equation}, opset=12), rtol=1e-5, atol=1e-5)
    assert "Einsum" not in {node.op for node in g.nodes}


def test_einsum_bad_equations_name_the_problem():
    x = rand(3, 4)
    with pytest.raises(GraphError, match=r"term 'ijk' of equation 'ijk->i' names 3 axes for an input of rank 2"):
        vg.from_onnx(model_of(Case("Einsum", {"x": x}, {"equation": "ijk->i"}, opset=12)))
    with pytest.raises(GraphError, match=r"equation 'ij,jk->ik' has 2 operands, the node has 1 inputs"):
        vg.from_onnx(model_of(Case("Einsum", {"x": x}, {"equation": "ij,jk->ik"}, opset=12)))
    with pytest.raises(GraphError, match=r"output 'iz' of equation 'ij->iz' names letters \['z'\]"):
        vg.from_onnx(model_of(Case("Einsum", {"x": x}, {"equation": "ij->iz"}, opset=12)))
    with pytest.raises(GraphError, match=r"letter 'i' labels axes of sizes 3 and 4"):
        vg.from_onnx(model_of(Case("Einsum", {"x": x}, {"equation": "ii->i"}, opset=12)))


# ---------------------------------------------------------------------------- TopK
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis, k", [(-1, 3), (1, 5), (0, 1), (2, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_topk_equals_onnxruntime_with_ties_in_index_order(largest, axis, k, dtype):
    # few distinct values: ties are common, and onnxruntime lists equal values by index
    x = rand(4, 7, 6, seed=9, low=-3, high=3).astype(dtype)
    check(Case("TopK", {"x": x, "k": np.array([k], I64)}, {"axis": axis, "largest": largest}, weights=("k",),
               opset=11, outputs=2))


def test_topk_of_opsets_1_and_10():
    x = rand(3, 9, seed=10)
    check(Case("TopK", {"x": x}, {"k": 4}, opset=9, outputs=2))
    check(Case("TopK", {"x": x, "k": np.array([2], I64)}, {"axis": 0}, weights=("k",), opset=10, outputs=2))


def test_topk_bad_k_and_axis_name_the_value():
    x = rand(3, 4)
    with pytest.raises(GraphError, match=r"TopK: K = 5 for an axis of 4; expected 0..4"):
        vg.from_onnx(model_of(Case("TopK", {"x": x, "k": np.array([5], I64)}, weights=("k",), opset=11, outputs=2)))
    with pytest.raises(GraphError, match=r"TopK: axis 2 is out of range for an input of rank 2"):
        vg.from_onnx(model_of(Case("TopK", {"x": x, "k": np.array([1], I64)}, {"axis": 2}, weights=("k",),
                                   opset=11, outputs=2)))
    with pytest.raises(GraphError, match="must be a constant"):
        vg.from_onnx(model_of(Case("TopK", {"x": x, "k": np.array([1], I64)}, opset=11, outputs=2)))


def test_topk_unsorted_gives_onnxruntimes_elements_sorted():
    x = rand(3, 9, seed=11)
    case = Case("TopK", {"x": x, "k": np.array([4], I64)}, {"sorted": 0}, weights=("k",), opset=11, outputs=2)
    model = model_of(case)
    _, want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    values, indices = vg.build(vg.from_onnx(model)).run({"x": x})
    np.testing.assert_array_equal(np.sort(indices, axis=1), np.sort(want, axis=1))
    np.testing.assert_array_equal(values, np.take_along_axis(x, indices, axis=1))
    assert np.all(np.diff(values, axis=1) <= 0)
