"""runtime.gpu_code: a saved GPU kernel program round-trips through JSON; malformed records are named."""

import pytest


def test_saved_gpu_code_round_trips_and_rejects_malformed_launches():
    from vtakit.errors import ArgumentError
    from vtakit.runtime.gpu_code import GPUKernelCode, GPUKernelLaunch

    code = GPUKernelCode(".version 7.8", "sm_80", (GPUKernelLaunch("k0", (4, 1, 1), (256, 1, 1), 1024),))
    assert GPUKernelCode.from_json(code.to_json(), code.ptx) == code
    with pytest.raises(ArgumentError, match=r"grid must be three positive ints, got \[4, 0, 1\]"):
        GPUKernelLaunch.from_json({"name": "k", "grid": [4, 0, 1], "block": [1, 1, 1]})
    with pytest.raises(ArgumentError, match="malformed GPU kernel program"):
        GPUKernelCode.from_json({"kernels": []}, "")

