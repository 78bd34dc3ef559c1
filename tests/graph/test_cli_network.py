"""``vtakit compile`` and ``vtakit run``: a small ONNX model compiled, saved, run from files, and the
errors a user can make (bad shapes, bad files, wrong inputs) as one-line messages with no partial output."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from vtakit.cli import main


@pytest.fixture
def model_path(tmp_path):
    """y/probs = relu(x:0 @ W^T + b) + shift, with a symbolic batch dim on x:0."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((5, 8)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")
    nodes = [helper.make_node("Gemm", ["x:0", "W", "b"], ["g"], transB=1),
             helper.make_node("Relu", ["g"], ["r"]),
             helper.make_node("Add", ["r", "shift"], ["y/probs"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x:0", TensorProto.FLOAT, ["N", 8]),
                                              helper.make_tensor_value_info("shift", TensorProto.FLOAT, [5])],
                              [helper.make_tensor_value_info("y/probs", TensorProto.FLOAT, ["N", 5])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    return path


def _expected(model_path, x, shift):
    model = onnx.load(model_path)
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    return np.maximum(x @ w.T + b, 0) + shift


def test_compile_then_run_from_an_npz(tmp_path, model_path, capsys):
    pkg = tmp_path / "tiny.vtapkg"
    assert main(["compile", str(model_path), "--input-shape", "x:0:3x8", "-o", str(pkg), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"][0] == {"name": "x:0", "shape": [3, 8], "dtype": "float32"}
    assert summary["outputs"] == ["y/probs"] and pkg.is_file()
    rng = np.random.default_rng(0)
    x, shift = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    np.savez(tmp_path / "in.npz", **{"x:0": x, "shift": shift})
    out = tmp_path / "out.npz"
    assert main(["run", str(pkg), "--input", str(tmp_path / "in.npz"), "-o", str(out), "--print-top", "2",
                 "--repeat", "3", "--profile"]) == 0
    text = capsys.readouterr().out
    assert "y/probs: float32[3x5]" in text and "row 2 top 2:" in text and "median latency" in text
    assert "layer" in text and "kernels" in text
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["y/probs"], _expected(model_path, x, shift), rtol=1e-5, atol=1e-5)


def test_run_an_onnx_model_directly_with_filled_inputs_as_json(model_path, capsys):
    assert main(["run", str(model_path), "--input-shape", "x:0:2x8", "--fill-mode", "ones", "--print-top", "1",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    out = report["outputs"][0]
    want = _expected(model_path, np.ones((2, 8), np.float32), np.ones(5, np.float32))
    assert out["shape"] == [2, 5] and out["top"][0][0][0] == int(np.argmax(want[0]))
    assert out["top"][0][0][1] == pytest.approx(float(want[0].max()), rel=1e-5)


@pytest.mark.parametrize("extra, message", [
    (["--input-shape", "x:0:3x8", "--input", "{npy}"], "holds one array, but the model takes 2 inputs"),
    (["--input-shape", "x:0:3x8", "--input", "{bad_npz}"], "input 'shift' is missing"),
    (["--input-shape", "x:0:3x8", "--input", "{garbage}"], "is not an .npz or .npy file"),
    (["--input-shape", "y:3x8"], "input_shapes names \\['y'\\]"),
    ([], "symbolic dim 'N'"),
])
def test_run_errors_are_one_line_and_write_nothing(tmp_path, model_path, capsys, extra, message):
    files = {"npy": tmp_path / "x.npy", "bad_npz": tmp_path / "bad.npz", "garbage": tmp_path / "garbage.npz"}
    np.save(files["npy"], np.zeros((3, 8), np.float32))
    np.savez(files["bad_npz"], **{"x:0": np.zeros((3, 8), np.float32)})
    files["garbage"].write_bytes(b"not numpy at all")
    out = tmp_path / "out.npz"
    argv = ["run", str(model_path), "-o", str(out)] + [a.format(**files) for a in extra]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("vtakit: error:") and err.count("\n") == 1 and re.search(message, err)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


@pytest.mark.parametrize("shape", ["x0", "x:0:", "x:0:3xb", ":3x8", "x:0:3x-1"])
def test_malformed_input_shape_is_a_usage_error(model_path, capsys, shape):
    with pytest.raises(SystemExit) as exc:
        main(["compile", str(model_path), "--input-shape", shape])
    assert exc.value.code == 2 and "invalid input shape" in capsys.readouterr().err


def test_run_a_corrupt_package(tmp_path, capsys):
    bad = tmp_path / "bad.vtapkg"
    bad.write_bytes(b"PK\x03\x04 truncated")
    assert main(["run", str(bad)]) == 1
    assert "not a vtakit network module" in capsys.readouterr().err
