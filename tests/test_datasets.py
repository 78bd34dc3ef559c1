"""The packaged digits data (vtakit.datasets, written by scripts/train_digits.py): the files load with
the documented shapes, the float model reaches its accuracy through vtakit.graph and matches
onnxruntime, and the calibration images are not test images."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit import datasets
from vtakit.errors import GraphError, VtakitError


@pytest.fixture(scope="module")
def digits_test():
    return datasets.load_digits_test()


@pytest.fixture(scope="module")
def digits_logits(digits_test, tmp_path_factory):
    """The float model's logits for every test image, compiled with vtakit.graph for the CPU."""
    import vtakit.graph as vg

    x, _ = digits_test
    module = vg.build(vg.from_onnx(datasets.digits_model_path()), target="llvm",
                      cache_dir=tmp_path_factory.mktemp("kernels"))
    return np.concatenate([module.run({"input": x[i:i + 1]})[0] for i in range(len(x))])


def test_files_exist_and_are_small():
    path = datasets.digits_model_path()
    assert path.is_file() and path.name == "digits_cnn.onnx"
    total = sum(p.stat().st_size for p in path.parent.iterdir() if p.suffix in (".onnx", ".npz"))
    assert total < 300_000


def test_model_signature():
    import onnx

    model = onnx.load(str(datasets.digits_model_path()))
    onnx.checker.check_model(model)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    (inp,), (out,) = model.graph.input, model.graph.output
    assert inp.name == "input" and [d.dim_value for d in inp.type.tensor_type.shape.dim] == [1, 1, 8, 8]
    assert out.name == "logits" and [d.dim_value for d in out.type.tensor_type.shape.dim] == [1, 10]
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu", "Conv", "Relu", "MaxPool", "Conv", "Relu",
                                                    "Flatten", "Gemm"]
    assert all(t.data_type == onnx.TensorProto.FLOAT for t in model.graph.initializer)


def test_calibration_shapes():
    calib = datasets.load_digits_calibration()
    assert set(calib) == {"input"}
    x = calib["input"]
    assert x.shape == (256, 1, 8, 8) and x.dtype == np.float32
    assert 0.0 <= x.min() and x.max() <= 1.0
    assert len(np.unique(x.reshape(256, -1), axis=0)) == 256


def test_test_split_shapes(digits_test):
    x, y = digits_test
    assert x.shape == (450, 1, 8, 8) and x.dtype == np.float32
    assert y.shape == (450,) and y.dtype == np.int64
    assert 0.0 <= x.min() and x.max() <= 1.0
    assert np.array_equal(np.unique(x * 16), np.arange(17))  # pixel values k/16
    assert np.bincount(y, minlength=10).min() >= 43  # every digit, stratified (about 45 each)


def test_calibration_is_disjoint_from_the_test_split(digits_test):
    x_test, _ = digits_test
    test_rows = {row.tobytes() for row in x_test.reshape(len(x_test), -1)}
    calib = datasets.load_digits_calibration()["input"]
    assert not [i for i, row in enumerate(calib.reshape(len(calib), -1)) if row.tobytes() in test_rows]


def test_data_is_scikit_learns_split(digits_test):
    """Where scikit-learn is installed (the ``train`` extra): test.npz is exactly the split
    scripts/train_digits.py documents, and the calibration images come from its training side."""
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    x_train, x_test, _, y_test = train_test_split(x, digits.target, test_size=0.25, random_state=0,
                                                  stratify=digits.target)
    assert np.array_equal(digits_test[0], x_test) and np.array_equal(digits_test[1], y_test)
    train_rows = {row.tobytes() for row in x_train.reshape(len(x_train), -1)}
    calib = datasets.load_digits_calibration()["input"]
    assert all(row.tobytes() in train_rows for row in calib.reshape(len(calib), -1))


def test_float_accuracy_through_vtakit_graph(digits_test, digits_logits):
    _, y = digits_test
    assert digits_logits.shape == (450, 10)
    assert float((digits_logits.argmax(axis=1) == y).mean()) >= 0.97


def test_vtakit_graph_matches_onnxruntime(digits_test, digits_logits):
    ort = pytest.importorskip("onnxruntime")
    x, _ = digits_test
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(datasets.digits_model_path()), opts, providers=["CPUExecutionProvider"])
    expected = np.concatenate([sess.run(["logits"], {"input": x[i:i + 1]})[0] for i in range(len(x))])
    np.testing.assert_allclose(digits_logits, expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("loader, attr", [(datasets.digits_model_path, "_MODEL"),
                                          (datasets.load_digits_calibration, "_CALIBRATION"),
                                          (datasets.load_digits_test, "_TEST")])
def test_missing_file_is_a_clear_error(monkeypatch, loader, attr):
    monkeypatch.setattr(datasets, attr, "absent.bin")
    with pytest.raises(GraphError, match=r"vtakit/data/digits/absent\.bin is missing") as info:
        loader()
    assert isinstance(info.value, VtakitError)
    assert "scripts/train_digits.py" in str(info.value)
