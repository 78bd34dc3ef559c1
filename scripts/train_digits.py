#!/usr/bin/env python3
"""Train the small digits CNN that ``vtakit demo`` runs, and write it (with its data) into the package.

    pip install vtakit[train]          # scikit-learn, for its bundled 8x8 digits data set
    python scripts/train_digits.py     # writes vtakit/data/digits/{digits_cnn.onnx,calibration.npz,test.npz}

The data is scikit-learn's bundled digits (1797 8x8 grey-level images, pixel values 0..16, no
download), split exactly as ``train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)``
(1347 training images, 450 test images). Images are float32 ``(1, 1, 8, 8)`` scaled to [0, 1] by
``/ 16``.

The network is small but has what the accelerator path has to handle -- padded 3x3 convolutions
with biases, ReLU, a max pool and a fully connected layer::

    Conv(1->16, 3x3, pad 1) + Relu        8x8
    Conv(16->32, 3x3, pad 1) + Relu       8x8
    MaxPool(2x2, stride 2)                4x4
    Conv(32->32, 3x3, pad 1) + Relu       4x4
    Flatten                               512
    Gemm(512->10, transB=1) + bias        logits

torch is not a dependency, so training is plain numpy: im2col convolutions (forward and backward),
softmax cross-entropy, Adam with a little weight decay, a fixed number of epochs and a fixed seed.
The test split is never used to choose anything; it is only measured at the end (the script fails if
the float accuracy is below 97%).

The trained model is exported with ``onnx.helper`` (opset 17, float32 initializers, input ``input``
of shape (1, 1, 8, 8), output ``logits`` of shape (1, 10)), checked against onnxruntime (the exported
model must reproduce the numpy model's logits within 1e-4) and written with:

* ``calibration.npz`` -- ``input``: 256 training images (fixed seed), ``(256, 1, 8, 8)`` float32, none
  of them pixel-for-pixel equal to a test image (for the int8 quantiser's calibration);
* ``test.npz`` -- ``x``: the 450 test images ``(450, 1, 8, 8)`` float32, ``y``: their labels ``(450,)``
  int64.

The ``.npz`` files are written with fixed zip timestamps, so running the script again on the same
machine reproduces the same bytes. :mod:`vtakit.datasets` loads them.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

SEED = 0
EPOCHS = 30
BATCH = 32
LR = 2e-3
WEIGHT_DECAY = 1e-4
N_CALIBRATION = 256
MIN_ACCURACY = 0.97
OUT_DIR = Path(__file__).resolve().parents[1] / "vtakit" / "data" / "digits"


# --------------------------------------------------------------------------------------------
# data


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, x_test, y_train, y_test)``: images float32 (N, 1, 8, 8) in [0, 1], labels int64."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        sys.exit("scikit-learn is needed to train: pip install vtakit[train]  (or pip install scikit-learn)")
    digits = load_digits()
    x = (digits.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return x_train, x_test, y_train, y_test


def pick_calibration(x_train: np.ndarray, x_test: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` training images chosen at random, leaving out any that equal a test image pixel for pixel
    (the data set has a few duplicates, which can land on both sides of the split)."""
    test_rows = {row.tobytes() for row in x_test.reshape(len(x_test), -1)}
    eligible = np.array([i for i, row in enumerate(x_train.reshape(len(x_train), -1))
                         if row.tobytes() not in test_rows])
    chosen = np.sort(rng.choice(eligible, size=n, replace=False))
    return np.ascontiguousarray(x_train[chosen])


# --------------------------------------------------------------------------------------------
# layers (NCHW, float32). Each forward returns (output, cache); each backward takes the cache.


