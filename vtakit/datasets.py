"""The data shipped inside the package: the digits CNN that ``vtakit demo`` runs (docs/demo.md).

``vtakit demo`` needs a real model and real data without a download or a training framework: a
small CNN trained on scikit-learn's 8x8 digits, its int8 calibration images and the whole test
split ship as package data in ``vtakit/data/digits`` (written by ``scripts/train_digits.py``, about
100 KB in all). This module finds them through :mod:`importlib.resources`, so they load the same from
an installed wheel as from a source checkout.

* :func:`digits_model_path` -- the float32 ONNX model (input ``input`` (1, 1, 8, 8), output ``logits``
  (1, 10)); pixel values are scaled to [0, 1] (the raw 0..16 divided by 16).
* :func:`load_digits_calibration` -- ``{"input": (256, 1, 8, 8) float32}``, training images.
* :func:`load_digits_test` -- ``(x, y)``: the 450 test images (450, 1, 8, 8) float32 and their
  labels (450,) int64.

A missing file is a :class:`vtakit.errors.GraphError` naming it.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import pathlib
from importlib import resources

import numpy as np

from vtakit.errors import GraphError

__all__ = ["digits_model_path", "load_digits_calibration", "load_digits_test"]

_PACKAGE = "vtakit"
_DIGITS = ("data", "digits")
_MODEL = "digits_cnn.onnx"
_CALIBRATION = "calibration.npz"
_TEST = "test.npz"

# Files extracted from a zipped install (a zipimport, not a wheel installed by pip) live until exit.
_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)


def _resource(name: str):
    """The packaged digits file ``name`` as an importlib.resources Traversable; a GraphError if absent."""
    res = resources.files(_PACKAGE).joinpath(*_DIGITS, name)
    if not res.is_file():
        raise GraphError(
            f"the packaged digits data file {'/'.join((_PACKAGE, *_DIGITS, name))} is missing "
            f"(expected at {res}); reinstall vtakit, or regenerate it with "
            f"`pip install vtakit[train]` and `python scripts/train_digits.py`")
    return res


def _load_npz(name: str, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    with _resource(name).open("rb") as f:
        data = f.read()
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        missing = [k for k in keys if k not in npz.files]
        if missing:
            raise GraphError(f"the packaged digits data file {name} lacks the arrays {missing} "
                             f"(it holds {sorted(npz.files)}); regenerate it with scripts/train_digits.py")
        return {k: npz[k] for k in keys}


def digits_model_path() -> pathlib.Path:
    """The path of the packaged float32 digits CNN (``digits_cnn.onnx``, opset 17)."""
    res = _resource(_MODEL)
    if isinstance(res, pathlib.Path):
        return res
    return _extracted.enter_context(resources.as_file(res))


def load_digits_calibration() -> dict[str, np.ndarray]:
    """The quantiser's calibration inputs: ``{"input": float32 (256, 1, 8, 8)}``, training images in [0, 1]
    (none equal to a test image)."""
    return _load_npz(_CALIBRATION, ("input",))


def load_digits_test() -> tuple[np.ndarray, np.ndarray]:
    """The test split: images float32 ``(450, 1, 8, 8)`` in [0, 1] and labels int64 ``(450,)``."""
    arrays = _load_npz(_TEST, ("x", "y"))
    return arrays["x"], arrays["y"]
