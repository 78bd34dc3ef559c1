"""The ONNX frontend: loading (files, protos, external data), input typing, the converter registry, the
errors a user can reach, and specialising on input values."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import vtakit.graph as vg
from vtakit.compiler.graph.frontend import registry
from vtakit.compiler.graph.frontend.registry import SUPPORTED_DTYPES, find_converter, onnx_dtype
from vtakit.errors import GraphError, UnsupportedOperatorError


def _vi(name, shape=(2, 3), elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=None):
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(initializers)),
                              opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        model.ir_version = ir_version
    return model


def _weights_model():
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add0")], [_vi("x")], [_vi("y")], [w])


# -- loading ------------------------------------------------------------------------------------------
def test_a_path_and_a_proto_give_the_same_graph(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_weights_model(), path)
    for source in (path, str(path), _weights_model()):
        g = vg.from_onnx(source)
        assert g.inputs == ["x"] and g.outputs == ["y"] and [n.op for n in g.nodes] == ["Add"]
        np.testing.assert_array_equal(g.constants["w"], np.arange(6, dtype=np.float32).reshape(2, 3))


def test_external_data_is_found_next_to_the_file_or_in_base_dir(tmp_path):
    model = _weights_model()
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").is_file()
    g = vg.from_onnx(tmp_path / "m.onnx")
    np.testing.assert_array_equal(g.constants["w"], np.arange(6, dtype=np.float32).reshape(2, 3))
    proto = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    g = vg.from_onnx(proto, base_dir=tmp_path)
    np.testing.assert_array_equal(g.constants["w"], np.arange(6, dtype=np.float32).reshape(2, 3))


def test_a_missing_external_data_file_is_a_graph_error(tmp_path):
    onnx.save(_weights_model(), tmp_path / "m.onnx", save_as_external_data=True, location="weights.bin",
              size_threshold=0)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(GraphError, match="external data"):
        vg.from_onnx(tmp_path / "m.onnx")
    proto = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    with pytest.raises(GraphError, match="external data"):
        vg.from_onnx(proto, base_dir=tmp_path)


def test_a_missing_truncated_or_foreign_file_is_a_graph_error(tmp_path):
    with pytest.raises(GraphError, match="does not exist"):
        vg.from_onnx(tmp_path / "nope.onnx")
    data = _weights_model().SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[:len(data) // 2])
    with pytest.raises(GraphError, match="cut.onnx"):
        vg.from_onnx(tmp_path / "cut.onnx")
    np.save(tmp_path / "x.npy", np.zeros(4))
    with pytest.raises(GraphError, match="x.npy"):
        vg.from_onnx(tmp_path / "x.npy")
    (tmp_path / "t.onnx").write_text("just some text, not a protobuf\n")
    with pytest.raises(GraphError, match="t.onnx"):
        vg.from_onnx(tmp_path / "t.onnx")
    with pytest.raises(GraphError, match="path or an onnx.ModelProto"):
        vg.from_onnx(42)


def test_an_opset_outside_the_supported_range_is_refused():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x")], [_vi("y")], opset=6)
    with pytest.raises(GraphError, match="opset 6.*7 to 27"):
        vg.from_onnx(model)


# -- inputs ---------------------------------------------------------------------------------------------
def test_initializers_listed_as_inputs_are_constants():
    model = _weights_model()
    model.graph.input.append(_vi("w"))
    g = vg.from_onnx(model)
    assert g.inputs == ["x"] and "w" in g.constants


def test_a_symbolic_dim_must_be_fixed_by_input_shapes():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ("batch", 3))], [_vi("y", ("batch", 3))])
    with pytest.raises(GraphError, match=r"'x' has a symbolic dim 'batch' at axis 0"):
        vg.from_onnx(model)
    g = vg.from_onnx(model, input_shapes={"x": (4, 3)})
    assert g.type_of("y").shape == (4, 3)
    with pytest.raises(GraphError, match="does not match the model's declared shape"):
        vg.from_onnx(model, input_shapes={"x": (4, 5)})
    with pytest.raises(GraphError, match=r"names \['z'\]"):
        vg.from_onnx(model, input_shapes={"z": (1,)})
    unshaped = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", None)], [_vi("y", None)])
    with pytest.raises(GraphError, match="'x' has no shape"):
        vg.from_onnx(unshaped)


@pytest.mark.parametrize("elem", [TensorProto.BFLOAT16, TensorProto.STRING, TensorProto.FLOAT8E4M3FN,
                                  TensorProto.INT4, TensorProto.COMPLEX64])
def test_unsupported_element_types_are_named(elem):
    model = _model([helper.make_node("Identity", ["x"], ["y"])], [_vi("x", elem=elem)], [_vi("y", elem=elem)])
    with pytest.raises(UnsupportedOperatorError, match=TensorProto.DataType.Name(elem)):
        vg.from_onnx(model)


def test_onnx_dtype_maps_every_supported_type():
    expected = {TensorProto.BOOL: "bool", TensorProto.INT8: "int8", TensorProto.INT16: "int16",
                TensorProto.INT32: "int32", TensorProto.INT64: "int64", TensorProto.UINT8: "uint8",
                TensorProto.UINT16: "uint16", TensorProto.UINT32: "uint32", TensorProto.UINT64: "uint64",
                TensorProto.FLOAT16: "float16", TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64"}
    assert {onnx_dtype(t, "x") for t in expected} == set(SUPPORTED_DTYPES)
    assert all(onnx_dtype(t, "x") == name for t, name in expected.items())
    with pytest.raises(UnsupportedOperatorError, match="value 'v' has ONNX element type UNDEFINED"):
        onnx_dtype(TensorProto.UNDEFINED, "value 'v'")


# -- operators ------------------------------------------------------------------------------------------
def test_every_unsupported_operator_is_listed_at_once():
    nodes = [helper.make_node("FancyOp", ["x"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("OtherOp", ["b"], ["c"], name="second", domain="com.example"),
             helper.make_node("FancyOp", ["c"], ["y"], name="third")]
    model = _model(nodes, [_vi("x")], [_vi("y")])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(UnsupportedOperatorError) as info:
        vg.from_onnx(model)
    text = str(info.value)
    assert "3 unsupported" in text
    for part in ("ai.onnx::FancyOp (node 'first')", "com.example::OtherOp (node 'second')",
                 "ai.onnx::FancyOp (node 'third')", "Supported operators:", "Relu", "Reshape"):
        assert part in text


def test_the_newest_converter_at_or_below_the_model_opset_is_used():
    assert find_converter("Clip", "", 10) is not find_converter("Clip", "", 11)
    assert find_converter("Clip", "", 13) is find_converter("Clip", "", 11)
    assert find_converter("Squeeze", "", 12) is not find_converter("Squeeze", "", 13)
    assert find_converter("HardSwish", "", 13) is None and find_converter("HardSwish", "", 14) is not None
    assert find_converter("Relu", "ai.onnx", 9) is find_converter("Relu", "", 9)
    with pytest.raises(GraphError, match="already registered"):
        registry.converter("Relu", since=6)(lambda ctx, node: None)


def test_an_operator_newer_than_the_model_opset_is_unsupported():
    model = _model([helper.make_node("HardSwish", ["x"], ["y"])], [_vi("x")], [_vi("y")], opset=13)
    with pytest.raises(UnsupportedOperatorError, match="HardSwish"):
        vg.from_onnx(model)


def test_a_converter_error_names_the_node():
    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")
    s = numpy_helper.from_array(np.array([4, 4], np.int64), "s")
    with pytest.raises(GraphError, match="bad_reshape.*does not hold the 6 elements"):
        vg.from_onnx(_model([node], [_vi("x")], [_vi("y", None)], [s]))


def test_folding_follows_shape_chains_while_importing():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape becomes one Reshape with a constant shape."""
    c = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v, np.int64)))  # noqa: E731
    nodes = [helper.make_node("Shape", ["x"], ["sh"]), c("zero", 0), c("minus1", [-1]), c("ax", [0]),
             helper.make_node("Gather", ["sh", "zero"], ["n"]), helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    g = vg.from_onnx(_model(nodes, [_vi("x", (2, 3, 4))], [_vi("y", None)]))
    assert [n.op for n in g.nodes] == ["Reshape"]
    np.testing.assert_array_equal(g.constants[g.nodes[0].inputs[1]], [2, -1])
    assert g.type_of("y").shape == (2, 12)


# -- specialising on input values ----------------------------------------------------------------------
def _crop_model():
    """Pads computed from a run-time shape input: Max/Sub/Div/Concat before a Pad, as CenterCropPad expands."""
    two = numpy_helper.from_array(np.array([2], np.int64), "two")
    nodes = [helper.make_node("Shape", ["x"], ["xs"]), helper.make_node("Max", ["xs", "shape"], ["big"]),
             helper.make_node("Sub", ["big", "xs"], ["grow"]), helper.make_node("Div", ["grow", "two"], ["left"]),
             helper.make_node("Sub", ["grow", "left"], ["right"]),
             helper.make_node("Concat", ["left", "right"], ["pads"], axis=0),
             helper.make_node("Pad", ["x", "pads"], ["y"]), helper.make_node("Relu", ["x"], ["r"])]
    return _model(nodes, [_vi("x", (2, 3)), _vi("shape", (2,), TensorProto.INT64)], [_vi("y", None), _vi("r")], [two])


def test_input_values_make_the_inputs_a_compile_time_value_depends_on_constants():
    model = _crop_model()
    with pytest.raises(GraphError, match="must be a constant known at compile time"):
        vg.from_onnx(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = vg.from_onnx(model, input_values={"x": x, "shape": np.array([4, 4])})
    assert g.inputs == ["x"] and "shape" in g.constants   # x is only read at run time: it stays an input
    assert g.type_of("y").shape == (4, 4)
    out = vg.evaluate(g, {"x": x})
    np.testing.assert_array_equal(out["y"], np.pad(x, [(1, 1), (0, 1)]))


def test_input_values_are_checked():
    model = _crop_model()
    with pytest.raises(GraphError, match=r"input_values names \['nope'\]"):
        vg.from_onnx(model, input_values={"nope": np.zeros(1)})
    with pytest.raises(GraphError, match=r"input_values\['shape'\] is int32\[2\], but the input is int64\[2\]"):
        vg.from_onnx(model, input_values={"shape": np.array([4, 4], np.int32)})
