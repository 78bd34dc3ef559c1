"""``vtakit.te`` is importable both ways TVM users write it."""

import importlib


def test_te_importable_as_module_and_attribute():
    import vtakit
    te = importlib.import_module("vtakit.te")
    assert vtakit.te is te
    from vtakit.compiler.te import compute
    assert te.compute is compute and "create_schedule" in te.__all__
