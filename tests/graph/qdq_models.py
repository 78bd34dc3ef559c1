"""The digits CNN quantised by onnxruntime (``quantize_static``), as the QDQ tests need it."""

from __future__ import annotations

import warnings
from pathlib import Path


def quantize_digits(out: Path, per_channel: bool, fmt: str = "QDQ", symmetric: bool = True,
                    samples: int | None = None) -> str:
    """Write the packaged digits CNN quantised to int8 by onnxruntime to ``out``, calibrated on the first
    ``samples`` (all by default) calibration images, one per batch; returns the path.

    onnxruntime writes a shape-inferred copy of its input model beside it, so the model is copied next to
    ``out`` first: never into the package's data directory, where test workers would race on that file."""
    import shutil

    from onnxruntime import quantization

    from vtakit import datasets

    calib = datasets.load_digits_calibration()["input"][:samples]
    model = Path(out).with_name(f"{Path(out).stem}_float.onnx")
    shutil.copyfile(datasets.digits_model_path(), model)

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"input": calib[i:i + 1]} for i in range(len(calib))])

        def get_next(self):
            return next(self.items, None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantization.quantize_static(
            str(model), str(out), Reader(),
            quant_format=getattr(quantization.QuantFormat, fmt), activation_type=quantization.QuantType.QInt8,
            weight_type=quantization.QuantType.QInt8, per_channel=per_channel,
            extra_options={"ActivationSymmetric": symmetric})
    return str(out)
