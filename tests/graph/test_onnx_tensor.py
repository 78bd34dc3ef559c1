"""Tensor operators (casts, Dropout, shapes, joins and splits, Pad, Slice, Gather, Expand, Tile, constants)
against onnxruntime, in every attribute and input form of opsets 7 to 27, through the importer, the numpy
references and the compiled CPU kernels; and the errors their bad attributes give."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tests.graph.onnx_cases import Case, check, model_of, rand
from vtakit import graph as vg
from vtakit.errors import GraphError, UnsupportedOperatorError

I64 = np.int64


def ints(*v):
    return np.array(v, I64)


# -- casts, copies, inference-only ops --------------------------------------------------------------------
@pytest.mark.parametrize("src, dst", [
    (np.float32, TensorProto.INT32), (np.float32, TensorProto.INT8), (np.float32, TensorProto.BOOL),
    (np.float32, TensorProto.FLOAT16), (np.float32, TensorProto.DOUBLE), (np.float64, TensorProto.FLOAT16),
    (np.float16, TensorProto.FLOAT), (np.bool_, TensorProto.FLOAT), (np.int64, TensorProto.FLOAT16),
    (np.int32, TensorProto.INT64), (np.uint8, TensorProto.FLOAT), (np.int64, TensorProto.BOOL),
])
def test_cast(src, dst):
    x = rand(3, 9, low=-50, high=50) if src != np.bool_ else rand(3, 9) > 0
    x = x.astype(src) if src != np.uint8 else np.abs(x).astype(src)
    check(Case("Cast", {"x": x}, {"to": dst}, opset=13))


def test_cast_19_accepts_saturate_and_cast_like_takes_the_second_input_type():
    check(Case("Cast", {"x": rand(2, 3)}, {"to": TensorProto.INT16, "saturate": 1}, opset=19))
    check(Case("CastLike", {"x": rand(2, 3, low=-9, high=9), "like": np.zeros(1, np.int32)}, weights=("like",),
               opset=15))


def test_cast_to_an_unsupported_type_names_it():
    with pytest.raises(UnsupportedOperatorError, match="BFLOAT16"):
        vg.from_onnx(model_of(Case("Cast", {"x": rand(2, 2)}, {"to": TensorProto.BFLOAT16}, opset=13)))


def test_identity():
    check(Case("Identity", {"x": rand(2, 3, 4, dtype=np.int64)}))


@pytest.mark.parametrize("opset, outputs", [(7, 1), (7, 2), (10, 2), (12, 2), (13, 1)])
def test_dropout_in_inference_is_identity_with_a_constant_mask(opset, outputs):
    attrs = {"ratio": 0.3} if opset < 12 else {}
    check(Case("Dropout", {"x": rand(3, 5)}, attrs, opset=opset, outputs=outputs))


def test_dropout_12_inputs():
    x = rand(3, 5)
    check(Case("Dropout", {"x": x, "r": np.array(0.4, np.float32), "t": np.array(False)}, weights=("r", "t"),
               outputs=2, opset=13))
    check(Case("Dropout", {"x": x, "r": np.array(0.0, np.float32), "t": np.array(True)}, weights=("r", "t"),
               outputs=2, opset=13), want=[x, np.ones(x.shape, bool)])
    with pytest.raises(UnsupportedOperatorError, match="training-mode Dropout"):
        vg.from_onnx(model_of(Case("Dropout", {"x": x, "r": np.array(0.5, np.float32), "t": np.array(True)},
                                   weights=("r", "t"), opset=13)))
    with pytest.raises(GraphError, match="training_mode.*must be a constant"):
        vg.from_onnx(model_of(Case("Dropout", {"x": x, "r": np.array(0.5, np.float32), "t": np.array(True)},
                                   weights=("r",), opset=13)))


# -- shapes --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(axis):
    check(Case("Flatten", {"x": rand(2, 3, 4)}, {"axis": axis}, opset=13 if axis < 0 else 9)
          if axis != 3 else Case("Flatten", {"x": rand(2, 3, 4)}, {"axis": axis}, opset=13))


@pytest.mark.parametrize("shape, allowzero", [((4, 6), 0), ((0, -1), 0), ((-1,), 0), ((2, 0, -1), 0), ((3, 8), 1),
                                              ((24,), 1)])
def test_reshape(shape, allowzero):
    attrs = {"allowzero": allowzero} if allowzero else {}
    check(Case("Reshape", {"x": rand(2, 3, 4), "s": ints(*shape)}, attrs, weights=("s",), opset=14))


def test_reshape_allowzero_keeps_a_zero_dim():
    check(Case("Reshape", {"x": rand(0, 3), "s": ints(3, 0)}, {"allowzero": 1}, weights=("s",), opset=14))


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes", [None, (1,), (-1, 1)])
def test_squeeze(opset, axes):
    x = rand(2, 1, 3, 1)
    if axes is None:
        check(Case("Squeeze", {"x": x}, opset=opset))
    elif opset < 13:
        check(Case("Squeeze", {"x": x}, {"axes": list(axes)}, opset=opset))
    else:
        check(Case("Squeeze", {"x": x, "a": ints(*axes)}, weights=("a",), opset=opset))


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes", [(0,), (1, -1), (3, 0)])
def test_unsqueeze(opset, axes):
    x = rand(2, 3)
    if opset < 13:
        check(Case("Unsqueeze", {"x": x}, {"axes": list(axes)}, opset=opset))
    else:
        check(Case("Unsqueeze", {"x": x, "a": ints(*axes)}, weights=("a",), opset=opset))


@pytest.mark.parametrize("shape", [(2, 3, 4), (3, 1), (1,)])
def test_expand(shape):
    check(Case("Expand", {"x": rand(3, 1), "s": ints(*shape)}, weights=("s",), opset=13))


# -- joins and splits -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    shapes = {0: [(1, 3, 2), (2, 3, 2), (3, 3, 2)], 1: [(2, 1, 2), (2, 4, 2), (2, 2, 2)],
              -1: [(2, 3, 1), (2, 3, 3), (2, 3, 2)]}[axis]
    check(Case("Concat", {f"x{i}": rand(*s, seed=i) for i, s in enumerate(shapes)}, {"axis": axis}))


def test_concat_leaves_out_empty_inputs():
    check(Case("Concat", {"a": rand(2, 3), "e": np.zeros((2, 0), np.float32), "b": rand(2, 1, seed=2)}, {"axis": 1}))


@pytest.mark.parametrize("case", [
    Case("Split", {"x": rand(6, 4)}, {"axis": 0}, opset=11, outputs=3),
    Case("Split", {"x": rand(6, 4)}, {"axis": 0, "split": [1, 5]}, opset=11, outputs=2),
    Case("Split", {"x": rand(3, 7)}, {"axis": -1}, opset=13, outputs=1),
    Case("Split", {"x": rand(3, 7), "s": ints(2, 0, 5)}, {"axis": 1}, weights=("s",), opset=13, outputs=3),
    Case("Split", {"x": rand(7, 2)}, {"num_outputs": 3}, opset=18, outputs=3),
    Case("Split", {"x": rand(2, 8)}, {"axis": 1, "num_outputs": 4}, opset=18, outputs=4),
], ids=str)
def test_split(case):
    check(case)


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1], [1, 0, 2]])
def test_transpose(perm):
    check(Case("Transpose", {"x": rand(2, 3, 4)}, {} if perm is None else {"perm": perm}))


# -- Pad -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_2_attribute_form(mode):
    attrs = {"pads": [0, 1, 2, 1, 0, 2], "mode": mode}
    if mode == "constant":
        attrs["value"] = 1.5
    check(Case("Pad", {"x": rand(2, 3, 4)}, attrs, opset=10))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", [(0, 1, 2, 1, 0, 2), (1, 0, 0, 0, 2, 3), (0, -1, 1, 1, 1, -2)])
def test_pad_11_input_form(mode, pads):
    inputs = {"x": rand(2, 3, 4, dtype=np.int32), "p": ints(*pads)}
    if mode == "constant":
        inputs["v"] = np.array(-7, np.int32)
    check(Case("Pad", inputs, {"mode": mode}, weights=("p", "v"), opset=13))


def test_pad_18_axes_input():
    check(Case("Pad", {"x": rand(2, 3, 4), "p": ints(1, 2, 0, 1), "v": None, "a": ints(-1, 0)},
               {"mode": "constant"}, weights=("p", "a"), opset=18))


def test_pad_wrap_is_unsupported():
    case = Case("Pad", {"x": rand(2, 3), "p": ints(0, 1, 0, 1)}, {"mode": "wrap"}, weights=("p",), opset=19)
    with pytest.raises(UnsupportedOperatorError, match="'wrap'.*constant.*reflect.*edge"):
        vg.from_onnx(model_of(case))


# -- Slice, Gather, Tile -----------------------------------------------------------------------------------------
def test_slice_1_attribute_form():
    check(Case("Slice", {"x": rand(4, 5, 6)}, {"starts": [1, -4], "ends": [3, 1000], "axes": [0, 2]}, opset=9))
    check(Case("Slice", {"x": rand(4, 5)}, {"starts": [1, 0], "ends": [-1, 3]}, opset=9))


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ((1, 0), (3, 5), None, None), ((0,), (-1,), (1,), None), ((3, -1), (0, -1000), (0, 1), (-1, -2)),
    ((-100,), (100,), (-1,), (3,)), ((2,), (1,), (0,), (1,)), ((10,), (0,), (2,), (-4,)),
])
def test_slice_10_input_form(starts, ends, axes, steps):
    inputs = {"x": rand(4, 5, 6), "s": ints(*starts), "e": ints(*ends),
              "a": None if axes is None else ints(*axes), "t": None if steps is None else ints(*steps)}
    if steps is None:
        inputs.pop("t")
        if axes is None:
            inputs.pop("a")
    check(Case("Slice", inputs, weights=("s", "e", "a", "t"), opset=13))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_run_time_and_negative_indices(axis):
    idx = np.array([[0, -1], [2, 1]], I64)
    check(Case("Gather", {"x": rand(3, 4, 5), "i": idx}, {"axis": axis}))
    check(Case("Gather", {"x": rand(3, 4, 5), "i": np.array(-2, np.int32)}, {"axis": axis}, weights=("i",)))


def test_gather_with_an_out_of_range_constant_index_is_a_graph_error():
    case = Case("Gather", {"x": rand(3, 4), "i": ints(3)}, weights=("x", "i"))
    with pytest.raises(GraphError, match="out of range"):
        vg.from_onnx(model_of(case))


@pytest.mark.parametrize("reps", [(1, 1), (2, 3), (3, 1)])
def test_tile(reps):
    check(Case("Tile", {"x": rand(2, 3, dtype=np.int64), "r": ints(*reps)}, weights=("r",)))


# -- constants and shapes of values --------------------------------------------------------------------------------
def _constant_model(**attrs):
    node = helper.make_node("Constant", [], ["c"], **attrs)
    add = helper.make_node("Identity", ["c"], ["y"])
    return helper.make_model(helper.make_graph([node, add], "g", [], [helper.make_empty_tensor_value_info("y")]),
                             opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("attrs, want", [
    ({"value": numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))},
     np.arange(6, dtype=np.float32).reshape(2, 3)),
    ({"value_float": 2.5}, np.array(2.5, np.float32)), ({"value_floats": [1.0, 2.0]}, np.array([1, 2], np.float32)),
    ({"value_int": 7}, np.array(7, I64)), ({"value_ints": [3, -1]}, ints(3, -1)),
    ({"sparse_value": helper.make_sparse_tensor(numpy_helper.from_array(np.array([5.0, 6.0], np.float32)),
                                                numpy_helper.from_array(ints(1, 4)), [2, 3])},
     np.array([[0, 5, 0], [0, 6, 0]], np.float32)),
])
def test_constant_forms(attrs, want):
    g = vg.from_onnx(_constant_model(**attrs))
    np.testing.assert_array_equal(g.constants["y"], want)
    assert g.constants["y"].dtype == want.dtype
    out = vg.build(g).run({})
    np.testing.assert_array_equal(out[0], want)


def test_string_constants_are_unsupported():
    with pytest.raises(UnsupportedOperatorError, match="value_string"):
        vg.from_onnx(_constant_model(value_string="hello"))


@pytest.mark.parametrize("value", [None, numpy_helper.from_array(np.array([3], np.int32)),
                                   numpy_helper.from_array(np.array([1.5], np.float64))])
def test_constant_of_shape(value):
    attrs = {} if value is None else {"value": value}
    check(Case("ConstantOfShape", {"s": ints(2, 0, 3) if value is None else ints(2, 3)}, attrs, weights=("s",)))


@pytest.mark.parametrize("attrs", [{}, {"start": 1}, {"end": -1}, {"start": -2, "end": 3}, {"start": 3, "end": 1}])
def test_shape_and_size_fold_to_constants(attrs):
    g = check(Case("Shape", {"x": rand(2, 3, 4, 5)}, attrs, opset=15))
    assert not g.nodes and "y0" in g.constants
    g = check(Case("Size", {"x": rand(2, 3, 4)}))
    assert not g.nodes and g.constants["y0"].shape == ()


@pytest.mark.parametrize("start, limit, delta", [(0, 10, 3), (10, 4, -2), (1.5, 4.0, 0.5), (3, 1, 1)])
def test_range_folds(start, limit, delta):
    dtype = np.float32 if isinstance(start, float) else np.int64
    scalars = {k: np.array(v, dtype) for k, v in zip("sld", (start, limit, delta))}
    g = check(Case("Range", scalars, weights=("s", "l", "d"), opset=11))
    assert not g.nodes


def test_range_with_a_zero_delta_is_a_graph_error():
    with pytest.raises(GraphError, match="delta is 0"):
        vg.from_onnx(model_of(Case("Range", {k: np.array(v, I64) for k, v in zip("sld", (0, 4, 0))},
                                   weights=("s", "l", "d"), opset=11)))


# -- errors --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case, message", [
    (Case("Reshape", {"x": rand(2, 3), "s": ints(-1, -1)}, weights=("s",)), "at most one -1"),
    (Case("Reshape", {"x": rand(2, 3), "s": ints(0, 0, 0)}, weights=("s",)), "copies dim 2"),
    (Case("Squeeze", {"x": rand(2, 3), "a": ints(0)}, weights=("a",)), r"axes \[0\] of shape \(2, 3\) are not 1"),
    (Case("Unsqueeze", {"x": rand(2, 3), "a": ints(1, 1)}, weights=("a",)), "repeat an axis"),
    (Case("Unsqueeze", {"x": rand(2, 3), "a": ints(5)}, weights=("a",)), "axis 5 is out of range"),
    (Case("Split", {"x": rand(6, 4), "s": ints(2, 2)}, weights=("s",), outputs=2), "do not add up"),
    (Case("Split", {"x": rand(6, 4)}, {"num_outputs": 2}, opset=18, outputs=3), "num_outputs=2"),
    (Case("Transpose", {"x": rand(2, 3)}, {"perm": [0, 0]}), "not a permutation"),
    (Case("Slice", {"x": rand(4, 5), "s": ints(0), "e": ints(2), "a": ints(0), "t": ints(0)},
          weights=("s", "e", "a", "t")), "step is 0"),
    (Case("Pad", {"x": rand(2, 3), "p": ints(1, 1, 1)}, weights=("p",)), "3 pads"),
    (Case("Tile", {"x": rand(2, 3), "r": ints(2)}, weights=("r",)), r"reps \[2\] must be one"),
    (Case("Expand", {"x": rand(2, 3), "s": ints(4, 3)}, weights=("s",)), "does not broadcast"),
    (Case("Concat", {"a": rand(2, 3), "b": rand(3, 3)}, {"axis": 1}), "differ outside axis 1"),
    (Case("Reshape", {"x": rand(2, 3), "s": ints(6)}), r"input 1 \('s'\) must be a constant"),
], ids=lambda v: v.op if isinstance(v, Case) else None)
def test_bad_attributes_and_shapes_are_graph_errors_naming_the_value(case, message):
    with pytest.raises(GraphError, match=message):
        vg.from_onnx(model_of(case))


# -- property: Slice's clamping rules against onnxruntime ------------------------------------------------------
@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(-9, 9), st.integers(-9, 9), st.sampled_from([-3, -2, -1, 1, 2, 3])),
                min_size=1, max_size=3),
       st.permutations([0, 1, 2]), st.booleans())
def test_slice_matches_onnxruntime_on_random_bounds(bounds, axes, negative_axes):
    starts, ends, steps = zip(*bounds)
    axes = [a - 3 if negative_axes else a for a in axes[:len(bounds)]]
    check(Case("Slice", {"x": rand(4, 5, 6), "s": ints(*starts), "e": ints(*ends), "a": ints(*axes),
                         "t": ints(*steps)}, weights=("s", "e", "a", "t"), opset=13))