def im2col(x: np.ndarray) -> np.ndarray:
    """3x3, stride 1, pad 1 patches of ``x`` (N, C, H, W) as rows: (N*H*W, C*9), columns in (C, kh, kw)
    order so that ``cols @ w.reshape(O, -1).T`` is the convolution."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.empty((n, c, 3, 3, h, w), dtype=x.dtype)
    for kh in range(3):
        for kw in range(3):
            cols[:, :, kh, kw] = xp[:, :, kh:kh + h, kw:kw + w]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * h * w, c * 9)


def col2im(dcols: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    """The adjoint of :func:`im2col`: scatter-add patch gradients back to an (N, C, H, W) gradient."""
    n, c, h, w = shape
    d = dcols.reshape(n, h, w, c, 3, 3).transpose(0, 3, 4, 5, 1, 2)
    dxp = np.zeros((n, c, h + 2, w + 2), dtype=dcols.dtype)
    for kh in range(3):
        for kw in range(3):
            dxp[:, :, kh:kh + h, kw:kw + w] += d[:, :, kh, kw]
    return dxp[:, :, 1:-1, 1:-1]


def conv_forward(x, w, b):
    n, _, h, wd = x.shape
    cols = im2col(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), (x.shape, cols, w)


def conv_backward(dout, cache, need_dx=True):
    shape, cols, w = cache
    d2 = dout.transpose(0, 2, 3, 1).reshape(-1, w.shape[0])
    dw = (d2.T @ cols).reshape(w.shape)
    db = d2.sum(axis=0)
    dx = col2im(d2 @ w.reshape(w.shape[0], -1), shape) if need_dx else None
    return dx, dw, db


def relu_forward(x):
    return np.maximum(x, 0), x > 0


def relu_backward(dout, mask):
    return dout * mask


def maxpool_forward(x):
    """2x2, stride 2. Ties go to the first element of the window (as argmax), for the gradient."""
    n, c, h, w = x.shape
    win = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    idx = win.argmax(axis=-1)
    out = np.take_along_axis(win, idx[..., None], axis=-1)[..., 0]
    return out, (x.shape, idx)


def maxpool_backward(dout, cache):
    (n, c, h, w), idx = cache
    dwin = np.zeros((n, c, h // 2, w // 2, 4), dtype=dout.dtype)
    np.put_along_axis(dwin, idx[..., None], dout[..., None], axis=-1)
    return dwin.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h, w)


# --------------------------------------------------------------------------------------------
# the network


def init_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """He-normal weights, zero biases. Shapes are ONNX's: Conv (O, C, 3, 3), Gemm B (10, 512) (transB)."""
    def he(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    return {
        "conv1.weight": he((16, 1, 3, 3), 9), "conv1.bias": np.zeros(16, np.float32),
        "conv2.weight": he((32, 16, 3, 3), 144), "conv2.bias": np.zeros(32, np.float32),
        "conv3.weight": he((32, 32, 3, 3), 288), "conv3.bias": np.zeros(32, np.float32),
        "fc.weight": he((10, 512), 512), "fc.bias": np.zeros(10, np.float32),
    }


def forward(p: dict[str, np.ndarray], x: np.ndarray, keep: bool = False):
    """Logits (N, 10) for images ``x`` (N, 1, 8, 8); with ``keep`` also the caches for :func:`backward`."""
    h, c1 = conv_forward(x, p["conv1.weight"], p["conv1.bias"])
    h, r1 = relu_forward(h)
    h, c2 = conv_forward(h, p["conv2.weight"], p["conv2.bias"])
    h, r2 = relu_forward(h)
    h, mp = maxpool_forward(h)
    h, c3 = conv_forward(h, p["conv3.weight"], p["conv3.bias"])
    h, r3 = relu_forward(h)
    flat = h.reshape(len(h), -1)  # (C, H, W) order, as ONNX Flatten
    logits = flat @ p["fc.weight"].T + p["fc.bias"]
    return (logits, (c1, r1, c2, r2, mp, c3, r3, flat, h.shape)) if keep else logits


def backward(p, caches, dlogits):
    c1, r1, c2, r2, mp, c3, r3, flat, shape3 = caches
    g = {"fc.weight": dlogits.T @ flat, "fc.bias": dlogits.sum(axis=0)}
    d = (dlogits @ p["fc.weight"]).reshape(shape3)
    d = relu_backward(d, r3)
    d, g["conv3.weight"], g["conv3.bias"] = conv_backward(d, c3)
    d = maxpool_backward(d, mp)
    d = relu_backward(d, r2)
    d, g["conv2.weight"], g["conv2.bias"] = conv_backward(d, c2)
    d = relu_backward(d, r1)
    _, g["conv1.weight"], g["conv1.bias"] = conv_backward(d, c1, need_dx=False)
    return g


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean loss and its gradient with respect to the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    prob = np.exp(z)
    prob /= prob.sum(axis=1, keepdims=True)
    n = len(y)
    loss = float(-np.log(prob[np.arange(n), y] + 1e-12).mean())
    prob[np.arange(n), y] -= 1.0
    return loss, prob / n


def accuracy(p, x, y) -> float:
    return float((forward(p, x).argmax(axis=1) == y).mean())


def train(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, log=print) -> dict[str, np.ndarray]:
    """Adam (decoupled weight decay on the weights only), cosine-decayed learning rate, fixed epochs."""
    p = init_params(rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    steps_per_epoch = -(-len(x) // BATCH)
    total, t = EPOCHS * steps_per_epoch, 0
    for epoch in range(EPOCHS):
        order = rng.permutation(len(x))
        losses = []
        for s in range(steps_per_epoch):
            idx = order[s * BATCH:(s + 1) * BATCH]
            logits, caches = forward(p, x[idx], keep=True)
            loss, dlogits = softmax_cross_entropy(logits, y[idx])
            losses.append(loss)
            grads = backward(p, caches, dlogits.astype(np.float32))
            t += 1
            lr = LR * 0.5 * (1.0 + np.cos(np.pi * (t - 1) / total))
            for k in p:
                m[k] = beta1 * m[k] + (1 - beta1) * grads[k]
                v[k] = beta2 * v[k] + (1 - beta2) * grads[k] * grads[k]
                mhat = m[k] / (1 - beta1 ** t)
                vhat = v[k] / (1 - beta2 ** t)
                update = mhat / (np.sqrt(vhat) + eps)
                if k.endswith("weight"):
                    update = update + WEIGHT_DECAY * p[k]
                p[k] = (p[k] - lr * update).astype(np.float32)
        if epoch % 5 == 4 or epoch == EPOCHS - 1:
            log(f"epoch {epoch + 1:3d}  loss {np.mean(losses):.4f}  train accuracy {accuracy(p, x, y):.4f}")
    return p


# --------------------------------------------------------------------------------------------
# export


def to_onnx(p: dict[str, np.ndarray]):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}
    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["conv1"], name="conv1", **conv),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("Conv", ["relu1", "conv2.weight", "conv2.bias"], ["conv2"], name="conv2", **conv),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("MaxPool", ["relu2"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool", "conv3.weight", "conv3.bias"], ["conv3"], name="conv3", **conv),
        helper.make_node("Relu", ["conv3"], ["relu3"], name="relu3"),
        helper.make_node("Flatten", ["relu3"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        initializer=[numpy_helper.from_array(np.ascontiguousarray(p[k], np.float32), k) for k in p])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="vtakit scripts/train_digits.py", ir_version=8)
    model.doc_string = ("8x8 digits classifier (scikit-learn digits, input scaled to [0, 1] by /16); "
                        "trained by scripts/train_digits.py")
    onnx.checker.check_model(model, full_check=True)
    return model


def onnxruntime_logits(model_bytes: bytes, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(["logits"], {"input": x[i:i + 1]})[0] for i in range(len(x))])


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez_compressed`` with fixed zip timestamps, so the same arrays give the same bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, arr in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, member.getvalue(), compresslevel=9)
    path.write_bytes(buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder (default {OUT_DIR})")
    args = ap.parse_args(argv)

    start = time.perf_counter()
    x_train, x_test, y_train, y_test = load_split()
    print(f"digits: {len(x_train)} training images, {len(x_test)} test images")
    rng = np.random.default_rng(SEED)
    params = train(x_train, y_train, rng)
    acc_numpy = accuracy(params, x_test, y_test)
    print(f"float test accuracy (numpy): {acc_numpy:.4f}   [{time.perf_counter() - start:.1f} s]")

    model = to_onnx(params)
    model_bytes = model.SerializeToString()
    ort_logits = onnxruntime_logits(model_bytes, x_test)
    diff = float(np.abs(ort_logits - forward(params, x_test)).max())
    acc_ort = float((ort_logits.argmax(axis=1) == y_test).mean())
    print(f"onnxruntime vs numpy logits: max abs diff {diff:.2e}")
    print(f"float test accuracy (onnxruntime): {acc_ort:.4f}")
    if diff >= 1e-4:
        sys.exit(f"the exported model does not reproduce the numpy model (max abs diff {diff:.2e} >= 1e-4)")
    if acc_ort < MIN_ACCURACY:
        sys.exit(f"float test accuracy {acc_ort:.4f} is below {MIN_ACCURACY}")

    calibration = pick_calibration(x_train, x_test, N_CALIBRATION, np.random.default_rng(SEED + 1))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "digits_cnn.onnx").write_bytes(model_bytes)
    save_npz(args.out / "calibration.npz", {"input": calibration})
    save_npz(args.out / "test.npz", {"x": np.ascontiguousarray(x_test, np.float32),
                                     "y": y_test.astype(np.int64)})
    for name in ("digits_cnn.onnx", "calibration.npz", "test.npz"):
        print(f"wrote {args.out / name} ({(args.out / name).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
